"""The overlay of one transfer (sans-I/O): levels, representants, and who may talk to whom.

Tekel's overlay, built bottom-up per transfer:

* every agent joins its **rack** group;
* the first `RACK_REPS` (2) of a rack to take a rack slot are its representants and join their **DC** group;
* the first `DC_REPS` (5) rack representants of a datacenter to take a DC slot are its DC representants and join
  the **root** group, where the initial seeder sits;
* two peers may talk only when they share a group, so only representants carry bytes across a level.

Slots are taken first come, first served (the shell does it with redis `SET NX` and a TTL the holder refreshes),
and a holder never steps down: roles only grow, so a connection allowed once stays allowed. A peer at least
`DONE_ENOUGH` (95 %) done does not stand for a free slot while a peer below that could: a representant that is
nearly finished would soon have nothing left to fetch across the level for its group. It still stands when no
one else is left, so that a group never loses its link.

After redis restarts empty (`SHUTDOWN NOSAVE`, or a failover to a replica that missed the writes) every slot is
free again. Holders take theirs back at once; the others do not claim while the transfer is older than the
server (it was published under another server run id) and the server has been the primary for less than `grace`
seconds (`on_server`; `cluster.coord.Coord.server` counts from its promotion, not its start, since a promoted
replica has long been up), so the roles survive the restart instead of being reshuffled — even by an agent that
never saw the old server (one started during the outage). A transfer published on this server has no holders to
wait for.

Late racks (Kraken's issue #244, where topology-aware selection let the first group hold every seeder connection):
each rack has its own slots, so a rack that joins late gets representants at once, and they talk to every other
rack representant of the DC, which hold the content by then. Nothing in the overlay is "full" for a newcomer.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["DC_REPS", "DONE_ENOUGH", "RACK_REPS", "Level", "Location", "Member", "Plan", "Representation",
           "Slot", "View", "merged", "recovering"]

RACK_REPS = 2  # representants per rack (Tekel): two, so that one dying does not cut the rack off
DC_REPS = 5  # representants per datacenter in the root group (Tekel: at least five)
DONE_ENOUGH = 0.95  # a peer this far done does not stand for a slot while another could


class Level(enum.IntEnum):
    """How far apart two peers are; also the names of the throttle groups and byte counters."""

    RACK = 0  # myRack
    DC = 1  # myDC
    OUTSIDE = 2  # another DC, or a peer with no location (the seeder)

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Location:
    dc: str
    rack: str

    def level_to(self, other: Location | None) -> Level:
        if other is None or other.dc != self.dc:
            return Level.OUTSIDE
        return Level.RACK if other.rack == self.rack else Level.DC

    def __str__(self) -> str:
        return f"{self.dc}/{self.rack}"


def level_between(a: Location | None, b: Location | None) -> Level:
    return Level.OUTSIDE if a is None else a.level_to(b)


@dataclass(frozen=True, slots=True)
class Member:
    """One participant of a transfer as the overlay sees it. The seeder has no location: it sits at the root, and
    is no member of a rack's group. `site` is the rack a seeder's host sits in, when the pusher was told
    (`push --dc --rack`): its uplink then carries the seeder's copy out (`seeder_racks`)."""

    node: str
    location: Location | None
    progress: float = 0.0
    seeder: bool = False
    site: Location | None = None


@dataclass(frozen=True, slots=True, order=True)
class Slot:
    """A representant slot: `level` RACK (of dc/rack) or DC (of dc, rack ""), numbered from 0."""

    level: Level
    dc: str
    rack: str
    index: int


def rack_slots(location: Location, count: int = RACK_REPS) -> list[Slot]:
    return [Slot(Level.RACK, location.dc, location.rack, i) for i in range(count)]


def dc_slots(dc: str, count: int = DC_REPS) -> list[Slot]:
    return [Slot(Level.DC, dc, "", i) for i in range(count)]


@dataclass
class View:
    """What the shell last read of a transfer: its members and who holds which slot."""

    members: dict[str, Member] = field(default_factory=dict)
    holders: dict[Slot, str] = field(default_factory=dict)
    rack_reps: int = RACK_REPS
    dc_reps: int = DC_REPS

    @classmethod
    def of(cls, members: Iterable[Member], holders: Mapping[Slot, str] | None = None, **counts: int) -> View:
        return cls({m.node: m for m in members}, dict(holders or {}), **counts)

    def slots(self) -> list[Slot]:
        """Every slot worth reading: those of the racks and DCs that have members."""
        locations = {m.location for m in self.members.values() if m.location is not None}
        wanted = {s for loc in locations for s in rack_slots(loc, self.rack_reps)}
        wanted |= {s for dc in {loc.dc for loc in locations} for s in dc_slots(dc, self.dc_reps)}
        return sorted(wanted)

    def holding(self, node: str, level: Level) -> Slot | None:
        return next((s for s, n in self.holders.items() if n == node and s.level is level), None)

    def is_rack_rep(self, node: str) -> bool:
        return self.holding(node, Level.RACK) is not None

    def is_dc_rep(self, node: str) -> bool:
        return self.is_rack_rep(node) and self.holding(node, Level.DC) is not None

    def rack_reps_of(self, location: Location) -> set[str]:
        return {n for s, n in self.holders.items() if s.level is Level.RACK and (s.dc, s.rack) ==
                (location.dc, location.rack)}

    def dc_reps_of(self, dc: str) -> set[str]:
        return {n for s, n in self.holders.items() if s.level is Level.DC and s.dc == dc and self.is_rack_rep(n)}

    def seeder_racks(self) -> set[Location]:
        return {m.site for m in self.members.values() if m.seeder and m.site is not None}

    def shares_with_seeder(self, location: Location) -> bool:
        """Whether `location` is a seeder's rack and its DC has other racks: its uplink then carries the
        seeder's copy out, and its representants leave the DC's slots (the blocks' homes) to the other racks."""
        return location in self.seeder_racks() and any(
            m.location is not None and m.location.dc == location.dc and m.location != location
            for m in self.members.values())

    def groups(self, node: str) -> set[tuple[str, ...]]:
        """The groups `node` belongs to: ("rack", dc, rack), ("dc", dc), ("root",)."""
        member = self.members.get(node)
        if member is None:
            return set()
        if member.seeder:
            return {("root",)}
        assert member.location is not None
        loc = member.location
        groups: set[tuple[str, ...]] = {("rack", loc.dc, loc.rack)}
        if self.is_rack_rep(node):
            groups.add(("dc", loc.dc))
            if self.is_dc_rep(node):
                groups.add(("root",))
        return groups

    def may_talk(self, a: str, b: str) -> bool:
        """Whether `a` and `b` may exchange blocks: only when they share a group."""
        return a != b and bool(self.groups(a) & self.groups(b))

    def level(self, a: str, b: str) -> Level:
        ma, mb = self.members.get(a), self.members.get(b)
        return level_between(ma.location if ma else None, mb.location if mb else None)


