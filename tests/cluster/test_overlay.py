"""The overlay core: representants first come first served, never stepping down, the 95 % rule, who may talk."""

import pytest

from cluster.overlay import (
    DC_REPS,
    RACK_REPS,
    Level,
    Location,
    Member,
    Representation,
    Slot,
    View,
    dc_slots,
    merged,
    rack_slots,
    recovering,
)

R1, R2, R3 = Location("d1", "r1"), Location("d1", "r2"), Location("d1", "r3")
OTHER_DC = Location("d2", "r1")


def rack_slot(loc, i):
    return Slot(Level.RACK, loc.dc, loc.rack, i)


def dc_slot(dc, i):
    return Slot(Level.DC, dc, "", i)


def cluster(racks=(R1, R2, R3), per_rack=4, progress=0.0):
    members = [Member("seed", None, 1.0, seeder=True)]
    for loc in racks:
        members += [Member(f"{loc.dc}{loc.rack}a{i}", loc, progress) for i in range(per_rack)]
    return View.of(members)


def form(view, order):
    """Every node in `order` runs its plan against the shared holders, taking slots as SET NX would."""
    reps = {node: Representation(node) for node in view.members}
    for _ in range(3):  # a rack representant stands for its DC at its next plan
        for node in order:
            plan = reps[node].plan(view)
            for slot in plan.claim:
                if slot not in view.holders:  # SET NX
                    view.holders[slot] = node
                    reps[node].on_claimed(slot)
                    break
    return reps


def test_two_representants_per_rack_first_come():
    view = cluster()
    order = [n for n in view.members if n != "seed"]
    form(view, order)
    for loc in (R1, R2, R3):
        assert view.rack_reps_of(loc) == {f"{loc.dc}{loc.rack}a0", f"{loc.dc}{loc.rack}a1"}
    assert len(view.dc_reps_of("d1")) == DC_REPS == 5


@pytest.mark.parametrize("per_rack, racks, expected_dc", [
    (1, (R1,), 1),  # a lone host is its rack's and its DC's representant
    (4, (R1,), 2),  # fewer than five rack representants in the DC: all of them
    (4, (R1, R2, R3), 5),
    (4, (R1, R2, R3, Location("d1", "r4")), 5),
])
def test_dc_representants_are_rack_representants(per_rack, racks, expected_dc):
    view = cluster(racks, per_rack)
    form(view, sorted(n for n in view.members if n != "seed"))
    dc_reps = view.dc_reps_of("d1")
    assert len(dc_reps) == expected_dc
    assert all(view.is_rack_rep(n) for n in dc_reps)
    for loc in racks:
        assert len(view.rack_reps_of(loc)) == min(RACK_REPS, per_rack)


@pytest.mark.parametrize("racks, dc_reps_in_r2", [
    ((R1, R2, R3), 0),  # the seeder's rack leaves the DC slots to the others: its uplink carries the seeder's copy
    ((R2,), 2),  # its DC has no other rack: it takes them, as any rack would
])
def test_the_seeders_rack_leaves_the_dc_slots_to_the_others(racks, dc_reps_in_r2):
    """(The pusher says where it sits only when the other racks can fill the DC's slots: `cluster.push.site_to_say`.)"""
    view = cluster(racks, 4)
    view.members["seed"] = Member("seed", None, 1.0, seeder=True, site=R2)
    assert view.seeder_racks() == {R2} and view.shares_with_seeder(R2) is (len(racks) > 1)
    form(view, sorted(n for n in view.members if n != "seed"))
    assert len(view.rack_reps_of(R2)) == RACK_REPS  # its hosts still get their rack's representants
    assert len([n for n in view.dc_reps_of("d1") if view.members[n].location == R2]) == dc_reps_in_r2
    assert len(view.dc_reps_of("d1")) == min(DC_REPS, RACK_REPS * len(racks) - (RACK_REPS - dc_reps_in_r2))
    assert view.groups("seed") == {("root",)}  # the seeder itself still talks to the root group only


def test_never_stepping_down_and_holders_refresh():
    view = cluster((R1,), 3)
    reps = form(view, ["d1r1a2", "d1r1a0", "d1r1a1"])
    assert view.rack_reps_of(R1) == {"d1r1a2", "d1r1a0"}
    plan = reps["d1r1a2"].plan(view)
    assert rack_slot(R1, 0) in plan.refresh and not plan.claim
    # A third member joining later finds no free slot: nobody is pushed out.
    assert not reps["d1r1a1"].plan(view).claim


@pytest.mark.parametrize("mine, others, stands", [
    (0.0, [0.0, 0.5], True),
    (0.96, [0.2], False),  # nearly done: leave the slot to a peer with work ahead
    (0.96, [0.99, 1.0], True),  # unless none is left below 95 %
    (0.95, [0.0], False),
    (0.94, [0.0], True),
])
def test_nearly_done_peer_does_not_stand(mine, others, stands):
    members = [Member("me", R1, mine)] + [Member(f"o{i}", R1, p) for i, p in enumerate(others)]
    view = View.of(members, {rack_slot(R1, 0): "someone"})
    assert bool(Representation("me").plan(view).claim) is stands


