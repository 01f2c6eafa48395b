"""What a stranger may make this node do a minute, counted per source and in all: the sliding window the
connect-back limiter (`swarm.core.reach`) and the hole-punch limiter (`swarm.core.punch`) share, and the one rule
for which requesters they act for. Sans-I/O: time comes in as `now`."""

from __future__ import annotations

from collections import Counter, deque

import addresses

__all__ = ["SourceWindow", "refusal"]


def refusal(address: str | None, *, allow_private: bool, purpose: str) -> str | None:
    """Why a stranger's request from (or naming) `address` is not acted on: not an IP, special-purpose, or not public
    (unless `allow_private`: tests and LAN labs). `purpose` ends the last reason ("connect-backs are for …")."""
    source, _network = addresses.source(address)  # (a public IPv6 address: its /64)
    kind = addresses.kind_of(address)
    if source is None or kind is None:
        return f"{address} is not an IP address"
    if kind is addresses.Kind.SPECIAL:
        return f"{source} is a special-purpose address"
    if kind is not addresses.Kind.PUBLIC and not allow_private:
        return f"{source} is not a public address: {purpose}"
    return None


class SourceWindow:
    """Admissions within the last `window` seconds, by source (`addresses.source`) and in all."""

    def __init__(self, *, per_source: int, per_window: int, window: float) -> None:
        if min(per_source, per_window) < 1 or window <= 0:
            raise ValueError("limits must be >= 1 and the window > 0")
        self.per_source, self.per_window, self.window = per_source, per_window, window
        self._admitted: deque[tuple[float, str]] = deque()  # (when, source) of the admissions within the window
        self._by_source: Counter[str] = Counter()

    def total(self, now: float) -> int:
        """Admissions within the window ending `now` (older ones are forgotten here)."""
        while self._admitted and self._admitted[0][0] <= now - self.window:
            _when, source = self._admitted.popleft()
            self._by_source[source] -= 1
            if not self._by_source[source]:
                del self._by_source[source]
        return len(self._admitted)

    def of(self, source: str) -> int:
        """Admissions of `source` within the window (as of the last `total`)."""
        return self._by_source[source]

    def admit(self, source: str, now: float) -> None:
        self._admitted.append((now, source))
        self._by_source[source] += 1
