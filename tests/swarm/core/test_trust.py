"""Peer trust, checked against libtorrent's rules: −2 per hash failure, +1 per good block up to a cap, ban at
−7, immediate ban when the fault is certain."""

from __future__ import annotations

import pytest

from swarm.core.trust import Trust, TrustConfig

SHARED = TrustConfig(ban_sole_contributor=False)  # every failure shared with someone: the point scale decides


# (events, expected points, expected banned). "+" = a good block, "-" = a hash failure (shared), in order.
POINT_CASES = [
    ("", 0, False),
    ("+", 1, False),
    ("++++++++++++", 8, False),  # capped at +8
    ("-", -2, False),
    ("---", -6, False),
    ("----", -7, True),  # 0 -2 -4 -6 -8: clamped at -7, banned on the fourth failure
    ("+---", -5, False),
    ("+----", -7, True),  # 1 -1 -3 -5 -7: reaching the threshold exactly bans (libtorrent: <= -7)
    ("++-+-+-+-", -3, False),  # a failure costs twice a success: the balance drifts down
    ("++++++++----", 0, False),  # earned trust absorbs failures
    ("++++++++--------", -7, True),
]


@pytest.mark.parametrize("events, points, banned", POINT_CASES, ids=[case[0] or "none" for case in POINT_CASES])
def test_points_follow_libtorrent(events: str, points: int, banned: bool) -> None:
    trust = Trust(SHARED)
    for event in events:
        if event == "+":
            trust.on_good_block("a")
        else:
            trust.on_hash_failure(["a", "b"])
    assert trust.points("a") == points
    assert trust.is_banned("a") is banned


def test_sole_contributor_is_banned_at_once() -> None:
    trust = Trust()
    for _ in range(8):
        trust.on_good_block("a")  # even a well-trusted source
    assert trust.on_hash_failure(["a"]) == ["a"]
    assert trust.is_banned("a")
    assert "sole contributor" in trust.record("a").ban_reason


def test_shared_failure_costs_every_contributor_but_bans_none_at_once() -> None:
    trust = Trust()
    assert trust.on_hash_failure(["a", "b", "a"]) == []  # a sending two ranges is still one fault
    assert trust.points("a") == trust.points("b") == -2
    assert trust.record("a").hash_failures == 1
    assert trust.on_parole("a") and trust.on_parole("b")


def test_parole_ends_with_a_good_block_and_ban_is_reported_once() -> None:
    trust = Trust(SHARED)
    trust.on_hash_failure(["a", "b"])
    trust.on_good_block("a")
    assert not trust.on_parole("a") and trust.on_parole("b")
    newly = [trust.on_hash_failure(["b", "c"]) for _ in range(5)]
    # each ban is reported by the failure that crossed the threshold, and only by it
    assert newly == [[], [], ["b"], ["c"], []]
    assert trust.banned() == ["b", "c"]


def test_a_bad_hash_layer_or_protocol_fault_bans_at_once() -> None:
    trust = Trust()
    assert trust.on_bad_hash_layer("a") is True
    assert trust.on_bad_hash_layer("a") is False
    assert trust.is_banned("a") and "hash layer" in trust.record("a").ban_reason
    assert trust.ban("b", "flooded us") is True and trust.record("b").ban_reason == "flooded us"


def test_strikes_count_until_a_good_block_and_leave_points_alone() -> None:
    trust = Trust()
    assert [trust.on_strike("a") for _ in range(3)] == [1, 2, 3]
    assert trust.points("a") == 0 and not trust.is_banned("a")
    trust.on_good_block("a")
    assert trust.strikes("a") == 0


def test_unknown_sources_are_neutral() -> None:
    trust = Trust()
    assert trust.points("x") == 0 and trust.strikes("x") == 0
    assert not trust.is_banned("x") and not trust.on_parole("x")


def test_a_tuple_source_is_one_source() -> None:
    trust = Trust()
    assert trust.on_hash_failure([("10.0.0.1", 6881)]) == [("10.0.0.1", 6881)]


@pytest.mark.parametrize(
    "config",
    [dict(failure_penalty=0), dict(ban_at=0), dict(max_points=-1), dict(success_reward=-1)],
    ids=["no penalty", "ban at 0", "negative cap", "negative reward"],
)
def test_bad_configs_are_refused(config: dict) -> None:
    with pytest.raises(ValueError):
        TrustConfig(**config)
