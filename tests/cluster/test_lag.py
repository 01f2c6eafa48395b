"""`cluster.lag`: a root member whose share from the pusher lags the other root members' (the lower median of
theirs, by `LAG_MARGIN` of a share) has its pusher's flow go first, for the rest of the transfer; nobody else."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from cluster.lag import LAG_MARGIN, LagWatch, share_progress

BLOCK = 100
# five root members, 20 blocks each: a share is 2,000 bytes
OWNERS = [name for name in ("a", "b", "c", "d", "e") for _ in range(20)]


@dataclass
class Rec:
    received: dict[str, int] = field(default_factory=dict)


def records(**outside: int) -> dict[str, Rec]:
    return {node: Rec({"rack": 999_999, "dc": 999_999, "outside": n}) for node, n in outside.items()}


@pytest.mark.parametrize(("outside", "lagging"), [
    (dict(a=100, b=2000, c=2000, d=2000, e=2000), True),  # the shaped rack: the others have their share
    (dict(a=1000, b=1100, c=1000, d=1200, e=900), False),  # equal shares at an equal pace: nobody lags
    (dict(a=1000, b=2000, c=2000, d=1400, e=1400), False),  # behind the lower median (0.7) by 0.2 only
    (dict(a=800, b=2000, c=2000, d=1400, e=1400), True),  # by 0.3
    (dict(a=100, b=2000, c=100, d=100, e=100), False),  # one record that claims more cannot make it lag
    (dict(a=100, b=2000, c=2000, d=100, e=100), False),  # two of four: the lower median is still 0.05
    (dict(a=2000, b=2000, c=2000, d=2000, e=2000), False),  # its share is in
    (dict(a=0), False),  # no other root member's record read
    (dict(b=2000, c=2000, d=2000, e=2000), False),  # its own record not read (yet)
    (dict(a=100, b=9000, c=9000, d=9000, e=9000), True),  # outside bytes beyond a share count as the share
])
def test_a_root_member_lags_when_the_lower_median_of_the_others_is_ahead_by_the_margin(outside, lagging) -> None:
    watch = LagWatch("a")
    assert watch.observe(OWNERS, records(**outside), BLOCK) is lagging
    assert watch() is lagging


@pytest.mark.parametrize("owners", [None, [], ["b"] * 100])
def test_no_root_split_or_no_share_never_lags(owners) -> None:
    watch = LagWatch("a")
    assert not watch.observe(owners, records(a=0, b=2000, c=2000), BLOCK)


def test_once_found_it_stays_so_when_it_catches_up() -> None:
    watch = LagWatch("a")
    assert watch.observe(OWNERS, records(a=0, b=2000, c=2000, d=2000, e=2000), BLOCK)
    assert watch.observe(OWNERS, records(a=1900, b=2000, c=2000, d=2000, e=2000), BLOCK)
    assert watch()


def test_share_progress() -> None:
    assert share_progress(OWNERS, "a", 500, BLOCK) == 0.25
    assert share_progress(OWNERS, "a", 5000, BLOCK) == 1.0
    assert share_progress(OWNERS, "z", 500, BLOCK) is None
    assert LAG_MARGIN == 0.25
