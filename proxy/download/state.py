"""The states of a fallback download (`proxy.download.core`), shared by the modules its decisions are split into."""

from __future__ import annotations

import enum

__all__ = ["Phase", "Producer"]


class Phase(enum.Enum):
    HEAD = "head"
    HEADLESS = "headless"
    WAIT = "wait"
    STREAM = "stream"
    SWITCHED = "switched"
    MERGE = "merge"
    DONE = "done"


class Producer(enum.Enum):
    NONE = "none"  # never started
    HEAD_PENDING = "head pending"  # the origin's request is sent, its head not yet here
    RUNNING = "running"
    GONE = "gone"
