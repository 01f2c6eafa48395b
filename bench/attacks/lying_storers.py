"""Lying storing nodes in two networks attest hosts they claim: measured against a victim proxy, on any checkout.

The attacker runs DHT nodes on two addresses (127.0.0.66 and 127.0.0.67: two networks, as loopback counts) that
store forged manifest records for a URL under K fresh keys, each claiming a host in another public network, and
swear to every one of them; honest storing nodes refuse the records (they do not come from the hosts they name).
Its node on 127.0.0.66 serves its own bytes. A victim that stores nothing of it then GETs the URL from an origin
slow to send its headers: a T switch, which needs a quorum of 3 before the origin has said anything. Trees that
counted each host two storing networks attested saw K networks; the fix weighs the group as the two networks
that could have shown it.

    python -m bench.attacks.lying_storers [--keys K]
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import tempfile
import time

from bench.attacks.forged_quorum import DATA, EVIL, SIZE, SWITCH, _lie
from dht.identity import NodeIdentity
from dht.records import KIND_MANIFEST, ManifestRecord, ProviderRecord, Transport
from dht.storage import RecordStore
from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin
from proxy.engine import url_key
from swarm.content.manifest import build_manifest

LIARS = ["127.0.0.66", "127.0.0.67"]
FAR_PUBLIC = ["192.31.196.7", "192.175.48.9", "192.52.193.66", "2620:4f:1::1"]  # claimed, never contacted


async def run(keys: int, workdir: pathlib.Path) -> dict:
    origin = SlowOrigin()
    await origin.start()
    honest = Cluster(workdir / "honest", **SWITCH)
    bad = Cluster(workdir / "attacker", hosts=LIARS, **SWITCH)
    try:
        await honest.grow(3)
        bad.bootstrap = honest.nodes[0].addresses["dht"]
        liars = [await bad.add(), await bad.add()]
        for liar in liars:
            _lie(liar.dht)
        url = origin.add("/setup.bin", DATA, headers={"Content-Type": "application/octet-stream"})
        path = workdir / "evil.bin"
        path.write_bytes(EVIL)
        manifest, layer = build_manifest([EVIL], SIZE, url=url, validator='"evil"', content_type="text/html")
        server = liars[0]
        server.engine.store.adopt(manifest, layer, path, pin=True)
        for swarm in server.engine.nodes.values():
            swarm.share(manifest.root)
        now, port = time.time(), server.engine.address[1]
        for index in range(keys):
            identity = NodeIdentity.generate()
            record = ManifestRecord.create(identity, repr_key=url_key(url), content_root=manifest.root, size=SIZE,
                                           block_size=manifest.block_size, validator='"evil"',
                                           host=FAR_PUBLIC[index % len(FAR_PUBLIC)], now=now, ttl_s=3600)
            for liar in liars:  # held by the liars alone, each swearing it arrived from the host it names
                liar.dht.store._insert((KIND_MANIFEST, url_key(url)), record, "self", None)
            await server.dht.publish(ProviderRecord.create(identity, root=manifest.root, host=LIARS[0], port=port,
                                                           transports=Transport.TCP, now=now, ttl_s=3600))
        origin.first_byte_delay = 1.0
        victim = await honest.add()
        victim.dht.store = RecordStore(victim.dht.config.store_limits)  # it stores nothing: others' word only
        status, headers, body = await honest.get(victim, url)
        record = honest.last_record(victim)
        return {
            "attacker_keys": keys,
            "liar_networks": len(LIARS),
            "victim_status": status,
            "victim_served_attacker_bytes": body == EVIL,
            "victim_served_origin_bytes": body == DATA,
            "transition": record["transition"],
            "manifest_source": record["manifest_source"],
            "victim_kept_attacker_content": manifest.root in victim.engine.store,
        }
    finally:
        await bad.close()
        await honest.close()
        await origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=4, help="forged keys, each claiming another network (4)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(run(args.keys, pathlib.Path(directory)))
    for name, value in result.items():
        print(f"{name:42} {value}")


if __name__ == "__main__":
    main()
