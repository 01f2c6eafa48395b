"""Piece picker: which block to ask which source for next (sans-I/O, no clock, no sockets).

The picker knows, per block, its state and how many sources have it; per source, which blocks it has and which
it was asked for. It answers `pick(source, n)` — up to `n` blocks to request from `source`, already marked as
requested — and records the outcome of each request. It never decides *when* or *how many*; that is the
request policy's job (`swarm.core.policy`).

Block states (`BlockState`): MISSING → REQUESTED → RECEIVED → VERIFIED, and RECEIVED → FAILED when the block
fails its hash. FAILED is pickable again, exactly like MISSING (the state is kept only so that it shows).

Order of a pick, for the blocks `source` has and that are pickable (MISSING or FAILED):

1. the **streaming window**: the `window` blocks from the delivery point (the first block at or after
   `set_delivery_point(...)` that is not verified), in index order — what the consumer needs next;
2. then, by mode: **rarest-first** (fewest partial holders first; sources that have everything — seeds and the
   origin — add the same to every block and are left out of the counts) or **random**;
   ties, and the random order, follow one permutation drawn once from the injected `rng`; without an `rng`
   they follow the block index, which keeps tests readable;
3. **endgame**, only when no block at all is pickable any more (every missing block is requested), and only
   for a peer with no request outstanding, one block at a time (libtorrent's `dont_pick_busy_blocks`; the
   origin, far and pipelined, takes up to `n`, as it would any block no peer gives in time): a
   block already requested from other sources, fewest requesters first then nearest the delivery point, up to
   `max_duplicates` requesters per block. When one copy arrives, `on_received` returns the losers to cancel.
   A file of fewer blocks than the window is all requested from the first source that joins: every other
   source used to be asked for all of it again at once, so a small file crossed the network twice, and the
   cancel came too late to stop the second copy (in the lab's flash crowd the seeds' uplinks carried both).

The origin is the source `ORIGIN`, which has every block (`add_origin()`). Every downloader of a crowd shares
it, so its picks are *spread* (`pick(ORIGIN, n, spread=True)`) once peers are known: only blocks no peer has
and no peer is fetching from the origin (`on_start`, the wire's START), the delivery point first, then by rank
(each downloader's random permutation differs), the window included.

Availability counts and the pickable blocks sorted by (availability, rank) are kept by
`swarm.core.availability.Availability`; this module keeps the states, the sources and their requests, and picks.

Complexity (N blocks, S sources, n = blocks asked for, W = window):

* making a block (un)pickable or changing its availability is O(log N) (`swarm.core.availability`);
* `pick` scans the pickable lists in (availability, rank) order and stops after n hits: O(W + n + blocks
  skipped because the source lacks them). For a source holding few blocks it instead walks that source's blocks
  (`bytearray.find`, C speed) and keeps the n best: O(held). It takes whichever is cheaper by the estimate
  held² < n·pickable, so a pick is never O(N·S). A source for which a pick found nothing is remembered, and its
  next pick returns at once unless a block became pickable again or the source announced new blocks since, and
  looks at those blocks alone if it announced a few (`FRESH_KEPT`) and no block became pickable again;
* `have` is O(log N); seeds and the origin join and leave in O(1); a bitfield costs O(held log N), or O(N) in C
  for a large one, its lists rebuilt once at the next pick (`swarm.core.availability`);
* endgame picks are O(outstanding requests), which is small by then.

Memory: one byte per block per partial source (a `bytearray` bitfield), a few words per block.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Container, Hashable, Iterable
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from swarm.core.availability import Availability
from swarm.errors import BadBlockIndex

__all__ = ["BlockState", "Mode", "ORIGIN", "Picker", "BadBlockIndex"]

Source = Hashable


class BlockState(IntEnum):
    MISSING = 0
    REQUESTED = 1
    RECEIVED = 2
    VERIFIED = 3
    FAILED = 4


_PICKABLE = frozenset({BlockState.MISSING, BlockState.FAILED})


class Mode(Enum):
    RAREST_FIRST = "rarest"
    RANDOM = "random"


class _Special(Enum):
    ORIGIN = "origin"

    # Enum's own __hash__ is Python code (it hashes the name), and the origin is looked up in the sources on every
    # HAVE; a sentinel compares by identity, so the identity hash does as well, in C.
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return self.name


#: The origin server as a source: it has every block. A sentinel, so it can never collide with a peer id.
ORIGIN = _Special.ORIGIN

#: Scale of the "held² < n·pickable" estimate that chooses between the two pick strategies (tests vary it to
#: check both strategies give the same answer).
SPARSE_SCAN_FACTOR = 1.0
#: START announcements kept per peer: its latest few. A peer has a couple of origin requests at a time
#: (swarm.core.policy's origin_max_outstanding), so older ones were answered by a HAVE or given up.
STARTS_KEPT = 4
#: Blocks announced since a pick found nothing for a source that its next pick looks at alone (`pick`): about
#: what a rack mate announces between two of our picks; more, and the next pick does the full walk.
FRESH_KEPT = 32


@dataclass(slots=True)
class _SourceView:
    #: one byte per block (0/1); None when the source has every block (a seed, or the origin)
    has: bytearray | None
    count: int
    requests: set[int] = field(default_factory=set)
    #: bumped whenever the source announces a block; part of the "nothing for you" memo
    have_version: int = 0
    empty_memo: tuple[int, int, Hashable | None] | None = None
    #: the blocks it announced since `empty_memo` was set (None: no memo, or more than FRESH_KEPT of them)
    fresh: list[int] | None = None
    #: blocks it said it is fetching from the origin (START), latest last, at most STARTS_KEPT
    starts: deque[int] = field(default_factory=deque)

    def holds(self, block: int) -> bool:
        return self.has is None or self.has[block] == 1


class Picker:
    """Block states, availability and the choice of the next blocks to request."""

    def __init__(
        self,
        num_blocks: int,
        *,
        mode: Mode = Mode.RAREST_FIRST,
        window: int = 0,
        rng: random.Random | None = None,
        max_duplicates: int = 2,
    ) -> None:
        if num_blocks < 0 or window < 0 or max_duplicates < 1:
            raise ValueError("num_blocks and window must be >= 0, max_duplicates >= 1")
        if mode is Mode.RANDOM and rng is None:
            raise ValueError("random mode needs an injected rng")
        self.num_blocks = num_blocks
        self.mode = mode
        self.window = window
        self.max_duplicates = max_duplicates

        self._state = bytearray(num_blocks)  # BlockState per block; `_avail` reads it, never replace it
        # one byte per block, 1 while it is pickable: ANDed with a source's `has` at C speed (`_pick_held`)
        self._pickable_mask = bytearray(b"\x01") * num_blocks
        self._state_counts = [0] * len(BlockState)
        self._state_counts[BlockState.MISSING] = num_blocks
        # availability counts, the tie-break ranks and the pickable blocks in (availability, rank) order
        self._avail = Availability(self._state, _PICKABLE, by_count=mode is Mode.RAREST_FIRST, rng=rng)

        self._requesters: dict[int, set[Source]] = {}  # only for REQUESTED blocks
        self._started: dict[int, int] = {}  # block -> peers that said they are fetching it from the origin
        self._sources: dict[Source, _SourceView] = {}
        self._cursor = 0  # the delivery point: first block at or after the start that is not verified
        # bumped whenever a block becomes pickable again; part of the "nothing for you" memo
        self._returns = 0

    # -- queries ------------------------------------------------------------------------------------------

    def state(self, block: int) -> BlockState:
        return BlockState(self._state[block])

    def states(self) -> list[BlockState]:
        return [BlockState(s) for s in self._state]

    def count(self, state: BlockState) -> int:
        """How many blocks are in `state`."""
        return self._state_counts[state]

    @property
    def pickable(self) -> int:
        """Blocks that may be requested now (missing or failed)."""
        return self._state_counts[BlockState.MISSING] + self._state_counts[BlockState.FAILED]

    @property
    def is_complete(self) -> bool:
        return self._state_counts[BlockState.VERIFIED] == self.num_blocks

    @property
    def in_endgame(self) -> bool:
        """Every block not yet received is requested: duplicates may now be asked for."""
        return self.pickable == 0 and self._state_counts[BlockState.REQUESTED] > 0

    def availability(self, block: int) -> int:
        """How many peers have `block` (the origin is not counted: it always has everything)."""
        return self._avail.counts[block] + self._avail.seeds

    def has(self, source: Source, block: int) -> bool:
        return self._view(source).holds(block)

    def requesters(self, block: int) -> frozenset[Source]:
        """Sources with an outstanding request for `block`."""
        return frozenset(self._requesters.get(block, ()))

    def requests_of(self, source: Source) -> frozenset[int]:
        """Blocks `source` has outstanding requests for."""
        return frozenset(self._view(source).requests)

    def sources(self) -> list[Source]:
        return list(self._sources)

    @property
    def delivery_point(self) -> int:
        """The first block at or after the start that is not verified (== num_blocks when all are)."""
        return self._cursor

    def set_delivery_point(self, block: int) -> None:
        """Where the consumer reads from (a client's Range start, or where delivery has got to)."""
        if not 0 <= block <= self.num_blocks:
            raise ValueError(f"delivery point {block} outside 0..{self.num_blocks}")
        self._cursor = block
        self._advance_cursor()

    # -- sources ------------------------------------------------------------------------------------------

    def add_origin(self) -> None:
        self.add_source(ORIGIN, has_all=True)

    def add_source(
        self, source: Source, bitfield: bytes | bytearray | Iterable[object] | None = None, *, has_all: bool = False
    ) -> None:
        """A source joined with `bitfield` (one truthy item per block) or with every block (`has_all`)."""
        if source in self._sources:
            raise ValueError(f"source {source!r} already added")
        has: bytearray | None = None
        if not has_all:
            has = self._parse_bitfield(bitfield)
        held = self.num_blocks if has is None else has.count(1)
        if has is not None and held == self.num_blocks:
            has = None  # a full bitfield is a seed: O(1) bookkeeping from now on
        self._sources[source] = _SourceView(has=has, count=held)
        if has is None:
            if source is not ORIGIN:
                self._avail.seeds += 1
        elif held:
            self._avail.shift_bitfield(has, +1, held)

    def have(self, source: Source, block: int) -> bool:
        """`source` announced `block`. True if that makes a pickable block available from it."""
        # Called once per block per peer in a swarm: the checks of `_view`, `_check_index` and `holds` inline.
        view = self._sources.get(source)
        if view is None:
            raise ValueError(f"unknown source {source!r}")
        if not 0 <= block < self.num_blocks:
            raise BadBlockIndex(f"block {block} outside 0..{self.num_blocks - 1}")
        has = view.has
        if has is None or has[block]:
            return False
        has[block] = 1
        view.count += 1
        view.have_version += 1
        fresh = view.fresh
        if fresh is not None:
            if len(fresh) < FRESH_KEPT:
                fresh.append(block)
            else:
                view.fresh = None
        if view.starts and block in view.starts:  # fetched: it counts as available now
            view.starts.remove(block)
            self._unstart(block)
        self._avail.shift_one(block, +1)
        return self._state[block] in _PICKABLE

    def remove_source(self, source: Source) -> list[int]:
        """`source` is gone (left, banned, dropped): forget its blocks and requests.

        Returns the blocks that became pickable again because their only request was to `source`.
        """
        view = self._sources.pop(source, None)
        if view is None:
            return []
        for block in view.starts:
            self._unstart(block)
        if view.has is None:
            if source is not ORIGIN:
                self._avail.seeds -= 1
        elif view.count:
            self._avail.shift_bitfield(view.has, -1, view.count)
        returned = []
        for block in sorted(view.requests):
            if self._withdraw(source, block):
                returned.append(block)
        return returned

    def on_start(self, source: Source, block: int) -> None:
        """`source`, a peer, said it is fetching `block` from the origin: spread picks leave it to it."""
        self._check_index(block)
        view = self._sources.get(source)
        if view is None or source is ORIGIN or view.holds(block) or block in view.starts:
            return
        if len(view.starts) == STARTS_KEPT:
            self._unstart(view.starts.popleft())
        view.starts.append(block)
        self._started[block] = self._started.get(block, 0) + 1

    def started(self, block: int) -> int:
        """How many peers said they are fetching `block` from the origin."""
        return self._started.get(block, 0)

    def _unstart(self, block: int) -> None:
        left = self._started[block] - 1
        if left:
            self._started[block] = left
        else:
            del self._started[block]

    # -- picking ------------------------------------------------------------------------------------------

    def pick(self, source: Source, n: int, skip: Container[int] = frozenset(), *, spread: bool = False,
             skip_version: Hashable | None = None) -> list[int]:
        """Up to `n` blocks to request from `source` now, best first, marked as requested by it.

        `skip` holds blocks not to ask this source for (the policy's "retry elsewhere" memory). A `skip` that
        only grows between two changes of `skip_version` keeps the "nothing for this source" memo usable (the
        fetch core's START book, `swarm.core.starts`): without a version, any `skip` turns the memo off.

        `spread` is for a source every downloader shares, the origin. Once peers are known it is asked only
        for blocks no peer has and no peer is fetching from it (START): the delivery-point block first, then
        by rank, each downloader's random permutation, the streaming window included. Downloaders that start
        together share their window: asking the origin for it first would send the same blocks to all of them
        (and a block asked of the origin is not asked of the peers that have it a moment later); leaving it for
        last would have the whole crowd ask the origin for the same few blocks at the end. With no peer known the
        same: the delivery-point block, then by rank (a crowd whose members have not found each other yet would
        otherwise all ask the origin for the first blocks). The caller decides when to spread
        (`RequestPolicy._origin_spreads`).
        """
        view = self._sources.get(source)  # `_view`, inline: a pick follows every block and most new HAVEs
        if view is None:
            raise ValueError(f"unknown source {source!r}")
        if n <= 0:
            return []
        idle = not view.requests
        if self._avail.stale:
            self._avail.rebuild()
        memo = (self._returns, view.have_version, skip_version)
        chosen: list[int] = []
        # Spread picks depend on the other sources' blocks and STARTs, which the memo does not follow.
        no_skip = (not skip or skip_version is not None) and not spread
        counts = self._state_counts
        if counts[BlockState.MISSING] + counts[BlockState.FAILED] and not (no_skip and view.empty_memo == memo):
            # Found nothing last time, and since then no block became pickable again and `skip` only grew: the
            # only candidates are the blocks the source announced since (a HAVE's pick, mostly).
            last = view.empty_memo
            fresh = view.fresh if no_skip and last is not None and last[0] == memo[0] and last[2] == memo[2] \
                else None
            if spread:
                self._pick_spread(view, n, skip, chosen)
            elif self.window:
                self._pick_window(view, n, skip, chosen)
            if len(chosen) < n and not spread:
                if fresh is not None:
                    self._pick_from_blocks(fresh, n, skip, chosen)
                elif view.has is not None:
                    self._pick_held(view, n, skip, chosen)
                else:
                    self._pick_from_lists(view, n, skip, chosen)
            view.empty_memo = memo if (not chosen and no_skip) else None
            view.fresh = [] if view.empty_memo is not None else None
        for block in chosen:
            self._request(source, view, block)
        busy = 0
        # endgame: the origin, far and pipelined, fills its slots; an idle peer takes one
        if counts[BlockState.MISSING] + counts[BlockState.FAILED] == 0:
            busy = n - len(chosen) if source is ORIGIN else int(idle and not chosen)
        if busy:
            for block in self._pick_endgame(source, view, busy, skip):
                self._request(source, view, block)
                chosen.append(block)
        return chosen

    def _pick_spread(self, view: _SourceView, n: int, skip: Container[int], chosen: list[int]) -> None:
        avail = self._avail
        if avail.seeds or not avail.lists:  # a peer has everything
            return
        cursor, started = self._cursor, self._started
        if cursor < self.num_blocks and self._state[cursor] in _PICKABLE and avail.counts[cursor] == 0 \
                and cursor not in started and cursor not in skip:
            chosen.append(cursor)
        block_at_rank = avail.block_at_rank
        for rank in avail.lists[0]:  # pickable blocks no partial source has, by rank
            if len(chosen) == n:
                return
            block = block_at_rank[rank]
            if block not in started and block not in skip and block != cursor:
                chosen.append(block)

    def _pick_window(self, view: _SourceView, n: int, skip: Container[int], chosen: list[int]) -> None:
        state = self._state
        for block in range(self._cursor, min(self.num_blocks, self._cursor + self.window)):
            if state[block] in _PICKABLE and view.holds(block) and block not in skip:
                chosen.append(block)
                if len(chosen) == n:
                    return

    def _pick_from_lists(self, view: _SourceView, n: int, skip: Container[int], chosen: list[int]) -> None:
        """Walk the pickable lists in (availability, rank) order until n blocks the source has are found."""
        taken = set(chosen)
        has = view.has
        block_at_rank = self._avail.block_at_rank
        for ranks in self._avail.lists:
            for rank in ranks:
                block = block_at_rank[rank]
                if (has is None or has[block]) and block not in skip and block not in taken:
                    chosen.append(block)
                    if len(chosen) == n:
                        return

    def _pick_held(self, view: _SourceView, n: int, skip: Container[int], chosen: list[int]) -> None:
        """A source with some of the blocks: the pickable blocks it holds are the AND of two byte masks, done on
        ints at C speed; none, nothing to walk (the lists walk went through every pickable block to find that: most
        of a 200-agent cluster simulation's time); few, keep the n best of them (`_pick_from_source_blocks`); many,
        walk the lists, which soon meet n of them (about n x pickable / held steps)."""
        assert view.has is not None
        held_mask = int.from_bytes(view.has, "little") & int.from_bytes(self._pickable_mask, "little")
        held = held_mask.bit_count()
        if held == 0:
            return
        if held * held < (n - len(chosen)) * self.pickable * SPARSE_SCAN_FACTOR:
            self._pick_from_source_blocks(held_mask.to_bytes(self.num_blocks, "little"), n, skip, chosen)
        else:
            self._pick_from_lists(view, n, skip, chosen)

    def _pick_from_source_blocks(self, held: bytes, n: int, skip: Container[int], chosen: list[int]) -> None:
        """Walk `held`, the pickable blocks the source has (one byte each), and keep the n best by (availability,
        rank): same order as the lists."""
        taken = set(chosen)
        avail, rank_of = self._avail.counts, self._avail.rank_of
        by_count = self.mode is Mode.RAREST_FIRST
        candidates = []
        block = held.find(1)
        while block != -1:
            if block not in skip and block not in taken:
                candidates.append((avail[block] if by_count else 0, rank_of[block], block))
            block = held.find(1, block + 1)
        chosen.extend(block for _, _, block in heapq.nsmallest(n - len(chosen), candidates))

    def _pick_from_blocks(self, blocks: list[int], n: int, skip: Container[int], chosen: list[int]) -> None:
        """The n best by (availability, rank) of `blocks` (held by the source) that are pickable: as
        `_pick_from_source_blocks`, for a few blocks named rather than a mask."""
        taken = set(chosen)
        avail, rank_of, mask = self._avail.counts, self._avail.rank_of, self._pickable_mask
        by_count = self.mode is Mode.RAREST_FIRST
        candidates = [(avail[block] if by_count else 0, rank_of[block], block) for block in blocks
                      if mask[block] and block not in skip and block not in taken]
        chosen.extend(block for _, _, block in heapq.nsmallest(n - len(chosen), candidates))

    def _pick_endgame(self, source: Source, view: _SourceView, n: int, skip: Container[int]) -> list[int]:
        candidates = [
            (len(requesters), block)
            for block, requesters in self._requesters.items()
            if len(requesters) < self.max_duplicates
            and source not in requesters
            and view.holds(block)
            and block not in skip
        ]
        return [block for _, block in heapq.nsmallest(n, candidates)]

    # -- outcomes -----------------------------------------------------------------------------------------

    def mark_requested(self, source: Source, block: int) -> None:
        """Record a request made outside `pick` (e.g. the origin response already streaming this block)."""
        view = self._view(source)
        self._check_index(block)
        if self._state[block] not in _PICKABLE and self._state[block] != BlockState.REQUESTED:
            raise ValueError(f"block {block} is {self.state(block).name}, it cannot be requested")
        self._request(source, view, block)

    def abort(self, source: Source, block: int) -> bool:
        """`source` will not deliver `block` (timeout, reject, cancel). True if the block became pickable."""
        view = self._view(source)
        if block not in view.requests:
            return False
        return self._withdraw(source, block)

    def wants(self, block: int) -> bool:
        """Would a copy of `block` arriving now be used (it is neither received nor verified)?"""
        return self._state[block] not in (BlockState.RECEIVED, BlockState.VERIFIED)

    def on_received(self, source: Source, block: int) -> list[Source]:
        """A copy of `block` arrived from `source` (not yet verified).

        Returns the losers: the other sources with an outstanding request for it, whose requests are dropped
        here and should be cancelled on the wire. A copy nobody asked for is accepted too (a late answer to a
        timed-out request is still good data).
        """
        self._check_index(block)
        if not self.wants(block):
            raise ValueError(f"block {block} is already {self.state(block).name}")
        losers = self._clear_requests(block, keep=source)
        self._set_state(block, BlockState.RECEIVED)
        return losers

    def on_verified(self, block: int) -> list[Source]:
        """`block` passed its hash (or was already held, e.g. the origin's prefix or data resumed from disk).

        Returns the sources whose requests for it are now pointless (to cancel).
        """
        self._check_index(block)
        losers = self._clear_requests(block, keep=None)
        self._set_state(block, BlockState.VERIFIED)
        self._advance_cursor()
        return losers

    def on_failed(self, block: int) -> None:
        """The received copy of `block` failed its hash: it is pickable again."""
        self._check_index(block)
        if self._state[block] != BlockState.RECEIVED:
            raise ValueError(f"block {block} is {self.state(block).name}, not RECEIVED")
        self._set_state(block, BlockState.FAILED)

    # -- internals ----------------------------------------------------------------------------------------

    def _view(self, source: Source) -> _SourceView:
        try:
            return self._sources[source]
        except KeyError:
            raise ValueError(f"unknown source {source!r}") from None

    def _check_index(self, block: int) -> None:
        if not 0 <= block < self.num_blocks:
            raise BadBlockIndex(f"block {block} outside 0..{self.num_blocks - 1}")

    def _parse_bitfield(self, bitfield: bytes | bytearray | Iterable[object] | None) -> bytearray:
        if bitfield is None:
            return bytearray(self.num_blocks)
        if isinstance(bitfield, (bytes, bytearray)):
            has = bytearray(bitfield)
            if has.translate(None, b"\x00\x01"):  # deletes the 0s and 1s: anything left is invalid
                raise BadBlockIndex("bitfield bytes must be 0 or 1")
        else:
            has = bytearray(1 if bit else 0 for bit in bitfield)
        if len(has) != self.num_blocks:
            raise BadBlockIndex(f"bitfield of {len(has)} blocks, expected {self.num_blocks}")
        return has

    def _request(self, source: Source, view: _SourceView, block: int) -> None:
        requesters = self._requesters.setdefault(block, set())
        requesters.add(source)
        view.requests.add(block)
        if self._state[block] != BlockState.REQUESTED:
            self._set_state(block, BlockState.REQUESTED)

    def _withdraw(self, source: Source, block: int) -> bool:
        """Drop `source`'s request for `block`; the block is pickable again when no request is left."""
        view = self._sources.get(source)
        if view is not None:
            view.requests.discard(block)
        requesters = self._requesters.get(block)
        if requesters is None:
            return False
        requesters.discard(source)
        if requesters:
            return False
        del self._requesters[block]
        self._set_state(block, BlockState.MISSING)
        return True

    def _clear_requests(self, block: int, keep: Source | None) -> list[Source]:
        requesters = self._requesters.pop(block, None)
        if not requesters:
            return []
        losers = [s for s in requesters if s != keep]
        for source in requesters:
            view = self._sources.get(source)
            if view is not None:
                view.requests.discard(block)
        return sorted(losers, key=repr)  # a stable order for callers and tests

    def _set_state(self, block: int, new: BlockState) -> None:
        old = self._state[block]
        if old == new:
            return
        was_pickable, is_pickable = old in _PICKABLE, new in _PICKABLE
        if was_pickable and not is_pickable:
            self._avail.remove_pickable(block)
            self._pickable_mask[block] = 0
        elif is_pickable and not was_pickable:
            self._avail.add_pickable(block)
            self._pickable_mask[block] = 1
            self._returns += 1
        self._state[block] = new
        self._state_counts[old] -= 1
        self._state_counts[new] += 1

    def _advance_cursor(self) -> None:
        state = self._state
        while self._cursor < self.num_blocks and state[self._cursor] == BlockState.VERIFIED:
            self._cursor += 1

    def __repr__(self) -> str:
        return (
            f"Picker({self.num_blocks} blocks, {self.mode.value}, window={self.window}, "
            f"verified={self.count(BlockState.VERIFIED)}, pickable={self.pickable}, sources={len(self._sources)})"
        )
