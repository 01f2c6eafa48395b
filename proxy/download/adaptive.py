"""Adaptive T/R/W: per origin host, the transition settings of its next download, learned from its last ones
(sans-I/O: time comes in as `now`).

Pack's T, R and W are fixed (his chapter 5 leaves "dynamically optimize these values" as future work). One
setting cannot suit every origin: a far but fast one (first byte after 1 s, then megabytes per second) trips T on
every download although the origin alone is fine, and an overloaded one is watched for W seconds although every
recent download from it was finished sooner by peers. `Adaptive` keeps, per host, what its downloads showed and
derives the T, R and W of the next one. The configured flags are the starting point and the bounds:

    T in [T0/4, 4·T0]    R in [R0/4, R0]    W in [W0/8, 4·W0]

(W goes down to W0/8, not W0/4: the best fixed W of `swarmproxy lab sweep` is 0.25 s = W0/8, and the policy's
50 ms buckets still give five per window there. R only goes down: an R above the flag would leave origins that
the user called fast enough.)

What is learned, per host (each a running average in which the newest download weighs `ALPHA`, or for the
verdicts `ALPHA_HELPED` and `ALPHA_NEEDLESS`):

- the first byte's delay: mean and mean deviation (Jacobson's RTT estimator), so the host's *normal* first
  byte is mean + 4·deviation;
- the origin's rate (a geometric mean: rates spread over orders of magnitude): over a whole body that never
  switched, or up to the switch;
- two verdict scores in [-1, 1], one for T switches and one for rate switches (`R` and `crowd`): +1 for a
  switch that *helped* (peers delivered bytes and the download ended sooner than the origin's own rate
  promised: its first byte plus size/rate), -1 for a *needless* one (peers delivered nothing, or the origin
  would have finished first). A helpful switch weighs twice a needless one: it saved seconds, where a needless
  one cost a lookup while the origin went on. `hint` and `died` are not our decisions and teach nothing; a
  download that was cut or abandoned teaches only its first byte.

The rules:

- T: `patient` = max(T0, normal first byte). With T switches needless (score s < 0) T = patient·(1 + |s|), so
  a far origin's normal latency no longer trips it; with them helpful (s > 0) T moves from `patient` towards
  `eager` = the normal first byte within [T0/4, T0] by s: a slow host is left as soon as it is late for *it*.
- W and R: with rate switches helpful (s > 0), W = W0·8^-s (down to W0/8): the switch comes sooner. With them
  needless (s < 0), W = W0·4^|s| (up to 4·W0) to ride out dips, and R moves towards half the host's usual
  rate (within [R0/4, R0]) by |s|, so a host that is steadily below R but never helped by peers stops being
  switched.

Robustness: one download moves a score at most half of the way to +1 or -1, so an origin that flaps between
helpful and needless switches keeps its settings between the two regimes' instead of jumping from bound to
bound. What a host taught fades with the time since its last download: each setting goes geometrically back
towards its flag, half of the way after `HALF_LIFE`, which also tries switching again on a host once judged
needless. Memory is bounded: at most `max_hosts` hosts, the least recently used forgotten first.

What a download's origin showed reaches this core through the download's own core: the transition policies it
makes (`observed_policy`) note the request time, the first byte, the origin bytes before the switch and the switch
itself on its `Probe`, which the shell hands to `Adaptive.learn` when the download ends.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict

from .transition import CROWD_CAUSE, R_CAUSE, T_CAUSE, TransitionPolicy, TransitionSettings

ALPHA = 0.3  # the newest download's weight in the first-byte and rate estimates
# ... and in the verdict scores, by verdict: a switch that helped saved seconds, a needless one cost a lookup (and a
# HEAD or a Range source) while the origin went on, so one helpful switch counts twice as much as one needless.
ALPHA_HELPED = 0.5
ALPHA_NEEDLESS = 0.25
HALF_LIFE = 600.0  # seconds after a host's last download for what it taught to count half
MAX_HOSTS = 1024
DEV_WEIGHT = 4.0  # normal first byte = mean + 4 · mean deviation (Jacobson's RTO)
MIN_RATE_BYTES = 64 * 1024  # a shorter body that never switched says little about a rate
MIN_RATE_SPAN = 0.1  # s; ... and neither do fewer seconds of bytes
T_BOUNDS = (0.25, 4.0)  # factors of the flag
R_BOUNDS = (0.25, 1.0)
W_BOUNDS = (0.125, 4.0)
RATE_SWITCHES = (R_CAUSE, CROWD_CAUSE)


@dataclasses.dataclass
class Probe:
    """What one download's transition policies saw (several: a late origin answer after T starts a new one). The
    download's core owns it and fills it through the policies it makes (`observed_policy`); the shell hands it to
    `Adaptive.learn` when the download is over."""

    started: float | None = None  # the request went to the origin
    first_byte: float | None = None  # its first byte (head) arrived
    seen: int = 0  # origin bytes before any switch (head and body)
    last_seen: float | None = None
    cause: str | None = None  # the policy's switch (T, R, hint, crowd); `died` is the core's, not seen here
    switched_at: float | None = None


def observed_policy(settings: TransitionSettings, probe: Probe) -> TransitionPolicy:
    """A transition policy by `settings` that reports what it sees to `probe`."""
    return _ProbedPolicy(probe, settings.first_byte_timeout, settings.min_rate, settings.rate_window,
                         settings.early_lookup)


class _ProbedPolicy(TransitionPolicy):
    def __init__(self, probe: Probe, *args: float) -> None:
        super().__init__(*args)
        self._probe = probe

    def start(self, now: float) -> None:
        super().start(now)
        if self._probe.started is None:  # the first policy's start is the request's; a later one, a late answer's
            self._probe.started = now

    def on_bytes(self, n: int, now: float) -> None:
        super().on_bytes(n, now)
        probe = self._probe
        if n > 0 and probe.first_byte is None:
            probe.first_byte = now  # also a late answer after a T switch: the host's delay, uncensored
        if n > 0 and self.cause is None and probe.cause is None:  # the origin's rate: before any switch only
            probe.seen += n
            probe.last_seen = now
        self._noted(now)

    def check(self, now: float) -> str | None:
        return self._noted(now, super().check(now))

    def hint(self, now: float) -> str | None:
        return self._noted(now, super().hint(now))

    def crowd(self, now: float) -> str | None:
        return self._noted(now, super().crowd(now))

    def _noted(self, now: float, cause: str | None = None) -> str | None:
        cause = cause or self.cause
        if cause is not None and self._probe.cause is None:
            self._probe.cause, self._probe.switched_at = cause, now
        return cause


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one download to a host went: its probe, plus what only its end knows."""

    probe: Probe
    ended: float
    cause: str | None  # the download's switch cause as recorded (`died` included), None: none
    size: int  # bytes the client got
    from_peers: int  # of them, from peers (not the origin's Range source)
    complete: bool  # the client got the whole response


