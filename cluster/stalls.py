"""Work stealing's two signals (sans-I/O): a member that makes no progress, and one that waits on a stopped source.

The entry plan (`cluster.division`) lets each block enter a unit of the topology through one member, and a server
across a level shows a peer only the blocks that peer is the entry point of. When the one server that is to show a
member some blocks cannot deliver them, nobody else offers them. Two rules free them, both read from the member
records every reconcile period:

* **No progress** (`StallWatch`): a member still incomplete whose verified count has not grown for `STEAL_AFTER`
  seconds is shown everything across the level (`EntryPlan.stalled`), so it takes the missing blocks from whoever
  has them. Tekel's START keeps that from costing copies: every agent's fetch runs with the engine's work stealing
  by distance (`swarm.core.starts`), so before it asks a source across a level for a block it announces START to
  the peers it serves, and it never asks such a source for a block a nearer peer (its rack, then its DC) has
  STARTed and not yet announced (HAVE), for at most 10 s and unless that peer lets its requests time out.
* **A stopped source** (`stranded_by`): a member whose requests to a source timed out (the request policy snubbed
  it) while that source alone had shown it blocks it lacks names the source in its record (`MemberRecord.stranded`,
  from `swarm.core.fetch.FetchCore.stranded`). Every other server then shows it, beside what the plan gives it
  from that server, what the plan gives it from the stopped source (`EntryPlan.stranded`, `Joined`); and the
  stopped source shows the member's share to the other members of the member's unit, who take it in its place
  (the pusher's slice for a root member has no other holder). One TCP
  connection in retransmission back-off (a burst of loss on a shallow switch queue, a few seconds of blackhole)
  stays silent for RTO * 2^k after the loss has ended, while the member's other sources keep it making progress:
  the stall watch saw nothing until every other block had come and `STEAL_AFTER` more seconds had passed (the
  lab's outliers, docs/cluster.md). Now it takes the request timeout (5 s) and up to two reconcile periods.

What a member may claim: that its sources stopped. That lets it take from others blocks the plan already gives it
from someone, which it could have had from everyone by making no progress for `STEAL_AFTER` seconds, and makes each
named source send its share once more, to the member's unit (SECURITY.md); a named source counts only if it is a
member of the view and not the member itself, and only the first `STRANDED_KEPT` names are read.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Protocol

__all__ = ["Joined", "STEAL_AFTER", "STRANDED_KEPT", "StallWatch", "stranded_by"]

STEAL_AFTER = 10.0  # seconds without progress before a member is shown everything across a level
# Stopped sources a member names: a member whose connections to more sources than this stopped at once is better
# served by the stall watch (everything, from everyone), and a record stays small.
STRANDED_KEPT = 4


class StallWatch:
    """When each member last made progress (its verified count grew), from the records read each period.

    A member's clock starts again whenever its role changes: waiting to become a representant (a late rack whose
    slots are not free yet, as while redis recovers from a restart) is no stall. Counted as one, every node would
    show a rack's new representants everything at once, and both would bring the whole file across the level."""

    def __init__(self, after: float = STEAL_AFTER) -> None:
        self.after = after
        self._last: dict[str, tuple[int, float, str]] = {}  # node -> (verified, when it last grew, role then)

    def observe(self, node: str, verified: int, blocks: int, now: float, fetching: bool = True,
                role: str = "") -> None:
        """A member's record: `fetching` False while it waits its turn (priority): that is no stall."""
        before = self._last.get(node)
        if verified >= blocks:
            self._last.pop(node, None)
        elif before is None or verified > before[0] or not fetching or role != before[2]:
            self._last[node] = (verified, now, role)

    def stalled(self, now: float) -> frozenset[str]:
        return frozenset(node for node, (_, since, _) in self._last.items() if now - since >= self.after)

    def observe_round(self, records: Mapping[str, MemberState], now: float) -> frozenset[str]:
        """Observe every member record read this round; the members stalled among those read.

        A member whose record was not read this round is not judged, whatever its clock says: what the watch did
        not see is no stall. After redis restarted empty, a member's record is missing until it writes it again,
        and the clocks stood still while redis was away; counted as stalls, every serving node would show every
        member everything at once (the chaos test's late rack once brought 1.40 copies across its uplink)."""
        for node, record in records.items():
            self.observe(node, record.verified, record.blocks, now, record.fetching, record.role)
        return frozenset(node for node in self.stalled(now) if node in records)


class MemberState(Protocol):
    """What `StallWatch` reads of a member record (`cluster.records.MemberRecord`)."""

    @property
    def verified(self) -> int: ...
    @property
    def blocks(self) -> int: ...
    @property
    def fetching(self) -> bool: ...
    @property
    def role(self) -> str: ...


class Stranding(Protocol):
    """What `stranded_by` reads of a member record (`cluster.records.MemberRecord`)."""

    @property
    def stranded(self) -> Sequence[str]: ...


def stranded_by(records: Mapping[str, Stranding], members: Container[str]) -> dict[str, frozenset[str]]:
    """Each member that names stopped sources, and those of them that count: members of the view other than itself,
    among the first `STRANDED_KEPT` it names. A record is JSON from redis: anything but a list of strings names
    nobody."""
    found: dict[str, frozenset[str]] = {}
    for node, record in records.items():
        named = record.stranded
        if not isinstance(named, list | tuple):
            continue
        sources = frozenset(source for source in named[:STRANDED_KEPT]
                            if isinstance(source, str) and source != node and source in members)
        if sources:
            found[node] = sources
    return found


class Joined:
    """The blocks in any of several containers: what a server shows a stranded member (`EntryPlan.shown`)."""

    __slots__ = ("parts",)

    def __init__(self, parts: Iterable[Container[int]]) -> None:
        self.parts = tuple(parts)

    def __contains__(self, block: object) -> bool:
        return any(block in part for part in self.parts)

    def __repr__(self) -> str:
        return f"Joined({self.parts!r})"
