"""What ordinary fast browsing tells the DHT, measured on any checkout of swarmproxy.

Three full nodes on 127.0.0.x; one of them GETs files under 1 MiB from a fast local origin (listed in
`--share-private-origins` where the tree has that setting, as a public origin would be), one after the other.
Every call the node makes to its Discovery is counted: lookups of a key's claims (`get_manifests`), lookups of
a root's providers (`find_providers`), announcements (`announce`) and records put (`put_manifest`: vouches and
in-progress claims). Then the same with one file of `--large` bytes, which the privacy rule lets it announce.

    python -m bench.attacks.browsing_privacy [--gets 200] [--large 20M]

Before the rule (24d0e3d): every GET was looked up as it left and every response published.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import pathlib
import tempfile

from proxy.config import OPTIONS
from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin

CALLS = ("get_manifests", "find_providers", "announce", "put_manifest")
SIZES = (4_000, 40_000, 400_000, 1_000_000)  # all under 1 MiB


def _count(discovery, counts: collections.Counter) -> None:
    """Wrap each Discovery call the engine makes, to count it."""
    for name in CALLS:
        real = getattr(discovery, name)
        if name == "find_providers":
            def wrapped(*args, _real=real, _name=name, **kwargs):
                counts[_name] += 1
                return _real(*args, **kwargs)
        else:
            async def wrapped(*args, _real=real, _name=name, **kwargs):
                counts[_name] += 1
                return await _real(*args, **kwargs)
        setattr(discovery, name, wrapped)


async def run(gets: int, large: int, workdir: pathlib.Path) -> dict[str, dict[str, int]]:
    origin = SlowOrigin()
    await origin.start()
    flags = {"share_private_origins": "127.0.0.1"} if any(o.name == "share-private-origins" for o in OPTIONS) \
        else {}
    cluster = Cluster(workdir, **flags)
    try:
        nodes = await cluster.grow(3)
        browser = nodes[-1]
        counts: collections.Counter = collections.Counter()
        _count(browser.engine.service.discovery, counts)
        urls = [origin.add(f"/page/{i}.bin", hashlib.sha256(str(i).encode()).digest() * (SIZES[i % 4] // 32))
                for i in range(gets)]
        for url in urls:
            status, _, _ = await cluster.get(browser, url)
            assert status == 200
        await browser.engine.settled()
        small = dict(counts)
        status, _, _ = await cluster.get(browser, origin.add("/big.iso", bytes(large)))
        assert status == 200
        await browser.engine.settled()
        return {f"{gets} GETs under 1 MiB": {name: small.get(name, 0) for name in CALLS},
                f"1 GET of {large:,} bytes": {name: counts[name] - small.get(name, 0) for name in CALLS}}
    finally:
        await cluster.close()
        await origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gets", type=int, default=200, help="GETs of files under 1 MiB (200)")
    parser.add_argument("--large", type=int, default=20_000_000, help="the large file's size in bytes (20,000,000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(run(args.gets, args.large, pathlib.Path(directory)))
    print(f"{'':28}" + "".join(f"{name:>16}" for name in CALLS))
    for what, counts in result.items():
        print(f"{what:28}" + "".join(f"{counts[name]:>16}" for name in CALLS))


if __name__ == "__main__":
    main()
