"""Parking's state in a fallback download, and the decisions made from it (`proxy.download.parking` has the
settings).

A download that would still run at its early lookup looks the URL up at its head; if enough independent others
already fetch it from the origin it leaves the origin to them once the origin has shown it is slow (at the early
point's lookup, or a later one: `ParkingSettings.leave`) and waits for their vouches, or takes a file of several
segments segment by segment (`StartSegments`); one that sees too few says it fetches too (`ClaimFetching`) and looks
again later. `Parking` keeps what that needs (did it claim, when it parked, where each segment came from) and
answers from it and the arguments it is given; the download's core (`proxy.download.core`) owns one, asks it, and
makes the steps themselves (closing and reopening the origin, the phase changes).
"""

from __future__ import annotations

import dataclasses

from .parking import ParkingSettings
from .transition import TransitionPolicy

__all__ = ["Parking"]


@dataclasses.dataclass
class Parking:
    """One download's parking state."""

    settings: ParkingSettings
    claimed: bool = False  # ClaimFetching was said
    recheck_at: float | None = None  # claimed: when to look again for the others ahead (`rechecks`)
    rechecks: int = 0
    parked_at: float | None = None  # when it parked (it parks once at most)
    parked_until: float | None = None  # parked: when to stop waiting for the fetchers and reopen
    segment_sources: dict[int, str] = dataclasses.field(default_factory=dict)  # taken segment by segment: from where

    def segment_taken(self, index: int, source: str) -> None:
        """Segment `index` of a segmented download comes from `source` ("peers", "origin", "peers+origin")."""
        self.segment_sources[index] = source

    def first_hand(self) -> bool:
        """Did every byte come from the origin itself? Only then may the file be vouched for: a file assembled from
        peers' segments (however many vouched for them) is served, never vouched for, or a poisoned segment
        would recruit its victims as publishers."""
        return all(source == "origin" for source in self.segment_sources.values())

    @property
    def available(self) -> bool:
        """Parking is on and this download has not parked yet (it parks once at most)."""
        return self.settings.after > 0 and self.parked_at is None

    def enough(self, others: int, ahead: int) -> bool:
        """Do enough others fetch it to leave them the origin? One that said it fetches too steps back only for
        those ahead of it (holders, and earlier claimers, ordered alike by every node: `swarm.trust.ahead_of`):
        arrivals closer than a claim takes to land all claimed, and each more reader of the whole file divides
        the origin for all."""
        return (ahead if self.claimed else others) >= self.settings.after

    def leaves(self, policy: TransitionPolicy, body: int, now: float, *, streaming: bool) -> float | None:
        """Enough others fetch it: does it leave the origin now (`ParkingSettings.leave`)? The rate the origin showed
        (`body` bytes since its head), to wait by, if it leaves; None if it stays. A download still `streaming`
        (not switched) is judged at the early point, by the transition's rule; a switch judged its origin slow."""
        first = policy.first_byte_at
        since_head = now - first if first is not None else 0.0
        judged = slow = True
        if streaming:
            due = policy.lookup_due_at()
            judged, slow = due is None or now >= due, policy.slow_so_far(now)
        if self.settings.leave(body=body, since_head=since_head, judged=judged, slow=slow) != "leave":
            return None
        # The rate it showed, or R when it showed none: an origin that sent no body byte by its judgement is under
        # R, so waiting as long as R would take still waits no longer than that origin would have. (The shortest
        # wait stood in for it once: the 10 MB largefile's newcomers, parked at their heads, took the file's
        # segments from the origin after 5 s, and a 30-client crowd of them starved the origin: none finished.)
        return body / since_head if body > 0 else policy.min_rate

    def claim(self, now: float) -> None:
        """Too few others fetch it: this node says it fetches it (and will vouch), and looks again later."""
        self.claimed = True
        self.recheck_later(now)

    def recheck_later(self, now: float) -> None:
        """After a lookup of a download that claimed: the next recheck, `rechecks[i]` s from now after i rechecks
        (none once they are used up)."""
        rechecks = self.settings.rechecks
        self.recheck_at = now + rechecks[self.rechecks] if self.rechecks < len(rechecks) else None

    def recheck_due(self, now: float, *, looking: bool) -> bool:
        """Is a recheck due at `now` (not while a lookup runs: it answers the same)? One that is due is spent;
        it looks again only if the download claimed (and, the core asks, its origin is slow so far: else it
        finishes before stepping back pays)."""
        if self.recheck_at is None or now < self.recheck_at or looking:
            return False
        self.recheck_at = None
        return self.claimed

    def park(self, now: float, *, remaining: int, rate: float) -> float:
        """It leaves the origin now: how long it waits for the fetchers (`ParkingSettings.wait`)."""
        self.parked_at = now
        return self.settings.wait(remaining=remaining, rate=rate)

    def next_poll(self, now: float) -> float | None:
        """Parked, a lookup found nothing: when to ask again, or None once the wait is over (the origin again)."""
        assert self.parked_until is not None and self.parked_at is not None
        if now >= self.parked_until:
            return None
        return min(now + self.settings.next_poll(now - self.parked_at), self.parked_until)
