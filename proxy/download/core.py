"""The fallback download's decisions, sans-I/O: origin first, the swarm when slow, one response in order.

`DownloadCore` never touches a socket or the clock (the model is h11 and mitmproxy's layers). The asyncio shell
(`fallback`) feeds it events — the origin's head, body chunks, end or failure, a lookup's result, the swarm's
chunks, end or failure, the timer — and executes the actions each call returns, in order; `next_deadline()` says
when to call `timer(now)`. The phases (HEAD, HEADLESS, WAIT, STREAM, SWITCHED, MERGE, DONE) are described in
docs/ARCHITECTURE.md, "The download"; `_enter` makes every change of phase, checked against the table of the changes
allowed (`state.NEXT`). What one concern alone needs is kept in a small state object the core owns (`state`): what
is known of the representation, the headless answer, the lookups, the origin bytes the merge checks the swarm
against, and parking's (`parking.Parking`).

Parking (`parking`: its settings, state and decisions): a download that would still run at its early lookup
looks the URL up at its head and leaves the origin to enough independent others fetching it, or says it fetches too
(`ClaimFetching`); a file of several segments is then taken segment by segment (`StartSegments`). A trusted manifest
found before the origin could be judged is kept (`state.KEPT_FOR`) for the early point or a switch. Privacy
(`discovery_rule`): nothing is looked up, claimed, announced or vouched for unless the origin was slow (a
switch, the early point, a head silent for half of T), asked for it, its host was slow recently, or the file is large
(`discovery_rule.Discretion`).

Guarantees the tests check: swarming never makes a download fail that the origin alone would finish (with the
origin's Range stream reopened if we had closed it ourselves); a response that cannot be completed is cut, never
ended short; the request's bookkeeping (`Account`, `HandOver`) happens once, before the last byte goes out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm.content.manifest import choose_block_size
from swarm.trust import ManifestSource

from ..origin_head import UNVOUCHED_TYPE, BodyDigest, OriginHead, late_start, resumed_start, same_version
from . import actions as act
from .actions import Action, Deliver, Source
from .adaptive import Probe, observed_policy
from .discovery_rule import Discretion
from .parking import Parking
from .parking_steps import ParkingSteps
from .settings import DownloadSettings
from .state import Headless, Lookups, Phase, Producer, Representation, Tail, checked
from .transition import CROWD_CAUSE, DIED_CAUSE, T_CAUSE, TransitionPolicy

if TYPE_CHECKING:
    from ..engine import Found


class DownloadCore(ParkingSteps):
    """One fallback download's decisions; see the module docstring. Every event method returns actions."""

    def __init__(self, settings: DownloadSettings, *, range_header: str | None = None,
                 if_range: str | None = None) -> None:
        self.settings = settings
        self.probe = Probe()  # what its origin showed, for the adaptive core (`adaptive.Outcome`)
        self.policy: TransitionPolicy = observed_policy(settings.transition, self.probe)
        self.discretion = Discretion(settings.discovery, settings.host_slow, settings.before_head)
        self.phase: Phase = Phase.HEAD  # where every download starts; `_enter` makes each change after this
        self.origin = Producer.HEAD_PENDING
        self.origin_offset = 0  # where the origin's next body byte belongs in the representation
        self.origin_error: BaseException | None = None  # why the origin's request failed, before its head
        self.swarm = Producer.NONE
        self.position = 0  # the next byte the client gets
        self.end = 0
        self.promised_start = 0  # where a late origin answer must start at the latest
        self.known = Representation()  # what the origin (or a manifest) said of the representation
        self.publishable = False
        self.spool_block: int | None = None  # the block size of the spool, when one is kept (it can be vouched)
        self.headless = Headless(range_header, if_range)
        self.lookups = Lookups()
        self.parking = Parking(settings.parking)
        self.found: Found | None = None  # the manifest it swarms with
        self.tail = Tail()  # the merge's: the last origin bytes delivered, which the swarm's first block must match
        self.fetch_start = self.swarm_position = 0
        self.reopen = False  # we closed the origin's stream ourselves: on a swarm failure, reopen it
        self.swarm_error: str | None = None
        self.delivered = {Source.ORIGIN: 0, Source.SWARM: 0}
        self.handed_over = False
        self.digest: BodyDigest | None = None  # the origin's Repr-Digest, when the answer is the whole representation

    # -- what the shell asks -------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    @property
    def wants_origin(self) -> bool:
        return not self.done and self.origin in (Producer.HEAD_PENDING, Producer.RUNNING)

    @property
    def wants_swarm(self) -> bool:
        return not self.done and self.swarm is Producer.RUNNING

    def next_deadline(self) -> float | None:
        if self.phase is Phase.HEAD:
            deadlines = [self.policy.next_deadline(), self.discretion.silent_at]
            return min((d for d in deadlines if d is not None), default=None)
        if self.phase is Phase.STREAM:
            early = None if self.lookups.looked_early else self.policy.lookup_due_at()
            deadlines = [self.policy.next_deadline(), early, None if self.lookups.running else self.parking.recheck_at,
                         self.parking.closed_until]
            return min((d for d in deadlines if d is not None), default=None)
        if self.phase is Phase.SWITCHED:
            return min((d for d in (self.lookups.at, self.parking.closed_until) if d is not None), default=None)
        return self.headless.held_until if self.phase is Phase.HEADLESS else None

    # -- events --------------------------------------------------------------------------------------------------
    def start(self, now: float) -> list[Action]:
        """The GET is sent. Its claims are looked up now if its host was slow recently, else once its head is late."""
        self.policy.start(now)
        at_once = self.discretion.start(now, self.settings.transition.first_byte_timeout,
                                        discovery=self.settings.parking.after > 0)
        return [act.LookAhead()] if at_once else []

    def timer(self, now: float) -> list[Action]:
        return self._tick(now)

    def origin_head(self, head: OriginHead, now: float) -> list[Action]:
        """The origin's response head arrived (of the first GET, or of a reopened Range request)."""
        if self.origin is not Producer.HEAD_PENDING:
            return []
        if self.phase is Phase.HEAD:
            self.policy.on_bytes(head.head_size, now)
            return self._relay(head, now)
        if self.phase in (Phase.HEADLESS, Phase.WAIT):
            # The origin answered after T: its own answer is the better one. It may switch (once) later.
            actions = self._stop_lookups()
            self.policy = observed_policy(self.settings.transition, self.probe)
            self.policy.start(now)
            self.policy.on_bytes(head.head_size, now)
            return actions + self._relay(head, now)
        if self.phase in (Phase.SWITCHED, Phase.STREAM):  # the origin reopened after parking, or a lookup
            start = resumed_start(head, self.known.size, self.known.validator, self.promised_start)
            if isinstance(start, str):
                self.origin = Producer.GONE
                why = f"the origin's answer after waiting cannot be used: {start}"
                gone = self._switch(DIED_CAUSE, why, now) if self.phase is Phase.STREAM else []
                return [act.CloseOrigin(why)] + gone
            self.origin, self.origin_offset = Producer.RUNNING, start
            return []
        if self.phase is Phase.MERGE:  # a late answer, used only if it is the representation we serve
            if head.status in (200, 206):
                self.publishable = head.swarmable
            start = late_start(head, self.found.manifest, self.promised_start) if self.found else \
                resumed_start(head, self.known.size, self.known.validator, self.promised_start)
            if isinstance(start, str):
                self.origin = Producer.GONE
                return [act.CloseOrigin(f"origin stream gone during the swarm download: {start}")] + self._starved()
            self.origin, self.origin_offset = Producer.RUNNING, start
        return []

    def origin_head_failed(self, error: BaseException, now: float) -> list[Action]:
        """The origin's request failed before its head (unreachable, refused, timed out)."""
        if self.origin is not Producer.HEAD_PENDING:
            return []
        self.origin, self.origin_error = Producer.GONE, error
        if self.phase in (Phase.HEAD, Phase.WAIT):
            self._enter(Phase.DONE)
            return [act.Fail(error)]
        if self.phase is Phase.MERGE:
            return [act.Note(f"origin request failed during the swarm download: {error}")] + self._starved()
        if self.phase is Phase.STREAM:  # asked again after a close for the early lookup
            return self._switch(DIED_CAUSE, f"the origin's request failed: {error}", now)
        return []  # HEADLESS: the lookup decides; SWITCHED: the lookups go on

    def origin_data(self, data: bytes, now: float) -> list[Action]:
        if self.origin is not Producer.RUNNING or not data:
            return []
        offset = self.origin_offset
        self.origin_offset += len(data)
        if self.phase is Phase.STREAM:
            self.policy.on_bytes(len(data), now)
        if self.phase in (Phase.STREAM, Phase.SWITCHED):
            piece = data[self.position - offset:self.end - offset]
            actions = [self._deliver_origin(piece)]
            if self.position >= self.end:
                return actions + self._origin_finished(now)
            return actions + self._tick(now)
        if self.phase is not Phase.MERGE:
            return []
        if offset > self.position:  # a stream that starts past us (another range): unusable
            self.origin = Producer.GONE
            return [act.CloseOrigin(f"the origin's answer starts at {offset}, past {self.position}; dropping it")] \
                + self._starved()
        if offset + len(data) <= self.position:
            return []
        piece = data[self.position - offset:self.end - offset]
        if self.position + len(piece) >= self.end:
            return self._complete(self._deliver(Source.ORIGIN, piece))
        return [self._deliver_origin(piece)]

    def origin_end(self, now: float) -> list[Action]:
        """The origin's body ended (before `end`, or the core would have finished)."""
        return self._origin_gone(f"origin ended the body after {self.position - self.promised_start} of "
                                 f"{self.end - self.promised_start} bytes", now)

    def origin_failed(self, reason: str, now: float) -> list[Action]:
        return self._origin_gone(reason, now)

    def head_answered(self, head: OriginHead | None) -> list[Action]:
        """The HEAD racing a headless lookup answered (None: it failed)."""
        self.headless.head_pending = False
        if self.phase is Phase.HEADLESS:
            self.headless.head_answer = head
            if self.headless.held is not None:
                return self._headless_found(self.headless.release())
        return []

    def lookup_done(self, found: Found | None, now: float, others: int = 0, ahead: int = 0) -> list[Action]:
        """A lookup's trusted manifest (None: none), the weight of the independent others that hold or fetch this
        version from the origin (`swarm.trust.working`), and of those a fetcher steps back for (`Miss.ahead`)."""
        if not self.lookups.running:
            return []
        self.lookups.running = False
        if self.phase is Phase.HEADLESS:
            if found is not None and self.headless.head_pending and self.settings.head_grace > 0:
                self.headless.hold(found, now + self.settings.head_grace)  # the HEAD may say another version
                return []
            return self._headless_found(found)
        if self.phase is Phase.STREAM:  # at the head, or the early lookup
            actions = self._streaming_answer(found, now, others, ahead)
            # Still streaming: it goes on with the origin, closed for this lookup (`_close_for_lookup`) or not.
            return actions + self._reopen_after_lookup() if self.phase is Phase.STREAM else actions
        if self.phase is not Phase.SWITCHED:
            return []
        if found is not None:
            self.parking.parked_until = None
            self.found = found
            return self._merge()
        if self.parking.parked_until is not None:
            if (poll_at := self.parking.next_poll(now)) is None:
                return self._unpark(now)
            self.lookups.at = poll_at
            return []
        if (parked := self._park_if(others, ahead, now)) is not None:  # switched, still reading the origin
            return parked
        if self.origin is Producer.GONE and not self.parking.closed_for_lookup:
            return self._cut(f"origin_cut: the origin broke off after {self.position} bytes and no peer has the rest")
        few = not self.parking.enough(others, ahead)  # (switched before its first answer: claims now, as above)
        claim = self.parking.claiming(now, self.spool_block, self.known) if few else []
        reopened = self._reopen_after_lookup()  # (switched while closed for the early lookup, which it took over)
        wait = self.lookups.again(now, self.settings.repoll)
        return claim + reopened + [act.Note(
            f"no usable manifest or provider yet; the origin goes on, asking again in {wait:g} s", False)]

    def _streaming_answer(self, found: Found | None, now: float, others: int, ahead: int) -> list[Action]:
        """`lookup_done` while the origin's answer is still relayed (STREAM)."""
        if found is not None and self.policy.crowd(now) is not None:
            self.found = found  # the policy now says `crowd` (or a cause due before): _tick switches
        elif found is not None:  # too early to judge the origin: kept for the early lookup (_tick) or a switch
            self.lookups.kept = (found, now)
        elif (parked := self._park_if(others, ahead, now)) is not None:  # (found nothing, from here on)
            return parked
        elif claim := self.parking.claiming(now, self.spool_block, self.known):  # too few others at it
            return claim + self._tick(now)  # (this node fetches it, and will vouch)
        elif self.parking.claimed:
            self.parking.recheck_later(now)
        return self._tick(now)

    def swarm_data(self, data: bytes, now: float) -> list[Action]:
        if self.swarm is not Producer.RUNNING or self.phase is not Phase.MERGE or not data:
            return []
        actions: list[Action] = []
        if not self.tail.first_block_matches(data, self.swarm_position):
            assert self.found is not None
            self.swarm, self.swarm_position = Producer.GONE, -1  # nothing of it is kept or shared
            self.swarm_error = "manifest_mismatch: peers' content differs from the origin's"
            actions += [act.RejectManifest(self.found.source), act.StopSwarm(), act.SwarmFailed(self.swarm_error)]
            return actions + self._reopen() + self._starved()
        if self.swarm_position + len(data) > self.position:
            piece = data[self.position - self.swarm_position:] if self.swarm_position < self.position else data
            delivery = self._deliver(Source.SWARM, piece)
            self.swarm_position += len(data)
            if self.position >= self.end:
                return self._complete(delivery)
            actions.append(delivery)
        else:
            self.swarm_position += len(data)
        return actions

    def swarm_end(self, now: float) -> list[Action]:
        if self.swarm is not Producer.RUNNING:
            return []
        self.swarm = Producer.GONE
        return self._starved()

    def swarm_failed(self, reason: str, now: float) -> list[Action]:
        if self.swarm is not Producer.RUNNING:
            return []
        self.swarm = Producer.GONE
        self.swarm_error = f"swarm_failed: {reason}"
        failed: list[Action] = [act.Note(f"swarm download failed: {reason}"), act.SwarmFailed(self.swarm_error)]
        return failed + self._reopen() + self._starved()

    def abort(self) -> list[Action]:
        """The shell is leaving (done, cut, client gone, stopping): what must still happen, once."""
        actions = self._stop_lookups()
        if self.swarm is not Producer.NONE and not self.handed_over:
            actions += self._hand_over(swarm_done=False)
        if not self.done:  # the shell aborts a done core too
            self._enter(Phase.DONE)
        return actions

    # -- internals -----------------------------------------------------------------------------------------------
    def _relay(self, head: OriginHead, now: float) -> list[Action]:
        """Relay the origin's answer; watch it if it may be swarmed."""
        self.origin = Producer.RUNNING
        if not head.swarmable or head.end is None:
            self.policy.finish()
            self._enter(Phase.DONE)
            return [act.RelayAsIs(head.reason)]
        self._enter(Phase.STREAM)
        self.publishable = True
        self.known = Representation.of(head)
        self.position = self.origin_offset = self.tail.end = self.promised_start = head.start
        self.end = head.end
        if head.status == 200:
            self.digest = BodyDigest(head.digest) if head.digest else None
        actions: list[Action] = [act.RelayHead()]
        size = self.known.size
        if head.status != 206 and size is not None and self.settings.sharing and size <= self.settings.max_spool:
            published = self.known.published.block_size if self.known.published else None
            block_size = self.settings.spool_block_size(size, published)
            actions.append(act.OpenSpool(size, block_size))
            if self.known.validator:  # else nobody can vouch for it: no claim is worth making
                self.spool_block = block_size or choose_block_size(size)
        if self.position >= self.end:
            return actions + self._origin_finished(now)
        if self.known.hinted:  # before any body byte: the origin published its manifest and asks us to swarm
            actions += self._switch(self.policy.hint(now) or T_CAUSE, "the origin asks clients to swarm", now)
            if self.phase is Phase.SWITCHED:  # its providers are looked up: the busy origin is left meanwhile
                actions += self._close_for_lookup(now, asked=True)
            return actions
        if self._may_park() and self.policy.lookup_due_at() is not None and self._discoverable() \
                and self.end - self.position > self.policy.min_rate * self.policy.early_lookup:
            self.lookups.running = True  # it would still run at the early lookup even at R: do others fetch it already?
            actions.append(act.StartLookup(headless=False))
        return actions + self._tick(now)

    def _tick(self, now: float) -> list[Action]:
        """What is due at `now` without any new byte."""
        if self.phase is Phase.HEADLESS and self.headless.held_until is not None and now >= self.headless.held_until:
            return self._headless_found(self.headless.release())
        if self.phase is Phase.HEAD:
            early: list[Action] = []
            if self.discretion.silence_over(now):
                early = [act.Note("no response head yet: the origin counts as slow; looking it up"), act.LookAhead()]
            if self.policy.check(now) is None:
                return early
            self.discretion.slow = True
            if not self.discretion.before_head:  # a local name: nothing is looked up before its head says where
                self._enter(Phase.WAIT)
                return early + [act.Switch(T_CAUSE, 0, "no first byte in time; a local name waits for its origin")]
            self._enter(Phase.HEADLESS)
            self.lookups.running = self.headless.head_pending = True
            return early + [act.Switch(T_CAUSE, 0, "no first byte in time"), act.StartHead(),
                            act.StartLookup(headless=True)]
        if self.phase is Phase.STREAM:
            actions: list[Action] = []
            due = None if self.lookups.looked_early else self.policy.lookup_due_at()
            if due is not None and now >= due:
                self.lookups.looked_early = True
                self.discretion.slow = self.discretion.slow or self.policy.slow_so_far(now)
                if self.policy.slow_so_far(now) and not self.lookups.running and self._take_kept(now):
                    self.policy.crowd(now)  # records `crowd` (slow so far, at the early point): switched below
                    actions.append(act.Note("the origin is slow so far; the swarm has it (the lookup at its head)"))
                elif self.policy.slow_so_far(now) and not self.lookups.running:  # else fast enough: no early lookup
                    self.lookups.running = True
                    actions += [act.Note("the origin is slow so far; looking for peers already"),
                                act.StartLookup(headless=False)]
                    actions += self._close_for_lookup(now)
            if self.parking.closed_until is not None and now >= self.parking.closed_until:
                actions.append(act.Note("the lookup is slow: the origin asked again meanwhile", False))
                actions += self._reopen_after_lookup()
            if self.parking.recheck_due(now, looking=self.lookups.running) and self.policy.slow_so_far(now):
                self.lookups.running = True
                self.parking.rechecks += 1
                actions.append(act.StartLookup(headless=False))  # others ahead fetch it too, now their claims landed?
            cause = self.policy.check(now)
            if cause is not None:
                reason = "the swarm has it and the origin is slow" if cause == CROWD_CAUSE else f"transition {cause}"
                actions += self._switch(cause, reason, now)
            return actions
        if self.phase is Phase.SWITCHED:
            later: list[Action] = []
            if self.parking.closed_until is not None and now >= self.parking.closed_until:
                later += self._reopen_after_lookup()  # (switched while closed for a slow early lookup)
            if self.lookups.at is not None and now >= self.lookups.at:
                self.lookups.at, self.lookups.running = None, True
                later.append(act.StartLookup(headless=False))
            return later
        return []

    def _switch(self, cause: str, reason: str, now: float) -> list[Action]:
        """Leave the origin's lead: finish from the swarm if it can, else from the origin alone."""
        self._enter(Phase.SWITCHED)
        self.discretion.slow = True
        actions: list[Action] = [act.Switch(cause, self.position, reason)]
        if self.found is not None or self._take_kept(now):  # an early lookup found it: no second lookup
            return actions + self._merge()
        if not self.lookups.running:  # an early lookup still running becomes the switch's first lookup
            self.lookups.running = True
            actions.append(act.StartLookup(headless=False))
        return actions

    def _take_kept(self, now: float) -> bool:
        """Swarm with the head's lookup's manifest, if it is recent enough (`Lookups.take_kept`)."""
        if (kept := self.lookups.take_kept(now)) is not None:
            self.found = kept
        return kept is not None

    def _origin_gone(self, reason: str, now: float) -> list[Action]:
        if self.origin is not Producer.RUNNING:
            return []
        self.origin = Producer.GONE
        if self.phase is Phase.STREAM:
            return self._switch(DIED_CAUSE, reason, now)
        if self.phase is Phase.SWITCHED:
            actions: list[Action] = [act.Note(f"origin gone during the lookup: {reason}")]
            if not self.lookups.running and self.lookups.at is None:  # cannot happen: a lookup runs or is scheduled
                return actions + self._cut(f"origin_cut: the origin broke off after {self.position} bytes and "
                                           "no peer has the rest")
            return actions  # the lookup under way (or scheduled) is the last chance
        if self.phase is Phase.MERGE:
            return [act.Note(f"origin stream gone during the swarm download: {reason}")] + self._starved()
        return []

    def _headless_found(self, found: Found | None) -> list[Action]:
        """The lookup after a `T` switch before any origin byte answered."""
        actions: list[Action] = [act.StopHead()] if self.headless.stop() else []
        described = None
        head = self.headless.head_answer
        if found is not None and head is not None and head.status == 200:
            if not same_version(head, found.manifest):
                actions.append(act.Note("the origin's HEAD shows another version than the manifest; not swarming"))
                found = None
            else:
                described = (head.content_type, head.content_encoding)
        if found is None:
            if self.origin is Producer.GONE:
                self._enter(Phase.DONE)
                assert self.origin_error is not None  # (the origin is gone for it)
                return actions + [act.Fail(self.origin_error)]
            self._enter(Phase.WAIT)
            return actions + [act.Note("no usable manifest or provider; waiting for the origin")]
        manifest = found.manifest
        self.known = Representation(manifest.size, manifest.validator)  # (the rest stays unknown: no origin head)
        status, start, end = self.headless.range_of(manifest)
        if status == 416:
            self._enter(Phase.DONE)
            return actions + [act.Respond(416, 0, 0, manifest, None)]
        if described is None and found.source in (ManifestSource.QUORUM, ManifestSource.ANY):
            described = (UNVOUCHED_TYPE, None)  # never a stranger's Content-Type
        self.found = found
        self.position = self.tail.end = self.promised_start = start
        self.end = end
        if status == 200 and head is not None and head.status == 200:
            self.digest = BodyDigest(head.digest) if head.digest else None
        actions.append(act.Respond(status, start, end, manifest, described))
        if start >= end:  # an empty representation: nothing to fetch
            self._enter(Phase.DONE)
            return actions + [act.Finish()]
        if start == 0 and end == manifest.size and self.settings.sharing and manifest.size <= self.settings.max_spool:
            # In the manifest's blocks: the swarm fills the same store entry, and a root has one block size.
            actions.append(act.OpenSpool(manifest.size, manifest.block_size))
        return actions + self._merge()

    def _merge(self) -> list[Action]:
        """Start the block engine beside the origin (if still open), from the block holding the last origin byte
        delivered, so that the first swarm block is checked against the origin's bytes."""
        assert self.found is not None
        self._enter(Phase.MERGE)
        self.parking.close_over()  # (closed for the lookup that found it: the swarm decides now, `_reopen` after)
        manifest = self.found.manifest
        actions = self._stop_lookups()
        if self.origin is Producer.RUNNING and self.known.ranges and self.known.validator and self._swarm_takes_over():
            # The swarm has it all: the stream would send a prefix nobody reads. The Range source takes blocks nobody
            # has; a failed swarm reopens the stream where delivery got to.
            self.origin, self.reopen = Producer.GONE, True
            actions.append(act.CloseOrigin())
        self.fetch_start = self.tail.merge_at(self.position, manifest.block_size)
        self.swarm, self.swarm_position = Producer.RUNNING, self.fetch_start
        return actions + [act.StartSwarm(self.found, self.fetch_start, self.end)]

    def _swarm_takes_over(self) -> bool:
        """Does the swarm take the rest alone? When the origin asked (with its manifest), and on a crowd switch: in
        the lab's crowd at 20/s, streams kept open beside the swarm were half of what the origin sent, unread. A T
        or R switch keeps the origin racing: it may still be the faster of the two."""
        assert self.found is not None
        if self.known.hinted:
            return self.found.source is ManifestSource.ORIGIN
        return self.policy.cause == CROWD_CAUSE and bool(self.found.providers)

    def _reopen(self) -> list[Action]:
        """After a swarm failure: the origin again from the delivery point, if we had closed it ourselves."""
        if not self.reopen or self.origin is not Producer.GONE:
            return []
        assert self.known.validator is not None
        self.reopen = False
        self.origin, self.promised_start = Producer.HEAD_PENDING, self.position
        streams = self.parking.streams(self.known, self.end - self.position)  # a claimer's: several at once
        return [act.ReopenOrigin(self.position, self.end, self.known.validator, streams)]

    def _starved(self) -> list[Action]:
        """Neither producer can go on: the response cannot be completed."""
        if self.phase is not Phase.MERGE or self.position >= self.end or self.wants_origin or self.wants_swarm:
            return []
        return self._cut(f"origin_cut: neither the origin nor the swarm can supply bytes {self.position}.. "
                         f"({self.swarm_error or 'both failed'})")

    def _complete(self, last: Deliver) -> list[Action]:
        """The last piece is here. Clean up before it goes out: a client holding the whole body may hang up at
        once, and its request record must be complete by then."""
        actions: list[Action] = []
        if self.origin is not Producer.GONE:
            self.origin = Producer.GONE
            actions.append(act.CloseOrigin())
        if self.digest and self.digest.disagrees():  # the manifest's bytes are not what the origin serves
            self.publishable, self.swarm_position = False, -1  # nothing of it is kept or shared
            algorithm = self.digest.algorithm
            actions.append(act.WithdrawSegments(f"the body disagrees with its {algorithm} Repr-Digest"))
            if self.delivered[Source.SWARM]:
                self.swarm_error = f"digest_mismatch: the body does not match the origin's Repr-Digest ({algorithm})"
                actions += [act.RejectManifest(self.found.source if self.found else ManifestSource.SEGMENTS),
                            act.SwarmFailed(self.swarm_error)]
                return actions + self._hand_over(swarm_done=False) + self._cut(self.swarm_error)
        actions += self._hand_over(swarm_done=self.swarm_position >= self.end)
        self._enter(Phase.DONE)
        return actions + [last, act.Finish()]

    def _hand_over(self, *, swarm_done: bool) -> list[Action]:
        self.handed_over = True
        self.swarm = Producer.GONE
        # The swarm is stopped first: stopping fills its report, which Account reads.
        shared = self.publishable and self._discoverable()
        return [act.StopSwarm(), act.Account(self.delivered[Source.SWARM]),
                act.HandOver(self.found.manifest if self.found else None, self.fetch_start, swarm_done, shared,
                             shared and self.parking.first_hand())]

    def _origin_finished(self, now: float) -> list[Action]:
        """The origin delivered the last byte (the response's `end`)."""
        self.discretion.slow = self.discretion.slow or self.policy.slow_to_the_end(now)
        self.policy.finish()
        self._enter(Phase.DONE)
        self.origin = Producer.GONE
        actions = self._stop_lookups()
        if self.digest and self.digest.disagrees():  # the origin's own bytes: relayed as they are, never shared
            self.publishable = False
            why = f"the body disagrees with its {self.digest.algorithm} Repr-Digest"
            actions += [act.Note(f"{why}: not shared"), act.WithdrawSegments(why)]
        elif self.publishable and not self._discoverable():
            self.publishable = False
            actions.append(act.Note("kept private: a fast origin and a small file (nothing announced)"))
        return actions + [act.OriginComplete(self.publishable), act.Finish()]

    def _discoverable(self) -> bool:  # may it look its URL up, claim, announce or vouch for it?
        return self.discretion.allows(hinted=self.known.hinted, size=self.known.size)

    def _deliver(self, source: Source, piece: bytes) -> Deliver:
        self.position += len(piece)
        self.delivered[source] += len(piece)
        if self.digest is not None:
            self.digest.update(piece)
        return Deliver(source, piece)

    def _deliver_origin(self, piece: bytes) -> Deliver:
        delivery = self._deliver(Source.ORIGIN, piece)
        self.tail.keep(piece, self.position)
        return delivery

    def _enter(self, phase: Phase) -> None:  # every change of phase; one `state.NEXT` does not list raises
        self.phase = checked(self.phase, phase)

    def _stop_lookups(self) -> list[Action]:
        actions: list[Action] = [act.StopLookup()] if self.lookups.stop() else []
        if self.headless.stop():
            actions.append(act.StopHead())
        return actions

    def _cut(self, reason: str) -> list[Action]:
        self._enter(Phase.DONE)
        return self._stop_lookups() + [act.Cut(reason)]
