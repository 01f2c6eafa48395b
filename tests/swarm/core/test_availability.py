"""`swarm.core.availability`: `shift_one`, the HAVE's path, leaves the counts and the pickable lists exactly as
`shift` of that one block does."""

from __future__ import annotations

import random

import pytest

from swarm.core.availability import Availability

PICKABLE = frozenset({0, 4})  # the picker's MISSING and FAILED


def _lists(avail: Availability) -> list[list[int]]:
    return [list(ranks) for ranks in avail.lists if len(ranks)] if not avail.stale else []


@pytest.mark.parametrize("by_count", [True, False])
@pytest.mark.parametrize("stale", [False, True])
def test_shift_one_matches_shift(by_count: bool, stale: bool) -> None:
    draw = random.Random(7)
    blocks = 300
    state = bytearray(draw.choice((0, 1, 2, 3, 4)) for _ in range(blocks))
    one, many = (Availability(bytearray(state), PICKABLE, by_count=by_count, rng=random.Random(3)) for _ in "ab")
    for avail in (one, many):  # the lists as a picker keeps them: only pickable blocks, counts from zero
        avail._state[:] = state
        avail.stale = True
        avail.rebuild()
        avail.stale = stale
    for _ in range(3000):
        block = draw.randrange(blocks)
        delta = 1 if one.counts[block] == 0 or draw.random() < 0.6 else -1
        one.shift_one(block, delta)
        many.shift([block], delta)
        assert one.counts[block] == many.counts[block]
    assert list(one.counts) == list(many.counts)
    assert _lists(one) == _lists(many)
    assert max(one.counts) > 2  # the walk moved blocks across several lists
