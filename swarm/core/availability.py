"""The piece picker's availability bookkeeping (`swarm.core.picker`): how many sources hold each block, and the
pickable blocks kept sorted by (availability, rank) so that a pick reads them in order.

Sources that have everything — seeds and the origin — add the same to every block: they are left out of the
per-block counts (seeds other than the origin are counted once, in `seeds`). The rank is the tie-break: one
permutation of the blocks, drawn once from the picker's `rng` (the block index without one).

Complexity (N blocks):

* pickable blocks live in sorted sets of their rank (`SortedInts`), one per availability count (one in all for
  random mode), each a list of chunks of ≤ 1024 ranks. Making a block (un)pickable or changing its count is
  O(log N) bisecting plus a `memmove` of at most a chunk;
* a bitfield with few blocks is applied block by block, O(held log N); a large one (over N/8 blocks) is added to
  the counts as one big integer with a lane per block (O(N) in C, about a millisecond for 100,000 blocks) and the
  sorted sets are rebuilt once, at the next pick (O(N) in Python), so a burst of peers joining together pays for
  one rebuild.

Memory: a few words per block.
"""

from __future__ import annotations

import random
import sys
from array import array
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator
from itertools import compress

__all__ = ["Availability", "SortedInts", "BULK_BITFIELD_MIN"]

#: Bitfields holding more than max(this, N/8) blocks are added in bulk (then the lists are rebuilt).
BULK_BITFIELD_MIN = 64

# Availability counts: an array of 32-bit lanes, so that a whole bitfield can be added as one big integer.
_COUNT_TYPE = "I"
_LANE = array(_COUNT_TYPE).itemsize


def _bitfield_as_int(has: bytearray) -> int:
    """`has` (one 0/1 byte per block) as an int with one little-endian lane per block."""
    wide = bytearray(len(has) * _LANE)
    wide[0::_LANE] = has
    return int.from_bytes(wide, "little")


def _counts_as_int(counts: array[int]) -> int:
    if sys.byteorder == "big":
        counts = array(counts.typecode, counts)
        counts.byteswap()
    return int.from_bytes(counts.tobytes(), "little")


def _int_as_counts(value: int, size: int) -> array[int]:
    # no lane can borrow or carry: a count never drops below the bitfield that added to it, nor reaches 2**32
    counts = array(_COUNT_TYPE, value.to_bytes(size * _LANE, "little"))
    if sys.byteorder == "big":
        counts.byteswap()
    return counts


class SortedInts:
    """A sorted set of ints kept as chunks of at most 2×_LOAD items (the layout of `sortedcontainers`).

    Plain sorted lists would make every insert/delete a `memmove` of up to N pointers, and a swarm sends N×S
    HAVEs over a download; with chunks an update is two bisects and a move of a few hundred pointers.
    """

    _LOAD = 512

    def __init__(self, sorted_items: list[int] | None = None) -> None:
        items = sorted_items or []
        load = self._LOAD
        self._chunks = [items[i : i + load] for i in range(0, len(items), load)]
        self._maxes = [chunk[-1] for chunk in self._chunks]
        self._len = len(items)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        for chunk in self._chunks:
            yield from chunk

    def add(self, value: int) -> None:
        chunks, maxes = self._chunks, self._maxes
        self._len += 1
        if not maxes:
            chunks.append([value])
            maxes.append(value)
            return
        i = bisect_left(maxes, value)
        if i == len(maxes):
            i -= 1
            chunks[i].append(value)
            maxes[i] = value
        else:
            insort(chunks[i], value)
        chunk = chunks[i]
        if len(chunk) > 2 * self._LOAD:
            chunks[i : i + 1] = [chunk[: self._LOAD], chunk[self._LOAD :]]
            maxes[i : i + 1] = [chunk[self._LOAD - 1], chunk[-1]]

    def remove(self, value: int) -> None:
        chunks, maxes = self._chunks, self._maxes
        i = bisect_left(maxes, value)
        if i == len(maxes):
            raise KeyError(value)
        chunk = chunks[i]
        j = bisect_left(chunk, value)
        if chunk[j] != value:
            raise KeyError(value)
        del chunk[j]
        self._len -= 1
        if not chunk:
            del chunks[i], maxes[i]
        elif j == len(chunk):
            maxes[i] = chunk[-1]


