"""Parking: a download leaves a slow origin to the others who already fetch it, and waits for their vouches.

Without help from the origin, a flash crowd's first copies are vouched for only once quorum nodes got every byte
from the origin, and every newcomer that also reads the origin divides its bandwidth among more readers. So a
download whose lookup at its head finds fewer than `after` independent others fetching the same version says it
fetches it (and will vouch), and one that finds at least that many leaves the origin to them: it closes its stream
(only if the origin serves ranges to come back to), asks for their vouches every `poll` s, and after `wait(...)` s
without them reopens the origin at a Range where it left off. Others are counted by network, like a quorum
(`swarm.trust.quorum.working`), so one party with many keys in one network counts once. A download leaves its origin
only once the origin has shown a rate, and only a slow one (`leave`): a party that only pretends to fetch can make a
download whose origin is slow take at most about twice what its origin would have, and cannot slow a healthy one at
all. The download's core (`proxy.download.core`) owns one `Parking`: what the rule needs to remember (did it claim,
when it parked, where each segment came from) and the decisions made from it and the arguments it is given; the core
makes the steps themselves (closing and reopening the origin, the phase changes). This module holds the rule's
settings, its computations and that state.
"""

from __future__ import annotations

import dataclasses

from .actions import Action, ClaimFetching
from .origin_pieces import PIECE_MIN
from .state import Representation
from .transition import TransitionPolicy

# How often a parked download asks for the fetchers' vouches.
PARK_POLL_SECONDS = 0.5
# It waits for them at least PARK_SECONDS (in the lab's flash crowd of 100 KB at 256 KB/s the first copies are
# vouched for 1-3 s after the crowd arrived), or as long as the origin would still have taken at the rate it showed
# (30 MB at a crowd's share of 256 KB/s: minutes), but never more than PARK_MAX_SECONDS. Only an origin judged slow
# is left (`leave`): a healthy origin's 20 MB (10 s at 2 MB/s), parked at its head, once waited 125 s for fake
# fetchers. One that sent no body byte by then showed no rate, and is waited for as long as R would still take.
PARK_SECONDS = 5.0
PARK_MAX_SECONDS = 600.0
# A download taken segment by segment asks for the next segment's vouches at most this far apart. Its polls back
# off with its whole wait so far, not the current segment's: the crowd of the lab's 100-client largefile, polling
# each new segment from 0.5 s on, ran about 90 DHT lookups a second (two keys per poll), enough to time lookups
# out while the segments' holders' links were busy. A segment found up to this late costs little: the first
# fetchers vouch for the next one a segment's worth of origin time later (about 30 s there).
SEGMENT_POLL_MAX_SECONDS = 4.0
# A download that said it fetches looks again this long after its last lookup (then not again): claims said in
# the same moment reach the DHT 0.3-0.6 s later, so arrivals that close all claim, and each more reader of the
# whole file divides the origin for all. In the lab's crowd at 20/s, seven claimers saw 0-1 others at their early
# lookups and shared the origin until R (2 s) instead of leaving it to the two ahead of them.
CLAIM_RECHECK_SECONDS = (0.5, 1.0)
# A download that closed its slow origin while its early lookup runs (`proxy.download.parking_steps`) asks for the
# rest by Range this long after, if the lookup has not answered by then: our DHT's lookups took 0.16 s at the median
# and 0.5 s at the p99 in the lab's crowd; Mainline's take seconds, and a download that goes on with its origin
# must not wait for them without it.
CLOSE_FOR_LOOKUP_SECONDS = 0.5
# ... and one its origin asked to swarm (server_plugin's hint, with its manifest) waits this long for its lookup:
# that origin said it is busy, and a slow lookup's stream asked again from byte 0 takes a share of it. On the crowd
# simulator (10,000 clients at 1,000/s with the plugin) those streams, ~160 kB/s of the 256, kept the origin busy to
# the crowd's end: with the fetch's Range source after its providers and the plugin's hold, the origin sent 0.28 % of
# the direct clients' bytes at 0.5 s, 0.12 % at 2 s, with the same p50 and p99 (bench/README.md, "Flash crowd at
# internet scale, simulated"). Our DHT's lookups end well within it; a Mainline one still ends at the lookup's own
# timeout (5 s).
CLOSE_WHILE_ASKED_SECONDS = 2.0
# A download that says it fetches a slow origin's file for the others asks for the rest, when it asks its origin
# again (`ReopenOrigin`), as this many Range requests at once (`origin_pieces`; 1: one stream). A crowd without the
# origin's help waits for its first-hand fetchers' copies, and an overloaded origin shares itself among the responses
# in progress, so each stream more is one more share for the copies the crowd waits for: in the simulated no-plugin
# crowd (`python -m bench.crowd_sim.parallel_ranges`) the second first-hand copy came 2.0-2.2 s after the crowd
# began instead of 3.1-3.7 s. It asks more of the origin than one stream, so only a claimer does it (a few per
# crowd), only of an origin judged slow that serves ranges of a validated version, and four stays under the six
# connections a browser opens to one host.
CLAIM_RANGES = 4


