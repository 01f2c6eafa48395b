"""Throttle groups of one agent (sans-I/O): myRack / myDC / outside, highest level first, and the CPU rule.

Each level's upload is capped at its link's capacity minus a reserve (`RESERVE`, 20 %: room for the traffic that
is not ours). When the host's own capacity is given too, it is handed out **highest level first**: the
outside (the scarcest, most shared link) takes what it needs up to its cap, then the DC, then the rack; what a
level does not use (its measured rate, `RateMeter`) flows down to the next. The plan is recomputed every
`RECOMPUTE_EVERY` seconds from measured rates (`Planner`).

Tekel's CPU rule: a host whose CPU is less than `CPU_IDLE_THRESHOLD` (20 %) idle throttles every level further,
by idle / 20 %, so that a transfer never takes the host from its real work. Never below `MIN_SHARE` of the limit:
`swarm.core.throttle.TokenBucket` reads a rate of 0 as "unlimited", and a transfer must keep moving.

The limits go into `swarm.core.throttle.ThrottleGroup`s (one per level), which the transport shell consumes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cluster.overlay import Level

__all__ = ["CPU_IDLE_THRESHOLD", "Capacities", "MIN_SHARE", "Planner", "RECOMPUTE_EVERY", "RESERVE", "RateMeter",
           "cpu_factor", "upload_limits"]

RESERVE = 0.20  # of each link's capacity, left for others (--reserve)
CPU_IDLE_THRESHOLD = 0.20  # below this idle fraction the throttle scales by idle / threshold (Tekel)
MIN_SHARE = 0.05  # the least fraction of a limit ever granted (see above)
RECOMPUTE_EVERY = 2.0  # seconds between plans
RATE_WINDOW = 4.0  # seconds over which measured rates are averaged

HIGHEST_FIRST = (Level.OUTSIDE, Level.DC, Level.RACK)


@dataclass(frozen=True)
class Capacities:
    """Link capacities in bytes/s (None: not limited): the links each level crosses, and the host's own."""

    rack: float | None = None
    dc: float | None = None
    outside: float | None = None
    host: float | None = None

    def of(self, level: Level) -> float | None:
        return {Level.RACK: self.rack, Level.DC: self.dc, Level.OUTSIDE: self.outside}[level]


def cpu_factor(idle: float | None, threshold: float = CPU_IDLE_THRESHOLD) -> float:
    """1 when the CPU is idle enough (or unknown), else idle / threshold, never below MIN_SHARE."""
    if idle is None or idle >= threshold:
        return 1.0
    return max(MIN_SHARE, idle / threshold)


def _least(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def upload_limits(caps: Capacities, *, reserve: float = RESERVE, cpu_idle: float | None = None,
                  measured: Mapping[Level, float] | None = None) -> dict[Level, float | None]:
    """Bytes/s each level may upload now (None: unlimited)."""
    if not 0 <= reserve < 1:
        raise ValueError("reserve must be in [0, 1)")
    measured = measured or {}
    factor = cpu_factor(cpu_idle)
    budget = None if caps.host is None else caps.host * (1 - reserve)
    floor = None if budget is None else budget * MIN_SHARE
    limits: dict[Level, float | None] = {}
    for level in HIGHEST_FIRST:
        link = caps.of(level)
        limit = _least(None if link is None else link * (1 - reserve), budget)
        if limit is not None and floor is not None:
            limit = max(limit, floor)
        if budget is not None:
            budget = max(0.0, budget - min(measured.get(level, 0.0), limit if limit is not None else budget))
        limits[level] = None if limit is None else max(limit * factor, limit * MIN_SHARE)
    return limits


class RateMeter:
    """Bytes per level over the last RATE_WINDOW seconds, from `on_bytes(level, n, now)`."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self.window = window
        self.totals: dict[Level, int] = {level: 0 for level in Level}
        self._marks: list[tuple[float, dict[Level, int]]] = []

    def on_bytes(self, level: Level, n: int) -> None:
        self.totals[level] += n

    def rates(self, now: float) -> dict[Level, float]:
        """Rates since the oldest mark still inside the window (a mark is taken at every call)."""
        self._marks.append((now, dict(self.totals)))
        while len(self._marks) > 1 and now - self._marks[1][0] >= self.window:
            self._marks.pop(0)
        then, old = self._marks[0]
        span = now - then
        if span <= 0:
            return {level: 0.0 for level in Level}
        return {level: (self.totals[level] - old[level]) / span for level in Level}


class Planner:
    """When to recompute (`due(now)`) and what (`plan(now, cpu_idle)`), from a `RateMeter`'s rates."""

    def __init__(self, caps: Capacities, *, reserve: float = RESERVE, every: float = RECOMPUTE_EVERY) -> None:
        self.caps, self.reserve, self.every = caps, reserve, every
        self.meter = RateMeter()
        self.next_at = 0.0
        self.limits: dict[Level, float | None] = upload_limits(caps, reserve=reserve)

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def plan(self, now: float, cpu_idle: float | None = None) -> dict[Level, float | None]:
        self.next_at = now + self.every
        self.limits = upload_limits(self.caps, reserve=self.reserve, cpu_idle=cpu_idle,
                                    measured=self.meter.rates(now))
        return self.limits


def cpu_idle_between(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Idle fraction between two (idle, total) jiffy samples of /proc/stat's "cpu" line (read by the shell)."""
    idle, total = after[0] - before[0], after[1] - before[1]
    return None if total <= 0 else idle / total


def parse_proc_stat(text: str) -> tuple[int, int] | None:
    """(idle + iowait, total) jiffies from /proc/stat's first line; None if it does not look like one."""
    line = text.split("\n", 1)[0].split()
    if not line or line[0] != "cpu" or len(line) < 6:
        return None
    values = [int(v) for v in line[1:] if v.isdigit()]
    return values[3] + values[4], sum(values)