class Availability:
    """Per-block counts of the partial sources holding it, and the pickable blocks in (count, rank) order.

    `state` is the picker's per-block state, shared and only read here: a block is listed while its state is in
    `pickable`. The picker calls `add_pickable` / `remove_pickable` when a block's state enters or leaves that set.
    With `by_count` False (random mode) every pickable block sits in one list, by rank alone.
    """

    def __init__(
        self, state: bytearray, pickable: frozenset[int], *, by_count: bool, rng: random.Random | None
    ) -> None:
        num_blocks = len(state)
        self.num_blocks = num_blocks
        self._state = state
        self._pickable = pickable
        self.by_count = by_count
        # among partial sources; seeds are counted once, in `seeds`, the origin not at all
        self.counts = array(_COUNT_TYPE, bytes(num_blocks * _LANE))
        self.seeds = 0

        # Tie-break permutation: rank -> block and block -> rank.
        self.block_at_rank = list(range(num_blocks))
        if rng is not None:
            rng.shuffle(self.block_at_rank)
        self.rank_of = [0] * num_blocks
        for rank, block in enumerate(self.block_at_rank):
            self.rank_of[block] = rank
        # Pickable blocks, as sorted sets of ranks, indexed by count (a single set in random mode). Every block
        # starts missing, so pickable.
        self.lists: list[SortedInts] = [SortedInts(list(range(num_blocks)))]
        # set by bulk count changes (bitfields): the lists are rebuilt once, at the next pick (`rebuild`)
        self.stale = False

    def _list_index(self, block: int) -> int:
        return self.counts[block] if self.by_count else 0

    def add_pickable(self, block: int) -> None:
        if self.stale:  # the coming rebuild reads the states
            return
        index = self._list_index(block)
        while len(self.lists) <= index:
            self.lists.append(SortedInts())
        self.lists[index].add(self.rank_of[block])

    def remove_pickable(self, block: int) -> None:
        if self.stale:
            return
        self.lists[self._list_index(block)].remove(self.rank_of[block])

    def shift_bitfield(self, has: bytearray, delta: int, held: int) -> None:
        """Add `delta` to the count of every block in `has` (a source's bitfield joining or leaving)."""
        if held <= max(BULK_BITFIELD_MIN, self.num_blocks // 8):
            self.shift(compress(range(self.num_blocks), has), delta)
            return
        # A large bitfield: add it lane-wise in C through big-int arithmetic (a Python loop over 100,000 blocks
        # for each of hundreds of peers would dominate), then rebuild the lists once, at the next pick, which
        # also pays once for a burst of peers sending their bitfields together.
        counts = _counts_as_int(self.counts)
        counts = counts + _bitfield_as_int(has) if delta > 0 else counts - _bitfield_as_int(has)
        self.counts = _int_as_counts(counts, self.num_blocks)
        self.stale = self.by_count

    def shift(self, blocks: Iterable[int], delta: int) -> None:
        """Add `delta` to the count of a few `blocks`, keeping the pickable lists sorted."""
        state, counts, pickable = self._state, self.counts, self._pickable
        if not self.by_count or self.stale:
            for block in blocks:
                counts[block] += delta
            return
        for block in blocks:
            if state[block] in pickable:
                self.remove_pickable(block)
                counts[block] += delta
                self.add_pickable(block)
            else:
                counts[block] += delta

    def shift_one(self, block: int, delta: int) -> None:
        """`shift([block], delta)` without the list and the loop: a HAVE moves one block's count."""
        counts = self.counts
        if self.by_count and not self.stale and self._state[block] in self._pickable:
            lists, rank = self.lists, self.rank_of[block]
            lists[counts[block]].remove(rank)
            counts[block] += delta
            index = counts[block]
            while len(lists) <= index:
                lists.append(SortedInts())
            lists[index].add(rank)
        else:
            counts[block] += delta

    def rebuild(self) -> None:
        """Rebuild the lists from the states and counts after bulk changes (`stale`)."""
        lists: list[list[int]] = [[] for _ in range(max(self.counts, default=0) + 1)]
        state, counts, pickable = self._state, self.counts, self._pickable
        for rank, block in enumerate(self.block_at_rank):  # rank order, so every list comes out sorted
            if state[block] in pickable:
                lists[counts[block]].append(rank)
        self.lists = [SortedInts(ranks) for ranks in lists]
        self.stale = False
