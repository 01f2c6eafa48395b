"""Parking, the fallback download's steps for leaving the origin to others (`proxy.download.parking` has its settings).

A download that would still run at its early lookup looks the URL up at its head; if enough independent others
already fetch it from the origin it leaves the origin to them once the origin has shown it is slow (at the early
point's lookup, or a later one: `ParkingSettings.leave`) and waits for their vouches, or takes a file of several
segments segment by segment (`StartSegments`). These are
methods of `proxy.download.core.DownloadCore`, kept here to keep that module readable: they read and set its state.
"""

from __future__ import annotations

from swarm.content.segments import segmented

from .actions import Action, CloseOrigin, EndClaim, Note, ReopenOrigin, Source, StartSegments, Switch
from .settings import DownloadSettings
from .state import Phase, Producer
from .transition import FETCHING_CAUSE, TransitionPolicy

__all__ = ["ParkingSteps"]


class ParkingSteps:
    """Mixed into `DownloadCore`, whose state these are (set in its `__init__`)."""

    settings: DownloadSettings
    policy: TransitionPolicy
    phase: Phase
    origin: Producer
    swarm: Producer
    ranges: bool
    validator: str | None
    size: int | None
    spool_block: int | None
    position: int
    end: int
    promised_start: int
    fetch_start: int
    swarm_position: int
    delivered: dict[Source, int]
    reopen: bool
    polls: int
    lookup_at: float | None

    def _init_parking(self) -> None:
        """The parking steps' own state, set by `DownloadCore.__init__`."""
        self.claimed = False  # ClaimFetching was said
        self.recheck_at: float | None = None  # claimed: when to look again for the others ahead (`rechecks`)
        self.rechecks = 0
        self.parked_at: float | None = None  # when it parked (it parks once at most)
        self.parked_until: float | None = None  # parked: when to stop waiting for the fetchers and reopen
        self.segment_sources: dict[int, str] = {}  # taken segment by segment: where each segment's bytes came from

    def segment_taken(self, index: int, source: str) -> None:
        """Segment `index` of a segmented download comes from `source` ("peers", "origin", "peers+origin")."""
        self.segment_sources[index] = source

    def _first_hand(self) -> bool:
        """Did every byte come from the origin itself? Only then may the file be vouched for: a file assembled from
        peers' segments (however many vouched for them) is served, never vouched for, or a poisoned segment
        would recruit its victims as publishers."""
        return all(source == "origin" for source in self.segment_sources.values())

    def _stop_lookups(self) -> list[Action]:
        raise NotImplementedError  # DownloadCore's: stop a lookup under way

    def _tick(self, now: float) -> list[Action]:
        raise NotImplementedError  # DownloadCore's: what is due at `now`

    def _may_park(self) -> bool:
        """Can this download leave the origin for the fetchers, and come back to where it is if they fail it?"""
        return (self.settings.parking.after > 0 and self.phase in (Phase.STREAM, Phase.SWITCHED) and self.ranges
                and self.origin is Producer.RUNNING and bool(self.validator) and self.parked_at is None
                and self.position < self.end)

    def _park_if(self, others: int, ahead: int, now: float) -> list[Action] | None:
        """Park if enough others fetch it and the origin has shown it is slow (`ParkingSettings.leave`). One that
        said it fetches too steps back for those ahead of it (holders, and earlier claimers, ordered alike by every
        node: `swarm.trust.ahead_of`): arrivals closer than a claim takes to land all claimed, and each more
        reader of the whole file divides the origin for all."""
        if not self._may_park() or (ahead if self.claimed else others) < self.settings.parking.after:
            return None
        first, body = self.policy.first_byte_at, self.delivered[Source.ORIGIN]
        since_head = now - first if first is not None else 0.0
        judged = slow = True  # a switched download's origin was judged slow by its switch
        if self.phase is Phase.STREAM:  # judged at the early point, by the transition's rule
            due = self.policy.lookup_due_at()
            judged, slow = due is None or now >= due, self.policy.slow_so_far(now)
        if self.settings.parking.leave(body=body, since_head=since_head, judged=judged, slow=slow) != "leave":
            # It stays. One that never said it fetches does not say so now, with enough others at it: the early
            # point's lookup asks again if the origin is slow by then. The rest goes on as when too few fetch it.
            return self._tick(now) if self.phase is Phase.STREAM and not self.claimed else None
        actions: list[Action] = [EndClaim()] if self.claimed else []
        self.claimed = False
        # The rate it showed, or R when it showed none: an origin that sent no body byte by its judgement is under
        # R, so waiting as long as R would take still waits no longer than that origin would have. (The shortest
        # wait stood in for it once: the 10 MB largefile's newcomers, parked at their heads, took the file's
        # segments from the origin after 5 s, and a 30-client crowd of them starved the origin: none finished.)
        shown = body / since_head if body > 0 else self.policy.min_rate
        return actions + self._park(ahead if actions else others, shown, now)

    def _park(self, others: int, rate: float, now: float) -> list[Action]:
        parking = self.settings.parking
        wait = parking.wait(remaining=self.end - self.position, rate=rate)
        why = f"{others} independent other{'s' if others != 1 else ''} fetch it from the origin"
        actions: list[Action] = [] if self.phase is Phase.SWITCHED else [
            Switch(FETCHING_CAUSE, self.position, f"{why}; waiting for their vouches")]
        self.phase, self.parked_at = Phase.SWITCHED, now
        self.origin, self.reopen = Producer.GONE, True
        if self.spool_block and self.size and segmented(self.size, self.spool_block):
            # Segment by segment: from peers once vouched, before anyone has it all (`proxy.download.segments`).
            self.phase, self.swarm, self.swarm_position = Phase.MERGE, Producer.RUNNING, self.position
            self.fetch_start = self.position
            return actions + self._stop_lookups() + [
                CloseOrigin(f"{why}: taking it segment by segment, from their vouches or the origin's ranges"),
                StartSegments(self.position, self.end, self.spool_block, rate)]
        self.parked_until, self.lookup_at = now + wait, now + parking.poll
        return actions + [CloseOrigin(f"{why}: leaving the origin to them for up to {wait:.3g} s")]

    def _unpark(self, now: float) -> list[Action]:
        """No vouched manifest in time: the origin again from the delivery point; lookups go on as after a switch."""
        assert self.validator is not None
        self.parked_until, self.reopen = None, False
        self.origin, self.promised_start = Producer.HEAD_PENDING, self.position
        wait = self.settings.repoll[min(self.polls, len(self.settings.repoll) - 1)]
        self.polls += 1
        self.lookup_at = now + wait
        return [Note("the fetchers' vouches did not come in time; back to the origin"),
                ReopenOrigin(self.position, self.end, self.validator)]

    def _recheck_later(self, now: float) -> None:
        """After a lookup of a download that claimed: the next recheck, `parking.rechecks[i]` s from now after i
        rechecks (none once they are used up)."""
        rechecks = self.settings.parking.rechecks
        self.recheck_at = now + rechecks[self.rechecks] if self.rechecks < len(rechecks) else None
