"""The adaptive T/R/W core (`proxy/download/adaptive.py`): verdicts of single downloads, what histories of each kind of
origin do to T, R and W, the bounds, fading, flapping, the host memory and the probe. A fake clock throughout:
every time is a number passed in."""

from __future__ import annotations

import random

import pytest

from proxy.download.adaptive import HALF_LIFE, Adaptive, Outcome, Probe, observed_policy
from proxy.download.transition import TransitionSettings

FLAGS = TransitionSettings(first_byte_timeout=0.75, min_rate=160_000.0, rate_window=2.0, early_lookup=0.5)
T0, R0, W0 = FLAGS.first_byte_timeout, FLAGS.min_rate, FLAGS.rate_window
SIZE = 100_000


def outcome(at: float, *, first: float | None, seen: int = 0, last: float | None = None, cause: str | None = None,
            switched: float | None = None, end: float, peers: int = 0, size: int = SIZE,
            complete: bool = True) -> Outcome:
    """A download started at `at`; every other time is relative to it."""
    probe = Probe(started=at, first_byte=None if first is None else at + first, seen=seen,
                  last_seen=None if last is None else at + last,
                  cause=cause if cause != "died" else None, switched_at=None if switched is None else at + switched)
    return Outcome(probe, ended=at + end, cause=cause, size=size, from_peers=peers, complete=complete)


# The kinds of download in the mixed workload, each as one outcome starting at `at`.
def far_fast_t_switch(at: float) -> Outcome:
    """T (0.75 s) fired; nobody had the file; the origin answered at 1.2 s and sent 100 KB in 0.1 s."""
    return outcome(at, first=1.2, cause="T", switched=0.75, end=1.3)


def far_fast_untouched(at: float) -> Outcome:
    """The first byte at 1.2 s, then 100 KB in 0.1 s: no switch."""
    return outcome(at, first=1.2, seen=SIZE, last=1.3, end=1.3)


def overloaded_helped(at: float) -> Outcome:
    """Under R from the first byte (40 KB/s); the crowd rule switched at 0.55 s; peers sent the rest by 0.9 s,
    where the origin promised 0.05 + 100 KB / 40 KB/s = 2.55 s."""
    return outcome(at, first=0.05, seen=20_000, cause="crowd", switched=0.55, end=0.9, peers=80_000)


def steady_slow_needless(at: float) -> Outcome:
    """100 KB/s all along: R switched at 2.05 s but nobody had the file; the origin finished at 10 s."""
    return outcome(at, first=0.05, seen=205_000, cause="R", switched=2.05, end=10.05, size=1_000_000)


def t_helped_near(at: float) -> Outcome:
    """A near origin (its first byte normally 0.1 s) late this time: T fired and peers served it all at 1 s."""
    return outcome(at, first=None, cause="T", switched=0.75, end=1.0, peers=SIZE)


def near_fast(at: float) -> Outcome:
    return outcome(at, first=0.1, seen=SIZE, last=0.2, end=0.2)


VERDICTS = [
    pytest.param(far_fast_t_switch(0.0), "needless", id="T-switch-peers-sent-nothing"),
    pytest.param(overloaded_helped(0.0), "helped", id="crowd-switch-peers-finished-before-the-promise"),
    pytest.param(steady_slow_needless(0.0), "needless", id="R-switch-peers-sent-nothing"),
    # 1 MB: a dip to 75 KB/s over W made R switch; peers sent 100 KB but the download still ended at 20 s, later
    # than the origin's promise at that rate (0.05 + 1 MB / 75 KB/s = 13.4 s): the origin was fast enough.
    pytest.param(outcome(0.0, first=0.05, seen=150_000, cause="R", switched=2.05, end=20.0, peers=100_000,
                         size=1_000_000), "needless", id="R-switch-later-than-the-origins-promise"),
    pytest.param(outcome(0.0, first=None, cause="T", switched=0.75, end=1.0, peers=SIZE), "helped",
                 id="T-switch-served-by-peers-no-promise-known"),
    pytest.param(near_fast(0.0), None, id="no-switch"),
    pytest.param(outcome(0.0, first=0.05, cause="hint", switched=0.05, end=0.5, peers=SIZE), None, id="hint"),
    pytest.param(outcome(0.0, first=0.05, seen=50_000, last=0.3, cause="died", end=0.8, peers=50_000), None,
                 id="died"),
    pytest.param(outcome(0.0, first=0.05, cause="fetching", end=0.8, peers=SIZE), None, id="another-cause"),
    pytest.param(outcome(0.0, first=0.05, seen=20_000, cause="R", switched=2.05, end=3.0, peers=10_000,
                         complete=False), None, id="cut-or-abandoned"),
]


