"""The priority source first (`PolicyConfig.priority_first`, `priority_far_others`): while the switch says so and
a marked source still has blocks for us, at most `priority_far_others` far sources (`add_peer(..., far=True)`)
keep requests outstanding beside it; near sources only to `priority_others`. Switch off, or nothing marked: as
before. In the fetch core, a source is far when its distance is above 0 (`FetchCore(distance=...)`)."""

from __future__ import annotations

import pytest

from swarm.core.picker import Picker
from swarm.core.policy import PolicyConfig, RequestPolicy
from swarm.net import wire
from tests.swarm.core.test_fetch import BLOCK, Sim, content
from tests.swarm.core.test_policy_priority import bits, busy

SOURCES = (("n1", False, (4, 5)), ("n2", False, (6, 7)), ("f1", True, (8, 9)), ("f2", True, (10, 11)))


class Switch:
    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self) -> bool:
        return self.on


def started(first: Switch, far_others: int = 0, marked: bool = True) -> RequestPolicy:
    """p (blocks 0-3, marked or not), two near sources and two far ones (two blocks each), at t=0."""
    config = PolicyConfig(peer_max_outstanding=2, request_timeout=5.0, retry_backoff=10.0, priority_others=7,
                          priority_far_others=far_others, priority_first=first)
    policy = RequestPolicy(Picker(12), None, config)
    policy.add_peer("p", 0.0, bits(12, 0, 1, 2, 3), priority=marked)
    for name, far, held in SOURCES:
        policy.add_peer(name, 0.0, bits(12, *held), far=far)
    return policy


@pytest.mark.parametrize(("first", "far_others", "marked", "expected"), [
    (False, 0, True, {"n1", "n2", "f1", "f2"}),  # switch off: as before (7 others may be busy)
    (True, 0, True, {"n1", "n2"}),  # on: no far source beside the priority source
    (True, 1, True, {"n1", "n2", "f1"}),
    (True, 0, False, {"n1", "n2", "f1", "f2"}),  # nothing marked: nothing to make room for
])
def test_far_sources_are_held_while_the_priority_source_goes_first(first, far_others, marked, expected) -> None:
    policy = started(Switch(first), far_others, marked)
    assert busy(policy, "p") == {"p"}
    assert busy(policy, "n1", "n2", "f1", "f2") == expected


def test_the_switch_turned_on_holds_far_sources_from_their_next_request_and_lets_them_go_after() -> None:
    switch = Switch(False)
    policy = started(switch)
    assert busy(policy, "f1", "f2") == {"f1", "f2"}
    switch.on = True  # found lagging: what is outstanding stays, nothing more goes to a far source
    for block in (8, 9):
        policy.on_block("f1", block, 1.0)
        policy.on_verified(block, 1.0)
    policy.on_have("f1", 3, 1.0)  # more for f1, and p still owes 0-3
    assert busy(policy, "f1") == set()
    for block in (0, 1, 2):
        policy.on_block("p", block, 2.0)
        policy.on_verified(block, 2.0)
    assert busy(policy, "f1") == set()  # p still owes 3 (f1 has it too: left to p)
    policy.on_have("f1", 7, 2.0)
    assert busy(policy, "f1") == set()
    actions = policy.on_block("p", 3, 3.0) + policy.on_verified(3, 3.0)
    assert any(a.source == "f1" for a in actions)  # p has nothing more: the far sources are asked again
    assert "f1" in busy(policy, "f1")


DISTANCE = {"pusher": 2, "near": 0, "far": 1}


@pytest.mark.parametrize(("first", "far_asked"), [(False, True), (True, False)])
def test_the_fetch_core_counts_a_source_at_distance_above_0_as_far(first: bool, far_asked: bool) -> None:
    config = PolicyConfig(priority_far_others=0, priority_first=Switch(first))
    s = Sim(content(12 * BLOCK), window=0, distance=DISTANCE.__getitem__, config=config,
            priority=lambda peer: peer == "pusher")
    s.join("pusher", behaviour="silent", blocks={0, 1, 2, 3})  # never answers: always has requests out
    s.join("far", behaviour="silent", blocks={4, 5, 6, 7})
    s.join("near", behaviour="silent", blocks={8, 9, 10, 11})
    asked = {p for p, _ in s.requests}
    assert {"pusher", "near"} <= asked
    assert ("far" in asked) is far_asked
    s.run(s.core.on_message("far", wire.Have(0), s.now))
    assert ("far" in {p for p, _ in s.requests}) is far_asked
