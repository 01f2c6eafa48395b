"""What one agent reads of the overlay (`cluster.scope`): which slots, the view they make, when it looks again and
when it draws a plan; and the benchmark's test of a formed overlay. Pure: no redis, a fake clock."""

import pytest

from bench.cluster_formation import formed
from cluster.overlay import Location, Member, View, dc_slots, rack_slots
from cluster.records import MemberRecord
from cluster.scope import (
    FollowUp,
    Stillness,
    across,
    assemble,
    deep,
    empty_dcs,
    empty_racks,
    member_of,
    rep_racks,
    slots_settled,
)

from .test_overlay import dc_slot, rack_slot

R1, R2, R3 = Location("d1", "r1"), Location("d1", "r2"), Location("d1", "r3")
D2 = Location("d2", "x1")


def record(node, loc=None, **kw):
    return MemberRecord(node, dc=loc.dc if loc else "", rack=loc.rack if loc else "", **kw)


@pytest.mark.parametrize("holders, held, expected", [
    ({}, [], False),  # a plain member: its rack only
    ({rack_slot(R1, 0): "me"}, [], True),  # the view says it holds a slot (restarted with its node id)
    ({rack_slot(R1, 0): "other"}, [], False),
    ({}, [rack_slot(R1, 1)], True),  # holds one redis lost: it must take it back on what the levels say
])
def test_deep(holders, held, expected):
    assert deep(View.of([], holders), "me", held) is expected


@pytest.mark.parametrize("rec, location, seeder, site", [
    (record("a", R1, verified=5, blocks=10), R1, False, None),
    # the seeder sits at the root; the rack its host is in (`push --dc --rack`) is its site, no group of its
    (MemberRecord("s", seeder=True, dc="d1", rack="r1"), None, True, Location("d1", "r1")),
    (MemberRecord("s", seeder=True), None, True, None),
])
def test_member_of(rec, location, seeder, site):
    member = member_of(rec)
    assert member.location == location and member.seeder is seeder and member.site == site
    assert member.progress == (1.0 if seeder else 0.5)


def test_a_record_without_a_location_is_no_member_yet():
    assert member_of(record("old")) is None
    view = assemble({"a": record("a", R1), "old": record("old")}, {rack_slot(R1, 0): "a"})
    assert set(view.members) == {"a"} and view.is_rack_rep("a")


@pytest.mark.parametrize("racks, dcs, expected", [
    ([], [], dc_slots("d1")),  # the first representant of the DC: its DC's slots only
    (["r1", "r2"], ["d1"], rack_slots(R2) + dc_slots("d1")),  # not its own rack's again
    (["r3"], ["d2"], rack_slots(R3) + dc_slots("d1") + dc_slots("d2")),
])
def test_across(racks, dcs, expected):
    assert across(R1, racks, dcs) == sorted(expected)


def test_rep_racks_reads_the_racks_of_dc_representants_not_read_yet():
    holders = {dc_slot("d1", 0): "a", dc_slot("d2", 0): "b", dc_slot("d2", 1): "gone", rack_slot(R1, 0): "a"}
    records = {"a": record("a", R1), "b": record("b", D2)}
    assert rep_racks(holders, records, rack_slots(R1)) == rack_slots(D2)
    assert rep_racks(holders, records, rack_slots(R1) + rack_slots(D2)) == []


@pytest.mark.parametrize("racks, holders, expected", [
    (["r1", "r2"], {rack_slot(R1, 1): "a"}, ["r2"]),
    (["r1"], {rack_slot(R1, 0): "a"}, []),
    ([], {}, []),
])
def test_empty_racks(racks, holders, expected):
    assert empty_racks("d1", racks, holders) == expected


def test_empty_dcs():
    assert empty_dcs(["d1", "d2"], {dc_slot("d2", 4): "x"}) == ["d1"]


@pytest.mark.parametrize("changes, waits", [
    ([False, False], [2.0, 2.0]),
    ([True, True, False, True], [0.25, 0.25, 2.0, 0.25]),  # a still view ends the streak
    ([True] * 5, [0.25, 0.25, 0.25, 2.0, 2.0]),  # a view that never settles costs no more than the period
    ([True, True, True, True, False, True], [0.25, 0.25, 0.25, 2.0, 2.0, 0.25]),
])
def test_follow_up(changes, waits):
    follow_up = FollowUp(2.0)
    assert [follow_up.wait(c) for c in changes] == waits


