"""The segment walk's decisions, sans-I/O: where each segment of a file taken segment by segment comes from, and
when to look again. `segments.SegmentedFetch` is the shell: it runs the lookups and the fetches and waits until
the deadlines this core gives; every choice is made here, with the time passed in (`now`), so that the vectors of
`tests/proxy/download/segment_vectors.py` can step it on a fake clock.

For each segment (`step`): from peers once a quorum vouched for it and someone holds it; else wait (`Poll`) while
enough independent others are at it, for at most `budget` s since the last segment others delivered (as long as
parking would have waited for the whole rest: the bound a party that only pretends to fetch can impose); else
from the origin, after a moment's random pause (`Pause`) that lets another's claim land first. A segment its
holders failed (`peers_failed`) is asked again, and after PEER_TRIES failures its rest comes from the origin.
A lookup that failed keeps the last count of others, and one that sees fewer than before is believed only
OTHERS_MEMORY s later (`looked_up`). The file's last segment, fetched ahead by a task of its own, asks `tail_step`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from .parking import ParkingSettings

if TYPE_CHECKING:
    from ..engine import Found

__all__ = ["HESITATION_MAX", "OTHERS_MEMORY", "PEER_TRIES", "Pause", "Poll", "Segment", "SegmentLookup",
           "SegmentWalk", "Take"]

# A lookup that finds fewer others fetching than one within this many seconds before is taken for a busy DHT's
# partial answer, not for the fetchers leaving (their claims live IN_PROGRESS_TTL): in the 100-client largefile
# a tenth of the parked crowd saw the two fetchers vanish from one lookup and asked the origin for a segment.
OTHERS_MEMORY = 20.0
HESITATION_MAX = 2.0  # seconds: the longest pause before claiming a segment (`SegmentWalk.hesitation`)
PEER_TRIES = 2  # a segment whose holders failed it this often comes from the origin (from where they left off)


@dataclasses.dataclass(frozen=True)
class SegmentLookup:
    found: Found | None  # a trusted segment manifest and its providers
    others: int  # the weight of the independent others who vouched for it or fetch it (or the file) from the origin
    reason: str  # why not found: `swarm.trust.decide`'s reasons, "no-provider", "no-manifest", "lookup-failed"
    enough: int | None = None  # the weight of `others` worth waiting for: 1 when only a provider is missing


@dataclasses.dataclass(frozen=True)
class Poll:
    """Wait for the others at it until `at`, then look it up again."""

    at: float


@dataclasses.dataclass(frozen=True)
class Pause:
    """A moment's random pause before taking it from the origin, until `at`; then look it up again."""

    at: float


@dataclasses.dataclass(frozen=True)
class Take:
    """Take it (the rest of it, after a failure) from `source`, "peers" or "origin"; `event` says why."""

    source: str
    event: str


Step = Poll | Pause | Take


@dataclasses.dataclass
class Segment:
    """One segment's walk: since when it is waited for, whether it paused before the origin, how often its holders
    failed it."""

    index: int
    began: float
    hesitated: bool = False
    failures: int = 0


