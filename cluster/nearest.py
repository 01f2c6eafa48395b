"""Nearest first (sans-I/O): a block a nearer source holds is not asked of a farther one, for a START's lifetime.

The entry plan (`cluster.division`) decides what each representant is *shown* across a level, and what was shown
is never taken back. When a rack's representants change while a transfer runs — a late rack's second
representant standing after the first was shown everything, one standing only after redis recovered from a
restart, one taking the slot of a holder that stepped aside, a member shown everything because it stalled — a
representant can be shown, across the level, blocks its rack already holds. The block engine's START rule leaves a
block to a nearer peer only until that peer's HAVE (`swarm.core.starts`); after it the picker may still ask a far
source for the block, and the block crosses the rack's uplink a second time.

This core, on the fetching side, sees every source's BITFIELD and HAVE with the source's level (rack 0, DC 1,
outside 2) and says, for each, which sources should be taken to have STARTed which blocks: the shell
(`cluster.transport`) slips those STARTs into the engine's receive stream of that source (in the process only,
nothing goes on the wire), and the engine's own START rule then asks no farther source for the block for a
START's lifetime (10 s), unless that source lets its requests time out (the engine's snub rule). So:

* a HAVE or BITFIELD of a source that has farther sources of the same content is followed by STARTs from it;
* a far source's offer of a block a nearer source holds is answered by a START from that nearer source, however
  long ago it got the block.

10 s is the patience of the whole design (a START's lifetime, `cluster.division.STEAL_AFTER`): a nearer peer that
does not hand a block over by then is no reason to wait longer.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

__all__ = ["NearestFirst"]

Source = Hashable


@dataclass
class _Source:
    root: bytes
    level: int
    held: set[int] = field(default_factory=set)


class NearestFirst:
    def __init__(self) -> None:
        self._sources: dict[Source, _Source] = {}
        self._holders: dict[tuple[bytes, int], dict[int, set[Source]]] = {}  # (root, level) -> block -> sources

    def joined(self, source: Source, root: bytes, level: int) -> None:
        """A source of `root` at `level` answered our handshake."""
        self.left(source)
        self._sources[source] = _Source(root, int(level))

    def left(self, source: Source) -> None:
        entry = self._sources.pop(source, None)
        if entry is None:
            return
        holders = self._holders.get((entry.root, entry.level), {})
        for block in entry.held:
            sources = holders.get(block)
            if sources is not None:
                sources.discard(source)
                if not sources:
                    del holders[block]

    def farther_exists(self, source: Source) -> bool:
        """Whether some source of the same content is farther than `source` (STARTs may come from it)."""
        entry = self._sources.get(source)
        return entry is not None and any(o.root == entry.root and o.level > entry.level
                                         for o in self._sources.values())

    def _nearer_holder(self, entry: _Source, block: int) -> Source | None:
        for level in range(entry.level):
            sources = self._holders.get((entry.root, level), {}).get(block)
            if sources:
                return next(iter(sources))
        return None

    def offer(self, source: Source, blocks: Iterable[int]) -> dict[Source, list[int]]:
        """`source` has `blocks` (its BITFIELD, or one HAVE): the STARTs to slip in, per source."""
        entry = self._sources.get(source)
        if entry is None:
            return {}
        holders = self._holders.setdefault((entry.root, entry.level), {})
        starts: dict[Source, list[int]] = {}
        own = self.farther_exists(source)
        for block in blocks:
            if block not in entry.held:
                entry.held.add(block)
                holders.setdefault(block, set()).add(source)
                if own:
                    starts.setdefault(source, []).append(block)
            if entry.level > 0 and (nearer := self._nearer_holder(entry, block)) is not None:
                starts.setdefault(nearer, []).append(block)
        return starts
