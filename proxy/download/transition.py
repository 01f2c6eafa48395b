"""When to give up on the origin and switch to the swarm (Pack's T/R/W rule, sans-I/O).

Pack's thesis (docs/ARCHITECTURE.md "Transition"): switch when no byte of any kind — header or body — has
arrived T seconds after the request was sent (cause `"T"`), or when, from the first byte on, the
rate over the last W seconds falls below R bytes/s (cause `"R"`). The rate check starts only once
W seconds have passed since the first byte, so an R switch happens at the earliest at
first_byte + W. A server plugin may also ask us to switch (cause `"hint"`).

The crowd rule (ours, not Pack's): waiting W on a slow origin is what a download pays when nobody else has
the file. When the origin is under R on average `early_lookup` seconds after its first byte, the shell
looks the URL up at once, still reading the origin; if the swarm already holds a trusted copy it calls
`crowd(now)`, which switches (cause `"crowd"`) as long as the origin is still under R since its first
byte (over at most the last W). In a flash crowd every newcomer after the first copies leaves a slow
origin after `early_lookup` plus one lookup instead of W; a download nobody else has waits W as before.

The object never reads the clock: every call gets `now` (float seconds, any monotonic origin), and
`next_deadline()` says when to call `check()` again if no byte arrives, so the asyncio shell arms
one `loop.call_at` instead of polling. A cause, once recorded, is sticky.

Window semantics, precisely. Bytes that arrived at time s count towards the window of every
`now` in the closed interval [s, s + W], i.e. the window is [now − W, now] with both ends in. The
check at `now` is due when

    (no byte yet  and  now >= start + T)                                   -> "T"
    (first byte   and  now >= first + W  and  bytes in window < R * W)    -> "R"

Consequences, worked out (defaults T=0.75, R=160 000, W=2): headers of 300 bytes at 0.5 and then
nothing switch with `R` at exactly 2.5 (the 300 bytes are still in the window but 150 B/s < R). A
first read of ≥ R·W = 320 000 bytes at 0.5 and then nothing still counts at 2.5 (closed window),
so the switch is due at the first float *after* 2.5 — `next_deadline()` returns exactly that,
`math.nextafter(2.5, inf)`, so the deadline is attained and never late.

Memory stays bounded: arrivals are coalesced into buckets at most `bucket_width` wide (50 ms, or
W/256 for a very long W) stamped with the time of their newest byte, and buckets that left the
window are dropped. Stamping with the newest byte means a byte can count up to one bucket width
longer than it would unbucketed — so bucketing can delay an R switch by at most that width, never
bring one forward.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

T_CAUSE = "T"
R_CAUSE = "R"
HINT_CAUSE = "hint"
CROWD_CAUSE = "crowd"
DIED_CAUSE = "died"  # not the policy's: the origin broke off mid-body (the download's core records it)
# Not the policy's either: independent others fetch the same version from the origin, so the download waits for
# their vouches instead of loading the origin too (the download's core records it).
FETCHING_CAUSE = "fetching"

# The defaults of T, R, W and the early lookup: the command line's defaults are these (proxy.config).
DEFAULT_FIRST_BYTE_TIMEOUT = 0.75
DEFAULT_MIN_RATE = 160_000.0
DEFAULT_RATE_WINDOW = 2.0
# 0.25 s: `lab sweep --param early` put it ahead of 0.5 s twice (1.80 against 1.99 s at 5/s; 0.805 against 1.03 s
# at 10/s once lookups answered within 0.3 s): with a trusted copy in hand, the wait was judging the origin.
DEFAULT_EARLY_LOOKUP = 0.25

BUCKET_SECONDS = 0.05
MAX_BUCKETS = 256  # per window; a longer W widens the buckets instead of growing the deque


class _Bucket:
    """Arrivals coalesced from `opened` on; they count as if all had come at `newest`."""

    __slots__ = ("opened", "newest", "nbytes")

    def __init__(self, now: float, nbytes: int) -> None:
        self.opened = now
        self.newest = now
        self.nbytes = nbytes


@dataclasses.dataclass(frozen=True)
class TransitionSettings:
    """T, R, W and the early lookup, as configured; `policy()` makes one download's policy."""

    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT
    min_rate: float = DEFAULT_MIN_RATE
    rate_window: float = DEFAULT_RATE_WINDOW
    early_lookup: float = DEFAULT_EARLY_LOOKUP

    def policy(self) -> TransitionPolicy:
        return TransitionPolicy(self.first_byte_timeout, self.min_rate, self.rate_window, self.early_lookup)