class SegmentWalk:
    """The walk of one download (`SegmentedFetch`): its waits, its budget and what it remembers of the others."""

    def __init__(self, parking: ParkingSettings, *, origin_rate: float, now: float,
                 jitter: Callable[[], float]) -> None:
        self.parking, self.origin_rate, self.jitter = parking, origin_rate, jitter
        self.budget = 0.0  # set by `begin`
        self.waited = 0.0  # since the last segment others delivered (or since the walk began)
        self.waited_in_all = 0.0  # every wait of this download, which the polls back off with
        self.lookup_seconds = 0.0  # how long this download's last lookup took: a claim's put takes about as long
        self.others_known = parking.after  # the last count of others at a segment a lookup gave (or a higher one
        self.others_at = now  # seen within OTHERS_MEMORY s), and when it was last seen

    def begin(self, start: int, end: int) -> None:
        """The walk delivers bytes `start..end-1`: its budget is parking's wait for all of them."""
        self.budget = self.parking.wait(remaining=end - start, rate=self.origin_rate)

    def looked_up(self, lookup: SegmentLookup, *, began: float, now: float, file_fetchers: bool = True
                  ) -> SegmentLookup:
        """A lookup that began at `began` answered `lookup` at `now`; the answer the walk goes by. One that failed
        (a busy DHT times out) keeps the last count of others, as nobody fetching it would send the whole crowd to
        the origin (the download parked for `after` of them)."""
        self.lookup_seconds = now - began
        if lookup.reason == "lookup-failed":
            return dataclasses.replace(lookup, others=self.others_known)
        # Only a count that includes the whole file's fetchers is kept: a trusted segment's lookup counts the
        # segment's own claimers alone (`look_up` skips the rest), often none, and keeping that sent a crowd whose
        # next lookups timed out to the origin.
        if lookup.found is None and lookup.enough is None and file_fetchers:
            if lookup.others >= self.others_known or now - self.others_at >= OTHERS_MEMORY:
                self.others_known, self.others_at = lookup.others, now
            return dataclasses.replace(lookup, others=self.others_known)
        return lookup

    def step(self, segment: Segment, lookup: SegmentLookup, now: float) -> Step:
        """Where `segment` comes from, given its latest lookup, or how long to wait before looking again."""
        waited = self.waited + now - segment.began
        source = self.parking.segment_source(trusted=lookup.found is not None, others=lookup.others,
                                             waited=waited, limit=self.budget, enough=lookup.enough)
        if source == "peers" and segment.failures >= PEER_TRIES:
            source = "origin"  # its holders failed it twice: the origin's Range for the rest of this segment
        if source == "wait":
            # Spread a crowd's polls (0.75-1.25 times the interval): parked together, they would ask together.
            pause = self.parking.segment_poll(self.waited_in_all + now - segment.began)
            return Poll(now + pause * (0.75 + 0.5 * self.jitter()))
        if source == "origin" and not segment.hesitated and not segment.failures:
            # A crowd that reaches the same segment at once would all ask the origin for it: a moment's random
            # pause lets the first one's claim land, and the others wait for it instead.
            segment.hesitated = True
            return Pause(now + self.jitter() * self.hesitation())
        self.waited_in_all += now - segment.began
        # Waits count from the last segment others delivered: fetchers that deliver are no pretence.
        self.waited = 0.0 if source == "peers" else waited
        return Take(source, f"segment {segment.index} from {source} ({lookup.reason}, {lookup.others} others)")

    def peers_failed(self, segment: Segment, now: float) -> None:
        """Its holders failed `segment` (busy, or lying): it is asked again, never the rest of the file."""
        segment.failures += 1
        segment.began = now

    def hesitation(self) -> float:
        """The longest random pause before claiming a segment: long enough for another's claim to land, which on
        a busy DHT takes as long as a lookup (in the 100-client largefile, lookups of seconds let eleven parked
        clients claim segment 0 together, each then reading it from the origin). At most HESITATION_MAX s: a
        lookup slowed on purpose must not stretch every segment's wait past parking's bound."""
        poll = self.parking.poll
        return min(max(poll, 2 * self.lookup_seconds), max(poll, HESITATION_MAX))

    def tail_pause(self) -> float:
        """Seconds the last segment's fetch ahead waits before its first lookup: a crowd arriving together lets the
        first claims land."""
        return self.jitter() * self.hesitation()

    def tail_step(self, index: int, lookup: SegmentLookup, *, waited: float, now: float) -> Poll | Take:
        """The last segment ahead: from peers once trusted; else wait while enough others fetch this very segment
        (its lookups do not count those fetching the whole file: they hold it last), within the budget; else from
        the origin."""
        source = self.parking.segment_source(trusted=lookup.found is not None, others=lookup.others,
                                             waited=waited, limit=self.budget, enough=lookup.enough)
        if source == "wait":
            return Poll(now + self.parking.next_poll(waited))
        return Take(source, f"last segment {index} ahead from {source} ({lookup.reason}, {lookup.others} others)")