@pytest.mark.parametrize("result,verdict", VERDICTS)
def test_the_verdict_of_one_download(result, verdict):
    assert Adaptive(FLAGS).learn("origin.example", result, result.ended) == verdict


def test_a_host_without_history_gets_the_flags():
    choice = Adaptive(FLAGS).choose("origin.example", 0.0)
    assert choice.settings == FLAGS and "no history" in choice.why


def run(history, downloads: int = 6, every: float = 5.0) -> tuple[Adaptive, TransitionSettings]:
    """`downloads` outcomes of the kind(s) `history` (one a call, cycling), `every` seconds apart; then the
    settings for the next download."""
    adaptive = Adaptive(FLAGS)
    kinds = history if isinstance(history, list) else [history]
    now = 0.0
    for i in range(downloads):
        result = kinds[i % len(kinds)](now)
        adaptive.learn("origin.example", result, result.ended)
        now += every
    return adaptive, adaptive.choose("origin.example", now).settings


# (kind of origin, its downloads, what the next download's settings must satisfy)
HISTORIES = [
    pytest.param([far_fast_t_switch, far_fast_untouched, far_fast_untouched],
                 lambda s: 1.2 < s.first_byte_timeout <= 4 * T0 and s.min_rate == R0 and s.rate_window == W0,
                 id="far-fast-T-above-its-first-byte"),
    pytest.param(overloaded_helped,
                 lambda s: s.rate_window <= W0 / 4 and s.min_rate == R0 and s.first_byte_timeout <= T0,
                 id="overloaded-W-shrinks"),
    pytest.param(steady_slow_needless,
                 lambda s: s.rate_window >= 2 * W0 and R0 / 4 <= s.min_rate <= 0.7 * R0,
                 id="steady-slow-no-peers-W-grows-R-falls"),
    pytest.param([near_fast, near_fast, t_helped_near],
                 lambda s: T0 / 4 <= s.first_byte_timeout < T0, id="near-origin-T-helps-T-shrinks"),
    pytest.param(near_fast, lambda s: s == FLAGS, id="near-fast-keeps-the-flags"),
]


@pytest.mark.parametrize("history,check", HISTORIES)
def test_what_a_history_does_to_the_settings(history, check):
    _, settings = run(history)
    assert check(settings), settings
    assert settings.early_lookup == FLAGS.early_lookup  # not adapted


def test_one_needless_t_switch_lifts_t_over_a_far_origins_first_byte():
    adaptive = Adaptive(FLAGS)
    adaptive.learn("far.example", far_fast_t_switch(0.0), 1.3)
    assert adaptive.choose("far.example", 2.0).settings.first_byte_timeout > 1.2
    assert adaptive.choose("near.example", 2.0).settings == FLAGS  # per host


def test_settings_stay_within_the_bounds_whatever_happens():
    rng = random.Random(7)
    kinds = [far_fast_t_switch, far_fast_untouched, overloaded_helped, steady_slow_needless, t_helped_near,
             near_fast]
    adaptive = Adaptive(FLAGS)
    now = 0.0
    for _ in range(2000):
        kind = rng.choice(kinds)
        if rng.random() < 0.1:  # wild values: a first byte after a minute, a switch at once
            result = outcome(now, first=rng.uniform(0, 60), seen=rng.randrange(0, 10**7), cause=rng.choice(
                ["T", "R", "crowd", None]), switched=rng.uniform(0, 60), end=rng.uniform(0, 120),
                peers=rng.randrange(0, SIZE), last=rng.uniform(0, 60))
        else:
            result = kind(now)
        adaptive.learn("h", result, now)
        settings = adaptive.choose("h", now).settings
        assert T0 / 4 <= settings.first_byte_timeout <= 4 * T0
        assert R0 / 4 <= settings.min_rate <= R0
        assert W0 / 8 <= settings.rate_window <= 4 * W0
        now += rng.uniform(0, 30)


