"""Readings of a shaped link's counters during a push (`bench.cluster_netns`, the cluster labs): bytes each way
sampled in a thread, the link's use second by second, and how much a counter (a queue's drops) grew each second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bench.netns import READ_TIMEOUT

__all__ = ["SAMPLE_EVERY", "LinkSampler", "counts_per_second", "link_phases", "share_between"]

SAMPLE_EVERY = 0.2  # s between two readings of the link counters (a rate measurement, not a wait)


class LinkSampler:
    """Readings (monotonic time, bytes sent into a rack, or out of it with `upward`) every SAMPLE_EVERY s, in a
    thread, until `stop()`."""

    def __init__(self, topology: Any, rack: int, upward: bool = False,
                 read: Callable[[int], int] | None = None) -> None:
        """`read`: another counter than the rack uplink's (called with `rack`: the DC link's ignores it)."""
        self.topology, self.rack = topology, rack
        self.read = read or (topology.uplink_bytes if upward else topology.downlink_bytes)
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.read(self.rack)))
            self._stop.wait(SAMPLE_EVERY)  # the sampling period of a rate measurement

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=READ_TIMEOUT)


def share_between(samples: list[tuple[float, int]], start: float, end: float) -> tuple[int, float]:
    """Bytes and seconds between the first reading at or after `start` and the last at or before `end`."""
    inside = [(t, n) for t, n in samples if start <= t <= end]
    if len(inside) < 2:
        return 0, 0.0
    return inside[-1][1] - inside[0][1], inside[-1][0] - inside[0][0]


def _inside(samples: list[tuple[float, int]], start: float, end: float) -> list[tuple[float, int]]:
    """The readings from `start` to a sampling period past `end`, their times counted from `start`."""
    return [(t - start, n) for t, n in samples if start <= t <= end + SAMPLE_EVERY]


def _each_second(inside: list[tuple[float, int]]) -> list[tuple[int, float]]:
    """`share_between` for each whole second the readings span (at least two readings)."""
    return [share_between(inside, second, second + 1) for second in range(int(inside[-1][0]) + 1)]


def link_phases(samples: list[tuple[float, int]], start: float, end: float, size: int, rate: float) -> dict:
    """Where a push's time went on the shaped link (monotonic `start` = publication, `end` = last FINISHED):
    when its first and its last byte crossed it, and the link's use (wire bytes / rate) second by second."""
    inside = _inside(samples, start, end)
    if len(inside) < 2:
        return {}
    base = inside[0][1]
    first = next((t for t, n in inside if n > base), None)
    last = next((t for t, n in inside if n >= inside[-1][1]), None)
    per_second = [round(got / took / rate, 3) if took else None for got, took in _each_second(inside)]
    return {"first_byte_s": first, "last_byte_s": last, "end_s": round(end - start, 3),
            "wire_copies": round((inside[-1][1] - base) / size, 4), "use_per_second": per_second}


def counts_per_second(samples: list[tuple[float, int]], start: float, end: float) -> list[int]:
    """How much a counter (a qdisc's drops) grew in each second from `start` to `end` (monotonic times)."""
    inside = _inside(samples, start, end)
    return [got for got, _ in _each_second(inside)] if len(inside) > 1 else []
