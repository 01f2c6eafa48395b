"""What a second crowd costs once the first fetchers left: the price of vouching only with origin bytes.

A node vouches for a URL only with bytes it got from the origin itself (the security issue's rule); trees before
it also vouched for a file they assembled from peers (`vouches_for_assembled`). Measured on any checkout, in one
process on 127.0.0.x:

1. three publishers fetch the file from a fast origin and vouch for it;
2. a first crowd of N nodes GETs it from the origin, now crawling below R: each switches and takes it from peers;
3. the publishers withdraw their vouches and leave (as they do when the file is evicted, or their records expire);
4. a second crowd of N new nodes GETs it from the still crawling origin.

Prints, per crowd, the median and worst time, the bytes the origin served and where the manifest came from. With
`vouches_for_assembled`, the first crowd's vouches let the second swarm at once; without, the second crowd has
holders but no quorum, and takes the file from the origin until two of it finished from there.

    python -m bench.second_crowd [--crowd N] [--size BYTES] [--origin-rate BYTES_PER_S]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import pathlib
import statistics
import tempfile
import time

from proxy.config import Config
from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin
from proxy.engine import url_key

# Switches by R within half a second; every size may be announced (the privacy rule is not what is measured; trees
# from before it have no such setting and announce every size anyway).
SETTINGS = {"first_byte_timeout": "0.5", "min_rate": "160k", "rate_window": "0.5"}
if "discover_size" in {field.name for field in dataclasses.fields(Config)}:
    SETTINGS["discover_size"] = "0"


async def crowd(cluster: Cluster, url: str, count: int) -> dict:
    nodes = await cluster.grow(count)
    started = time.monotonic()

    async def one(node) -> tuple[float, dict]:
        begin = time.monotonic()
        status, _, body = await cluster.get(node, url)
        assert status == 200
        return time.monotonic() - begin, cluster.last_record(node)

    results = await asyncio.gather(*(one(node) for node in nodes))
    times = [seconds for seconds, _ in results]
    sources: dict[str, int] = {}
    for _, record in results:
        source = record.get("manifest_source") or "none"
        sources[source] = sources.get(source, 0) + 1
    return {"nodes": count, "median_s": round(statistics.median(times), 2), "max_s": round(max(times), 2),
            "origin_bytes": sum(record["bytes_origin"] for _, record in results),
            "peer_bytes": sum(record["bytes_peers"] for _, record in results),
            "manifests": sources, "wall_s": round(time.monotonic() - started, 2),
            "events": [record.get("events", []) for _, record in results]}


async def run(count: int, size: int, origin_rate: float, workdir: pathlib.Path) -> dict:
    data = (hashlib.sha256(b"a release").digest() * (size // 32 + 1))[:size]
    origin = SlowOrigin()
    await origin.start()
    cluster = Cluster(workdir, **SETTINGS)
    try:
        url = origin.add("/release.tar.gz", data)
        publishers = await cluster.grow(3)
        for node in publishers:
            status, _, body = await cluster.get(node, url)
            assert status == 200 and body == data
        origin.set_rate(origin_rate)
        first = await crowd(cluster, url, count)
        for node in publishers:  # they leave: their vouches go with them
            await node.engine.discovery.withdraw_manifest(url_key(url))
            await node.stop()
            cluster.nodes.remove(node)
        second = await crowd(cluster, url, count)
        return {"first_crowd": first, "second_crowd": second, "file_bytes": size}
    finally:
        await cluster.close()
        await origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--crowd", type=int, default=8, help="nodes in each crowd (8)")
    parser.add_argument("--size", type=int, default=600_000, help="file size in bytes (600,000)")
    parser.add_argument("--origin-rate", type=float, default=64_000.0,
                        help="the crawling origin's rate in total, bytes/s (64,000)")
    parser.add_argument("--events", action="store_true", help="also print each download's events (why it did what)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(run(args.crowd, args.size, args.origin_rate, pathlib.Path(directory)))
    for name in ("first_crowd", "second_crowd"):
        events = result[name].pop("events")
        print(f"{name:13} " + "  ".join(f"{key} {value}" for key, value in result[name].items()))
        for index, lines in enumerate(events if args.events else []):
            print(f"  node {index}: " + " | ".join(lines))


if __name__ == "__main__":
    main()
