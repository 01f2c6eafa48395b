"""The instruments that judge a run of bench/dht.py: process and machine CPU, event-loop lag, cyclic-GC pauses,
and the percentile every figure is read with."""

from __future__ import annotations

import asyncio
import math
import resource
import sys
import time
from array import array

LAG_TICK_S = 0.010


def log(message: str) -> None:
    print(f"[dht-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def system_busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat (to see other processes' CPU: noise)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def percentile(values, q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of a sequence; None when empty."""
    data = sorted(values)
    if not data:
        return None
    rank = max(1, math.ceil(q / 100 * len(data)))
    return data[rank - 1]


def r(value, digits=4):
    return None if value is None else round(value, digits)


class GcPauses:
    """Duration of every cyclic-GC collection while recording (gc.callbacks), by generation."""

    def __init__(self) -> None:
        self.recording = False
        self.pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self.recording:
            self.pauses[info["generation"]].append(time.perf_counter() - self._started)

    def summary(self) -> dict:
        return {
            f"gen{g}": {"count": len(v), "max_ms": r(max(v) * 1000 if v else 0.0, 2), "total_s": r(sum(v), 3)}
            for g, v in self.pauses.items()
        }


class LoopLagMonitor:
    """A ticker every LAG_TICK_S: how late each tick runs versus when it was scheduled."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lags = array("d")
        self.recording = False
        self._handle = None
        self._due = 0.0

    def start(self) -> None:
        self._due = self.loop.time() + LAG_TICK_S
        self._handle = self.loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        now = self.loop.time()
        if self.recording:
            self.lags.append(now - self._due)
        self._due = now + LAG_TICK_S
        self._handle = self.loop.call_at(self._due, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
