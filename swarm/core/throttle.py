"""Token buckets and throttle groups with an injected clock (sans-I/O).

Nothing here reads a clock or sleeps: every call takes `now` (seconds, any monotonic origin) and answers either
"yes, go" (`consume`) or "ask again in this many seconds" (`delay_for`); the asyncio shell turns the delay into
`loop.call_at`.

* `TokenBucket(rate, burst)` — `rate` bytes (or any unit) per second, at most `burst` banked. Rate 0 or None
  means unlimited. A request larger than the burst is allowed once the bucket holds a full burst and leaves the
  bucket in debt, so a big write is never starved and the long-run rate still holds.
* `ThrottleGroup(capacity, reserve)` — one bucket shared by all its members at `capacity - reserve` (a link's
  capacity minus a safety reserve, as the cluster mode's myRack / myDC / outside groups need). Members that
  are refused queue in arrival order and are served first come, first served, so neither an early greedy
  member nor a stream of small requests can starve the others or a large request. A queued member that does
  not come back within `patience` seconds of its turn loses its place, so a vanished member cannot block the
  group. `share(member)` is the member's weighted fair share, a hint for callers that split work.
* `Throttle(member, *limits)` — what one transfer consumes from: its own buckets plus every group it belongs
  to, taken all-or-nothing so that a refusal by one does not leak tokens from the others. Its own buckets are
  asked first, so a member held back by its own limit never holds a place in a group's queue.

Time going backwards (a caller mixing clocks) is ignored rather than minting or destroying tokens.

An upload cap is a link's rate, so what it counts is the wire (`on_the_wire`), and it banks a tenth of a second
(`rate_cap`), not a second: see `WIRE_OVERHEAD` and `RATE_BURST_SECONDS`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["TokenBucket", "ThrottleGroup", "Throttle", "RATE_BURST_SECONDS", "WIRE_OVERHEAD", "on_the_wire",
           "rate_cap"]

# A link carries each BLOCK's bytes with TCP/IP headers (20 + 32 with timestamps) and Ethernet's (14) per 1448-byte
# segment: 1514 / 1448 = 1.046 (QUIC's UDP, IP and packet headers over ~1,350-byte packets are about the same). An
# upload cap counted in payload let a pusher capped at its DC link less the 20 % reserve leave the one flow beside
# it 0.82 of that reserve at best (docs/cluster.md, "Scenario 2, shared links").
WIRE_OVERHEAD = 1514 / 1448
# The most an upload cap banks, in seconds of its rate: a second's worth, full at the start, let that pusher send
# 1.6 MB at once on top of its rate, and the TCP flow beside it backed off to 2.4 % of the link for the push.
RATE_BURST_SECONDS = 0.1

# Relative tolerance on token comparisons, so that waiting exactly `delay_for(n)` seconds is always enough
# despite float rounding in `deficit / rate * rate` (relative to the largest amount involved: repaying the debt
# of a large take rounds at the scale of that take).
_EPSILON = 1e-9


def _is_unlimited(rate: float | None) -> bool:
    return rate is None or rate == 0


def on_the_wire(payload: int) -> int:
    """The bytes `payload` bytes of BLOCKs take on a link (`WIRE_OVERHEAD`): what an upload cap is charged."""
    return math.ceil(payload * WIRE_OVERHEAD)


def rate_cap(rate: float | None) -> TokenBucket:
    """An upload cap of `rate` bytes/s on the wire (None or 0: unlimited), banking `RATE_BURST_SECONDS` of it."""
    return TokenBucket(rate, rate * RATE_BURST_SECONDS if rate else None)


class TokenBucket:
    """A token bucket: `rate` tokens/second, holding at most `burst`; starts full."""

    def __init__(self, rate: float | None, burst: float | None = None) -> None:
        self._rate: float | None = None
        self._burst = 0.0
        self._tokens = 0.0
        self._last: float | None = None
        self._largest_take = 0.0
        self._configure(rate, burst)
        self._tokens = self._burst

    # -- configuration ------------------------------------------------------------------------------------

    @property
    def rate(self) -> float | None:
        """Tokens per second; None when unlimited."""
        return self._rate

    @property
    def burst(self) -> float:
        return self._burst

    @property
    def unlimited(self) -> bool:
        return self._rate is None

    def set_rate(self, rate: float | None, now: float, burst: float | None = None) -> None:
        """Change the rate (and burst) from `now` on; tokens earned so far at the old rate are kept (capped)."""
        self._refill(now)
        was_unlimited = self.unlimited
        self._configure(rate, burst)
        # leaving "unlimited" starts with a full bucket, like a new one; otherwise keep what was banked
        self._tokens = self._burst if was_unlimited else min(self._tokens, self._burst)

    def _configure(self, rate: float | None, burst: float | None) -> None:
        if rate is not None and rate < 0:
            raise ValueError(f"rate must be >= 0 or None, not {rate}")
        if _is_unlimited(rate):
            self._rate, self._burst = None, 0.0
            return
        assert rate is not None
        burst = rate if burst is None else burst  # one second's worth by default
        if burst <= 0:
            raise ValueError(f"burst must be > 0, not {burst}")
        self._rate, self._burst = float(rate), float(burst)

    # -- use ----------------------------------------------------------------------------------------------

    def tokens(self, now: float) -> float:
        """Tokens available at `now` (negative while in debt)."""
        self._refill(now)
        return self._tokens if not self.unlimited else float("inf")

    def can_consume(self, n: float, now: float) -> bool:
        self._refill(now)
        if self.unlimited:
            return True
        need = min(n, self._burst)
        return self._tokens >= need - _EPSILON * max(1.0, need, self._largest_take)

    def consume(self, n: float, now: float) -> bool:
        """Take `n` tokens at `now` if available; False (and nothing taken) otherwise."""
        if not self.can_consume(n, now):
            return False
        self.take(n, now)
        return True

    def take(self, n: float, now: float) -> None:
        """Take `n` tokens unconditionally (may go into debt); for all-or-nothing use across several buckets."""
        self._refill(now)
        if not self.unlimited:
            self._tokens -= n
            self._largest_take = max(self._largest_take, n)

    def delay_for(self, n: float, now: float) -> float:
        """Seconds from `now` until `consume(n)` would succeed; 0.0 if it would now."""
        self._refill(now)
        if self.unlimited:
            return 0.0
        assert self._rate is not None
        deficit = min(n, self._burst) - self._tokens
        return max(0.0, deficit / self._rate)

    def _refill(self, now: float) -> None:
        if self._last is None or now > self._last:
            if self._last is not None and self._rate is not None:
                self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now

    def __repr__(self) -> str:
        if self.unlimited:
            return "TokenBucket(unlimited)"
        return f"TokenBucket(rate={self._rate}, burst={self._burst}, tokens={self._tokens:.1f})"


class Throttle:
    """What one member's transfers consume from: its own buckets and its groups, all-or-nothing."""

    def __init__(self, member: Hashable, *limits: TokenBucket | ThrottleGroup) -> None:
        self.member = member
        self._buckets = [limit for limit in limits if isinstance(limit, TokenBucket)]
        self._groups = [limit for limit in limits if isinstance(limit, ThrottleGroup)]

    def add(self, limit: TokenBucket | ThrottleGroup) -> None:
        if isinstance(limit, TokenBucket):
            self._buckets.append(limit)
        else:
            self._groups.append(limit)

    def consume(self, n: float, now: float) -> bool:
        """Take `n` from every limit if all can supply it at `now`; otherwise take nothing."""
        # own buckets first (short-circuit): a member held back by its own limit must not queue in a group
        if not all(bucket.can_consume(n, now) for bucket in self._buckets):
            return False
        if not all(group.can_consume(self.member, n, now) for group in self._groups):
            return False
        for bucket in self._buckets:
            bucket.take(n, now)
        for group in self._groups:
            group.take(self.member, n, now)
        return True

    def delay_for(self, n: float, now: float) -> float:
        """Seconds until every limit could supply `n` (the slowest one decides)."""
        delays = [bucket.delay_for(n, now) for bucket in self._buckets]
        delays += [group.delay_for(self.member, n, now) for group in self._groups]
        return max(delays, default=0.0)