@pytest.mark.parametrize("published_on, uptime, waits", [
    ("old-run", 1.0, True),  # redis restarted under the transfer a second ago: holders may be coming back
    ("old-run", 14.9, True),
    ("old-run", 15.0, False),  # a slot TTL later, a free slot is free
    ("new-run", 1.0, False),  # published on this server: nobody held a slot before it
])
def test_redis_restart_holders_retake_others_wait(published_on, uptime, waits):
    view = cluster((R1,), 3)
    reps = form(view, ["d1r1a0", "d1r1a1", "d1r1a2"])
    empty = View.of(view.members.values())  # redis restarted empty
    newcomer = Representation("d1r1a2", grace=15.0)  # even one that never saw the old server
    for rep in (reps["d1r1a0"], newcomer):
        rep.on_server("new-run", uptime, published_on)
    assert rack_slot(R1, 0) in reps["d1r1a0"].plan(empty).retake  # a holder takes its slot back at once
    assert bool(newcomer.plan(empty).claim) is not waits


def test_lost_slot_is_given_up():
    view = cluster((R1,), 2)
    reps = form(view, ["d1r1a0", "d1r1a1"])
    view.holders[rack_slot(R1, 0)] = "intruder"
    plan = reps["d1r1a0"].plan(view)
    assert plan.lost == (rack_slot(R1, 0),)
    assert rack_slot(R1, 0) not in reps["d1r1a0"].held


def test_restarted_agent_rereads_its_role():
    view = cluster((R1,), 2)
    form(view, ["d1r1a0", "d1r1a1"])
    fresh = Representation("d1r1a0")  # the same node id, a new process
    plan = fresh.plan(view)
    assert rack_slot(R1, 0) in plan.refresh and dc_slot("d1", 0) in plan.refresh


def test_only_representants_cross_a_level():
    view = cluster((R1, R2, OTHER_DC))
    form(view, sorted(n for n in view.members if n != "seed"))
    reps1, plain1 = "d1r1a0", "d1r1a3"
    reps2, plain2 = "d1r2a0", "d1r2a3"
    other_dc_rep = "d2r1a0"
    assert view.may_talk(plain1, "d1r1a2")  # the same rack: always
    assert not view.may_talk(plain1, plain2)
    assert not view.may_talk(plain1, reps2)
    assert view.may_talk(reps1, reps2)  # rack representants of one DC
    assert view.may_talk(reps1, other_dc_rep)  # DC representants: the root group
    assert view.may_talk("seed", reps1) and not view.may_talk("seed", plain1)
    assert not view.may_talk(plain1, plain1)
    assert view.level(reps1, reps2) is Level.DC and view.level(reps1, other_dc_rep) is Level.OUTSIDE


def test_late_rack_gets_its_own_representants_and_peers():
    """Kraken #244: the first racks hold every DC slot, yet a late rack is not cut off."""
    view = cluster((R1, R2, R3), progress=1.0)
    form(view, sorted(n for n in view.members if n != "seed"))
    late = Location("d1", "late")
    for i in range(4):
        view.members[f"late{i}"] = Member(f"late{i}", late, 0.0)
    form(view, [f"late{i}" for i in range(4)])
    reps = view.rack_reps_of(late)
    assert len(reps) == 2
    providers = [n for n in view.members if any(view.may_talk(r, n) for r in reps) and n not in reps]
    assert any(view.members[n].progress == 1.0 for n in providers)


def test_slots_listed_for_present_locations():
    view = cluster((R1, OTHER_DC), 1)
    assert set(view.slots()) == set(rack_slots(R1) + rack_slots(OTHER_DC) + dc_slots("d1") + dc_slots("d2"))


@pytest.mark.parametrize("server, uptime, published_on, expected", [
    ("new", 3.0, "old", True), ("new", 30.0, "old", False), ("same", 3.0, "same", False),
])
def test_recovering(server, uptime, published_on, expected):
    assert recovering(server, uptime, published_on, 15.0) is expected


def test_merged_keeps_the_absent_but_not_our_own_slots():
    before = cluster((R1,), 3)
    form(before, ["d1r1a0", "d1r1a1", "d1r1a2"])
    fresh = View.of([before.members["d1r1a2"]])  # redis came back; only one member rewrote its record so far
    view = merged(before, fresh, keep_own="d1r1a0")
    assert set(view.members) == set(before.members)
    assert view.holders.get(rack_slot(R1, 1)) == "d1r1a1"
    assert rack_slot(R1, 0) not in view.holders  # ours: we see it free, and take it back