@dataclasses.dataclass(frozen=True)
class Choice:
    """The settings for one download and why (shown in /_swarm/requests)."""

    settings: TransitionSettings
    why: str
    host_slow: bool = False  # its host was slow recently: the privacy rule lets it look up at once


def _slow(state: _Host, flags: TransitionSettings, now: float) -> bool:
    """Was the host slow in its downloads of the last `HALF_LIFE` s: a switch that helped, a rate under R, or a
    normal first byte later than T? (`discovery_rule`: such a host's next download may look up at once.)"""
    if state.fade(now) < 0.5:
        return False
    rate, first = state.rate(), state.normal_first_byte()
    return (state.t_score > 0 or state.r_score > 0 or (rate is not None and rate < flags.min_rate)
            or (first is not None and first > flags.first_byte_timeout))


@dataclasses.dataclass
class _Host:
    updated: float
    downloads: int = 0
    fb_mean: float | None = None
    fb_dev: float = 0.0
    log_rate: float | None = None
    t_score: float = 0.0
    r_score: float = 0.0
    helped: int = 0
    needless: int = 0

    def fade(self, now: float) -> float:
        """The weight of what was learned, 1 just after the last download, halving every HALF_LIFE."""
        return float(0.5 ** (max(0.0, now - self.updated) / HALF_LIFE))

    def normal_first_byte(self) -> float | None:
        return None if self.fb_mean is None else self.fb_mean + DEV_WEIGHT * self.fb_dev

    def rate(self) -> float | None:
        return None if self.log_rate is None else math.exp(self.log_rate)


def _ewma(old: float, new: float, alpha: float = ALPHA) -> float:
    return (1 - alpha) * old + alpha * new


def _clamp(value: float, flag: float, bounds: tuple[float, float]) -> float:
    return min(max(value, flag * bounds[0]), flag * bounds[1])


def _toward(flag: float, value: float, weight: float) -> float:
    """Geometric blend: `flag` at weight 0, `value` at 1 (T, R and W are scales)."""
    if flag <= 0 or value <= 0:
        return flag if weight < 1 else value
    return float(flag * (value / flag) ** weight)


