"""The rest of an origin's answer cut into pieces, read as several Range requests at once (pure; the asyncio shell is
`proxy.download.ranged_origin`).

A download that says it fetches a slow origin's file for the others (`ClaimFetching`) reads the rest of it as up to
`streams` Range requests at once, delivered in order, as download accelerators do (`parking.CLAIM_RANGES` says why).
The rest is cut into pieces of equal size, at most PIECE_MAX, and at most `streams` of them are read at once: the
lowest not yet delivered and those right after it (`window`). A piece read ahead of delivery is buffered, so a
download holds at most `streams` x PIECE_MAX bytes whatever the file's size.
"""

from __future__ import annotations

import dataclasses

# The smallest piece worth a request of its own: a rest under two of these is read as one stream (`Parking.streams`).
PIECE_MIN = 16 * 1024
# The largest piece, and the most bytes a piece buffers ahead of delivery: four streams hold at most 1 MiB.
PIECE_MAX = 256 * 1024


@dataclasses.dataclass(frozen=True)
class Pieces:
    """`start..end` cut into `count` pieces of `size` bytes (the last one shorter), `streams` of them read at once."""

    start: int
    end: int
    streams: int
    size: int

    @classmethod
    def cut(cls, start: int, end: int, streams: int) -> Pieces:
        if end <= start or streams < 1:
            raise ValueError(f"nothing to cut: bytes {start}..{end} in {streams} streams")
        return cls(start, end, streams, min(PIECE_MAX, -(-(end - start) // streams)))

    @property
    def count(self) -> int:
        return -(-(self.end - self.start) // self.size)

    def bounds(self, index: int) -> tuple[int, int]:
        """Piece `index`'s bytes, `lo..hi` (hi exclusive)."""
        if not 0 <= index < self.count:
            raise IndexError(f"piece {index} of {self.count}")
        lo = self.start + index * self.size
        return lo, min(self.end, lo + self.size)

    def window(self, delivering: int) -> range:
        """The pieces read at once while piece `delivering` is the one delivered."""
        return range(delivering, min(self.count, delivering + self.streams))
