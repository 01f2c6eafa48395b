"""A claimer's origin asked again by several Range requests at once, on the simulator, as the product reads it
(`proxy.download.ranged_origin`): the first piece alone, the others once its head came, at most `streams` pieces at
once (`proxy.download.origin_pieces.Pieces`), delivered to the core in order. The first piece's head stands for the
whole rest's. Not modelled: an origin that refuses pieces (the simulated one never does), the read-ahead's memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.download.origin_pieces import Pieces
from proxy.download.state import Producer

from .models import Origin, OriginConn

if TYPE_CHECKING:
    from .node import Node


class Ranges:
    """Bytes `start..end` of the file for `node`, `streams` Range requests at once."""

    def __init__(self, node: Node, start: int, end: int, streams: int) -> None:
        self.node, self.next = node, start  # the next byte delivered
        self.plan = Pieces.cut(start, end, streams)
        self.parts: dict[int, bytes] = {}  # arrived ahead of delivery, by offset
        self.conns: list[OriginConn] = []
        self._ask()

    @property
    def hinted(self) -> bool:
        """The first piece's head stands for the whole rest's."""
        return self.conns[0].hinted

    def close(self, origin: Origin, now: float) -> None:
        for conn in self.conns:
            origin.close(conn, now)

    def _ask(self) -> None:
        lo, hi = self.plan.bounds(len(self.conns))
        world = self.node.world
        first = not self.conns
        self.conns.append(world.swarm_origin.get(self.node.host, world.clock.now, self._head if first else _nothing,
                                                 self._data(lo), lo, hi))

    def _fill(self) -> None:
        delivering = min((self.next - self.plan.start) // self.plan.size, self.plan.count - 1)
        while len(self.conns) in self.plan.window(delivering):
            self._ask()

    def _head(self, status: int, start: int, end: int) -> None:
        node = self.node
        if node.conn is self and node.core.origin is Producer.HEAD_PENDING:
            node._head_of(self)(206, self.plan.start, self.plan.end)  # as the node takes any answer's head
            if node.conn is self:  # (the core kept it)
                self._fill()

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
        if node.conn is self:
            self._fill()


def _nothing(status: int, start: int, end: int) -> None:
    """A later piece's head: checked by the product (`piece_refused`), always the piece asked here."""
