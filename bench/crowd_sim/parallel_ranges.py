"""Side by side on the crowd simulator: Pack's no-plugin crowd with its first-hand fetchers asking their origin again
by one stream or by several Ranges at once.

What keeps Pack's no-plugin crowd from p99 <= 3 s: its first ~3 s of arrivals park on the two first-hand fetchers,
whose second copy completed about 3.3 s in with one stream each. The throttled origin (`models.Origin`, SlowOrigin)
gives every response in progress a 16 KB turn in line, and a newcomer's response takes its turns until its early
lookup sends it away, so the fetchers got a small share of the origin. A download that says it fetches
(`ClaimFetching`) now asks for the rest by `ParkingSettings.ranges` Range requests at once
(`proxy.download.ranged_origin`, `CLAIM_RANGES`), and so gets that many turns. This runs the product's download core
with `--ranges 1` and `--ranges K` on the simulator, one seed after the other, in one process.

    python -m bench.crowd_sim.parallel_ranges [--ranges K] [--seeds 1,2,3,4] [--clients N]

prints, per seed, the p50, p99 and origin share with one stream and with K ranges, and when the first two first-hand
vouches were put.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from proxy.download.parking import CLAIM_RANGES

from .close_for_lookup import figures
from .world import SimParams


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranges", type=int, default=CLAIM_RANGES, help="Range requests at once per first-hand "
                        f"fetcher in the second arm (default: the product's, {CLAIM_RANGES})")
    parser.add_argument("--seeds", default="1,2,3,4")
    parser.add_argument("--clients", type=int, default=1000)
    args = parser.parse_args(argv)
    print(f"{'seed':>4} {'reads':>9} {'p50 s':>6} {'p99 s':>6} {'origin':>7}  first two vouches (s)")
    for seed in (int(s) for s in args.seeds.split(",")):
        params = SimParams(seed=seed, clients=args.clients)
        for ranges in (1, args.ranges):
            got = figures(dataclasses.replace(params, claim_ranges=ranges))
            assert got["exact"], "a client got other bytes than the file's"
            label = "1 stream" if ranges == 1 else f"{ranges} ranges"
            print(f"{seed:>4} {label:>9} {got['p50']:6.2f} {got['p99']:6.2f} {got['origin']:7.2%}  {got['vouches']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
