"""Token buckets and throttle groups on a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.core.throttle import Throttle, ThrottleGroup, TokenBucket, on_the_wire, rate_cap

# (rate, burst, steps): each step is (now, n, expected consume result, expected delay_for(n) before it)
BUCKET_CASES = [
    ("starts full", 100, 50, [(0.0, 50, True, 0.0), (0.0, 1, False, 0.01)]),
    ("refills at the rate", 100, 50, [(0.0, 50, True, 0.0), (0.1, 10, True, 0.0), (0.1, 1, False, 0.01)]),
    ("refill is capped at the burst", 100, 50, [(0.0, 50, True, 0.0), (60.0, 50, True, 0.0), (60.0, 1, False, 0.01)]),
    ("a request above the burst waits for a full bucket, then leaves a debt", 100, 50,
     [(0.0, 10, True, 0.0), (0.0, 200, False, 0.1), (0.1, 200, True, 0.0), (0.1, 1, False, 1.51)]),
    ("unlimited: rate None", None, None, [(0.0, 10**12, True, 0.0), (0.0, 10**12, True, 0.0)]),
    ("unlimited: rate 0", 0, None, [(0.0, 10**12, True, 0.0)]),
    ("default burst is one second of rate", 10, None, [(0.0, 10, True, 0.0), (0.0, 1, False, 0.1)]),
    ("time going backwards mints nothing", 100, 50,
     [(5.0, 50, True, 0.0), (1.0, 1, False, 0.01), (5.01, 1, True, 0.0)]),
]  # fmt: skip


@pytest.mark.parametrize("name, rate, burst, steps", BUCKET_CASES, ids=[case[0] for case in BUCKET_CASES])
def test_bucket_table(name: str, rate, burst, steps) -> None:
    bucket = TokenBucket(rate, burst)
    for now, n, expected, delay in steps:
        assert bucket.delay_for(n, now) == pytest.approx(delay), (now, n)
        assert bucket.consume(n, now) is expected, (now, n)


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(1.0, 1e9),
    burst_factor=st.floats(0.01, 10.0),
    sizes=st.lists(st.floats(0.5, 1e9), min_size=1, max_size=30),
)
def test_waiting_delay_for_is_always_enough_and_the_long_run_rate_holds(rate, burst_factor, sizes) -> None:
    burst = rate * burst_factor
    bucket, now, consumed = TokenBucket(rate, burst), 0.0, 0.0
    for n in sizes:
        now += bucket.delay_for(n, now)
        assert bucket.consume(n, now), (n, now)
        consumed += n
    # everything taken came from the initial burst or the refill, plus at most one request's overshoot (debt)
    overshoot = max(max(sizes) - burst, 0.0)
    assert consumed <= (burst + rate * now + overshoot) * (1 + 1e-9)


def test_set_rate_keeps_earned_tokens_and_lifting_unlimited_starts_full() -> None:
    bucket = TokenBucket(100, 100)
    assert bucket.consume(100, 0.0)
    bucket.set_rate(10, 1.0, burst=20)  # 100 earned at the old rate in 1 s, capped at the new burst
    assert bucket.tokens(1.0) == pytest.approx(20)
    bucket.set_rate(None, 1.0)
    assert bucket.unlimited and bucket.consume(10**9, 1.0)
    bucket.set_rate(50, 2.0)
    assert bucket.tokens(2.0) == pytest.approx(50)


@pytest.mark.parametrize("args", [(-1, None), (10, 0), (10, -5)], ids=["negative rate", "zero burst", "negative burst"])
def test_bad_bucket_settings_are_refused(args) -> None:
    with pytest.raises(ValueError):
        TokenBucket(*args)


# -- groups ----------------------------------------------------------------------------------------------------


def drain(throttles: list[Throttle], chunk: float, until: float, step: float = 0.01) -> list[float]:
    """Every member tries to send `chunk` at every step of the fake clock; returns what each got through."""
    sent = [0.0] * len(throttles)
    now = 0.0
    while now <= until:
        for i, throttle in enumerate(throttles):
            while throttle.consume(chunk, now):
                sent[i] += chunk
        now = round(now + step, 6)
    return sent


def test_members_share_the_group_rate_minus_the_reserve() -> None:
    group = ThrottleGroup(capacity=1000, reserve=200, name="myRack")
    assert group.rate == 800
    members = [group.join(f"m{i}") for i in range(3)]
    sent = drain(members, chunk=10, until=10.0)
    assert sum(sent) <= 800 * 10 + 800  # the rate for 10 s, plus the initial one-second burst
    assert sum(sent) >= 800 * 10 * 0.95
    # m0 asks first at every step and takes the initial burst, yet queued members are served in turn
    assert all(amount >= 0.9 * 800 * 10 / 3 for amount in sent[1:]), sent


def test_a_large_request_is_not_starved_by_small_ones() -> None:
    group = ThrottleGroup(capacity=100)
    big, small = group.join("big"), group.join("small")
    assert small.consume(100, 0.0)
    assert not big.consume(80, 0.0)  # big queues first
    now = 0.0
    while not big.consume(80, now):
        assert not small.consume(10, now)  # small may not jump the queue, even when 10 tokens are there
        now = round(now + 0.01, 6)
    assert now == pytest.approx(0.8, abs=0.02)


def test_a_member_that_never_comes_back_loses_its_place() -> None:
    group = ThrottleGroup(capacity=100, patience=0.5)
    gone, other = group.join("gone"), group.join("other")
    assert other.consume(100, 0.0)
    assert gone.delay_for(50, 0.0) == pytest.approx(0.5)  # queued, told to come back at 0.5
    assert group.queue == ["gone"]
    assert not other.consume(10, 0.6)  # within patience, its place is kept
    assert other.consume(10, 1.01)  # past due + patience: forgotten
    assert group.queue == []


def test_a_member_limit_applies_within_the_group_and_refusals_take_nothing() -> None:
    group = ThrottleGroup(capacity=1000)
    slow = group.join("slow", limit=TokenBucket(100, 100))
    fast = group.join("fast")
    sent_slow, sent_fast = drain([slow, fast], chunk=10, until=10.0)
    assert sent_slow <= 100 * 10 + 100
    # the slow member's refusals did not eat the group's tokens: the fast one got the rest
    assert sent_slow + sent_fast >= 1000 * 10 * 0.95


def test_all_or_nothing_across_buckets() -> None:
    own, shared = TokenBucket(100, 100), TokenBucket(100, 100)
    assert shared.consume(95, 0.0)
    throttle = Throttle("m", own, shared)
    assert throttle.consume(10, 0.0) is False
    assert own.tokens(0.0) == 100  # nothing taken from the bucket that could have paid
    assert throttle.delay_for(10, 0.0) == pytest.approx(0.05)


def test_capacity_changes_reach_existing_members() -> None:
    group = ThrottleGroup(capacity=100)
    member = group.join("m")
    assert member.consume(100, 0.0)
    group.set_capacity(1000, now=0.0)
    assert member.delay_for(500, 0.0) == pytest.approx(0.5)
    group.set_capacity(None, now=1.0)
    assert member.consume(10**9, 1.0)


def test_weighted_shares() -> None:
    group = ThrottleGroup(capacity=100, reserve=20)
    group.join("a")
    group.join("b", weight=3)
    assert group.share("a") == pytest.approx(20) and group.share("b") == pytest.approx(60)
    group.leave("b")
    assert group.members == ["a"] and group.share("a") == pytest.approx(80)
    unlimited = ThrottleGroup(None)
    unlimited.join("x")
    assert unlimited.share("x") is None and unlimited.rate is None


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(capacity=100, reserve=100),
        dict(capacity=100, reserve=-1),
        dict(capacity=100, burst_seconds=0),
        dict(capacity=100, patience=0),
    ],
    ids=["reserve eats everything", "negative reserve", "no burst", "no patience"],
)
def test_bad_group_settings_are_refused(kwargs) -> None:
    with pytest.raises(ValueError):
        ThrottleGroup(**kwargs)


def test_an_empty_throttle_never_waits() -> None:
    assert Throttle("m").consume(10**9, 0.0) and Throttle("m").delay_for(10**9, 0.0) == 0.0


@pytest.mark.parametrize("payload, wire", [(0, 0), (1448, 1514), (16384, 17131), (1, 2)])
def test_an_upload_cap_counts_the_bytes_on_the_wire(payload, wire) -> None:
    assert on_the_wire(payload) == wire  # TCP/IP and Ethernet headers per 1448-byte segment


def test_an_upload_cap_banks_a_tenth_of_a_second_of_its_rate() -> None:
    cap = rate_cap(1_000_000)
    assert cap.consume(100_000, 0.0) and not cap.consume(1, 0.0)  # full at the start with 0.1 s, no more
    assert cap.delay_for(10_000, 0.0) == pytest.approx(0.01)
    assert rate_cap(None).unlimited and rate_cap(0).unlimited
