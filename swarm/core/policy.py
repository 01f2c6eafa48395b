"""Request policy: what to ask whom, now (sans-I/O; time comes in as `now`, deadlines go out).

The policy sits between the connections and the picker. Every event — a source joins, announces a block,
delivers one, refuses one, vanishes; a block verifies or fails its hash; a deadline passes — is a method call
with the current time, and the answer is a list of actions for the asyncio shell to carry out:

* `Request(source, block)` — ask `source` for `block` (a REQUEST frame, or an HTTP Range request to the origin);
* `Cancel(source, block)` — we no longer want it from `source` (another copy won, or the request expired);
* `Drop(source, reason)` — close `source` for good: it is banned (bad data) or unresponsive;
* `Discard(source, block)` — the bytes just received are not wanted (a duplicate, or from a dropped source):
  throw them away unverified.

After every call the shell re-arms one timer at `next_deadline()` and calls `on_timeout(now)` when it fires.

Rules:

* **bounded outstanding requests** per source: `peer_max_outstanding` for peers, `origin_max_outstanding` for the
  origin (its own cap, so a flood of fallbacks cannot hammer it); `set_cap` lets a later rate estimator adapt it;
* **per-request timeout** (`request_timeout`, `origin_request_timeout`). When a request to a source expires, the
  source has stalled: it gets one strike, *all* its outstanding blocks go back to the picker at once (retrying
  them one deadline at a time would stall the streaming window for several timeouts) with a `Cancel` each, and
  it is snubbed — one request at a time — until it delivers again. A late answer is still used;
* **retry elsewhere**: a source that let a block expire, or refused it, is not asked for that block again for
  `retry_backoff` seconds; the expiry of that ban is a deadline too, so a block only one source has is retried;
* **strikes**: after `max_strikes` consecutive expiries or refusals (reset by a good block) a peer is dropped.
  An expiry counts only if the source delivered nothing for `max_strikes` timeouts: a peer whose upload is
  shared by a crowd answers late but answers, and dropping it would leave the crowd with fewer sources;
  The origin is never dropped for slowness — swarming must not make a download fail that the origin alone
  would finish — it stays snubbed instead;
* **trust** (`swarm.core.trust`): a hash failure bans its sender (usually at once: the fault is certain), a banned
  source is dropped and never asked again; a source on parole gets one request at a time. This holds for the
  origin too: origin bytes that fail the manifest's hashes mean the representation changed under us, and the
  fetch goes on from peers (the shell may also treat it as a reason to give up on the manifest);
* **the origin yields**: a block only the origin is fetching is taken back from it (`Cancel`) when a responsive
  peer with a free slot announces it (`origin_yields`), so the shared origin's rate goes to blocks no peer has;
* **a priority source** (`add_peer(..., priority=True)`: the cluster's pusher, for the nodes it feeds) still
  asked for blocks keeps all but `priority_others` other sources without outstanding requests, so its one flow is
  not one among dozens on our downlink; once it has nothing more for us, stalls or is lost, the others are asked;
  while `priority_first()` says so, only `priority_far_others` of them may be far ones (`add_peer(..., far=True)`);
* a **vanished or dropped source's** outstanding blocks become pickable immediately and are handed to the
  other sources in the same call — so no banned or vanished source can stall the fetch while another source,
  the origin included, has the block.

When blocks go back to the picker every source with free slots is offered work, best first (not snubbed, then
by trust points); otherwise only the sources whose slots changed are. Each call is O(sources touched × pick).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Container, Hashable, Iterable
from dataclasses import dataclass, field

from swarm.core.picker import ORIGIN, Picker
from swarm.core.trust import Trust

__all__ = ["Request", "Cancel", "Drop", "Discard", "Action", "Either", "PolicyConfig", "RequestPolicy"]

Source = Hashable


@dataclass(frozen=True)
class Request:
    source: Source
    block: int


@dataclass(frozen=True)
class Cancel:
    source: Source
    block: int


@dataclass(frozen=True)
class Drop:
    source: Source
    reason: str


@dataclass(frozen=True)
class Discard:
    source: Source
    block: int


Action = Request | Cancel | Drop | Discard


@dataclass(frozen=True)
class PolicyConfig:
    peer_max_outstanding: int = 8
    # The origin's own cap (proxy.engine's ORIGIN_RANGE_CONCURRENCY): a request queued behind it would run its
    # timeout while waiting. An overloaded origin may take a minute for one block; its source's stall timeout
    # (no byte for 30 s) catches a dead one, so this one is long: a cancelled Range request wastes its bytes.
    origin_max_outstanding: int = 2
    request_timeout: float = 5.0
    origin_request_timeout: float = 120.0
    retry_backoff: float = 10.0
    max_strikes: int = 3
    # Ask the origin only for blocks no peer has or fetches (`Picker.pick(spread=True)`): the origin is shared
    # by a whole crowd, and a block asked of it is not asked of the peers. A silent peer then delays the
    # blocks it alone holds until it is dropped (max_strikes request timeouts). False: the origin takes what
    # the usual order gives it, as any peer does.
    spread_origin: bool = True
    # ... and while no peer is known at all, too: the delivery point first, then each downloader's own order
    # (`RequestPolicy._origin_spreads`). False: the window's order then, as for a lone downloader streaming in order.
    spread_origin_alone: bool = True
    # A block asked of the origin is taken back from it when a responsive peer with a free slot announces it
    # (`Cancel` to the origin, the peer asked instead). In a crowd's first seconds nodes that had not found
    # each other yet asked the shared origin for the same few blocks, each at its share of the origin's
    # rate; a peer delivers the block in a round trip and the origin's rate goes to blocks nobody has.
    origin_yields: bool = True
    # While a priority source (`add_peer(..., priority=True)`: the cluster's pusher) still has something for
    # us, at most this many other sources keep requests outstanding. A downlink is shared per flow: beside
    # 64 busy peers the pusher's one flow got a sliver of a DC representant's downlink, and the pusher's
    # uplink, which feeds everybody, idled. 7: the best of 0-16 in `bench.sim.lab` at 100 agents (a DC
    # representant's rack peers need that many flows to fill the rest of its downlink: 5 was 0.6 s slower,
    # 2 3.4 s); 16 and up: no effect. Nothing marked: no effect.
    priority_others: int = 7
    # While `priority_first()` says so, at most this many of those others may be far sources (`add_peer(...,
    # far=True)`: across the rack or DC link the priority source's flow takes too). The cluster asks it of a root
    # member whose share from the pusher lags the other root members' (`cluster.lag`): its rack's shaped downlink
    # carried the pusher's one flow beside about nine, its share arrived last, and the other racks, which can
    # have it only through its rack's uplink, finished 0.6-3.2 s after it (docs/cluster.md). 0: in `bench.sim.lab
    # --crosscheck` (seeds 1 and 3) 0 and 1 both took the tail off (17.08 s against 18.80 and 17.93 s), with 0 the
    # share was in 3-6 s sooner (1 left about 1 s to pass it on). Never asked of a member that does not lag: held
    # to 1 or 0 far sources from the start, every DC representant at 100 agents fell behind its rack (p50 11.54 ->
    # 11.96 and 18.90 s): there the pusher's uplink, not the receiver's link, paces that flow.
    priority_far_others: int = 0
    priority_first: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        if min(self.peer_max_outstanding, self.origin_max_outstanding, self.max_strikes) < 1:
            raise ValueError("caps and max_strikes must be >= 1")
        if min(self.request_timeout, self.origin_request_timeout) <= 0 or self.retry_backoff < 0:
            raise ValueError("timeouts must be > 0 and retry_backoff >= 0")


@dataclass(slots=True)
class _SourceState:
    cap: int
    timeout: float
    #: block -> deadline of the outstanding request
    outstanding: dict[int, float] = field(default_factory=dict)
    #: block -> time until which this source is not asked for it again
    avoid: dict[int, float] = field(default_factory=dict)
    snubbed: bool = False
    order: int = 0
    last_delivery: float = float("-inf")
    priority: bool = False
    far: bool = False  # across a link the priority source's flow takes too (`PolicyConfig.priority_far_others`)


class Either:
    """A block to skip for either reason (always true, so the picker never reads it as "nothing to skip")."""

    __slots__ = ("a", "b")

    def __init__(self, a: Container[int], b: Container[int]) -> None:
        self.a, self.b = a, b

    def __contains__(self, block: object) -> bool:
        return block in self.a or block in self.b

    def __bool__(self) -> bool:
        return True


# kinds of timer entries in the heap
_REQUEST, _AVOID = 0, 1


class RequestPolicy:
    """Decides which requests to send to whom, consulting the picker and trust."""

    def __init__(self, picker: Picker, trust: Trust | None = None, config: PolicyConfig | None = None) -> None:
        self.picker = picker
        self.trust = trust or Trust()
        self.config = config or PolicyConfig()
        self._sources: dict[Source, _SourceState] = {}
        self._received_from: dict[int, Source] = {}
        # (time, seq, kind, source, block); stale entries are skipped when they surface
        self._timers: list[tuple[float, int, int, Source, int]] = []
        self._seq = itertools.count()
        # Blocks not to ask a source for now, beyond its own retry bans (`swarm.core.starts`: left to a nearer
        # peer that is fetching them), with a version that changes whenever one is let go (the picker's
        # memo). None: every source may be asked for anything it has.
        self.held_back: Callable[[Source, float], tuple[Container[int], Hashable] | None] | None = None
        self._priority: list[_SourceState] = []  # the priority sources' states (`PolicyConfig.priority_others`)
        self._held = False  # a source with free slots was left idle for them since they last let go

    # -- queries ------------------------------------------------------------------------------------------

    @property
    def is_complete(self) -> bool:
        return self.picker.is_complete

    def sources(self) -> list[Source]:
        return list(self._sources)

    def outstanding(self, source: Source) -> dict[int, float]:
        """Outstanding requests of `source`: block -> deadline."""
        state = self._sources.get(source)
        return dict(state.outstanding) if state else {}

    def cap(self, source: Source) -> int:
        """How many requests `source` may have outstanding right now."""
        state = self._sources[source]
        if state.snubbed or self.trust.on_parole(source):
            return 1
        return state.cap

    def avoided(self, source: Source) -> int:
        """How many blocks `source` is not asked for again yet (it refused them, or let them time out)."""
        state = self._sources.get(source)
        return len(state.avoid) if state else 0

    def is_snubbed(self, source: Source) -> bool:
        state = self._sources.get(source)
        return state is not None and state.snubbed

    def next_deadline(self) -> float | None:
        """When `on_timeout` must be called next (None: nothing pending)."""
        timers = self._timers
        while timers and not self._timer_is_live(timers[0]):
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    # -- sources ------------------------------------------------------------------------------------------

    def add_peer(
        self,
        source: Source,
        now: float,
        bitfield: bytes | bytearray | Iterable[object] | None = None,
        *,
        has_all: bool = False,
        priority: bool = False,
        far: bool = False,
    ) -> list[Action]:
        """A peer connected and sent its BITFIELD (or said it has everything). `priority`: while it has blocks for
        us, the other sources are held to `PolicyConfig.priority_others` busy ones; `far`: it counts among the far
        ones (`PolicyConfig.priority_far_others`)."""
        if source is ORIGIN:
            raise ValueError("use add_origin for the origin")
        return self._add(source, now, self.config.peer_max_outstanding, self.config.request_timeout, bitfield,
                         has_all, priority, far)

    def add_origin(self, now: float) -> list[Action]:
        """The origin answers Range requests: a source with every block and its own cap."""
        return self._add(
            ORIGIN, now, self.config.origin_max_outstanding, self.config.origin_request_timeout, None, True
        )

    def _add(
        self,
        source: Source,
        now: float,
        cap: int,
        timeout: float,
        bitfield: bytes | bytearray | Iterable[object] | None,
        has_all: bool,
        priority: bool = False,
        far: bool = False,
    ) -> list[Action]:
        if self.trust.is_banned(source):
            return [Drop(source, "banned")]
        if source in self._sources:
            raise ValueError(f"source {source!r} already added")
        self.picker.add_source(source, bitfield, has_all=has_all)
        self._sources[source] = state = _SourceState(cap=cap, timeout=timeout, order=next(self._seq),
                                                     priority=priority, far=far)
        if priority:
            self._priority.append(state)
        return self._take_from_origin(source, now) or self._fill([source], now)

    def on_have(self, source: Source, block: int, now: float) -> list[Action]:
        """`source` announced `block`."""
        if source not in self._sources:
            return []
        if self.picker.have(source, block):
            return self._fill([source], now)
        # Not new to pick, but perhaps a block the origin is fetching for us: that one it can take over. Most HAVEs
        # come here, and most fetches of a swarm have no origin.
        return self._take_from_origin(source, now) if ORIGIN in self._sources else []

    def set_cap(self, source: Source, cap: int, now: float) -> list[Action]:
        """Change `source`'s outstanding-request cap (e.g. from a rate estimate)."""
        if cap < 1:
            raise ValueError("cap must be >= 1")
        self._sources[source].cap = cap
        return self._fill([source], now)

    def on_source_lost(self, source: Source, now: float) -> list[Action]:
        """`source` disconnected: its outstanding blocks are handed to the others now."""
        if source not in self._sources:
            return []
        return self._remove(source, now)

    # -- deliveries ---------------------------------------------------------------------------------------

    def on_block(self, source: Source, block: int, now: float) -> list[Action]:
        """The bytes of `block` arrived from `source`, not yet verified.

        The shell verifies them unless the answer contains `Discard(source, block)`, then reports the
        outcome with `on_verified` or `on_hash_failure`.
        """
        state = self._sources.get(source)
        if state is None:  # dropped, banned or unknown: its bytes are never used
            return [Discard(source, block)]
        state.outstanding.pop(block, None)
        state.snubbed = False  # it answers
        state.last_delivery = now
        if not self.picker.wants(block):
            return [Discard(source, block), *self._fill([source], now)]
        losers = self.picker.on_received(source, block)
        self._received_from[block] = source
        actions: list[Action] = []
        for loser in losers:
            loser_state = self._sources.get(loser)
            if loser_state is not None:
                loser_state.outstanding.pop(block, None)
            actions.append(Cancel(loser, block))
        actions += self._fill([source, *losers], now)
        return actions

    def on_verified(self, block: int, now: float) -> list[Action]:
        """The received copy of `block` passed its hash (or the block was obtained otherwise)."""
        actions: list[Action] = []
        for loser in self.picker.on_verified(block):
            loser_state = self._sources.get(loser)
            if loser_state is not None:
                loser_state.outstanding.pop(block, None)
            actions.append(Cancel(loser, block))
        source = self._received_from.pop(block, None)
        if source is not None:
            self.trust.on_good_block(source)
        return actions + self._fill([s for s in (source,) if s is not None], now)

    def on_hash_failure(self, block: int, now: float) -> list[Action]:
        """The received copy of `block` failed its hash: blame the sender, fetch the block again elsewhere."""
        source = self._received_from.pop(block, None)
        self.picker.on_failed(block)
        actions: list[Action] = []
        if source is not None:
            for banned in self.trust.on_hash_failure([source]):
                if banned in self._sources:
                    actions += [Drop(banned, self.trust.record(banned).ban_reason)]
                    actions += self._remove(banned, now, refill=False)
            if source in self._sources:
                self._avoid(source, block, now)
        return actions + self._fill(self._ranked_sources(), now)

    def on_bad_hash_layer(self, source: Source, now: float) -> list[Action]:
        """`source` sent a hash layer that does not match the root: certain fault, ban and drop it."""
        self.trust.on_bad_hash_layer(source)
        if source not in self._sources:
            return []
        return [Drop(source, self.trust.record(source).ban_reason), *self._remove(source, now)]

    def on_reject(self, source: Source, block: int, now: float) -> list[Action]:
        """`source` refused `block` (a REJECT frame; for the origin, anything but a matching 206)."""
        state = self._sources.get(source)
        if state is None or state.outstanding.pop(block, None) is None:
            return []
        self.picker.abort(source, block)
        self._avoid(source, block, now)
        actions = self._strike(source, now)
        return actions + self._fill(self._ranked_sources(), now)

    def refill(self, now: float) -> list[Action]:
        """Hand out work again: something `held_back` kept from the sources may be free now."""
        return self._fill(self._ranked_sources(), now)

    def on_timeout(self, now: float) -> list[Action]:
        """Expire the requests whose deadline is past, and lift the retry bans that ended."""
        expired: dict[Source, list[int]] = {}
        refill: set[Source] = set()
        timers = self._timers
        while timers and timers[0][0] <= now:
            entry = heapq.heappop(timers)
            if not self._timer_is_live(entry):
                continue
            _, _, kind, source, block = entry
            if kind == _REQUEST:
                expired.setdefault(source, []).append(block)
            else:
                del self._sources[source].avoid[block]
                refill.add(source)
        actions: list[Action] = []
        for source, blocks in expired.items():
            state = self._sources[source]
            for block in blocks:
                self._avoid(source, block, now)
            # the source has stalled: everything it still owes goes elsewhere now, not one deadline at a time
            for block in sorted(state.outstanding):
                self.picker.abort(source, block)
                actions.append(Cancel(source, block))
            state.outstanding.clear()
            state.snubbed = True
            if now - state.last_delivery >= self.config.max_strikes * state.timeout:
                actions += self._strike(source, now)
        if expired:
            return actions + self._fill(self._ranked_sources(), now)
        return actions + self._fill([s for s in self._ranked_sources() if s in refill], now)

    # -- internals ----------------------------------------------------------------------------------------

    def _take_from_origin(self, peer: Source, now: float) -> list[Action]:
        """Cancel the origin's requests for the blocks `peer` has and only the origin is fetching, when `peer`
        can take one now: responsive and with a free slot (see `PolicyConfig.origin_yields`). Then `peer` and
        the origin are given work; nothing at all (an empty list) when no block was taken."""
        origin = self._sources.get(ORIGIN)
        if origin is None:  # first: most fetches of a swarm have no origin, and every HAVE not new to pick asks
            return []
        state = self._sources[peer]
        if not self.config.origin_yields or peer is ORIGIN or state.snubbed \
                or self.trust.on_parole(peer) or len(state.outstanding) >= state.cap:
            return []
        taken: list[Action] = []
        for block in list(origin.outstanding):
            if self.picker.has(peer, block) and self.picker.requesters(block) == {ORIGIN}:
                del origin.outstanding[block]
                self.picker.abort(ORIGIN, block)
                taken.append(Cancel(ORIGIN, block))
        return (taken + self._fill([peer, ORIGIN], now)) if taken else []

    def _strike(self, source: Source, now: float) -> list[Action]:
        strikes = self.trust.on_strike(source)
        if strikes >= self.config.max_strikes and source is not ORIGIN:
            return [Drop(source, f"unresponsive ({strikes} strikes)"), *self._remove(source, now, refill=False)]
        return []

    def _remove(self, source: Source, now: float, refill: bool = True) -> list[Action]:
        state = self._sources.pop(source)
        state.outstanding.clear()
        if state.priority:
            self._priority.remove(state)
        self.picker.remove_source(source)
        return self._fill(self._ranked_sources(), now) if refill else []

    def _avoid(self, source: Source, block: int, now: float) -> None:
        if self.config.retry_backoff <= 0:
            return
        until = now + self.config.retry_backoff
        self._sources[source].avoid[block] = until
        heapq.heappush(self._timers, (until, next(self._seq), _AVOID, source, block))

    def _timer_is_live(self, entry: tuple[float, int, int, Source, int]) -> bool:
        when, _, kind, source, block = entry
        state = self._sources.get(source)
        if state is None:
            return False
        table = state.outstanding if kind == _REQUEST else state.avoid
        return table.get(block) == when

    def _origin_spreads(self) -> bool:
        """Whether the origin's picks are spread (`Picker.pick(spread=True)`): while some peer is responsive (not
        snubbed, not on parole), or while there is no peer at all (`spread_origin_alone`). While every peer holding
        a block has stopped answering, the origin takes the delivery point and the window as a lone source would:
        spread regardless, a peer that went silent holding everything (its NAT mapping expired) left the origin idle
        until the peer's third strike, 30 s on, as long as the fetch's stall watchdog
        (tests/proxy/download/test_fallback_cutoff.py). With no peer yet (a download the origin asked to swarm, its
        providers still unannounced), the others arriving with it are in the same state: in order, they all asked
        the busy origin for the same first blocks, and the crowd held no complete copy for seconds (`swarmproxy lab
        crowd-scale --origin-plugin`: spread, the delivery point first, then each downloader's own order, the
        first second's arrivals of 10,000 clients at 1,000/s finished at a median of 1.25 s instead of 2.17 s, and
        the p99 of 100,000 was 1.24 s instead of 1.87 s)."""
        peers = False
        for source, state in self._sources.items():
            if source is not ORIGIN:
                if not state.snubbed and not self.trust.on_parole(source):
                    return True
                peers = True
        return not peers and self.config.spread_origin_alone

    def _ranked_sources(self) -> list[Source]:
        """Who gets first pick when work is handed out: responsive before snubbed, then by trust points."""
        return sorted(
            self._sources,
            key=lambda s: (self._sources[s].snubbed, -self.trust.points(s), self._sources[s].order),
        )

    def _prioritised(self) -> bool:
        """Whether a priority source still has something for us: it answers and has requests outstanding (it
        is filled first whenever it has free slots, so none outstanding means nothing left to ask it)."""
        return any(state.outstanding and not state.snubbed for state in self._priority)

    def _first(self) -> bool:
        """Whether only `priority_far_others` far sources may be busy beside the priority source now."""
        return self.config.priority_first is not None and self.config.priority_first()

    def _far_full(self, busy: set[Source]) -> bool:
        return self._first() and sum(1 for s in busy if self._sources[s].far) >= self.config.priority_far_others

    def _fill(self, sources: Iterable[Source], now: float) -> list[Action]:
        """Give each of `sources` as many requests as its free slots allow; while a priority source has work for
        us, only `priority_others` other sources may have requests outstanding (`priority_far_others` far ones
        while `priority_first()`)."""
        if not self._priority:
            return self._fill_some(sources, now, None)
        busy = {s for s, state in self._sources.items() if state.outstanding and not state.priority}
        requests = self._fill_some(sources, now, busy)
        if self._held and (len(busy) < self.config.priority_others or not self._prioritised()):
            # a busy slot freed, or the priority source has nothing more: the idle sources that were held back
            # are offered work now (no event of their own may come)
            self._held = False
            requests += self._fill_some(
                [s for s in self._ranked_sources() if not self._sources[s].outstanding], now, busy)
        return requests

    def _fill_some(self, sources: Iterable[Source], now: float, busy: set[Source] | None) -> list[Action]:
        """`_fill`; `busy` (None: no priority source) the other sources with requests outstanding, kept current."""
        requests: list[Action] = []
        for source in dict.fromkeys(sources):  # each once, in order
            state = self._sources.get(source)
            if state is None:
                continue
            # `cap(source)`, without looking the source up again: every block delivered and HAVE new to pick fills
            cap = 1 if state.snubbed or self.trust.on_parole(source) else state.cap
            free = cap - len(state.outstanding)
            if free <= 0:
                continue
            if busy is not None and not state.priority:
                busy.discard(source)
                if (len(busy) >= self.config.priority_others or (state.far and self._far_full(busy))) \
                        and self._prioritised():
                    if state.outstanding:
                        busy.add(source)
                    self._held = True
                    continue
            deadline = now + state.timeout
            spread = source is ORIGIN and self.config.spread_origin and self._origin_spreads()
            skip: Container[int] = state.avoid
            version = None
            if self.held_back is not None and (held := self.held_back(source, now)) is not None:
                skip, version = (held[0], held[1]) if not state.avoid else (Either(state.avoid, held[0]), None)
            for block in self.picker.pick(source, free, skip=skip, spread=spread, skip_version=version):
                state.outstanding[block] = deadline
                heapq.heappush(self._timers, (deadline, next(self._seq), _REQUEST, source, block))
                requests.append(Request(source, block))
            if busy is not None and not state.priority and state.outstanding:
                busy.add(source)
        return requests
