"""What one agent reads of a transfer's overlay each period (sans-I/O): its rack, and, for a representant, the
representants above it — never the members of other racks.

An agent acts on a part of the overlay only (`cluster.overlay`): a plain member talks to its rack alone and
stands for a free slot of its rack against its rack mates; a rack representant also talks to its DC's rack
representants, stands for a DC slot against them, and serves them the entry plan's slices (`cluster.division`),
which nest the root division, so it needs every DC representant too (with the rack slots that make them
representants). Reading every member record every period instead cost N records per agent, N² per period
overall. Per transfer the shell (`Coord.scope`) reads, by index keys with TTLs that the members keep up
(`cluster.records`):

* always: its rack's member index and records, and its rack's slots;
* `deep` (it holds a slot, or has just taken one): the racks of its DC that have representants and their rack
  slots, the DCs that have representants and their DC slots, the seeders, the records of every holder found, and
  the rack slots of the DC representants' racks.

So a plain member reads O(its rack) and a representant O(its rack + 2 x its DC's racks + 5 x DCs), whatever the
number of agents. Here: which slots to read next from what was read, the `View` they make, when an agent looks
again sooner than its period (`FollowUp`) and when it may draw a new entry plan (`Stillness`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from cluster.overlay import Level, Location, Member, Slot, View, dc_slots, rack_slots
from cluster.records import MemberRecord

__all__ = ["FollowUp", "Stillness", "across", "assemble", "deep", "empty_dcs", "empty_racks", "member_of",
           "rep_racks", "slots_settled"]

FOLLOW_UPS = 3  # looks sooner than the period in a row while the view changes, at most (then the period)
FOLLOW_UP_FRACTION = 0.125  # of the period: 0.25 s at the default 2 s
# An entry plan is drawn from a view that stood still this long (of the period: 1 s at the default 2 s): two of the
# looks a node takes while a plan is pending, so a slot another node took meanwhile is seen before the plan is
# drawn. A whole period before: at the lab's 0.5 s the shaped rack's link carried its first block 0.9-1.1 s into a
# push, now 0.4-0.5 s (docs/cluster.md, "Formation").
STILL_FRACTION = 0.5
PENDING_FRACTION = 0.25  # of the period: how often a node looks while a plan is pending (`FollowUp`)
DUE_SLACK = 0.005  # s: the look for a plan falling due comes this much after it, never a timer's hair before


def deep(view: View, node: str, held: Iterable[Slot]) -> bool:
    """Whether `node` reads above its rack: it holds a slot (a representant, or one that must take back or
    refresh a slot), or the view says it does (an agent restarted with its node id re-reads its role)."""
    return any(True for _ in held) or view.is_rack_rep(node)


def member_of(record: MemberRecord) -> Member | None:
    """The overlay's member for a record; None for a record without a location (it is no member yet)."""
    if record.seeder:
        return Member(record.node, None, 1.0, seeder=True, site=record.site)
    location = record.location
    return None if location is None else Member(record.node, location, record.progress)


def assemble(records: Mapping[str, MemberRecord], holders: Mapping[Slot, str]) -> View:
    members = [m for m in map(member_of, records.values()) if m is not None]
    return View.of(members, holders)


def across(location: Location, racks: Iterable[str], dcs: Iterable[str]) -> list[Slot]:
    """The slots a representant reads beyond its rack's: the rack slots of its DC's racks (with
    representants), and the DC slots of every DC (with representants) and of its own."""
    wanted = {s for rack in racks if rack != location.rack for s in rack_slots(Location(location.dc, rack))}
    wanted |= {s for dc in set(dcs) | {location.dc} for s in dc_slots(dc)}
    return sorted(wanted)


def rep_racks(holders: Mapping[Slot, str], records: Mapping[str, MemberRecord], read: Iterable[Slot]) -> list[Slot]:
    """The rack slots of the DC representants' racks not read yet: a DC slot holder is a DC representant only
    while it holds a slot of its rack (`View.is_dc_rep`), and the root division counts only those."""
    done = set(read)
    wanted = set()
    for slot, node in holders.items():
        record = records.get(node)
        if slot.level is Level.DC and record is not None and (location := record.location) is not None:
            wanted |= set(rack_slots(location)) - done
    return sorted(wanted)


def empty_racks(dc: str, racks: Iterable[str], holders: Mapping[Slot, str]) -> list[str]:
    """Racks listed as having representants whose slots were all free: dropped from the list (a rack whose
    representant stands again writes itself back within a period)."""
    return sorted(r for r in set(racks) if not any(s in holders for s in rack_slots(Location(dc, r))))


