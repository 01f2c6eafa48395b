"""The forged-quorum poisoning attack end to end: full nodes on 127.0.0.x, an origin slow to send its headers,
and one attacker on one address with several keys, each claiming a host in another network.

Before storing nodes checked where a record came from, the victim counted the attacker's claimed hosts as
independent networks, switched by T with no origin byte to check against, and answered a plain http:// URL with
the attacker's body, Content-Type and ETag — then shared it onwards. Now the forged vouches weigh one network,
the victim waits for the origin, and nothing of the attacker's is stored or announced."""

from __future__ import annotations

import hashlib
import time

import pytest_asyncio

from dht.identity import NodeIdentity
from dht.records import KIND_PROVIDER, ManifestRecord, ProviderRecord, Transport
from proxy.demo.local_swarm import Cluster
from proxy.engine import url_key
from swarm.content.manifest import build_manifest

from ..dht.liars import LyingStore

SIZE = 600_000
DATA = (hashlib.sha256(b"the origin's file").digest() * (SIZE // 32 + 1))[:SIZE]
EVIL = (b"<script>alert('the attacker')</script>" * (SIZE // 38 + 1))[:SIZE]
CLAIMED = ["198.51.100.7", "203.0.113.9", "192.0.2.44"]
FAST_SWITCH = {"first_byte_timeout": "0.3", "min_rate": "160k", "rate_window": "0.5", "discover_size": "0"}


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path / "honest", **FAST_SWITCH)
    yield group
    await group.close()


@pytest_asyncio.fixture
async def attacker(tmp_path, cluster):
    """A full node on 127.0.0.66 whose DHT node lies about what it observed."""
    await cluster.grow(3)  # honest storing nodes, there before anyone publishes
    group = Cluster(tmp_path / "attacker", hosts=["127.0.0.66"], bootstrap=cluster.nodes[0].addresses["dht"],
                    **FAST_SWITCH)
    node = await group.add()
    node.dht.store = LyingStore(node.dht.config.store_limits)
    yield node
    await group.close()


async def forge(attacker, url: str, tmp_path) -> bytes:
    """Sign a manifest of the attacker's bytes under one fresh key per claimed host, and serve those bytes."""
    path = tmp_path / "evil.bin"
    path.write_bytes(EVIL)
    # Its manifest names its own type and validator: what a poisoned victim would hand its client.
    manifest, layer = build_manifest([EVIL], SIZE, url=url, validator='"evil"', content_type="text/html")
    assert attacker.engine.store.adopt(manifest, layer, path, pin=True)
    for swarm in attacker.engine.nodes.values():
        swarm.share(manifest.root)
    dht, now = attacker.dht, time.time()
    port = attacker.engine.address[1]
    for host in CLAIMED:
        identity = NodeIdentity.generate()
        record = ManifestRecord.create(identity, repr_key=url_key(url), content_root=manifest.root, size=SIZE,
                                       block_size=manifest.block_size, validator='"evil"', host=host, now=now,
                                       ttl_s=3600)
        await dht.publish(record)
        dht.store._insert((record.kind, record.key), record, "self", None)
        provider = ProviderRecord.create(identity, root=manifest.root, host="127.0.0.66", port=port,
                                         transports=Transport.TCP, now=now, ttl_s=3600)
        await dht.publish(provider)
    return manifest.root


async def test_forged_quorum_does_not_poison_a_t_switch(cluster, attacker, slow_origin, tmp_path):
    url = slow_origin.add("/setup.bin", DATA, headers={"Content-Type": "application/octet-stream"})
    evil_root = await forge(attacker, url, tmp_path)
    honest_stores = sum(n.dht.counters["store_address_mismatch"] for n in cluster.nodes)
    assert honest_stores >= 1  # honest storing nodes refused records that did not come from the host they name

    slow_origin.first_byte_delay = 1.0  # T (0.3 s) fires with no origin byte to check the swarm against
    victim = await cluster.add()
    status, headers, body = await cluster.get(victim, url)
    assert status == 200 and body == DATA  # the origin's bytes, once it answered
    assert headers.get("ETag") != '"evil"'
    record = cluster.last_record(victim)
    assert record["transition"] == "T" and record["manifest_source"] is None
    assert record["bytes_peers"] == 0 and record["bytes_origin"] == SIZE

    # Nothing of the attacker's is kept, announced or served onwards; the origin's copy is.
    assert evil_root not in victim.engine.store
    assert (KIND_PROVIDER, evil_root) not in victim.dht.announcements
    assert victim.engine.counters.published == 1  # it vouches for what the origin sent it

    # An honest newcomer that switches by R against that origin gets the origin's bytes too.
    slow_origin.first_byte_delay = 0.0
    slow_origin.set_rate(100_000)
    follower = await cluster.add()
    status, _, body = await cluster.get(follower, url)
    assert status == 200 and body == DATA
    assert evil_root not in follower.engine.store


async def test_one_address_and_a_planted_key_make_no_quorum(cluster, attacker, slow_origin, tmp_path):
    """One machine, one address: it vouches from that address (honest storing nodes store and attest it) and plants
    a second key's vouch, claiming a far public host, in its own node's store. The planted one is attested by
    nobody but the attacker, and an unattested publisher weighs nothing: not one extra `unknown` network, which
    made the two a quorum:2 and handed an R switch the attacker's bytes (the origin's first block, then its own)."""
    url = slow_origin.add("/tool.bin", DATA, headers={"Content-Type": "application/octet-stream"})
    etag = slow_origin.files["/tool.bin"][1]
    poison = DATA[:65536] + EVIL[65536:]  # passes the check of the origin bytes a victim holds at its switch
    path = tmp_path / "poison.bin"
    path.write_bytes(poison)
    manifest, layer = build_manifest([poison], SIZE, url=url, validator=etag)
    assert attacker.engine.store.adopt(manifest, layer, path, pin=True)
    for swarm in attacker.engine.nodes.values():
        swarm.share(manifest.root)
    dht, now, port = attacker.dht, time.time(), attacker.engine.address[1]
    for host, planted in (("127.0.0.66", False), ("192.31.196.7", True)):
        identity = NodeIdentity.generate()
        record = ManifestRecord.create(identity, repr_key=url_key(url), content_root=manifest.root, size=SIZE,
                                       block_size=manifest.block_size, validator=etag, host=host, now=now,
                                       ttl_s=3600)
        await dht.publish(record)
        if planted:  # honest nodes refuse it (it does not come from the host it names): only the attacker keeps it
            dht.store._insert((record.kind, record.key), record, "self", None)
        await dht.publish(ProviderRecord.create(identity, root=manifest.root, host="127.0.0.66", port=port,
                                                transports=Transport.TCP, now=now, ttl_s=3600))

    slow_origin.set_rate(100_000)  # below R: the victim switches with the origin's first bytes in hand
    victim = await cluster.add()
    status, _, body = await cluster.get(victim, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(victim)
    assert record["bytes_peers"] == 0 and record["manifest_source"] is None
    assert manifest.root not in victim.engine.store
