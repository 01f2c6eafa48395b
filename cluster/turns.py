"""Whose turn it is to fetch: one transfer at a time, highest priority first, and none that starves (sans-I/O).

An agent fetches one transfer at a time, highest priority first (older first among equals), so that the most
urgent file lands first and a lower one never slows it. But a transfer that cannot progress (its pusher died and
nobody holds it, or no peer serves it) would then hold every lower one back for good: the record lives for days.
So a transfer that held the turn for `starved_after` s without a new verified block yields it to the next one,
sits out `benched_for` s, then gets a fresh turn, and so on: a dead transfer costs the queue `starved_after` s in
every `starved_after + benched_for`, never all of it. One that waits alone is never benched: nothing would gain.

`starved_after` is well above what a healthy transfer goes without a block: a redis outage does not stop the
fetches under way (the peers stay connected), and a late rack's members are waiting for their own turn, not
holding one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# In reconcile periods (2 s by default: 30 s and 60 s): a period is how often an agent learns of new providers.
STARVED_PERIODS = 15  # a transfer may hold the turn this long without a new verified block ...
BENCHED_PERIODS = 30  # ... then sits out this long


@dataclass
class _Turn:
    verified: int = -1
    progress_at: float = -math.inf  # since when it holds the turn, or its last new block while it did
    benched_until: float = -math.inf


class Turns:
    def __init__(self, starved_after: float, benched_for: float) -> None:
        self.starved_after = starved_after
        self.benched_for = benched_for
        self._turns: dict[str, _Turn] = {}
        self.holder: str | None = None

    def observe(self, tid: str, verified: int, now: float) -> None:
        """`tid` has `verified` blocks at `now`: a new one is progress."""
        turn = self._turns.setdefault(tid, _Turn())
        if verified > turn.verified:
            turn.verified, turn.progress_at = verified, now

    def pick(self, waiting: list[tuple[tuple, str]], now: float) -> str | None:
        """Of the unfinished transfers `waiting` as (sort key, id), the one that may fetch at `now` (None: none
        waits). A starved holder is benched only when another one can take the turn: alone, it keeps trying (a
        representant that stalls its rack is worked around by work stealing, which needs the rack to go on)."""
        ordered = [tid for _, tid in sorted(waiting)]
        free = [tid for tid in ordered if now >= self._turns.setdefault(tid, _Turn()).benched_until]
        if not free and ordered:  # every one sits out: the first goes on, its bench lifted
            self._turns[ordered[0]].benched_until = -math.inf
            free = ordered[:1]
        for index, tid in enumerate(free):
            turn = self._turns[tid]
            if tid != self.holder:  # its turn starts now
                self.holder, turn.progress_at = tid, now
            if now - turn.progress_at > self.starved_after and index + 1 < len(free):
                turn.benched_until = now + self.benched_for
                self.holder = None
                continue
            return tid
        return None

    def benched(self, tid: str, now: float) -> bool:
        return now < self._turns.get(tid, _Turn()).benched_until

    def forget(self, tid: str) -> None:
        self._turns.pop(tid, None)
        if self.holder == tid:
            self.holder = None