def test_a_flapping_origin_stays_between_the_two_regimes():
    # Alternately overloaded (switches help) and steady with nobody to help (needless): neither bound, leaning to
    # switching sooner (a helpful switch weighs twice a needless one).
    adaptive, settings = run([overloaded_helped, steady_slow_needless], downloads=40)
    assert W0 / 4 < settings.rate_window < W0
    assert settings.min_rate > R0 / 2


def test_what_a_host_taught_fades_back_to_the_flags():
    adaptive, learned = run(overloaded_helped)
    assert learned.rate_window < W0 / 4
    last = 25.0 + 0.9  # the sixth download's end
    half = adaptive.choose("origin.example", last + HALF_LIFE).settings.rate_window
    assert learned.rate_window < half < W0 and half == pytest.approx((learned.rate_window * W0) ** 0.5, rel=0.01)
    assert adaptive.choose("origin.example", last + 20 * HALF_LIFE).settings.rate_window == pytest.approx(W0,
                                                                                                          rel=0.01)


def test_a_cut_download_teaches_only_its_first_byte():
    adaptive = Adaptive(FLAGS)
    cut = outcome(0.0, first=1.5, seen=20_000, cause="R", switched=3.5, end=4.0, peers=0, complete=False)
    assert adaptive.learn("h", cut, 4.0) is None
    settings = adaptive.choose("h", 5.0).settings
    assert settings.first_byte_timeout > 1.5 and settings.rate_window == W0 and settings.min_rate == R0


def test_memory_is_bounded_least_recently_used_first():
    adaptive = Adaptive(FLAGS, max_hosts=2)
    for i, host in enumerate(("a", "b")):
        adaptive.learn(host, far_fast_t_switch(float(i)), i + 1.3)
    adaptive.choose("a", 3.0)  # a is used again: b is now the least recent
    adaptive.learn("c", far_fast_t_switch(4.0), 5.3)
    assert len(adaptive) == 2
    assert adaptive.choose("b", 6.0).settings == FLAGS  # forgotten
    assert adaptive.choose("a", 6.0).settings != FLAGS and adaptive.choose("c", 6.0).settings != FLAGS
    with pytest.raises(ValueError):
        Adaptive(FLAGS, max_hosts=0)


def test_the_probe_sees_the_request_the_first_byte_the_bytes_before_the_switch_and_the_switch():
    probe = Probe()
    policy = observed_policy(TransitionSettings(0.75, 160_000.0, 2.0, 0.5), probe)
    policy.start(10.0)
    policy.on_bytes(300, 10.1)  # the head
    policy.on_bytes(10_000, 10.6)
    assert policy.check(12.2) == "R"
    policy.on_bytes(5_000, 12.3)  # after the switch: not the origin's rate before it
    assert probe == Probe(started=10.0, first_byte=10.1, seen=10_300, last_seen=10.6, cause="R", switched_at=12.2)


def test_the_probe_keeps_the_request_time_when_a_late_answer_starts_a_new_policy():
    settings, probe = TransitionSettings(0.75, 160_000.0, 2.0, 0.5), Probe()
    first = observed_policy(settings, probe)
    first.start(0.0)
    assert first.check(0.75) == "T"
    second = observed_policy(settings, probe)  # the origin answered after T: the download's core watches it afresh
    second.start(1.2)
    second.on_bytes(300, 1.2)
    assert (probe.started, probe.first_byte, probe.cause, probe.switched_at) == (0.0, 1.2, "T", 0.75)
    assert probe.seen == 0


def test_an_adapted_choice_says_where_it_came_from():
    adaptive, _ = run(overloaded_helped, downloads=3)
    choice = adaptive.choose("origin.example", 20.0)
    assert choice.why == "adaptive (3 downloads, switches 3 helped / 0 needless)"


def test_a_t_switch_the_origin_won_teaches_an_upper_bound_of_its_first_byte():
    # The swarm was started after T, but the origin's answer (unwatched by the policy then) delivered every byte.
    adaptive = Adaptive(FLAGS)
    won = outcome(0.0, first=None, cause="T", switched=0.75, end=1.45)
    assert adaptive.learn("far.example", won, 1.45) == "needless"
    assert adaptive.choose("far.example", 2.0).settings.first_byte_timeout > 1.45
