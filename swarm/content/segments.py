"""Segments: a file cut into aligned runs of blocks that can be trusted one by one, before anyone has it all.

Without the origin's help a manifest needs the content root, and the root needs every byte. So a file of several
segments is also shared as its segments: each is a content of its own (its bytes, the file's block size, its own
root), that nodes which got those bytes from the origin vouch for under a key of (URL, size, segment number), and
that peers serve and fetch like any content. A segment is `blocks_per_segment` blocks, a power of two, so its root
is a node of the file's own merkle tree (BEP 52's): once every segment is trusted, `file_root` gives the file's
root from theirs without one more byte.

The geometry depends only on (size, block size), so every node cuts a file the same way: segments of about
`SEGMENT_TARGET` bytes, and never more than `MAX_SEGMENTS` of them (a voucher says so once per segment).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import merkle

# About one segment per second of a slow origin's stream at a few MB/s: small enough that a crowd waits for the
# first vouches seconds, not minutes; large enough that a file costs few DHT records (one per segment per voucher).
SEGMENT_TARGET = 4 * 1024 * 1024
MAX_SEGMENTS = 256


@dataclass(frozen=True)
class Segments:
    """How a file of `size` bytes in blocks of `block_size` is cut into segments."""

    size: int
    block_size: int

    def __post_init__(self) -> None:
        if self.size < 0 or self.block_size < merkle.LEAF_SIZE or self.block_size & (self.block_size - 1):
            raise ValueError(f"no segments for size {self.size} in blocks of {self.block_size}")

    @property
    def blocks_per_segment(self) -> int:
        per = max(1, SEGMENT_TARGET // self.block_size)
        while merkle.block_count(self.size, self.block_size * per) > MAX_SEGMENTS:
            per *= 2
        return per

    @property
    def length(self) -> int:
        """Bytes of a segment (the last may be shorter)."""
        return self.block_size * self.blocks_per_segment

    @property
    def count(self) -> int:
        return max(1, merkle.block_count(self.size, self.length))

    def span(self, index: int) -> tuple[int, int]:
        """`(start, end)` of segment `index` in the file."""
        if not 0 <= index < self.count:
            raise IndexError(f"segment {index} out of range 0..{self.count - 1}")
        start = index * self.length
        return start, min(start + self.length, self.size)

    def index_of(self, offset: int) -> int:
        """The segment holding byte `offset`."""
        return min(offset // self.length, self.count - 1)

    def file_root(self, roots: Sequence[bytes]) -> bytes:
        """The file's content root from every segment's own root (each a merkle root of that segment's bytes).

        A whole segment's tree is the file tree's node above it. The last one's tree is as high as its own
        bytes need, so it is raised to a whole segment's height with padding, as the file tree pads it."""
        if len(roots) != self.count:
            raise ValueError(f"{len(roots)} segment roots for {self.count} segments")
        if self.count == 1:
            return roots[0]
        height = merkle.tree_height(self.length)
        start, end = self.span(self.count - 1)
        own = merkle.tree_height(end - start)
        last = merkle.subtree_root([roots[-1]], height - own, own)
        return merkle.reduce_layer([*roots[:-1], last], height)


def segmented(size: int | None, block_size: int | None) -> Segments | None:
    """The file's segments when it has several (a file of one segment is trusted by its own manifest)."""
    if not size or not block_size:
        return None
    cut = Segments(size, block_size)
    return cut if cut.count > 1 else None