@dataclasses.dataclass(frozen=True)
class ParkingSettings:
    after: int = 0  # the weight of independent others fetching that makes a download wait for them (0: never)
    poll: float = PARK_POLL_SECONDS
    shortest: float = PARK_SECONDS
    longest: float = PARK_MAX_SECONDS
    rechecks: tuple[float, ...] = CLAIM_RECHECK_SECONDS
    close_for_lookup: float = CLOSE_FOR_LOOKUP_SECONDS  # the longest close while the early lookup runs (0: never)
    close_while_asked: float = CLOSE_WHILE_ASKED_SECONDS  # ... when the origin asked the download to swarm
    ranges: int = CLAIM_RANGES  # Range requests at once a claimer reads the rest of its origin's answer in

    def next_poll(self, parked_for: float) -> float:
        """Seconds to the next lookup after `parked_for` s of waiting: `poll` at first (a crowd's first copies are
        vouched for within seconds; in the lab's crowd at 20/s, 5-7 s after it began), then an eighth of the wait
        so far, so that a wait of minutes (a large file) costs the DHT a few lookups a minute, not two a second
        from every parked download."""
        return max(self.poll, parked_for / 8)

    def segment_poll(self, waited: float) -> float:
        """Seconds to a segmented download's next lookup after `waited` s of waiting in all (`next_poll`, capped
        at SEGMENT_POLL_MAX_SECONDS)."""
        return min(self.next_poll(waited), max(self.poll, SEGMENT_POLL_MAX_SECONDS))

    def wait(self, *, remaining: int, rate: float) -> float:
        """How long to wait for the fetchers: as long as the origin would still take for `remaining` bytes at
        `rate`, the rate it showed (R when it showed none: `leave`), within [shortest, longest]; `shortest` at 0."""
        origin_eta = remaining / rate if rate > 0 else 0.0
        return max(self.shortest, min(origin_eta, self.longest))

    @staticmethod
    def leave(*, body: int, since_head: float, judged: bool, slow: bool) -> str:
        """Does a download that sees enough others fetching leave its origin now? "leave" (it then waits at the
        rate the origin showed: `body` bytes in the `since_head` s since its head), "later" (not judged yet: it
        stays, and a later lookup asks again), or "stay" (a healthy origin).

        The origin is judged at the early point (`judged`: `early_lookup` s after its head), not before: the first
        read comes with the head, a burst of the server's buffers (200 KB in a millisecond from the lab's
        throttled origin), and says nothing of its rate. Only a `slow` one (under R so far, by the transition's
        rule) is left, as Pack's rule leaves an origin only when it is slow: one that gives this download R or
        more is not the overloaded origin parking spares. One that sent no body byte since its head is slow too,
        and is left (a crowd's newcomer costs the origin nothing then, and an origin that sends heads only is
        left at all). It showed no rate, and is waited for as long as R would still take: it is slower than R so
        far. (Before this judgement, a 2 MB/s origin's 20 MB parked at its head waited 125 s for fake fetchers.)
        So fake fetchers never slow a healthy download, and one whose origin is slow by at most what it would
        still have taken at the rate it showed, or at R."""
        if not judged or since_head <= 0:
            return "later"
        return "leave" if slow or body <= 0 else "stay"

    def segment_source(self, *, trusted: bool, others: int, waited: float, limit: float,
                       enough: int | None = None) -> str:
        """Where a segmented download takes its next segment (`proxy.download.segments`): "peers" once a quorum
        vouched for it and someone holds it; "wait" while at least `enough` (default `after`) independent others
        vouched for it or fetch it from the origin, as long as the download's waits (`waited`, since others last
        delivered) stay under `limit`; else "origin" (it then vouches for the segment itself)."""
        if trusted:
            return "peers"
        if self.after > 0 and others >= (enough or self.after) and waited < limit:
            return "wait"
        return "origin"


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
    closed_until: float | None = None  # its origin is closed while the early lookup runs: reopened by this time

    @property
    def closed_for_lookup(self) -> bool:
        return self.closed_until is not None

    def close_for_lookup(self, now: float, *, asked: bool = False) -> None:
        """The origin is closed while the early lookup runs, for `ParkingSettings.close_for_lookup` s at most
        (`close_while_asked` when the origin `asked` the download to swarm)."""
        self.closed_until = now + (self.settings.close_while_asked if asked else self.settings.close_for_lookup)

    def close_over(self) -> None:
        """The close for the early lookup is over: the origin is asked again, or left to the fetchers or the swarm."""
        self.closed_until = None

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

    def claiming(self, now: float, spool_block: int | None, known: Representation) -> list[Action]:
        """`ClaimFetching`, once, where it may be said (not claimed yet, a spool to vouch from, parking on): at the
        stream when too few others are at it, or switched before the first lookup answered. A download that
        switched first never claimed, and the crowd could not see it fetching: four of the twelve homes of the
        netns flash crowd (`bench.internet_lab --scenario crowd`), whose first lookups took 2 s."""
        if self.claimed or spool_block is None or not self.settings.after:
            return []
        self.claim(now)
        assert known.size is not None and known.validator is not None
        return [ClaimFetching(known.size, spool_block, known.validator)]

    def streams(self, known: Representation, rest: int) -> int:
        """How many Range requests at once the rest (`rest` bytes) of the origin's answer is read in: `ranges` for a
        download that claimed, of an origin that serves ranges of a validated version, and no more than the rest
        has pieces of PIECE_MIN; 1 (one stream) otherwise."""
        if not self.claimed or not known.ranges or not known.validator:
            return 1
        return max(1, min(self.settings.ranges, rest // PIECE_MIN))

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
        self.parked_at, self.closed_until = now, None
        return self.settings.wait(remaining=remaining, rate=rate)

    def next_poll(self, now: float) -> float | None:
        """Parked, a lookup found nothing: when to ask again, or None once the wait is over (the origin again)."""
        assert self.parked_until is not None and self.parked_at is not None
        if now >= self.parked_until:
            return None
        return min(now + self.settings.next_poll(now - self.parked_at), self.parked_until)
