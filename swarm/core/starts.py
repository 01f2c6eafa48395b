"""Work stealing by START across distances (sans-I/O): leave a block to a nearer peer that is fetching it.

For a fetch whose sources sit at different distances (the cluster mode: a peer in my rack is at distance 0, one
in another rack of my DC at 1, anything further at 2), a block should cross a far link once per group, not once
per member. Tekel's rule: before a member asks a far source for a block, it tells the peers it serves (START);
they then ask far sources for other blocks and take that one from it once it has it (HAVE). So a peer at
distance d that STARTed a block holds it back from my sources at distances > d until its HAVE, for at most `ttl`
seconds: a START not followed by a HAVE by then is stale (the starter is slow or gave up), and the block is
taken elsewhere — the work stealing. A START repeated (the starter asked again after a timeout) renews it, but one
peer holds one block back for `hold_max` seconds in all (2 TTLs) until its HAVE: a peer that keeps announcing and
never delivers cannot hold a block back for as long as it likes. A peer the request policy snubbed (its requests
timed out) holds nothing back, and one that is dropped is forgotten.

Sources at distance 0 are never held back: nothing is nearer. `blocked(distance, now)` is the container the
request policy skips when it picks for a source at that distance. Without a distance function (the proxy) the
fetch core keeps no `StartBook` at all.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Container, Hashable, Iterable

__all__ = ["HOLD_TTLS", "NearerHolders", "START_HOLD_MAX", "START_TTL", "StartBook"]

Peer = Hashable

#: seconds a START holds a block back. A starter whose request times out (the request policy's 5 s) asks again
#: and announces again, which renews its START; one that stays silent for twice that has stalled or given up,
#: and the block is better taken elsewhere. Shorter, a busy host's queued requests would be fetched twice.
START_TTL = 10.0
#: TTLs one peer's STARTs for one block hold it back in all, renewals included, until its HAVE: a starter that
#: asked again after a timeout still gets a second TTL; one that announces and never delivers (it keeps renewing)
#: no longer holds the block back for as long as it likes.
HOLD_TTLS = 2
START_HOLD_MAX = HOLD_TTLS * START_TTL  # seconds, at the default TTL

class _Blocked:
    """The blocks a source at `distance` should not be asked for now: a live view of the book."""

    __slots__ = ("book", "distance", "now", "ignored")

    def __init__(self, book: StartBook, distance: int, now: float, ignored: Container[Peer]) -> None:
        self.book, self.distance, self.now, self.ignored = book, distance, now, ignored

    def __contains__(self, block: object) -> bool:
        return self.book.holds_back(block, self.distance, self.now, self.ignored)  # type: ignore[arg-type]

    def __bool__(self) -> bool:
        return bool(self.book._starts)


class StartBook:
    def __init__(self, ttl: float = START_TTL) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be > 0")
        self.ttl = ttl
        self.hold_max = HOLD_TTLS * ttl  # (`START_HOLD_MAX` at the default TTL)
        self._starts: dict[int, dict[Peer, tuple[int, float]]] = {}  # block -> peer -> (distance, held until)
        self._of_peer: dict[Peer, set[int]] = {}  # blocks each peer appears under, to forget it
        # peer -> block -> its first START for that block not yet followed by its HAVE (kept past expiry: a renewal
        # after a pause holds no longer than one without)
        self._first: dict[Peer, dict[int, float]] = {}
        self.version = 0  # bumped whenever a block may have been let go (`expire`, `forget`)
        # (end, seq, block, peer) per START recorded, oldest end first; one fulfilled, forgotten or renewed since
        # is stale and skipped: `next_expiry` and `expire` stay O(log n).
        self._ends: list[tuple[float, int, int, Peer]] = []
        self._seq = itertools.count()

    def on_start(self, peer: Peer, distance: int, block: int, now: float) -> None:
        """`peer` said it is fetching `block` from further away (again: renewed, up to `hold_max` from its first
        START for the block)."""
        first = self._first.setdefault(peer, {}).setdefault(block, now)
        end = min(now + self.ttl, first + self.hold_max)
        if end <= now:
            return  # it held this block back long enough without delivering it
        self._starts.setdefault(block, {})[peer] = (distance, end)
        self._of_peer.setdefault(peer, set()).add(block)
        heapq.heappush(self._ends, (end, next(self._seq), block, peer))

    def on_have(self, peer: Peer, block: int) -> None:
        """`peer` has `block` now (HAVE): its START is fulfilled. The block is not held back any longer: were
        this member shown it by a far source (it stalled, `cluster.division`), the peer holding it has not been
        handing it over, and waiting for it would be no better."""
        self._first.get(peer, {}).pop(block, None)
        entries = self._starts.get(block)
        if entries is not None and entries.pop(peer, None) is not None:
            self.version += 1
            if not entries:
                del self._starts[block]

    def forget(self, peer: Peer) -> None:
        """`peer` is no longer a source: what it started is free for others."""
        self.version += 1
        self._first.pop(peer, None)
        for block in self._of_peer.pop(peer, ()):
            entries = self._starts.get(block)
            if entries is not None and entries.pop(peer, None) is not None and not entries:
                del self._starts[block]

    def holds_back(self, block: int, distance: int, now: float, ignored: Container[Peer] = ()) -> bool:
        """Should a source at `distance` not be asked for `block` now? Peers in `ignored` (the request policy's
        snubbed ones: they let requests time out) hold nothing back: a slow peer is no reason to wait."""
        if distance <= 0:
            return False
        return any(d < distance and now < end and p not in ignored
                   for p, (d, end) in self._starts.get(block, {}).items())

    def blocked(self, distance: int, now: float, ignored: Container[Peer] = ()) -> _Blocked:
        return _Blocked(self, distance, now, ignored)

    def next_expiry(self) -> float | None:
        """When the earliest START still kept stops holding its block back (`expire` then drops it)."""
        ends = self._ends
        while ends and not self._live(ends[0]):
            heapq.heappop(ends)
        return ends[0][0] if ends else None

    def _live(self, entry: tuple[float, int, int, Peer]) -> bool:
        end, _, block, peer = entry
        start = self._starts.get(block, {}).get(peer)
        return start is not None and start[1] == end

    def expire(self, now: float) -> bool:
        """Drop the STARTs `ttl` old; True if any was dropped (blocks may be asked of far sources now)."""
        dropped = False
        ends = self._ends
        while ends and ends[0][0] <= now:
            entry = heapq.heappop(ends)
            if not self._live(entry):
                continue
            _, _, block, peer = entry
            starts = self._starts[block]
            del starts[peer]
            if not starts:
                del self._starts[block]
            self._of_peer.get(peer, set()).discard(block)
            dropped = True
        self.version += dropped
        return dropped


class _Nearer:
    """The blocks a source at `distance` should not be asked for because a nearer responsive source holds them:
    a live view of a `NearerHolders`."""

    __slots__ = ("book", "distance")

    def __init__(self, book: NearerHolders, distance: int) -> None:
        self.book, self.distance = book, distance

    def __contains__(self, block: object) -> bool:
        return self.book.holds_back(block, self.distance)  # type: ignore[arg-type]

    def __bool__(self) -> bool:
        return True


class NearerHolders:
    """Nearest first: a block a nearer source holds is not asked of a farther one (sans-I/O).

    START leaves a block to a nearer peer only while that peer fetches it; once the nearer peer holds it (HAVE, or
    its BITFIELD), a far source could still be asked for it, and in the cluster mode the block would cross a rack
    uplink a second time. So the fetch also keeps, per distance, how many of its sources at that distance hold
    each block, and a source at distance d is not asked for a block some source at a distance < d holds. A source
    the request policy snubbed (its requests timed out) counts nowhere (`mute`) until it answers again: a slow
    nearer peer is no reason to wait, as with START. Sources at distance 0 are never held back."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._counts: dict[int, list[int]] = {}  # distance -> how many counted sources there hold each block
        # source -> (distance, one byte per block: 1 if it holds it). Bytes, not a set of ints: a set of a
        # thousand blocks is some 60 KB, and a cluster fetch keeps one per source (64 of them).
        self._sources: dict[Peer, tuple[int, bytearray]] = {}
        self._muted: set[Peer] = set()  # snubbed: counted nowhere for now
        self.version = 0  # bumped whenever a block may have been let go (a holder gone or muted)

    def add(self, source: Peer, distance: int, blocks: Iterable[int]) -> None:
        """`source`, at `distance`, joined the fetch holding `blocks` (its BITFIELD)."""
        self.remove(source)
        held = bytearray(self.num_blocks)
        for block in blocks:
            held[block] = 1
        self._sources[source] = (distance, held)
        self._count(distance, held, +1)

    def have(self, source: Peer, block: int) -> None:
        entry = self._sources.get(source)
        if entry is None or entry[1][block]:
            return
        entry[1][block] = 1
        if source not in self._muted:  # its distance's counts exist: `add` made them
            self._counts[entry[0]][block] += 1

    def refused(self, source: Peer, block: int) -> None:
        """`source` refused `block` (REJECT) although it said it holds it: it no longer holds it back."""
        entry = self._sources.get(source)
        if entry is None or not entry[1][block]:
            return
        entry[1][block] = 0
        if source not in self._muted:
            self._counts_at(entry[0])[block] -= 1
            self.version += 1

    def remove(self, source: Peer) -> None:
        entry = self._sources.pop(source, None)
        if entry is not None and source not in self._muted:
            self._count(entry[0], entry[1], -1)
            self.version += 1
        self._muted.discard(source)

    def mute(self, snubbed: Container[Peer]) -> None:
        """Follow the request policy's snubbed sources: they hold nothing back until they are no longer."""
        for source, (distance, held) in self._sources.items():
            muted = source in snubbed
            if muted and source not in self._muted:
                self._muted.add(source)
                self._count(distance, held, -1)
                self.version += 1
            elif not muted and source in self._muted:
                self._muted.discard(source)
                self._count(distance, held, +1)

    def holds_back(self, block: int, distance: int) -> bool:
        return any(counts[block] for d, counts in self._counts.items() if d < distance)

    def blocked(self, distance: int) -> _Nearer:
        return _Nearer(self, distance)

    def _counts_at(self, distance: int) -> list[int]:
        counts = self._counts.get(distance)
        if counts is None:
            counts = self._counts[distance] = [0] * self.num_blocks
        return counts

    def _count(self, distance: int, held: bytearray, step: int) -> None:
        counts = self._counts_at(distance)
        for block in itertools.compress(range(self.num_blocks), held):
            counts[block] += step