@pytest.mark.parametrize("changes, dues, waits", [
    ([False], [1.0], [0.5]),  # a plan pending: looked at every quarter period, not a period later
    ([False], [0.2], [0.205]),  # and once more just after it falls due
    ([True], [1.0], [0.25]),  # a view changing: the follow-up as before
    ([False], [-0.1], [0.25]),  # overdue (the look that should have drawn it took long, or failed): soon, no spin
    ([False] * 3, [-0.1] * 3, [0.25] * 3),
    ([False, False], [None, 0.3], [2.0, 0.305]),
    ([True] * 5, [1.0] * 5, [0.25, 0.25, 0.25, 2.0, 2.0]),  # a view that never settles: no plan due, the period
])
def test_follow_up_while_a_plan_is_pending(changes, dues, waits):
    follow_up = FollowUp(2.0)
    assert [round(follow_up.wait(c, d), 6) for c, d in zip(changes, dues)] == waits


@pytest.mark.parametrize("seen, draws", [
    ([("a", 0.0), ("a", 1.0)], [False, True]),  # stood still half a period
    ([("a", 0.0), ("a", 0.25), ("a", 0.5), ("a", 1.0)], [False, False, False, True]),  # follow-ups: not yet
    ([("a", 0.0), ("b", 1.0), ("b", 1.5), ("b", 2.0)], [False, False, False, True]),  # changed: half a period again
    ([("a", 0.0), ("a", 1.0), ("a", 4.0)], [False, True, False]),  # once per view
    ([("a", 0.0), ("a", 0.99)], [False, False]),
    ([("a", 0.0), ("a", 2.0), ("b", 3.0), ("a", 4.0), ("a", 6.0)], [False, True, False, False, False]),
])
def test_stillness(seen, draws):
    still = Stillness(2.0)
    assert [still.observe(signature, now) for signature, now in seen] == draws


def test_a_settled_view_is_drawn_at_once_and_only_once():
    still = Stillness(2.0)
    assert still.observe("a", 0.0) is False  # not settled: the half period
    assert still.observe("b", 0.25, settled=True) is True  # changed into a settled view: at once
    assert still.due() is None
    assert still.observe("b", 0.5, settled=True) is False  # drawn from it already
    assert still.observe("c", 0.75) is False and still.due() == 1.75  # a failure unsettles it: the half period again
    assert still.observe("c", 1.75) is True


TEKEL_DC_REPS = ["r1h1", "r1h2", "r3h1", "r3h2", "r4h1"]


def settled_view(drop=(), freed=(), dc_holders=TEKEL_DC_REPS):
    """Tekel's figure 8: racks r1-r4 of 5/4/7/1 hosts and the seeder; every rack slot held (but `freed`), the DC
    slots by `dc_holders` ("": free; by default the representants of r1, r3 and r4: the seeder's rack r2 leaves them
    to the others); the members but `drop`, and those the push targets."""
    sizes = {"r1": 5, "r2": 4, "r3": 7, "r4": 1}
    members = [Member("seed", None, 1.0, seeder=True)]
    holders = {}
    for rack, size in sizes.items():
        loc = Location("d1", rack)
        members += [Member(f"{rack}h{i}", loc) for i in range(1, size + 1)]
        for i in range(min(2, size)):
            holders[rack_slot(loc, i)] = f"{rack}h{i + 1}"
    holders |= {dc_slot("d1", i): node for i, node in enumerate(dc_holders) if node}
    members = [m for m in members if m.node not in drop]
    holders = {slot: node for slot, node in holders.items() if slot not in freed}
    return View.of(members, holders), [m.node for m in members if not m.seeder]


@pytest.mark.parametrize("setup, targeted_too, plain, settled", [
    ({}, [], False, True),  # every slot held, every targeted agent in
    ({}, ["r5h1"], False, False),  # a targeted agent not in the view yet
    ({"freed": [rack_slot(Location("d1", "r2"), 1)]}, [], False, False),  # a rack's second slot free
    ({"dc_holders": TEKEL_DC_REPS[:4] + [""]}, [], False, False),  # a DC slot free
    ({"dc_holders": TEKEL_DC_REPS[:4] + ["r3h5"]}, [], False, False),  # held by a node that is no rack representant
    ({"drop": ["r4h1"]}, [], False, False),  # held by a node that left (its record expired; nobody targets it)
    ({}, [], True, False),  # no DC slots read (a plain member's view)
], ids=["settled", "agent missing", "rack slot free", "DC slot free", "DC slot not a rep", "DC holder left",
        "plain member"])
