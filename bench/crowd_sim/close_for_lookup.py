"""Side by side on the crowd simulator: Pack's no-plugin crowd without and with the close while the early lookup runs.

A download whose origin is slow so far at its early point closes the stream while its lookup runs and asks for the
rest by Range if it goes on with the origin (`proxy.download.parking_steps`; `ParkingSettings.close_for_lookup`, 0
turns it off). Most of what the origin sent the no-plugin crowd went to newcomers in that moment: a 16 KB turn each,
for about half of them, into connections they closed once the lookup found the fetchers. This runs the product's
download core both ways on the simulator (`bench.crowd_sim`), one seed after the other, in one process.

    python -m bench.crowd_sim.close_for_lookup [--early S] [--seeds 1,2,3,4] [--clients N]

prints, per seed, the p50, p99 and origin share (of what the direct clients took) off and on, and when the first two
first-hand vouches were put.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from .world import SimParams, World


def figures(params: SimParams) -> dict:
    result = World(params).run(progress_every=1e9)
    times = sorted(r["duration_s"] for r in result["clients"])
    exact = all(r["exact"] and r["bytes"] == params.size for r in result["clients"])
    return {"p50": times[len(times) // 2], "p99": times[int(len(times) * 0.99)], "exact": exact,
            "origin": result["origin_bytes"] / (params.clients * params.size),
            "vouches": result["vouch_times"][:2]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--early", type=float, default=None, help="the early point, s (default: the product's)")
    parser.add_argument("--seeds", default="1,2,3,4")
    parser.add_argument("--clients", type=int, default=1000)
    args = parser.parse_args(argv)
    extra = {} if args.early is None else {"early_lookup": args.early}
    print(f"{'seed':>4} {'close':>6} {'p50 s':>6} {'p99 s':>6} {'origin':>7}  first two vouches (s)")
    for seed in (int(s) for s in args.seeds.split(",")):
        on = SimParams(seed=seed, clients=args.clients, **extra)
        for arm, params in (("off", dataclasses.replace(on, close_for_lookup=0.0)), ("on", on)):
            got = figures(params)
            assert got["exact"], "a client got other bytes than the file's"
            print(f"{seed:>4} {arm:>6} {got['p50']:6.2f} {got['p99']:6.2f} {got['origin']:7.2%}  {got['vouches']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
