"""The T/R/W transition policy, stepped with a fake clock (no sleeps)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.download.transition import TransitionPolicy


def _after(t: float) -> float:
    return math.nextafter(t, math.inf)


def _stream(first: float, last: float, step: float, n: int) -> list[tuple]:
    """`n` bytes every `step` seconds from `first` to `last`, each arrival preceded by a check."""
    ops: list[tuple] = []
    k = 0
    while (t := first + k * step) <= last:
        ops += [("check", t, None), ("bytes", t, n)]
        k += 1
    return ops


# Each script runs on a policy started at 0.0. Ops:
#   ("bytes", t, n)          on_bytes(n, t)
#   ("check", t, expected)   check(t) == expected
#   ("hint", t, expected)    hint(t) == expected
#   ("finish",)              finish()
#   ("deadline", expected)   next_deadline() == expected
#   ("crowd", t, expected)   crowd(t) == expected (an early lookup found a trusted copy at t)
#   ("lookup", expected)     lookup_due_at() == expected
#   ("slow", t, expected)    slow_so_far(t) == expected
#   ("end", t, expected)     slow_to_the_end(t) == expected (the origin's last byte came at t)
SCRIPTS = [
    pytest.param({}, _stream(0.1, 10.0, 0.01, 20_000) + [("check", 10.0, None)],
                 id="steady-2MB/s-never-switches"),
    pytest.param({}, [("deadline", 0.75), ("check", 0.0, None), ("check", 0.7499, None),
                      ("check", math.nextafter(0.75, 0), None), ("check", 0.75, "T"), ("check", 9.0, "T"),
                      ("deadline", None)],
                 id="no-bytes-T-at-exactly-start+T"),
    pytest.param({}, [("check", 0.4, None), ("bytes", 0.5, 300), ("deadline", 2.5), ("check", 2.0, None),
                      ("check", math.nextafter(2.5, 0), None), ("check", 2.5, "R")],
                 # the rate check starts at first+W = 2.5; the 300 header bytes are still in the
                 # closed window [0.5, 2.5] but 150 B/s < R
                 id="headers-at-0.5-then-nothing-R-at-first+W"),
    pytest.param({}, [("bytes", 0.5, 320_000), ("deadline", _after(2.5)), ("check", 2.5, None),
                      ("check", _after(2.5), "R")],
                 # R·W bytes at 0.5 keep the window at exactly R until they leave it just after 2.5
                 id="first-read-of-R*W-bytes-counts-through-2.5"),
    pytest.param({}, _stream(0.1, 2.0, 0.1, 1_000) + [("check", 2.05, None), ("check", 2.1, "R")],
                 # 10 kB/s: nothing can be said before first+W = 2.1, then it switches at once
                 id="slow-trickle-switches-at-first+W"),
    pytest.param({}, [("bytes", 0.5, 300), ("bytes", 1.0, 1_000_000), ("check", 2.5, None),
                      ("deadline", _after(3.0)), ("check", 3.0, None), ("check", _after(3.0), "R")],
                 id="burst-then-stall-switches-when-burst-leaves-window"),
    pytest.param({}, _stream(0.1, 3.0, 0.01, 20_000) + [("check", 4.0, None), ("check", 4.85, None),
                                                        ("check", 4.9, "R")],
                 # 2 MB/s until 3.0, then silence. Unbucketed the window drops below R·W (16
                 # arrivals) once the arrival at 2.85 leaves it, just after 4.85; buckets may hold
                 # it up to 50 ms longer (here: 4.87), never less
                 id="fast-then-stall"),
    pytest.param({"min_rate": 0.0}, [("bytes", 0.1, 1), ("deadline", None), ("check", 1000.0, None)],
                 id="R=0-never-switches-by-R"),
    pytest.param({"min_rate": 0.0}, [("check", 0.75, "T")], id="R=0-still-switches-by-T"),
    pytest.param({}, [("check", 0.3, None), ("hint", 0.3, "hint"), ("check", 10.0, "hint"), ("deadline", None)],
                 id="hint-forces-switch"),
    pytest.param({}, [("hint", 1.0, "T")], id="hint-after-T-was-due-keeps-T"),
    pytest.param({}, [("bytes", 0.1, 300), ("finish",), ("check", 100.0, None), ("deadline", None),
                      ("hint", 100.0, None)],
                 id="finish-prevents-switch"),
    pytest.param({}, [("check", 0.8, "T"), ("finish",), ("check", 100.0, "T")], id="finish-keeps-recorded-cause"),
    pytest.param({}, [("bytes", 1.0, 10_000_000), ("check", 1.0, "T")],
                 # the timer fired late: the first byte came after start+T, the switch was due
                 id="late-first-byte-does-not-undo-T"),
    pytest.param({}, [("bytes", 0.75, 10_000_000), ("check", 0.75, "T")],
                 # a byte at exactly start+T is too late: check-then-bytes at the same instant
                 id="byte-at-exactly-start+T-is-late"),
    pytest.param({}, [("bytes", 0.1, 300), ("bytes", 0.2, 1_000_000), ("bytes", 5.0, 10_000_000),
                      ("check", 5.0, "R")],
                 id="stall-then-burst-does-not-undo-R"),
    pytest.param({}, [("bytes", 0.1, 0), ("bytes", 0.5, 0), ("check", 0.75, "T")],
                 id="zero-bytes-are-not-a-first-byte"),
    pytest.param({}, [("bytes", 0.5, 300), ("check", 0.1, None), ("deadline", 2.5), ("check", 2.5, "R")],
                 id="clock-stepping-back-is-clamped"),
    pytest.param({"first_byte_timeout": 0.2, "min_rate": 1000.0, "rate_window": 0.5},
                 [("bytes", 0.1, 400), ("check", 0.6, "R")],
                 # 400 B / 0.5 s = 800 B/s < 1000 B/s
                 id="custom-T-R-W"),
    pytest.param({"first_byte_timeout": 0.2, "min_rate": 1000.0, "rate_window": 0.5},
                 [("bytes", 0.1, 500), ("check", 0.6, None), ("check", _after(0.6), "R")],
                 id="custom-exactly-R-is-not-below-R"),
    # The crowd rule: an early lookup at first byte + 0.5 s; a trusted copy found then moves a slow download.
    pytest.param({}, [("lookup", None), ("crowd", 0.3, None), ("bytes", 0.1, 300), ("lookup", 0.6),
                      ("slow", 0.6, True), ("crowd", 0.6, "crowd"), ("check", 10.0, "crowd"), ("lookup", None),
                      ("deadline", None)],
                 id="crowd-switches-a-slow-origin-after-the-early-lookup"),
    pytest.param({}, [("bytes", 0.1, 300), ("crowd", math.nextafter(0.6, 0), None), ("crowd", 0.6, "crowd")],
                 # before first byte + early_lookup the origin has not had its chance yet
                 id="crowd-not-before-first-byte+early"),
    pytest.param({}, _stream(0.1, 1.0, 0.01, 20_000) + [("slow", 1.0, False), ("crowd", 1.0, None),
                                                        ("check", 1.0, None)],
                 # 2 MB/s: a fast origin keeps the download whatever the swarm holds
                 id="crowd-leaves-a-fast-origin-alone"),
    pytest.param({}, [("bytes", 0.1, 100_000), ("slow", 0.6, False), ("crowd", 0.6, None),
                      ("slow", 0.8, True), ("crowd", 0.8, "crowd")],
                 # 100 kB at the first byte (0.1): 200 kB/s over 0.5 s, under 160 kB/s over 0.7 s
                 id="crowd-measures-the-average-since-the-first-byte"),
    pytest.param({}, _stream(0.1, 3.0, 0.01, 20_000) + [("slow", 3.0, False), ("crowd", 5.5, "R")],
                 # R was due first: the earlier cause stands
                 id="crowd-after-R-was-due-keeps-R"),
    pytest.param({}, [("check", 0.8, "T"), ("crowd", 0.9, "T"), ("lookup", None)], id="crowd-after-T-keeps-T"),
    pytest.param({"early_lookup": 0.0}, [("bytes", 0.1, 300), ("lookup", None), ("slow", 1.0, True),
                                         ("crowd", 1.0, None), ("check", 2.1, "R")],
                 id="early-lookup-0-is-off"),
    pytest.param({"early_lookup": 2.0}, [("bytes", 0.1, 300), ("lookup", None)],
                 # not before the R check anyway: nothing to gain
                 id="early-lookup-at-W-is-off"),
    pytest.param({}, [("bytes", 0.1, 300), ("finish",), ("lookup", None), ("slow", 1.0, False),
                      ("crowd", 1.0, None)],
                 id="crowd-after-finish-does-nothing"),
    pytest.param({"early_lookup": 0.25}, [("bytes", 0.1, 300), ("lookup", 0.1 + 0.25), ("crowd", 0.1 + 0.25, "crowd")],
                 # at the exact early point the shell's timer fires: 0.1 + 0.25 - 0.1 is 0.24999999999999997
                 id="crowd-at-the-early-point-in-floats"),
    # At the last byte: under R from the first byte to the last, for a download that lasted past T (0.75 s).
    pytest.param({}, [("bytes", 0.05, 60_000), ("bytes", 0.6, 20_000), ("bytes", 1.3, 20_000), ("end", 1.3, True)],
                 id="end-100KB-in-1.25s-was-slow"),  # a crowd's first fetcher: fast at first, then slowed
    pytest.param({}, [("bytes", 0.05, 2_000), ("bytes", 0.06, 4_000), ("end", 0.06, False)],
                 id="end-a-small-file-within-T-is-never-judged"),
    pytest.param({}, _stream(0.1, 1.5, 0.01, 2_000) + [("end", 1.5, False)],
                 id="end-200kB/s-to-the-end-was-fast"),
    pytest.param({}, [("bytes", 0.05, 300), ("bytes", 3.0, 500_000), ("check", 3.0, "R"), ("end", 3.0, False)],
                 id="end-after-a-switch-judges-nothing-more"),
    pytest.param({}, [("bytes", 0.05, 1_000), ("finish",), ("end", 2.0, False)],
                 id="end-after-finish-judges-nothing"),
]


EARLY = 0.5  # the scripts' early lookup unless they give one: they test the rule, not the default (0.25 s)


def _run(params: dict, ops: list[tuple]) -> TransitionPolicy:
    policy = TransitionPolicy(**{"early_lookup": EARLY, **params})
    policy.start(0.0)
    for op in ops:
        kind = op[0]
        if kind == "bytes":
            policy.on_bytes(op[2], op[1])
        elif kind == "check":
            assert policy.check(op[1]) == op[2], f"check({op[1]!r})"
        elif kind == "hint":
            assert policy.hint(op[1]) == op[2], f"hint({op[1]!r})"
        elif kind == "finish":
            policy.finish()
        elif kind == "crowd":
            assert policy.crowd(op[1]) == op[2], f"crowd({op[1]!r})"
        elif kind == "lookup":
            assert policy.lookup_due_at() == op[1], "lookup_due_at()"
        elif kind == "slow":
            assert policy.slow_so_far(op[1]) == op[2], f"slow_so_far({op[1]!r})"
        elif kind == "end":
            assert policy.slow_to_the_end(op[1]) == op[2], f"slow_to_the_end({op[1]!r})"
        elif kind == "deadline":
            assert policy.next_deadline() == op[1], "next_deadline()"
        else:  # pragma: no cover - a typo in the table
            raise AssertionError(kind)
    return policy


@pytest.mark.parametrize("params,ops", SCRIPTS)
def test_script(params, ops):
    _run(params, ops)


def test_cause_property_follows_check():
    policy = _run({}, [("bytes", 0.5, 300), ("check", 2.5, "R")])
    assert policy.cause == "R"
    assert policy.first_byte_at == 0.5


def test_before_start_nothing_is_due():
    policy = TransitionPolicy()
    assert policy.check(100.0) is None
    assert policy.next_deadline() is None


def test_bytes_without_start_start_the_clock():
    policy = TransitionPolicy()
    policy.on_bytes(300, 10.0)
    assert policy.next_deadline() == 12.0
    assert policy.check(12.0) == "R"


@pytest.mark.parametrize("kwargs,needle", [
    ({"first_byte_timeout": 0}, "first_byte_timeout (T)"),
    ({"first_byte_timeout": -1}, "first_byte_timeout (T)"),
    ({"first_byte_timeout": math.nan}, "first_byte_timeout (T)"),
    ({"first_byte_timeout": math.inf}, "first_byte_timeout (T)"),
    ({"min_rate": -1}, "min_rate (R)"),
    ({"min_rate": math.nan}, "min_rate (R)"),
    ({"min_rate": math.inf}, "min_rate (R)"),
    ({"rate_window": 0}, "rate_window (W)"),
    ({"rate_window": -0.5}, "rate_window (W)"),
    ({"rate_window": math.inf}, "rate_window (W)"),
], ids=lambda v: v if isinstance(v, str) else repr(v))
def test_invalid_parameters_are_refused(kwargs, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        TransitionPolicy(**kwargs)


def test_defaults_are_packs_best():
    policy = TransitionPolicy()
    assert (policy.first_byte_timeout, policy.min_rate, policy.rate_window) == (0.75, 160_000.0, 2.0)


def test_misuse_is_refused():
    policy = TransitionPolicy()
    policy.start(0.0)
    with pytest.raises(RuntimeError):
        policy.start(1.0)
    with pytest.raises(ValueError):
        policy.on_bytes(-1, 0.1)


@pytest.mark.parametrize("window,step,seconds,bound", [
    (2.0, 0.001, 30.0, 2.0 / 0.05 + 2),
    (0.1, 0.001, 5.0, 0.1 / 0.05 + 2),
    (100.0, 0.01, 300.0, 258),  # a long W widens buckets to W/256 instead of keeping 10 000 samples
], ids=["W=2", "W=0.1", "W=100"])
def test_memory_stays_bounded(window, step, seconds, bound):
    policy = TransitionPolicy(min_rate=0.0, rate_window=window)
    policy.start(0.0)
    worst = 0
    for k in range(1, int(seconds / step)):
        policy.on_bytes(1, k * step)
        worst = max(worst, len(policy._buckets))
    assert worst <= bound
    assert policy.cause is None


# -- next_deadline against fine-grained stepping ------------------------------------------------------

schedules = st.lists(st.tuples(st.integers(0, 800), st.integers(0, 400_000)), max_size=25)


def _fine(params: dict, events: list[tuple[int, int]], horizon_ms: int) -> tuple[str, int] | None:
    """Check every millisecond (before that millisecond's bytes); the first switch found."""
    policy = TransitionPolicy(**params)
    policy.start(0.0)
    pending = list(events)
    for ms in range(horizon_ms + 1):
        t = ms / 1000
        cause = policy.check(t)
        if cause:
            return cause, ms
        while pending and pending[0][0] == ms:
            policy.on_bytes(pending.pop(0)[1], t)
    return None


def _by_deadline(params: dict, events: list[tuple[int, int]]) -> tuple[str, float] | None:
    """Check only at next_deadline() (before any bytes due at or after it)."""
    policy = TransitionPolicy(**params)
    policy.start(0.0)
    for ms, n in events + [(None, 0)]:
        until = math.inf if ms is None else ms / 1000
        previous = -math.inf
        while (deadline := policy.next_deadline()) is not None and deadline <= until:
            assert deadline > previous, "next_deadline() must make progress"
            previous = deadline
            cause = policy.check(deadline)
            if cause:
                return cause, deadline
        if ms is not None:
            policy.on_bytes(n, until)
    return None


@settings(max_examples=300, deadline=None)
@given(t_ms=st.integers(1, 1000), w_ms=st.integers(1, 3000),
       rate=st.sampled_from([0.0, 1_000.0, 50_000.0, 160_000.0, 1_000_000.0]), gaps=schedules)
def test_deadline_stepping_never_misses_a_switch(t_ms, w_ms, rate, gaps):
    params = {"first_byte_timeout": t_ms / 1000, "min_rate": rate, "rate_window": w_ms / 1000}
    events, ms = [], 0
    for gap, n in gaps:
        ms += gap
        events.append((ms, n))
    horizon = ms + t_ms + w_ms + 10  # by then anything that can switch has switched
    fine = _fine(params, events, horizon)
    coarse = _by_deadline(params, events)
    if fine is None:
        assert coarse is None, f"deadline stepping switched at {coarse}, millisecond stepping never did"
        return
    cause, fine_ms = fine
    assert coarse is not None, f"deadline stepping missed the {cause} switch found at {fine_ms} ms"
    assert coarse[0] == cause
    # Not later than the fine stepping, and not earlier than its last check that found nothing.
    assert (fine_ms - 1) / 1000 < coarse[1] <= fine_ms / 1000


@settings(max_examples=200, deadline=None)
@given(t_ms=st.integers(1, 1000), w_ms=st.integers(1, 3000), rate=st.sampled_from([1_000.0, 160_000.0]),
       gaps=schedules)
def test_deadline_is_exact(t_ms, w_ms, rate, gaps):
    """After any byte schedule, checking at next_deadline() switches, and just before it does not."""
    policy = TransitionPolicy(first_byte_timeout=t_ms / 1000, min_rate=rate, rate_window=w_ms / 1000)
    policy.start(0.0)
    ms = 0
    for gap, n in gaps:
        ms += gap
        policy.on_bytes(n, ms / 1000)
    deadline = policy.next_deadline()
    if policy.cause is not None:
        assert deadline is None
        return
    assert deadline is not None
    if deadline > ms / 1000:
        assert policy.check(math.nextafter(deadline, -math.inf)) is None
    assert policy.check(max(deadline, ms / 1000)) is not None
