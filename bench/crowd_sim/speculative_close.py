"""An experiment, not the product: what closing the origin at the early point would give Pack's no-plugin crowd.

Issue 35's last goal (the no-plugin crowd at 1,000 clients, 20/s: p99 <= 3 s, origin <= 5 %) is missed: in the
simulator (`bench.crowd_sim`), p99 4.0-5.8 s and origin 7.1-8.3 % over four seeds. Most origin bytes go to newcomers
whose turn at SlowOrigin comes while their early lookup runs (a 16 KB chunk each for about half of them, into
connections they then close), and those turns also slow the two first-hand fetchers the quorum waits for.

The idea measured here: a download whose origin is slow so far at the early point closes it while the lookup runs,
and asks for the rest by Range (If-Range: its validator, as parking's reopen does) only if it goes on with the
origin. It is done in this script by wrapping the simulated shell (`node.Node`), not in `DownloadCore`, which does
not do it; the core change, if the figures hold in the real lab, belongs in `proxy/download/core.py`.

    python -m bench.crowd_sim.speculative_close [--early S] [--seeds 1,2,3,4] [--clients N]

prints, per seed, the p50, p99 and origin share without and with the close (side by side, one process).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from proxy.download.state import Phase, Producer

from . import node as node_module
from .world import SimParams, World

Node = node_module.Node


@contextlib.contextmanager
def speculative_close(counts: dict[str, int]) -> Iterator[None]:
    """While active, every simulated node closes its origin at its early lookup and reopens it by Range when the
    download goes on with the origin after the lookup's answer."""
    start_lookup, lookup_done = Node._start_lookup, Node._lookup_done

    def closing(self: Node, headless: bool) -> None:
        core = self.core
        if (not headless and core.phase is Phase.STREAM and self.conn is not None and core.lookups.looked_early
                and not getattr(self, "speculated", False)):
            self.speculated = self.speculating = True
            self.world.swarm_origin.close(self.conn, self.world.clock.now)
            self.conn = None
            counts["closed"] += 1
        start_lookup(self, headless)

    def reopening(self: Node, found) -> None:
        lookup_done(self, found)
        if not getattr(self, "speculating", False):
            return
        self.speculating = False
        core = self.core
        if not core.done and self.conn is None and core.wants_origin and core.origin is Producer.RUNNING:
            counts["reopened"] += 1
            world = self.world
            conn = world.swarm_origin.get(self.host, world.clock.now, lambda *head: None, lambda piece: None,
                                          core.origin_offset, len(world.content))
            conn.on_data = self._data_of(conn)  # (the head: the core has it from the first response)
            self.conn = conn

    Node._start_lookup, Node._lookup_done = closing, reopening  # type: ignore[method-assign]
    try:
        yield
    finally:
        Node._start_lookup, Node._lookup_done = start_lookup, lookup_done  # type: ignore[method-assign]


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
    print(f"{'seed':>4} {'arm':>6} {'p50 s':>6} {'p99 s':>6} {'origin':>7}  first two vouches (s)")
    for seed in (int(s) for s in args.seeds.split(",")):
        params = SimParams(seed=seed, clients=args.clients, **extra)
        counts = {"closed": 0, "reopened": 0}
        for arm in ("today", "close"):
            with speculative_close(counts) if arm == "close" else contextlib.nullcontext():
                got = figures(params)
            assert got["exact"], "a client got other bytes than the file's"
            print(f"{seed:>4} {arm:>6} {got['p50']:6.2f} {got['p99']:6.2f} {got['origin']:7.2%}  {got['vouches']}")
        print(f"     (closed at the early point: {counts['closed']}, reopened by Range: {counts['reopened']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
