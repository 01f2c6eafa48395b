"""An experiment, not the product: the no-plugin crowd when its first-hand fetchers read the rest by parallel Ranges.

What keeps Pack's no-plugin crowd from p99 <= 3 s: its first ~3 s of arrivals park on the two first-hand fetchers,
whose second copy completes about 3.3 s in. The throttled origin (`models.Origin`, SlowOrigin) gives every response
in progress a 16 KB turn in line, and a newcomer's response takes its turns (or spends their tokens, closed) until
its early lookup sends it away, so the fetchers get a small share of the origin. Measured here: a download that says
it fetches (`ClaimFetching`) asks for the rest of the file as `--ranges` Range requests at once instead of one stream,
as download accelerators do, and so gets that many turns. Done by wrapping the simulated shell (`node.Node`); the
product does not do it (it asks more of an origin's connections than a browser would: a decision to make first).

    python -m bench.crowd_sim.parallel_ranges [--ranges K] [--seeds 1,2,3,4] [--clients N]

prints, per seed, the p50, p99 and origin share with one stream and with K ranges (side by side, one process).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from proxy.download.state import Producer

from . import models
from . import node as node_module
from .close_for_lookup import figures
from .models import CHUNK, OriginConn
from .world import SimParams

Node = node_module.Node


class Ranges:
    """The rest of one download's file as `k` Range requests at once, delivered to its core in order; the first one's
    head stands for the whole rest's (a Range answer from `start` to the end)."""

    def __init__(self, node: Node, start: int, k: int) -> None:
        self.node, self.next = node, start
        self.parts: dict[int, bytes] = {}
        world, end = node.world, len(node.world.content)
        step = -(-(end - start) // k)
        step = -(-step // CHUNK) * CHUNK  # whole chunks: SlowOrigin's unit
        self.conns: list[OriginConn] = []
        for at in range(start, end, step):
            conn = world.swarm_origin.get(node.host, world.clock.now, lambda *head: None, self._data(at),
                                          at, min(end, at + step))
            self.conns.append(conn)
        self.conns[0].on_head = lambda status, _start, _end: self._head(start, end)

    def _head(self, start: int, end: int) -> None:
        node = self.node
        if node.conn is self and not node.core.done and node.core.origin is Producer.HEAD_PENDING:
            node.head = node_module.origin_head(node.world, 206, start, end)
            node._run(node.core.origin_head(node.head, node.world.clock.now))

    def _data(self, at: int):
        position = [at]

        def data(piece: bytes) -> None:
            if self.node.conn is self:
                self.parts[position[0]] = piece
                position[0] += len(piece)
                self._flush()
        return data

    def _flush(self) -> None:
        node = self.node
        while self.next in self.parts and node.conn is self and not node.core.done and node.core.wants_origin:
            piece = self.parts.pop(self.next)
            self.next += len(piece)
            if node.spool is not None and node.core.origin_offset == node.spool:
                node.spool += len(piece)
            node._run(node.core.origin_data(piece, node.world.clock.now))


@contextlib.contextmanager
def parallel_ranges(k: int, counts: dict[str, int]) -> Iterator[None]:
    """While active, a simulated download that claims and has just asked its origin again (the close for the early
    lookup) asks for the rest by `k` Ranges instead."""
    lookup_done, close = Node._lookup_done, models.Origin.close

    def answered(self: Node, found) -> None:
        lookup_done(self, found)
        core, conn = self.core, self.conn
        if core.parking.claimed and isinstance(conn, OriginConn) and core.origin is Producer.HEAD_PENDING \
                and len(self.world.content) - core.position > CHUNK:
            close(self.world.swarm_origin, conn, self.world.clock.now)  # (not accepted yet: it costs nothing)
            self.conn = Ranges(self, core.position, k)  # type: ignore[assignment]
            counts["parallel"] += 1

    def closing(origin: models.Origin, conn, now: float) -> None:
        for one in conn.conns if isinstance(conn, Ranges) else [conn]:
            close(origin, one, now)

    Node._lookup_done, models.Origin.close = answered, closing  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        Node._lookup_done, models.Origin.close = lookup_done, close  # type: ignore[method-assign,assignment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranges", type=int, default=4, help="Range requests at once per first-hand fetcher")
    parser.add_argument("--seeds", default="1,2,3,4")
    parser.add_argument("--clients", type=int, default=1000)
    args = parser.parse_args(argv)
    print(f"{'seed':>4} {'reads':>9} {'p50 s':>6} {'p99 s':>6} {'origin':>7}  first two vouches (s)")
    for seed in (int(s) for s in args.seeds.split(",")):
        params = SimParams(seed=seed, clients=args.clients)
        counts = {"parallel": 0}
        for arm in ("one", "parallel"):
            with parallel_ranges(args.ranges, counts) if arm == "parallel" else contextlib.nullcontext():
                got = figures(params)
            assert got["exact"], "a client got other bytes than the file's"
            label = "1 stream" if arm == "one" else f"{args.ranges} ranges"
            print(f"{seed:>4} {label:>9} {got['p50']:6.2f} {got['p99']:6.2f} {got['origin']:7.2%}  {got['vouches']}")
        print(f"     (first-hand fetchers that read by ranges: {counts['parallel']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