def test_slots_settled(setup, targeted_too, plain, settled):
    view, expected = settled_view(**setup)
    if plain:
        view = View.of(view.members.values(), {s: n for s, n in view.holders.items() if s.rack})
    assert slots_settled(view, [*expected, *targeted_too]) is settled


def test_the_lone_host_of_a_rack_holding_its_one_slot_is_enough():
    view, expected = settled_view()
    assert view.rack_reps_of(Location("d1", "r4")) == {"r4h1"}
    assert slots_settled(view, expected) is True


def test_slots_settled_needs_members():
    assert slots_settled(View(), []) is False
    assert slots_settled(View.of([Member("seed", None, 1.0, seeder=True)]), []) is False


def test_stillness_says_when_a_plan_falls_due():
    still = Stillness(2.0)
    assert still.due() is None  # nothing seen
    still.observe("a", 3.0)
    assert still.due() == 4.0
    still.observe("b", 3.5)
    assert still.due() == 4.5  # changed: from the change on
    assert still.observe("b", 4.5)
    assert still.due() is None  # drawn


def plan_drawn(period: float, slots_taken: list[float], *, pending: bool = True) -> tuple[float, int]:
    """A node's reconcile loop on a stepped clock, as `cluster.agent` runs it: its view changes at each time in
    `slots_taken` (its own claim first, then other nodes'). When it draws its plan, and from how many changes."""
    follow_up, still = FollowUp(period), Stillness(period)
    now = slots_taken[0]
    for _ in range(100):
        view = sum(1 for t in slots_taken if t <= now)
        if still.observe(view, now):
            return now, view
        now += follow_up.wait(still.changed, still.due() if pending else None, now)
    raise AssertionError("no plan drawn")


def test_a_slot_taken_just_after_our_own_is_planned_within_a_period():
    # The shaped rack's representants took their slots 0.1 s after ours (their transfer record still crossing
    # their link): seen at the follow-up an eighth of a period later, the plan drawn half a period after that.
    at, view = plan_drawn(2.0, [0.0, 0.1])
    assert view == 2 and at < 0.1 + 2.0
    assert at == pytest.approx(0.25 + 1.0 + 0.005)
    # Without the looks while a plan is pending (before): the change was seen a period later.
    at, view = plan_drawn(2.0, [0.0, 0.1], pending=False)
    assert view == 2 and at > 2.0
    # Taken after our follow-up found the view still: seen at the next quarter-period look, not a period later.
    at, view = plan_drawn(2.0, [0.0, 0.3])
    assert view == 2 and at == pytest.approx(0.75 + 1.0 + 0.005)
    at, view = plan_drawn(2.0, [0.0, 0.3], pending=False)
    assert view == 2 and at > 4.0


def formed_case(holders, views_of=None):
    locations = {"a": R1, "b": R1, "c": R1, "x": R2, "y": R2}
    full = View.of([], holders)
    full.members = {n: None for n in locations}
    views = {n: full for n in locations}
    views.update(views_of or {})
    return formed(locations, holders, views)


FULL = {rack_slot(R1, 0): "a", rack_slot(R1, 1): "b", rack_slot(R2, 0): "x", rack_slot(R2, 1): "y",
        **{dc_slot("d1", i): n for i, n in enumerate("abxy")}}


@pytest.mark.parametrize("holders, views_of, expected", [
    (FULL, None, True),
    ({s: n for s, n in FULL.items() if s != rack_slot(R2, 1)}, None, False),  # a rack slot still free
    ({s: n for s, n in FULL.items() if s != dc_slot("d1", 3)}, None, False),  # 4 rack reps, 3 DC slots held
    (FULL, {"c": View.of([], {rack_slot(R1, 0): "a"})}, False),  # c does not know its rack's second holder
    # A plain member need not know the other racks; a representant must.
    (FULL, {"c": View({n: None for n in "abc"}, {s: n for s, n in FULL.items() if s.rack == "r1"})}, True),
    (FULL, {"a": View({n: None for n in "abc"}, {s: n for s, n in FULL.items() if s.rack == "r1"})}, False),
])
def test_formed(holders, views_of, expected):
    assert formed_case(holders, views_of) is expected
