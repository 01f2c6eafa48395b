"""The priority source (`PolicyConfig.priority_others`): while a marked source still has blocks for us, at most
`priority_others` other sources keep requests outstanding, so its flow is not one among many on our downlink;
once it has nothing more for us, is lost or stalls, the others are asked at once. Nothing marked: no effect."""

from __future__ import annotations

import pytest

from swarm.core.picker import Picker
from swarm.core.policy import Action, PolicyConfig, Request, RequestPolicy

CONFIG = PolicyConfig(peer_max_outstanding=2, request_timeout=5.0, retry_backoff=10.0, priority_others=1)


def bits(blocks: int, *held: int) -> list[int]:
    return [int(b in held) for b in range(blocks)]


def asked(actions: list[Action]) -> set[object]:
    return {a.source for a in actions if isinstance(a, Request)}


def busy(policy: RequestPolicy, *sources: str) -> set[str]:
    return {s for s in sources if policy.outstanding(s)}


def started(marked: bool, others: int = 1) -> RequestPolicy:
    """p (blocks 0-3, marked or not), then a, b, c (blocks 4-5, 6-7, 8-9), at t=0."""
    policy = RequestPolicy(Picker(10), None, PolicyConfig(**{**CONFIG.__dict__, "priority_others": others}))
    policy.add_peer("p", 0.0, bits(10, 0, 1, 2, 3), priority=marked)
    for name, held in (("a", (4, 5)), ("b", (6, 7)), ("c", (8, 9))):
        policy.add_peer(name, 0.0, bits(10, *held))
    return policy


@pytest.mark.parametrize(("marked", "others", "expected"), [
    (False, 1, {"a", "b", "c"}),  # nothing marked: every source is asked, as before
    (True, 1, {"a"}),
    (True, 2, {"a", "b"}),
    (True, 3, {"a", "b", "c"}),
])
def test_others_are_held_to_priority_others_while_the_priority_source_has_blocks(marked, others, expected) -> None:
    policy = started(marked, others)
    assert busy(policy, "p") == {"p"}
    assert busy(policy, "a", "b", "c") == expected


def test_the_others_are_asked_once_the_priority_source_has_nothing_more() -> None:
    policy = started(True)
    for block in (0, 1):
        policy.on_block("p", block, 1.0)
        policy.on_verified(block, 1.0)
    assert busy(policy, "a", "b", "c") == {"a"}  # p still owes 2 and 3
    policy.on_block("p", 2, 2.0)
    policy.on_verified(2, 2.0)
    actions = policy.on_block("p", 3, 2.0) + policy.on_verified(3, 2.0)
    assert asked(actions) == {"b", "c"} and busy(policy, "a", "b", "c") == {"a", "b", "c"}


def test_a_busy_other_that_runs_dry_hands_its_turn_to_an_idle_one() -> None:
    policy = started(True)
    for block in (4, 5):
        policy.on_block("a", block, 1.0)
    assert busy(policy, "a", "b", "c") == {"b"}  # a had nothing more: b (first ranked) takes its turn


@pytest.mark.parametrize("how", ["lost", "stalled"])
def test_a_lost_or_stalled_priority_source_lets_the_others_go(how: str) -> None:
    policy = started(True)
    # (stalled: every request expires at 5 s, a's too; its blocks are then avoided, b's and c's are not)
    actions = policy.on_source_lost("p", 1.0) if how == "lost" else policy.on_timeout(5.0)
    assert {"b", "c"} <= asked(actions)
    assert {"b", "c"} <= busy(policy, "a", "b", "c")


def test_a_new_block_of_the_priority_source_restricts_the_others_again() -> None:
    policy = RequestPolicy(Picker(10), None, CONFIG)
    policy.add_peer("p", 0.0, bits(10), priority=True)  # nothing for us yet
    for name, held in (("a", (4, 5, 6)), ("b", (7, 8, 9))):
        policy.add_peer(name, 0.0, bits(10, *held))
    assert busy(policy, "a", "b") == {"a", "b"}
    assert asked(policy.on_have("p", 0, 1.0)) == {"p"}
    policy.on_block("a", 4, 1.0)
    policy.on_block("b", 7, 1.0)
    # a delivered first and keeps its turn; b drains what it was asked before and gets nothing new
    assert busy(policy, "a", "b") == {"a", "b"} and len(policy.outstanding("b")) == 1
    policy.on_block("b", 8, 1.5)
    assert busy(policy, "a", "b") == {"a"}