@dataclass
class _Waiter:
    need: float
    #: when the member was told it could go; it loses its place `patience` seconds after that
    due: float


class ThrottleGroup:
    """A rate shared by members: one bucket at `capacity - reserve`, served first come, first served.

    `capacity` None or 0 means unlimited (then `reserve` is ignored and nobody ever waits).
    """

    def __init__(
        self,
        capacity: float | None,
        reserve: float = 0.0,
        burst_seconds: float = 1.0,
        patience: float = 1.0,
        name: str = "",
    ) -> None:
        if burst_seconds <= 0 or patience <= 0:
            raise ValueError("burst_seconds and patience must be > 0")
        self.name = name
        self._burst_seconds = burst_seconds
        self._patience = patience
        self._weights: dict[Hashable, float] = {}
        self._waiting: dict[Hashable, _Waiter] = {}  # insertion order is the queue
        self._reserve = reserve
        rate = self._rate_for(capacity, reserve)
        self.bucket = TokenBucket(rate, None if rate is None else rate * burst_seconds)

    @property
    def rate(self) -> float | None:
        """The shared rate: capacity minus reserve; None when unlimited."""
        return self.bucket.rate

    def set_capacity(self, capacity: float | None, now: float, reserve: float | None = None) -> None:
        """Change the link capacity (and reserve) at `now`; e.g. when CPU idle drops or a lab measures the link."""
        reserve = self._reserve if reserve is None else reserve
        rate = self._rate_for(capacity, reserve)
        self._reserve = reserve
        self.bucket.set_rate(rate, now, None if rate is None else rate * self._burst_seconds)

    @staticmethod
    def _rate_for(capacity: float | None, reserve: float) -> float | None:
        if reserve < 0:
            raise ValueError("reserve must be >= 0")
        if _is_unlimited(capacity):
            return None
        assert capacity is not None
        if reserve >= capacity:
            # a rate of 0 would read as "unlimited": refuse rather than silently lift the limit
            raise ValueError(f"reserve {reserve} leaves nothing of capacity {capacity}")
        return capacity - reserve

    # -- membership ---------------------------------------------------------------------------------------

    def join(self, member: Hashable, weight: float = 1.0, limit: TokenBucket | None = None) -> Throttle:
        """Add `member`; returns the `Throttle` it must consume from (its own `limit` too, if given)."""
        if weight <= 0:
            raise ValueError("weight must be > 0")
        self._weights[member] = weight
        return Throttle(member, limit, self) if limit is not None else Throttle(member, self)

    def leave(self, member: Hashable) -> None:
        self._weights.pop(member, None)
        self._waiting.pop(member, None)

    @property
    def members(self) -> list[Hashable]:
        return list(self._weights)

    @property
    def queue(self) -> list[Hashable]:
        """Members waiting for tokens, first served first."""
        return list(self._waiting)

    def share(self, member: Hashable) -> float | None:
        """`member`'s weighted fair share of the rate (None when unlimited)."""
        if self.rate is None:
            return None
        return self.rate * self._weights[member] / sum(self._weights.values())

    # -- consumption (through a Throttle) -----------------------------------------------------------------

    def can_consume(self, member: Hashable, n: float, now: float) -> bool:
        """May `member` take `n` now? If not, it keeps (or gets) a place in the queue."""
        if self.bucket.unlimited:
            return True
        self._forget_absent(now)
        head = next(iter(self._waiting), member)
        if head == member and self.bucket.can_consume(n, now):
            return True
        self.delay_for(member, n, now)  # queue it and tell it when to come back
        return False

    def take(self, member: Hashable, n: float, now: float) -> None:
        self._waiting.pop(member, None)
        self.bucket.take(n, now)

    def delay_for(self, member: Hashable, n: float, now: float) -> float:
        """Seconds until `member`'s turn, counting what the members queued before it need."""
        if self.bucket.unlimited:
            return 0.0
        assert self.bucket.rate is not None
        self._forget_absent(now)
        ahead = 0.0
        for other, queued in self._waiting.items():
            if other == member:
                break
            ahead += min(queued.need, self.bucket.burst)
        need = min(n, self.bucket.burst)
        delay = max(0.0, (ahead + need - self.bucket.tokens(now)) / self.bucket.rate)
        waiter = self._waiting.get(member)
        if waiter is None:
            self._waiting[member] = _Waiter(need=n, due=now + delay)
        else:
            waiter.need, waiter.due = n, now + delay
        return delay

    def _forget_absent(self, now: float) -> None:
        """Drop queued members that did not come back in time (stopped, crashed, or served elsewhere)."""
        late = [m for m, waiter in self._waiting.items() if now > waiter.due + self._patience]
        for member in late:
            del self._waiting[member]

    def __repr__(self) -> str:
        return f"ThrottleGroup({self.name!r}, rate={self.rate}, members={len(self._weights)})"
