"""The simulator's virtual clock: a heap of timed callbacks, run in time order (ties in the order scheduled).

Nothing reads the wall clock: `now` is the time of the callback being run, so a run is deterministic for a seed.
A `Timer` can be cancelled; a cancelled one stays in the heap and is skipped when its time comes (cheaper than
removing it, and the heap holds at most a few per client).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable


class Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Timer | None, Callable[..., None], tuple]] = []
        self._seq = itertools.count()
        self.events = 0  # callbacks run: the simulator's own cost, for the report

    def at(self, when: float, callback: Callable[..., None], *args: object) -> None:
        """Run `callback(*args)` at `when` (never before now: a time in the past runs now)."""
        heapq.heappush(self._heap, (max(when, self.now), next(self._seq), None, callback, args))

    def timer(self, when: float, callback: Callable[..., None], *args: object) -> Timer:
        """As `at`, cancellable."""
        timer = Timer()
        heapq.heappush(self._heap, (max(when, self.now), next(self._seq), timer, callback, args))
        return timer

    def run(self, until: float = float("inf"), stop: Callable[[], bool] | None = None) -> None:
        """Run callbacks in time order until none is left, the next is after `until`, or `stop()` says."""
        heap = self._heap
        while heap and heap[0][0] <= until:
            when, _, timer, callback, args = heapq.heappop(heap)
            if timer is not None and timer.cancelled:
                continue
            self.now = when
            self.events += 1
            callback(*args)
            if stop is not None and stop():
                return

    @property
    def pending(self) -> int:
        return len(self._heap)