class TransitionPolicy:
    """Decides origin → swarm from (bytes received, now); see the module docstring for the rule."""

    def __init__(self, first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT, min_rate: float = DEFAULT_MIN_RATE,
                 rate_window: float = DEFAULT_RATE_WINDOW, early_lookup: float = DEFAULT_EARLY_LOOKUP):
        # isfinite() also rejects NaN, which would make every later comparison silently False.
        if not (math.isfinite(first_byte_timeout) and first_byte_timeout > 0):
            raise ValueError(
                f"first_byte_timeout (T) must be a finite number of seconds > 0, got {first_byte_timeout!r}")
        if not (math.isfinite(min_rate) and min_rate >= 0):
            raise ValueError(f"min_rate (R) must be a finite number of bytes/s >= 0, got {min_rate!r}")
        if not (math.isfinite(rate_window) and rate_window > 0):
            raise ValueError(f"rate_window (W) must be a finite number of seconds > 0, got {rate_window!r}")
        if not (math.isfinite(early_lookup) and early_lookup >= 0):
            raise ValueError(f"early_lookup must be a finite number of seconds >= 0 (0: off), got {early_lookup!r}")
        self.first_byte_timeout = float(first_byte_timeout)
        self.early_lookup = float(early_lookup)
        self.min_rate = float(min_rate)
        self.rate_window = float(rate_window)
        self.bucket_width = max(BUCKET_SECONDS, self.rate_window / MAX_BUCKETS)
        # Bytes needed in a window to stay on the origin; R = 0 makes it 0 and "< 0" never holds.
        self._threshold = self.min_rate * self.rate_window

        self._start: float | None = None
        self._t_deadline: float | None = None  # start + T
        self._first: float | None = None  # time of the first byte
        self._rate_from: float | None = None  # first + W: the R check applies from here on
        self._now = -math.inf  # latest time seen; time never runs backwards inside the policy
        # Oldest first; `_in_buckets` is their byte total.
        self._buckets: deque[_Bucket] = deque()
        self._in_buckets = 0
        self._cause: str | None = None
        self._finished = False

    # -- inputs -------------------------------------------------------------------------------------

    def start(self, now: float) -> None:
        """The request has been sent to the origin; the T clock starts."""
        if self._start is not None:
            raise RuntimeError("TransitionPolicy.start() called twice; use a new policy per download")
        self._start = now
        self._t_deadline = now + self.first_byte_timeout
        self._now = now

    def on_bytes(self, n: int, now: float) -> None:
        """`n` bytes (header or body) arrived at `now`. Zero bytes is not a first byte.

        A switch that fell due before these bytes (the deadline timer fired late, or the caller
        only checks on arrival) is recorded first: late bytes do not undo a due switch. During a
        gap without bytes "due" can only turn on, never off, so checking at `now` is enough.
        """
        if n < 0:
            raise ValueError(f"on_bytes: byte count must be >= 0, got {n}")
        if self._start is None:
            self.start(now)  # bytes without start(): treat the first arrival as the request time
        now = self._advance(now)
        if self._cause is not None or self._finished:
            return
        self._evaluate(now)
        if self._cause is not None or n == 0:
            return
        if self._first is None:
            self._first = now
            self._rate_from = now + self.rate_window
        last = self._buckets[-1] if self._buckets else None
        if last is not None and now - last.opened < self.bucket_width:
            last.newest = now
            last.nbytes += n
        else:
            self._buckets.append(_Bucket(now, n))
        self._in_buckets += n

    def hint(self, now: float) -> str | None:
        """The server plugin asked us to leave the origin. Returns the (possibly earlier) cause.

        A T or R switch already due at `now` keeps its own cause: it happened first.
        """
        if self._start is None:
            self.start(now)
        now = self._advance(now)
        if self._cause is None and not self._finished:
            self._evaluate(now)
            if self._cause is None:
                self._cause = HINT_CAUSE
        return self._cause

    def crowd(self, now: float) -> str | None:
        """The swarm holds a trusted copy (an early lookup found one). Switch with `"crowd"` if the origin is
        slow: under R since its first byte, over at most the last W, and for at least `early_lookup` s.
        Returns the cause now recorded (a T or R switch already due keeps its own), or None: stay."""
        if self._start is None or self._first is None or self._finished:
            return self._cause
        now = self._advance(now)
        if self._cause is None:
            self._evaluate(now)
        if self._cause is not None:
            return self._cause
        # `now >= first + early_lookup`, as `lookup_due_at` computes it: `now - first` can fall a rounding short
        # at the very point the early lookup's timer fires, and the download then stayed on the origin until R.
        if self.early_lookup > 0 and now >= self._first + self.early_lookup and self._under_r(now):
            self._cause = CROWD_CAUSE
        return self._cause

    def lookup_due_at(self) -> float | None:
        """When the shell should look the URL up early (first byte + `early_lookup`), or None: not (yet) —
        before the first byte (T covers that), after a switch or finish(), with early lookups off, or when
        the early point is not before the R check anyway."""
        if self._first is None or self._cause is not None or self._finished or self.early_lookup <= 0 \
                or self.early_lookup >= self.rate_window:
            return None
        return self._first + self.early_lookup

    def slow_so_far(self, now: float) -> bool:
        """Is the origin under R since its first byte (over at most the last W)? Worth an early lookup."""
        if self._first is None or self._finished or self._cause is not None:
            return False
        return self._under_r(self._advance(now))

    def slow_to_the_end(self, now: float) -> bool:
        """At the origin's last byte: did it stay under R (over at most the last W) for a download that lasted at
        least T past its first byte? One that ends before W is otherwise never judged at R: a crowd's first
        fetcher, fast at its early point and slowed by the crowd after it, took 1.3 s for 100 KB and was kept
        private as a fast download (T keeps a fast origin's small files out: they end within it)."""
        if self._first is None or self._finished or self._cause is not None \
                or now - self._first < self.first_byte_timeout:
            return False
        return self._under_r(self._advance(now))

    def finish(self) -> None:
        """The origin delivered everything: no switch from now on (a recorded cause stays)."""
        self._finished = True
        self._buckets.clear()
        self._in_buckets = 0

    # -- outputs ------------------------------------------------------------------------------------

    @property
    def cause(self) -> str | None:
        """`"T"`, `"R"`, `"hint"`, `"crowd"` once a switch was recorded, else None."""
        return self._cause

    @property
    def first_byte_at(self) -> float | None:
        return self._first

    def check(self, now: float) -> str | None:
        """The switch cause if one is due at `now` (sticky once recorded), else None."""
        if self._start is None:
            return None
        now = self._advance(now)
        if self._cause is None and not self._finished:
            self._evaluate(now)
        return self._cause

    def next_deadline(self) -> float | None:
        """The earliest time at which `check()` could change its answer if no byte arrives.

        Exact: `check(next_deadline())` switches unless bytes arrive first. None before start,
        after a switch, after finish(), or when nothing can switch any more (R = 0 after the
        first byte). May lie in the past if the caller has not checked for a while.
        """
        if self._start is None or self._cause is not None or self._finished:
            return None
        if self._first is None:
            return self._t_deadline
        assert self._rate_from is not None
        rate_from = self._rate_from
        # With no new bytes the window total only shrinks, one bucket expiry at a time: find the
        # first moment it is below the threshold and at or after rate_from.
        remaining = self._in_buckets
        pending = []
        for bucket in self._buckets:
            expiry = bucket.newest + self.rate_window
            if expiry < rate_from:
                remaining -= bucket.nbytes  # already gone when the R check starts
            else:
                pending.append((expiry, bucket.nbytes))
        if remaining < self._threshold:
            return rate_from
        for expiry, nbytes in pending:
            remaining -= nbytes
            if remaining < self._threshold:
                # The bucket still counts at `expiry` (closed window); it is gone just after.
                return math.nextafter(expiry, math.inf)
        return None  # only reachable with R = 0: an empty window is not below 0

    # -- internals ----------------------------------------------------------------------------------

    def _advance(self, now: float) -> float:
        # A caller's clock that steps back (two sources, float noise) must not resurrect bytes
        # or re-open a window; we stay at the latest time seen.
        if now > self._now:
            self._now = now
        return self._now

    def _evaluate(self, now: float) -> None:
        if self._first is None:
            assert self._t_deadline is not None
            if now >= self._t_deadline:
                self._cause = T_CAUSE
            return
        self._expire(now)
        assert self._rate_from is not None
        if now >= self._rate_from and self._in_buckets < self._threshold:
            self._cause = R_CAUSE

    def _expire(self, now: float) -> None:
        # Buckets whose window ended before `now` never count again (time only moves forward).
        buckets = self._buckets
        while buckets and now > buckets[0].newest + self.rate_window:
            self._in_buckets -= buckets.popleft().nbytes

    def _under_r(self, now: float) -> bool:
        """Under R on average since the first byte, over at most the last W (after the first byte only)."""
        assert self._first is not None
        self._expire(now)
        elapsed = min(now - self._first, self.rate_window)
        return elapsed > 0 and self._in_buckets < self.min_rate * elapsed