def recovering(server_id: str, uptime: float, published_on: str, grace: float) -> bool:
    """Whether a transfer is older than a young redis server: redis restarted (perhaps empty) under it less than
    `grace` seconds ago, so slot holders and members may not have written their keys back yet."""
    return published_on != server_id and uptime < grace


def merged(previous: View, fresh: View, keep_own: str | None = None) -> View:
    """`fresh` with what `previous` had and `fresh` lacks: while recovering, absence means "not rewritten yet".
    Slots held by `keep_own` are taken from `fresh` only (that node takes them back itself)."""
    holders = {s: n for s, n in previous.holders.items() if n != keep_own}
    return View({**previous.members, **fresh.members}, {**holders, **fresh.holders}, fresh.rack_reps,
                fresh.dc_reps)


@dataclass(frozen=True)
class Plan:
    """What the shell does with redis for one node, in order: refresh the TTL of `refresh` (held, still ours),
    `SET NX` each of `retake` (held, found free: redis lost it), forget `lost` (another took it while redis was
    away: we step aside rather than have three representants), then try `claim` in order until one succeeds."""

    refresh: tuple[Slot, ...] = ()
    retake: tuple[Slot, ...] = ()
    lost: tuple[Slot, ...] = ()
    claim: tuple[Slot, ...] = ()


class Representation:
    """One node's standing in one transfer's overlay: which slots it holds and which to claim, given a `View`."""

    def __init__(self, node: str, *, grace: float = 15.0, done_enough: float = DONE_ENOUGH) -> None:
        self.node = node
        self.grace = grace
        self.done_enough = done_enough
        self.held: set[Slot] = set()
        self.recovering = False

    def on_server(self, server_id: str, uptime: float, published_on: str) -> None:
        """What redis says now (its run id, its seconds as the primary) and the run id the transfer was published
        on."""
        self.recovering = recovering(server_id, uptime, published_on, self.grace)

    def on_claimed(self, slot: Slot) -> None:
        self.held.add(slot)

    def adopt(self, view: View) -> None:
        """Slots the view says are ours (an agent restarted with the same node id re-reads its role)."""
        self.held |= {s for s, n in view.holders.items() if n == self.node}

    def plan(self, view: View) -> Plan:
        self.adopt(view)
        refresh = tuple(sorted(s for s in self.held if view.holders.get(s) == self.node))
        retake = tuple(sorted(s for s in self.held if s not in view.holders))
        lost = tuple(sorted(s for s in self.held if view.holders.get(s) not in (None, self.node)))
        self.held -= set(lost)
        if self.recovering:
            return Plan(refresh, retake, lost)
        return Plan(refresh, retake, lost, tuple(self._claims(view)))

    def _claims(self, view: View) -> list[Slot]:
        me = view.members.get(self.node)
        if me is None or me.seeder or me.location is None:
            return []
        loc = me.location
        if not any(s.level is Level.RACK for s in self.held):
            free = [s for s in rack_slots(loc, view.rack_reps) if s not in view.holders]
            rivals = [m for m in view.members.values() if m.location == loc and m.node != self.node
                      and not view.is_rack_rep(m.node)]
            return free if free and self._stands(me, rivals) else []
        if not any(s.level is Level.DC for s in self.held) and not view.shares_with_seeder(loc):
            free = [s for s in dc_slots(loc.dc, view.dc_reps) if s not in view.holders]
            rivals = [view.members[n] for s, n in view.holders.items()
                      if s.level is Level.RACK and s.dc == loc.dc and n != self.node and n in view.members
                      and not view.is_dc_rep(n)]
            return free if free and self._stands(me, rivals) else []
        return []

    def _stands(self, me: Member, rivals: list[Member]) -> bool:
        """Tekel: a peer >= 95 % done does not stand, unless no one else is left to."""
        return me.progress < self.done_enough or all(r.progress >= self.done_enough for r in rivals)
