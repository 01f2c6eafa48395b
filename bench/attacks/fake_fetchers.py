"""Fake fetchers against a healthy origin, measured: run it against any checkout of swarmproxy.

Parties in as many networks as the quorum (two loopback addresses, which count one by one, like real networks)
say in the DHT that they fetch a URL from its origin (`IN_PROGRESS_ROOT` claims, naming the version the origin
serves) and never vouch. A victim proxy then GETs the URL from a loopback origin throttled to `--rate` (2 MB/s: far
above R, a healthy origin). Prints, for each size, the GET's time without the claims (baseline) and with them,
how the download went (its transition), and the ratio. SECURITY.md's promise: such claims delay a download by at
most the time its origin would still have taken at the rate it showed.

    python -m bench.attacks.fake_fetchers [--sizes 3000000 20000000] [--rate 2000000] [--fakes 2]
        [--first-byte-delay 0.1] [--discover-size 0] [--events]

`--rate 100000` (under R) shows a slow origin, which is still left to the fetchers. By default a fast download
looks up a file of 16 MiB or more only (the privacy rule): `--discover-size 0` makes the 3 MB one see the fakes
too. Each run has its own cluster (two storing nodes, the fakes, a fresh victim) and URL: nothing is cached between
runs.
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

STORING_NODES = 2  # besides the fakes: a record counts once storing nodes in other networks have seen it


def body(size: int) -> bytes:
    return (hashlib.sha256(b"fake fetchers").digest() * (size // 32 + 1))[:size]


async def one_run(workdir: pathlib.Path, size: int, rate: float, fakes: int, delay: float, flags: dict) -> dict:
    """One GET of `size` bytes through a fresh victim, with `fakes` parties claiming they fetch it (0: none)."""
    origin = SlowOrigin(rate=rate, first_byte_delay=delay)
    await origin.start()
    cluster = Cluster(workdir, **flags)
    try:
        nodes = await cluster.grow(STORING_NODES + fakes)
        url = origin.add(f"/file-{size}-{fakes}.bin", body(size))
        etag = origin.files[url[len(origin.url):]][1]
        for fake in nodes[STORING_NODES:]:
            # What a download's `ClaimFetching` says, for the version the origin serves; never followed by a vouch.
            fake.engine.fetching(url, size=size, block_size=16 * 1024, validator=etag)
        for fake in nodes[STORING_NODES:]:
            await fake.engine.service.settled()  # the claims are stored before the victim asks
        victim = await cluster.add()
        began = time.monotonic()
        async with cluster.client.get(url, proxy=victim.url) as response:
            data = await response.read()
        seconds = time.monotonic() - began
        await victim.stats.wait_for_requests(1)
        record = cluster.last_record(victim)
        assert response.status == 200 and data == body(size), (response.status, len(data))
        return {"seconds": seconds, "transition": record["transition"], "bytes_origin": record["bytes_origin"],
                "events": record["events"]}
    finally:
        await cluster.close()
        await origin.stop()


async def run(sizes: list[int], rate: float, fakes: int, delay: float, flags: dict, workdir: pathlib.Path,
              verbose: bool) -> list[dict]:
    rows = []
    for size in sizes:
        base = await one_run(workdir / f"base-{size}", size, rate, 0, delay, flags)
        attacked = await one_run(workdir / f"attack-{size}", size, rate, fakes, delay, flags)
        rows.append({"size": size, "baseline": base, "attacked": attacked})
        if verbose:
            for event in attacked["events"]:
                print(f"  {size}: {event}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[3_000_000, 20_000_000])
    parser.add_argument("--rate", type=float, default=2_000_000, help="the origin's bytes/s (2 MB/s)")
    parser.add_argument("--fakes", type=int, default=2, help="parties claiming, each on its own address (2: quorum)")
    parser.add_argument("--first-byte-delay", type=float, default=0.1,
                        help="s before the origin's head (0.1: a server's usual think time; the victim's lookup, a "
                             "few ms here, then answers before any body byte, as it does across real networks)")
    parser.add_argument("--discover-size", default=None,
                        help="the proxies' --discover-size (default: the tree's own; 0 lets a fast download of any "
                             "size look its URL up, and so see the fakes)")
    parser.add_argument("--events", action="store_true", help="print the attacked downloads' events")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        flags = {} if args.discover_size is None else {"discover_size": args.discover_size}
        rows = asyncio.run(run(args.sizes, args.rate, args.fakes, args.first_byte_delay, flags,
                               pathlib.Path(directory), args.events))
    print(f"{'size':>10} {'baseline s':>11} {'attacked s':>11} {'ratio':>6}  attacked transition")
    for row in rows:
        base, attacked = row["baseline"], row["attacked"]
        print(f"{row['size']:>10} {base['seconds']:>11.2f} {attacked['seconds']:>11.2f} "
              f"{attacked['seconds'] / base['seconds']:>6.2f}  {attacked['transition']}")


if __name__ == "__main__":
    main()