def empty_dcs(dcs: Iterable[str], holders: Mapping[Slot, str]) -> list[str]:
    return sorted(dc for dc in set(dcs) if not any(s in holders for s in dc_slots(dc)))


class FollowUp:
    """How long an agent waits before its next reconcile: its period, but a fraction of it while its views
    change (a push just arrived, representants are taking their slots), for at most `limit` looks in a row. So an
    overlay forms in a few fractions of a period rather than in periods, and costs nothing more once it stands.

    While an entry plan is pending (a view seen has not stood still long enough to draw one from, `Stillness`), it
    also looks every quarter period, and once more when the plan falls due. Before, a node whose own slot claim was
    its last change looked again only a period later: it saw a slower rack's representants (their transfer record
    still crossing their shaped link) a period late, and drew its plan a period after that; the pusher, which
    shows the root members their slices by its plan, drew its first one about a second into a push at the lab's
    0.5 s period, and the shaped rack's link carried no block before it (docs/cluster.md, "Formation")."""

    def __init__(self, period: float, *, fraction: float = FOLLOW_UP_FRACTION, limit: int = FOLLOW_UPS) -> None:
        self.period = period
        self.soon = period * fraction
        self.pending = period * PENDING_FRACTION
        self.limit = limit
        self.streak = 0

    def wait(self, changed: bool, due: float | None = None, now: float = 0.0) -> float:
        """The wait after a reconcile whose views changed (`changed`) or not, at `now`; `due`: when the earliest
        pending plan falls due (`Stillness.due`, on the same clock), None if none is pending."""
        if changed and self.streak >= self.limit:
            return self.period  # a view that never settles costs no more than the period (nor is a plan due)
        if changed:
            self.streak += 1
            wait = self.soon
        else:
            self.streak = 0
            wait = self.period
        if due is not None:
            # Overdue: the look that should have drawn it did not (it took longer than the time left, or failed):
            # soon, not at once, so that a node whose looks keep failing does not spin.
            wait = min(wait, self.pending, due - now + DUE_SLACK if due > now else self.soon)
        return wait


def slots_settled(view: View, expected: Iterable[str]) -> bool:
    """Whether no slot of `view` can change hands any more: every node of `expected` (the agents a push targets) is
    a member of it, each rack's slots are held as far as it has members (`View.rack_reps` at most), and every DC
    slot of each DC by one of its rack representants. A plan drawn from such a view is the one the half period of
    `Stillness` would have drawn, sooner; a view short of any of it waits that half period (a DC with fewer
    representants than DC slots never settles; nor does a view read without the DC slots)."""
    members = view.members.keys()
    per_rack = Counter(m.location for m in view.members.values() if not m.seeder and m.location is not None)
    if not per_rack or not members >= set(expected):
        return False
    if any(len(view.rack_reps_of(location) & members) < min(view.rack_reps, count)
           for location, count in per_rack.items()):
        return False
    holders = [view.holders.get(slot) for dc in {location.dc for location in per_rack}
               for slot in dc_slots(dc, view.dc_reps)]
    return all(node is not None and node in members and view.is_rack_rep(node) for node in holders)


class Stillness:
    """When a node may draw a new entry plan: from a view (its `signature`) that stood still for half a period, or
    at once from a view in which no slot can change hands any more (`slots_settled`).

    A block once shown is never taken back, so a plan is not drawn while a rack's representants are still taking
    their slots one after the other. Counted in time, not in reconciles: a reconcile may follow the last one by a
    fraction of a period (`FollowUp`), too soon for a late rack's second representant to have stood."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.signature: object = None
        self.since = 0.0
        self.drawn: object = None
        self.changed = True  # the view seen last differed from the one before it (`FollowUp`); True before any

    def observe(self, signature: object, now: float, settled: bool = False) -> bool:
        """True when a plan should be drawn from the view of `signature`, seen at `now` (`settled`: what
        `slots_settled` says of that view)."""
        self.changed = signature != self.signature
        if self.changed:
            self.signature, self.since = signature, now
        if settled and signature != self.drawn:
            self.drawn = signature
            return True
        if self.changed:
            return False
        if now - self.since >= self.period * STILL_FRACTION and signature != self.drawn:
            self.drawn = signature
            return True
        return False

    def due(self) -> float | None:
        """When (on `observe`'s clock) the view seen last will have stood still long enough to draw a plan from;
        None once one was drawn from it."""
        if self.signature is None or self.signature == self.drawn:
            return None
        return self.since + self.period * STILL_FRACTION
