"""Providers that never send the hash layer, measured: run it against any checkout of swarmproxy.

Two publishers on their own addresses (loopback addresses count one by one, like networks) fetch a file from its
origin and vouch for it: a quorum for the right root. Then the origin slows to `--rate` (under R) and a victim
proxy GETs the file; it switches to the quorum's providers. Each run gives the publishers a part: they serve the
root and send its hash layer (honest), serve it but never answer a HASH_REQUEST (withhold: BEP 52's piece layers,
without which a fetch can verify no block, the origin's neither), refuse it (unshared: the victim finds the quorum
and nobody to fetch from), or left after vouching (gone: its address no longer answers, which slows the victim's
lookup past R's switch, so the origin keeps streaming beside the swarm). Prints the victim's time per run. Before
the fix a fetch that got no layer waited for its 30 s stall watchdog; now the provider asked first costs at most
`LAYER_TIMEOUT` (5 s) before every other is asked at once, and they as long together before the fetch gives up
and the download takes the origin.

    python -m bench.attacks.withheld_layer [--size 2000000] [--rate 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import pathlib
import tempfile
import time

from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin
from swarm.core import serve

# Under R (160 kB/s) but fast enough for the swarm to be worth it: the victim switches to the quorum's peers.
SWITCH = {"first_byte_timeout": "0.75", "min_rate": "160k", "rate_window": "2", "early_lookup": "0.25"}
try:  # the privacy rule keeps a fast download of a small file to itself: the publishers must vouch for theirs
    import proxy.download.discovery_rule  # noqa: F401
    SWITCH["discover_size"] = "0"
except ImportError:  # a tree from before it vouches for every download
    pass
WITHHOLDING: set[bytes] = set()  # node ids whose serving side never answers a HASH_REQUEST

_answer = serve.ServeCore._on_hash_request


def _withhold(core, request):
    """The serving side of a node in WITHHOLDING says nothing: not the layer, not a REJECT."""
    return [] if core.node_id in WITHHOLDING else _answer(core, request)


serve.ServeCore._on_hash_request = _withhold


def body(size: int) -> bytes:
    return (hashlib.sha256(b"withheld layer").digest() * (size // 32 + 1))[:size]


RUNS = [("honest", "honest"), ("unshared", "unshared"), ("withhold", "unshared"), ("withhold", "withhold"),
        ("withhold", "gone")]


async def one_run(workdir: pathlib.Path, size: int, rate: float, parts: tuple[str, str]) -> dict:
    """The victim's GET, the two publishers playing `parts` ("honest", "withhold", "unshared" or "gone")."""
    origin = SlowOrigin()
    await origin.start()
    cluster = Cluster(workdir, **SWITCH)
    try:
        await cluster.grow(2)  # storing nodes in other networks, so that the vouches count
        publishers = await cluster.grow(2)
        url = origin.add(f"/file-{'-'.join(parts)}.bin", body(size))
        for node in publishers:
            status, _, data = await cluster.get(node, url)
            assert status == 200 and data == body(size)
            await node.engine.service.settled()  # vouched (and announced as provider)
        for node, part in zip(publishers, parts):
            if part == "withhold":
                WITHHOLDING.update(swarm.node_id for swarm in node.engine.nodes.values())
            elif part == "unshared":  # up, its vouch and provider record in the DHT, but refusing the root
                for swarm in node.engine.nodes.values():
                    for root in list(node.engine.store.roots()):
                        swarm.unshare(root)
            elif part == "gone":  # left after vouching: what other nodes stored of it lives on
                cluster.nodes.remove(node)
                await node.stop()
        origin.set_rate(rate)
        victim = await cluster.add()
        began = time.monotonic()
        async with cluster.client.get(url, proxy=victim.url) as response:
            data = await response.read()
        seconds = time.monotonic() - began
        await victim.stats.wait_for_requests(1)
        assert response.status == 200 and data == body(size)
        record = cluster.last_record(victim)
        return {"seconds": seconds, "transition": record["transition"], "source": record["manifest_source"],
                "bytes_peers": record["bytes_peers"], "error": record["error"], "events": record["events"]}
    finally:
        WITHHOLDING.clear()
        await cluster.close()
        await origin.stop()


async def run(size: int, rate: float, workdir: pathlib.Path, verbose: bool) -> list[tuple]:
    rows = []
    for number, parts in enumerate(RUNS):
        result = await one_run(workdir / f"run-{number}", size, rate, parts)
        rows.append((parts, result))
        if verbose:
            for event in result["events"]:
                print(f"  {'+'.join(parts)}: {event}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=2_000_000)
    parser.add_argument("--rate", type=float, default=100_000, help="the origin's bytes/s for the victim (100 kB/s)")
    parser.add_argument("--events", action="store_true", help="print the victim's events")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        rows = asyncio.run(run(args.size, args.rate, pathlib.Path(directory), args.events))
    print(f"{'publishers':>18} {'seconds':>8}  {'transition':10}  {'source':6}  {'bytes from peers':>16}  error")
    for parts, result in rows:
        print(f"{' + '.join(parts):>18} {result['seconds']:>8.2f}  {result['transition']!s:10}  "
              f"{result['source']!s:6}  {result['bytes_peers']:>16}  {result['error']}")


if __name__ == "__main__":
    main()
