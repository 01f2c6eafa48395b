"""Admission control for incoming requests: per-source token buckets and write tokens. Pure; time is `now`.

* `RateLimiter` — one token bucket per source key (an IP address by default). A flood from one address drains
  only its own bucket, so the node keeps answering everyone else. The table of buckets is an LRU bounded by
  `max_sources`, so spoofed source addresses cannot grow memory without bound.
* `WriteTokens` — BitTorrent's BEP 5 idea: a lookup reply hands the requester a token bound to its IP address,
  and a write (ANNOUNCE / PUT_RECORD) must present it. A sender forging its source address never sees the reply,
  so it cannot charge writes to someone else's per-source quota. Secrets rotate; the previous one stays valid so
  a token lives between one and two rotation periods.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections import OrderedDict
from dataclasses import dataclass

from dht.wire import TOKEN_BYTES


@dataclass
class TokenBucket:
    rate: float  # tokens per second
    burst: float  # bucket size
    tokens: float
    updated: float

    def allow(self, now: float, cost: float = 1.0) -> bool:
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
        self.updated = now
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False


class RateLimiter:
    """Token bucket per source key, LRU-bounded."""

    def __init__(self, rate: float, burst: float, max_sources: int = 10_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_sources = max_sources
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def allow(self, source: str, now: float, cost: float = 1.0) -> bool:
        bucket = self._buckets.get(source)
        if bucket is None:
            bucket = TokenBucket(self.rate, self.burst, self.burst, now)
            self._buckets[source] = bucket
            if len(self._buckets) > self.max_sources:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(source)
        return bucket.allow(now, cost)

    def __len__(self) -> int:
        return len(self._buckets)


class WriteTokens:
    """Issue and check short tokens bound to a requester's IP address."""

    def __init__(self, now: float, rotate_every_s: float = 300.0, secret: bytes | None = None) -> None:
        self.rotate_every_s = rotate_every_s
        self._current = secret or os.urandom(16)
        self._previous = self._current
        self._rotated_at = now

    def _token(self, secret: bytes, ip: str) -> bytes:
        return hmac.new(secret, ip.encode(), hashlib.sha256).digest()[:TOKEN_BYTES]

    def issue(self, ip: str, now: float) -> bytes:
        self.maybe_rotate(now)
        return self._token(self._current, ip)

    def check(self, ip: str, token: bytes, now: float) -> bool:
        self.maybe_rotate(now)
        return any(hmac.compare_digest(token, self._token(s, ip)) for s in (self._current, self._previous))

    def maybe_rotate(self, now: float) -> None:
        if now - self._rotated_at >= self.rotate_every_s:
            self._previous, self._current = self._current, os.urandom(16)
            self._rotated_at = now
