"""cluster.patience: a push stops waiting for an agent that makes no progress, on a clock that a redis outage, a
turn spent on a higher priority, and a late arrival do not run down."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cluster.patience import Patience


@dataclass
class Rec:
    verified: int
    blocks: int = 10
    fetching: bool = True


AFTER, GAP = 10.0, 4.0

# Each row: rounds of (now, {node: record}) the push read; the nodes given up on after the last round.
VECTORS = [
    pytest.param([(t, {"a": Rec(3)}) for t in range(0, 12, 2)], {"a"}, id="no-progress-for-10s-is-given-up"),
    pytest.param([(t, {"a": Rec(t)}) for t in range(0, 10)] + [(t, {"a": Rec(9)}) for t in range(10, 19)], set(),
                 id="progress-restarts-the-clock"),
    pytest.param([(0, {"a": Rec(3)}), (2, {"a": Rec(3)}), (400, {"a": Rec(3)}), (402, {"a": Rec(3)})], set(),
                 id="a-redis-outage-costs-at-most-one-gap"),
    pytest.param([(0, {"a": Rec(3)}), (2, {"a": Rec(3)}), (400, {"a": Rec(3)})]
                 + [(t, {"a": Rec(3)}) for t in range(402, 410, 2)], {"a"},
                 id="after-the-outage-the-clock-runs-again"),
    pytest.param([(t, {"a": Rec(3, fetching=t < 4 or t > 10)}) for t in range(0, 14, 2)], set(),
                 id="waiting-its-turn-is-no-stall"),
    pytest.param([(t, {"a": Rec(3, fetching=t % 4 == 0)}) for t in range(0, 24, 2)], {"a"},
                 id="yielding-its-turn-again-and-again-still-adds-up"),
    pytest.param([(t, {"a": Rec(9 - t // 2)}) for t in range(0, 16, 2)], set(),
                 id="a-count-that-drops-is-a-change"),
    pytest.param([(t, {"a": Rec(5)} | ({"late": Rec(0)} if t >= 8 else {})) for t in range(0, 14, 2)], {"a"},
                 id="a-late-agent-starts-fresh"),
    pytest.param([(t, {"a": Rec(10)}) for t in range(0, 30, 2)], set(), id="a-finished-agent-is-never-given-up"),
    pytest.param([(t, {"a": Rec(3)} if t < 12 else {}) for t in range(0, 14, 2)], set(),
                 id="only-agents-read-this-round-are-judged"),
]


@pytest.mark.parametrize("rounds,given_up", VECTORS)
def test_patience(rounds, given_up) -> None:
    patience = Patience(AFTER, GAP)
    last = frozenset()
    for now, records in rounds:
        last = patience.observe_round(records, float(now))
    assert last == given_up


def test_a_registered_agent_that_never_reports_is_given_up_on() -> None:
    patience = Patience(AFTER, GAP)
    given_up = frozenset()
    for now in range(0, 12, 2):
        given_up = patience.observe_round({}, float(now), registered=["silent"])
    assert given_up == {"silent"}


def test_an_agent_that_went_away_is_absent_on_the_same_clock() -> None:
    patience = Patience(AFTER, GAP)
    for now in range(0, 6, 2):
        patience.observe_round({"a": Rec(3), "b": Rec(3)}, float(now))
    for now in (6.0, 8.0, 300.0, 302.0):  # b's host died; a redis outage of 300 s in between
        patience.observe_round({"a": Rec(3)}, now)
    assert patience.absent("b") == 2 + 2 + GAP + 2 and patience.absent("a") == 0.0


def test_waited_counts_only_time_the_push_could_read() -> None:
    patience = Patience(AFTER, GAP)
    for now in (0.0, 2.0, 500.0):
        patience.observe_round({"a": Rec(1)}, now)
    assert patience.waited("a") == 2.0 + GAP and patience.waited("nobody") == 0.0