class Adaptive:
    """Per origin host: the T/R/W of its next download (`choose`), learned from its last ones (`learn`)."""

    def __init__(self, flags: TransitionSettings, *, max_hosts: int = MAX_HOSTS) -> None:
        if max_hosts < 1:
            raise ValueError(f"max_hosts must be >= 1, got {max_hosts}")
        self.flags = flags
        self.max_hosts = max_hosts
        self._hosts: OrderedDict[str, _Host] = OrderedDict()

    def __len__(self) -> int:
        return len(self._hosts)

    def choose(self, host: str, now: float) -> Choice:
        """The settings for a download from `host` starting at `now`: the flags until it has a history."""
        state = self._hosts.get(host)
        if state is None:
            return Choice(self.flags, "flags (no history)")
        self._hosts.move_to_end(host)
        flags = self.flags
        t0, r0, w0 = flags.first_byte_timeout, flags.min_rate, flags.rate_window
        t, r, w = self._learned(state)
        weight = state.fade(now)
        t = _clamp(_toward(t0, t, weight), t0, T_BOUNDS)
        r = _clamp(_toward(r0, r, weight), r0, R_BOUNDS)
        w = _clamp(_toward(w0, w, weight), w0, W_BOUNDS)
        settings = dataclasses.replace(flags, first_byte_timeout=round(t, 4), min_rate=round(r),
                                       rate_window=round(w, 4))
        why = f"adaptive ({state.downloads} downloads, switches {state.helped} helped / {state.needless} needless)"
        return Choice(settings, why, _slow(state, flags, now))

    def learn(self, host: str, outcome: Outcome, now: float) -> str | None:
        """Take one finished download's outcome; returns the switch's verdict (`helped`, `needless`) or None."""
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = _Host(updated=now)
            while len(self._hosts) > self.max_hosts:
                self._hosts.popitem(last=False)
        else:
            self._hosts.move_to_end(host)
            # Decay the verdicts by the time since the last download: what is left decides the next ones.
            fade = state.fade(now)
            state.t_score *= fade
            state.r_score *= fade
        state.updated = max(state.updated, now)
        state.downloads += 1
        probe = outcome.probe
        if probe.started is not None and probe.first_byte is not None:
            self._first_byte(state, max(0.0, probe.first_byte - probe.started))
        elif probe.started is not None and outcome.cause == T_CAUSE and outcome.complete and not outcome.from_peers:
            # After a T switch the origin won the race for every byte, but its answer came while the swarm was
            # being started, where the policy does not watch: its first byte came before the end, an upper bound.
            self._first_byte(state, max(0.0, outcome.ended - probe.started))
        if not outcome.complete:
            return None
        rate = self._rate(probe, outcome)
        if rate is not None:
            state.log_rate = math.log(rate) if state.log_rate is None else _ewma(state.log_rate, math.log(rate))
        if outcome.cause not in (T_CAUSE, *RATE_SWITCHES):
            return None
        verdict = self._verdict(state, probe, outcome, rate)
        sign, alpha = (1.0, ALPHA_HELPED) if verdict == "helped" else (-1.0, ALPHA_NEEDLESS)
        if outcome.cause == T_CAUSE:
            state.t_score = _ewma(state.t_score, sign, alpha)
        else:
            state.r_score = _ewma(state.r_score, sign, alpha)
        if verdict == "helped":
            state.helped += 1
        else:
            state.needless += 1
        return verdict

    # -- internals -------------------------------------------------------------------------------------------

    def _learned(self, state: _Host) -> tuple[float, float, float]:
        """T, R, W from the host's estimates, before fading and bounds."""
        t0, r0, w0 = self.flags.first_byte_timeout, self.flags.min_rate, self.flags.rate_window
        normal = state.normal_first_byte()
        patient = t0 if normal is None else max(t0, normal)
        if state.t_score < 0:
            t = patient * (1 - state.t_score)
        else:
            eager = t0 if normal is None else min(max(normal, t0 * T_BOUNDS[0]), t0)
            t = patient + state.t_score * (eager - patient)
        s = state.r_score
        if s >= 0:
            return t, r0, w0 * (W_BOUNDS[0] ** s)
        rate = state.rate()
        low = r0 if rate is None else _clamp(rate / 2, r0, R_BOUNDS)
        return t, _toward(r0, low, -s), w0 * (W_BOUNDS[1] ** -s)

    @staticmethod
    def _first_byte(state: _Host, delay: float) -> None:
        if state.fb_mean is None:
            state.fb_mean, state.fb_dev = delay, delay / 4  # one sample: a quarter of it as its spread
            return
        state.fb_dev = _ewma(state.fb_dev, abs(delay - state.fb_mean))
        state.fb_mean = _ewma(state.fb_mean, delay)

    @staticmethod
    def _rate(probe: Probe, outcome: Outcome) -> float | None:
        """The origin's rate: up to the switch, or over the whole body of a download that never switched."""
        if probe.first_byte is None:
            return None
        if probe.switched_at is not None:
            span, nbytes = probe.switched_at - probe.first_byte, probe.seen
        elif outcome.cause is None and probe.last_seen is not None and probe.seen >= MIN_RATE_BYTES:
            span, nbytes = probe.last_seen - probe.first_byte, probe.seen
        else:
            return None
        return nbytes / span if span >= MIN_RATE_SPAN and nbytes > 0 else None

    @staticmethod
    def _verdict(state: _Host, probe: Probe, outcome: Outcome, rate: float | None) -> str:
        """`helped`: peers delivered and the download ended before the origin's own promise; else `needless`."""
        if outcome.from_peers <= 0:
            return "needless"
        first = probe.first_byte
        rate = rate if rate is not None else state.rate()
        if first is None or not rate:
            # A T switch whose origin the policy never heard from: it was late this time, whatever it usually
            # does, and peers delivered what it had not. No promise to hold the swarm to.
            return "helped"
        promised = first + outcome.size / rate
        return "helped" if outcome.ended < promised else "needless"
