"""Memory back to the system once the proxy is idle.

A burst of concurrent downloads leaves the proxy's heap large after the last one ended: CPython and glibc keep
freed memory for reuse. After 1,000 concurrent 2 MB downloads the RSS stayed 270 MB above where it started for
as long as the proxy then sat idle. When no client connection has been open for `TRIM_AFTER` seconds, `IdleTrim`
collects garbage and asks glibc to return its free pages (`malloc_trim`, a no-op elsewhere): a few milliseconds,
only when nothing is waiting on the proxy.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable

log = logging.getLogger("swarmproxy")

TRIM_AFTER = 5.0  # seconds without a client connection before the heap is trimmed
# At most one trim a process in this many seconds. gc and malloc_trim are the whole process's, and a process may hold
# many servers: the lab runs 500 nodes a worker, and each one's own trim when it went idle (a full gc of a heap of
# gigabytes) left its timers seconds late (`swarmproxy lab flashcrowd --loads 20 --duration 50 --workers 2`: p99 7.7 s).
TRIM_EVERY = 60.0
_last_trim: float | None = None  # the loop time of this process's last trim


def malloc_trim() -> bool:
    """glibc's malloc_trim(0): free pages of the heap go back to the system. False where there is no glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False


class IdleTrim:
    """`connections(count)` after each change of the number of open client connections. A trim pending when the
    loop stops is dropped with it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float = TRIM_AFTER,
                 trim: Callable[[], bool] = malloc_trim) -> None:
        self.loop, self.delay, self.trim = loop, delay, trim
        self._timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0  # when the last client connection closed
        self.trims = 0

    def connections(self, count: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if count == 0:
            self._idle_since = self.loop.time()
            self._timer = self.loop.call_later(self.delay, self._fire)

    def _fire(self) -> None:
        global _last_trim
        self._timer = None
        now = self.loop.time()
        if _last_trim is not None and _last_trim >= self._idle_since:
            return  # the process trimmed since this server went idle (the lab's other nodes): the heap is one
        if _last_trim is not None and now - _last_trim < TRIM_EVERY:
            # Trimmed lately, before this server's last load: that load's memory is still held, so the trim is put
            # off to when one is allowed again, not dropped (1,000 downloads right after a trim stayed 110 MiB up).
            self._timer = self.loop.call_later(_last_trim + TRIM_EVERY - now, self._fire)
            return
        _last_trim = now
        gc.collect()
        self.trims += 1
        if not self.trim():
            log.debug("malloc_trim is not available here: freed memory stays with the process")
