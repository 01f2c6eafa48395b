"""Whose turn it is to fetch (`cluster.turns`): highest priority first, and a starved transfer yields (pure)."""

from __future__ import annotations

from cluster.turns import Turns

HIGH, LOW = ((-100, 1.0, "high"), "high"), ((0, 2.0, "low"), "low")


def test_the_highest_priority_fetches_while_it_progresses():
    turns = Turns(starved_after=30, benched_for=60)
    for now in range(0, 300, 10):
        turns.observe("high", now, now)  # a new block every 10 s
        assert turns.pick([LOW, HIGH], now) == "high"


def test_a_starved_transfer_yields_then_gets_a_fresh_turn():
    turns = Turns(starved_after=30, benched_for=60)
    turns.observe("high", 0, 0.0)
    assert turns.pick([HIGH, LOW], 0.0) == "high"
    assert turns.pick([HIGH, LOW], 30.0) == "high"  # 30 s without a block: not yet
    assert turns.pick([HIGH, LOW], 30.5) == "low"  # starved: benched, the next one fetches
    assert turns.benched("high", 31.0)
    for now in (40.0, 60.0, 80.0):
        turns.observe("low", int(now), now)  # the next one progresses meanwhile
    assert turns.pick([HIGH, LOW], 90.0) == "low"
    assert turns.pick([HIGH, LOW], 90.6) == "high"  # the bench is over: a fresh turn of 30 s
    turns.observe("high", 1, 100.0)  # ... in which it progresses: it keeps the turn
    assert turns.pick([HIGH, LOW], 129.0) == "high"


def test_a_transfer_waiting_for_its_turn_is_not_starving():
    turns = Turns(starved_after=30, benched_for=60)
    for now in range(0, 200, 10):
        turns.observe("high", now, now)
        assert turns.pick([HIGH, LOW], now) == "high"
    turns.forget("high")  # finished
    assert turns.pick([LOW], 200.0) == "low"  # its turn starts now, not when it was pushed
    assert turns.pick([LOW], 229.0) == "low"


def test_a_transfer_alone_is_never_benched():
    """A stalled representant's rack waits for work stealing: its only transfer must keep the turn."""
    turns = Turns(starved_after=30, benched_for=60)
    assert turns.pick([HIGH], 0.0) == "high"
    assert turns.pick([HIGH], 31.0) == "high"
    assert turns.pick([HIGH], 500.0) == "high"
    assert turns.pick([], 501.0) is None


def test_a_benched_transfer_left_alone_goes_on_at_once():
    turns = Turns(starved_after=30, benched_for=60)
    turns.pick([HIGH, LOW], 0.0)
    assert turns.pick([HIGH, LOW], 31.0) == "low"  # high benched until 91
    assert turns.pick([HIGH], 40.0) == "high"  # low finished: nothing to yield to, the bench is lifted
