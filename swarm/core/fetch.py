"""The download core: one representation fetched from peers and the origin (sans-I/O).

`FetchCore` turns what happens on the connections — a peer joined, a frame arrived, a peer left, an origin
Range request finished, a deadline passed — into actions for the asyncio shell (`swarm.service.fetch_run`):

* `Send(peer, message)` — put a wire message on that peer's connection;
* `OriginFetch(block, offset, length)` / `OriginCancel(block)` — start / abandon an HTTP Range request;
* `Close(peer, reason)` — close that connection for good (banned, useless or misbehaving);
* `Verified(block, data)` — these bytes passed their hash: store them (and keep them if the store fails);
* `Deliver(block)` — the next block in order is ready for the consumer: hand it over now;
* `Finished()` — every wanted block was delivered;
* `Announce(block)` — about to ask a far source for `block` (only with a `distance` function): send START to the
  peers this node serves, so that nearer ones leave it to us (`swarm.core.starts`).

It owns the picker, request policy and trust (`swarm.core.picker`, `swarm.core.policy`, `swarm.core.trust`)
and adds what they leave to it: learning the block hash layer from a peer (checked against the root; a peer with a bad
layer is banned), checking every block against that layer before anything else sees it, the wanted range
(a client's `Range`), and strictly in-order delivery. Whole blocks are requested (one REQUEST per block);
a BLOCK that is not exactly the block asked for is a protocol violation and closes the peer.

Time comes in as `now`; the shell re-arms one timer at `next_deadline()` and calls `on_timer(now)`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Hashable, Iterable

from swarm.content.manifest import Manifest
from swarm.core.picker import ORIGIN, BlockState, Mode, Picker
from swarm.core.policy import Action as PolicyAction
from swarm.core.policy import Cancel, Discard, Drop, Either, PolicyConfig, Request, RequestPolicy
from swarm.core.starts import START_TTL, NearerHolders, StartBook
from swarm.core.trust import Trust
from swarm.errors import HashMismatch, PeerError
from swarm.net import wire

# A hash layer is a few KB: a peer that has not sent it this long after the HASH_REQUEST is asked no longer
# alone: every other peer is asked at once (a party with many silent providers costs one more LAYER_TIMEOUT, not
# one per provider). Until some peer sends it no block can be verified, the origin's included, and a fetch that
# waited on silent peers had no other way out than the 30 s stall watchdog: a quorum for the right root served by
# peers that never answered took 50 s instead of 20. One that nobody answered that long after the last ask has no
# source (`has_sources`), and its caller moves on to the origin.
LAYER_TIMEOUT = 5.0

__all__ = ["Announce", "FetchCore", "Send", "OriginFetch", "OriginCancel", "Close", "Verified", "Deliver", "Finished",
           "FetchAction", "bitfield_to_bytes"]

Peer = Hashable


@dataclasses.dataclass(frozen=True)
class Send:
    peer: Peer
    message: wire.Message


@dataclasses.dataclass(frozen=True)
class OriginFetch:
    block: int
    offset: int
    length: int


@dataclasses.dataclass(frozen=True)
class OriginCancel:
    block: int


@dataclasses.dataclass(frozen=True)
class Close:
    peer: Peer
    reason: str


@dataclasses.dataclass(frozen=True)
class Verified:
    block: int
    data: bytes | bytearray  # a bytearray when received in place (TCP): nothing writes to it after


@dataclasses.dataclass(frozen=True)
class Deliver:
    block: int


@dataclasses.dataclass(frozen=True)
class Announce:
    """About to ask a far source for `block`: tell the peers this node serves (START), so nearer ones that
    fetch it too ask their far sources for other blocks (`swarm.core.starts`)."""

    block: int


@dataclasses.dataclass(frozen=True)
class Finished:
    pass


FetchAction = Send | OriginFetch | OriginCancel | Close | Verified | Deliver | Finished | Announce

# byte value -> its 8 bits as 8 bytes of 0/1, high bit first (wire order)
_BITS = [bytes((value >> (7 - bit)) & 1 for bit in range(8)) for value in range(256)]


def bitfield_to_bytes(bitfield: wire.Bitfield) -> bytes:
    """A wire BITFIELD as one 0/1 byte per block, the picker's format."""
    return b"".join(_BITS[byte] for byte in bitfield.bits)[: bitfield.count]


class FetchCore:
    def __init__(
        self,
        manifest: Manifest,
        layer: list[bytes] | None = None,
        *,
        first_block: int = 0,
        last_block: int | None = None,
        held: Iterable[int] = (),
        config: PolicyConfig | None = None,
        window: int = 8,
        rng: random.Random | None = None,
        distance: Callable[[Peer], int] | None = None,
        start_ttl: float = START_TTL,
        priority: Callable[[Peer], bool] | None = None,
    ) -> None:
        """Fetch blocks `first_block..last_block` (inclusive) of `manifest`; `held` are verified already.

        `distance(peer)` (0 = nearest), if given, turns on work stealing by START (`swarm.core.starts`): a far
        source is not asked for a block a nearer peer is fetching (its START) or holds (nearest first), and a
        request to a far source is announced first (`Announce`). `priority(peer)`, if given, marks the peers whose
        flows the others make room for (`PolicyConfig.priority_others`: the cluster's pusher)."""
        self.manifest = manifest
        # A manifest is frozen; its block count is read on every frame (a property that divides each time).
        self._count = count = manifest.num_blocks
        self.last_block = count - 1 if last_block is None else last_block
        if not 0 <= first_block <= self.last_block < count:
            raise ValueError(f"block range {first_block}..{self.last_block} outside 0..{count - 1}")
        self.first_block = first_block
        self.layer: list[bytes] | None = None
        # A random tie-break, unless a test fixes one: leechers that all asked for the same blocks in the
        # same order would hold the same blocks and have nothing to give each other.
        self.picker = Picker(count, mode=Mode.RAREST_FIRST, window=window, rng=rng or random.Random())
        self.trust = Trust()
        self.policy = RequestPolicy(self.picker, self.trust, config)
        self.distance = distance
        self.priority = priority
        self.starts: StartBook | None = None
        self.nearer: NearerHolders | None = None
        if distance is not None:
            self.starts = StartBook(start_ttl)
            self.nearer = NearerHolders(count)
            self.policy.held_back = self._held_back
        self._peers: dict[Peer, wire.Bitfield | None] = {}  # joined peers -> bitfield until the layer is known
        self._in_policy: set[Peer] = set()
        self._origin_wanted = False
        self._layer_asked: Peer | None = None
        self._layer_asked_at: float | None = None  # when the wait for the layer began: an ask alone, or the round
        self._layer_round = False  # one peer asked alone stayed silent: every peer is asked at once since
        self._layer_lost = False  # nobody sent it within LAYER_TIMEOUT of the last wait's start, nobody left to ask
        self._layer_slow: set[Peer] = set()  # asked in the round, or silent past LAYER_TIMEOUT: their answer counts
        self._no_layer: set[Peer] = set()  # peers that had no layer when asked (asked again on HAVE)
        self._verified_ahead: set[int] = set()
        self.next_delivery = first_block
        self.finished = False
        self.bytes_from: dict[str, int] = {"origin": 0, "peers": 0}
        self.hash_failures = 0  # blocks and hash layers that failed verification (for metrics)
        # Blocks outside the wanted range, and blocks already held, never need fetching.
        for block in [*range(first_block), *range(self.last_block + 1, count)]:
            self.picker.on_verified(block)
        self._initially_held = sorted(set(held) & set(range(first_block, self.last_block + 1)))
        if layer is not None:
            manifest.verify_layer(layer)  # our own caller's layer: a mismatch is a bug, let it raise
            self.layer = list(layer)

    # -- state ------------------------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        deadline = self.policy.next_deadline()
        if self.starts is not None and (expiry := self.starts.next_expiry()) is not None:
            deadline = expiry if deadline is None else min(deadline, expiry)
        if self.layer is None and self._layer_asked_at is not None and not self._layer_lost:
            layer_due = self._layer_asked_at + LAYER_TIMEOUT
            deadline = layer_due if deadline is None else min(deadline, layer_due)
        return deadline

    def describe(self, now: float) -> str:
        """Why blocks are not arriving, in one line, for a log: what is missing, and for each source how many of
        the missing blocks it holds, its outstanding requests, the blocks it is not asked for now (retry
        back-off, and those left to a nearer peer that fetches or holds them), and whether it is snubbed."""
        picker, policy = self.picker, self.policy
        missing = [b for b in range(self.first_block, self.last_block + 1)
                   if picker.state(b) is not BlockState.VERIFIED]
        parts = [f"{len(missing)} block(s) missing (first {missing[:4]})"]
        for source in policy.sources():
            held = [b for b in missing if source is ORIGIN or picker.has(source, b)]
            asked = sorted(policy.outstanding(source))
            blocked = self._held_back(source, now)
            back = sum(1 for b in held if blocked is not None and b in blocked[0])
            parts.append(f"{source}: holds {len(held)}, asked {asked[:4]}{'+' if len(asked) > 4 else ''}, "
                         f"retry later {policy.avoided(source)}, left to a nearer peer {back}"
                         f"{', snubbed' if policy.is_snubbed(source) else ''}")
        return "; ".join(parts)

    def stranded(self) -> list[Peer]:
        """The peers whose requests timed out (snubbed, `swarm.core.policy`) that have shown us blocks we still
        lack and no responsive source holds: those blocks wait on connections that stopped delivering. A TCP
        connection in retransmission back-off can sit idle for seconds after the loss that caused it; the cluster
        asks other holders to show such blocks (`cluster.stalls`). Empty while every source answers, and cheap
        then: the blocks are only scanned when some peer is snubbed, and each block costs its snubbed holders'
        count against its availability (every peer holding it), not a look at every source."""
        policy, picker = self.policy, self.picker
        sources = policy.sources()
        snubbed = [source for source in sources if source is not ORIGIN and policy.is_snubbed(source)]
        if not snubbed or (ORIGIN in sources and not policy.is_snubbed(ORIGIN)):  # the origin has every block
            return []
        stranded: set[Peer] = set()
        for block in range(self.first_block, self.last_block + 1):
            if picker.state(block) is BlockState.VERIFIED:
                continue
            holders = [source for source in snubbed if picker.has(source, block)]
            if holders and len(holders) == picker.availability(block):
                stranded.update(holders)
                if len(stranded) == len(snubbed):
                    break
        return [source for source in snubbed if source in stranded]

    @property
    def has_sources(self) -> bool:
        """Anyone left who could still supply a block. The origin counts once the layer is known: without it no
        block can be verified, so until then only peers that may still send it do."""
        if self.layer is None:
            return bool(self._peers) and not self._layer_lost
        return bool(self._peers) or self._origin_wanted

    @property
    def layer_lost(self) -> bool:
        """No peer sent the hash layer within LAYER_TIMEOUT of being asked, and no other is left to ask."""
        return self.layer is None and self._layer_lost

    def start(self, now: float) -> list[FetchAction]:
        """Deliver what is held already. Call once, before anything else."""
        actions: list[FetchAction] = []
        for block in self._initially_held:
            self.policy.on_verified(block, now)
            actions += self._verified_in_order(block)
        return actions

    # -- sources ----------------------------------------------------------------------------------------------

    def add_peer(self, peer: Peer, now: float) -> list[FetchAction]:
        """A connection to `peer` completed its handshake for our content root."""
        if self.trust.is_banned(peer):
            return [Close(peer, "banned")]
        self._peers.setdefault(peer, None)
        return self._ask_for_layer(now)

    def add_origin(self, now: float) -> list[FetchAction]:
        """The origin may be used as a Range source (its own cap)."""
        self._origin_wanted = True
        if self.layer is None or ORIGIN in self.policy.sources():
            return []
        return self._translate(self.policy.add_origin(now))

    def remove_origin(self, now: float) -> list[FetchAction]:
        """The origin can no longer serve Range requests (it ignores Range, or the representation changed)."""
        self._origin_wanted = False
        return self._translate(self.policy.on_source_lost(ORIGIN, now))

    def peer_lost(self, peer: Peer, now: float) -> list[FetchAction]:
        if self.starts is not None and self.nearer is not None:
            self.starts.forget(peer)  # the policy refills below: what it held back is free now
            self.nearer.remove(peer)
        self._peers.pop(peer, None)
        self._no_layer.discard(peer)
        self._layer_slow.discard(peer)
        self._in_policy.discard(peer)
        actions: list[FetchAction] = []
        if self._layer_asked == peer:
            self._layer_asked = None
            actions += self._ask_for_layer(now)
        return actions + self._translate(self.policy.on_source_lost(peer, now))

    # -- events -----------------------------------------------------------------------------------------------

    def on_message(self, peer: Peer, message: object, now: float) -> list[FetchAction]:
        """A frame from `peer` (its handshake is done). Peer faults become Close actions, never exceptions."""
        if peer not in self._peers:
            return []
        try:
            if isinstance(message, wire.Have):  # a swarm sends one per block per peer, far more than any other frame
                return self._on_have(peer, message, now)
            return self._on_message(peer, message, now)
        except PeerError as exc:
            return self._close_peer(peer, str(exc), now)

    def _on_message(self, peer: Peer, message: object, now: float) -> list[FetchAction]:
        count = self._count
        if isinstance(message, wire.Bitfield):
            if message.count != count:
                raise PeerError(f"bitfield of {message.count} blocks, the content has {count}")
            if peer in self._in_policy:
                raise PeerError("second BITFIELD")
            if self.layer is None:
                self._peers[peer] = message
                return []
            return self._join_policy(peer, message, now)
        if isinstance(message, wire.Block):
            return self._on_block(peer, message, now)
        if isinstance(message, wire.Start):  # it fetches this block from the origin: we need not
            if not 0 <= message.block < count:
                raise PeerError(f"START for block {message.block} of {count}")
            if peer in self._in_policy:
                self.picker.on_start(peer, message.block)
            if self.starts is not None:
                self.starts.on_start(peer, self._distance(peer), message.block, now)
            return []
        if isinstance(message, wire.Reject):
            if peer in self._in_policy:
                if self.nearer is not None and 0 <= message.block < count:
                    self.nearer.refused(peer, message.block)
                return self._translate(self.policy.on_reject(peer, message.block, now))
            if peer == self._layer_asked:  # it has no layer yet (it is fetching too): ask someone else
                self._layer_asked = None
                self._no_layer.add(peer)
                return self._ask_for_layer(now)
            if peer in self._layer_slow:
                self._layer_slow.discard(peer)
                self._no_layer.add(peer)
            return []
        if isinstance(message, wire.HashResponse):
            return self._on_layer(peer, message, now)
        return []  # keepalive, PEX, CANCEL, requests: not the downloader's business

    def _on_have(self, peer: Peer, message: wire.Have, now: float) -> list[FetchAction]:
        count, block = self._count, message.block
        if not 0 <= block < count:
            raise PeerError(f"HAVE for block {block} of {count}")
        if peer in self._no_layer:  # holding a block means holding the layer: it may be asked again
            self._no_layer.discard(peer)
            if self.layer is None and self._layer_asked is None:
                return self._ask_for_layer(now) + self._on_have(peer, message, now)
        if self.starts is not None:
            self.starts.on_have(peer, block)
        if peer in self._in_policy:
            if self.nearer is not None:
                self.nearer.have(peer, block)
            policy_actions = self.policy.on_have(peer, block, now)
            return self._translate(policy_actions) if policy_actions else []  # mostly nothing to do
        bitfield = self._peers.get(peer)
        if bitfield is not None:  # before the layer: fold it into the pending bitfield
            blocks = set(bitfield.blocks()) | {block}
            self._peers[peer] = wire.Bitfield.from_blocks(count, blocks)
        return []

    def _on_block(self, peer: Peer, message: wire.Block, now: float) -> list[FetchAction]:
        if peer not in self._in_policy:
            raise PeerError("BLOCK before it was asked for")
        offset, length = self._span(message.block)
        if message.offset != 0 or len(message.data) != length:
            raise PeerError(f"BLOCK {message.block} at {message.offset}+{len(message.data)}, asked 0+{length}")
        return self._received(peer, message.block, message.data, now)

    def on_origin_block(self, block: int, data: bytes, now: float) -> list[FetchAction]:
        """An origin Range request for `block` returned these bytes."""
        return self._received(ORIGIN, block, data, now)

    def on_origin_failure(self, block: int, now: float, *, permanent: bool) -> list[FetchAction]:
        actions = self._translate(self.policy.on_reject(ORIGIN, block, now))
        if permanent and self._origin_wanted:
            actions += self.remove_origin(now)
        return actions

    def on_timer(self, now: float) -> list[FetchAction]:
        actions: list[FetchAction] = []
        if self.layer is None and self._layer_asked_at is not None and not self._layer_lost \
                and now >= self._layer_asked_at + LAYER_TIMEOUT:
            asked: list[FetchAction] = []
            if self._layer_asked is not None:  # silent alone: the round asks every other peer at once
                self._layer_slow.add(self._layer_asked)
                self._layer_asked, self._layer_round, self._layer_asked_at = None, True, now
                asked = self._ask_for_layer(now)
            # Nobody asked now: those asked stayed silent, or said they have none and sent no HAVE since.
            self._layer_lost = not asked
            actions += asked
        actions += self._translate(self.policy.on_timeout(now))
        if self.starts is not None and self.starts.expire(now):  # stale STARTs: their blocks may go elsewhere
            actions += self._translate(self.policy.refill(now))
        return actions

    # -- internals --------------------------------------------------------------------------------------------

    def _distance(self, peer: Peer) -> int:
        assert self.distance is not None
        return self.distance(peer)

    def _held_back(self, source: object, now: float) -> tuple[Either, Hashable] | None:
        if self.starts is None or source is ORIGIN:
            return None
        assert self.distance is not None  # set with `starts`
        distance = self.distance(source)  # not `_distance`: asked on every pick, one call fewer
        if distance <= 0:
            return None
        snubbed = frozenset(p for p in self._in_policy if self.policy.is_snubbed(p))
        assert self.nearer is not None
        self.nearer.mute(snubbed)
        # The version the picker's memo keys on: a START let go, a holder forgotten or snubbed.
        return (Either(self.nearer.blocked(distance), self.starts.blocked(distance, now, snubbed)),
                (self.starts.version, len(snubbed), self.nearer.version))

    def _span(self, block: int) -> tuple[int, int]:
        if not 0 <= block < self._count:
            raise PeerError(f"block {block} outside 0..{self._count - 1}")
        return self.manifest.block_span(block)

    def _received(self, source: Peer, block: int, data: bytes | bytearray, now: float) -> list[FetchAction]:
        policy_actions = self.policy.on_block(source, block, now)
        actions = self._translate(policy_actions)
        if any(isinstance(a, Discard) and a.block == block for a in policy_actions):
            return actions  # a duplicate, or from a source already dropped: not even worth hashing
        assert self.layer is not None
        try:
            self.manifest.verify_block(self.layer, block, data)
        except HashMismatch:
            self.hash_failures += 1
            return actions + self._translate(self.policy.on_hash_failure(block, now))
        self.bytes_from["origin" if source is ORIGIN else "peers"] += len(data)
        actions += self._translate(self.policy.on_verified(block, now))
        actions.append(Verified(block, data))
        return actions + self._verified_in_order(block)

    def _verified_in_order(self, block: int) -> list[FetchAction]:
        self._verified_ahead.add(block)
        actions: list[FetchAction] = []
        while self.next_delivery in self._verified_ahead:
            self._verified_ahead.discard(self.next_delivery)
            actions.append(Deliver(self.next_delivery))
            self.next_delivery += 1
        if actions:
            if self.next_delivery > self.last_block:
                self.finished = True
                actions.append(Finished())
            else:
                self.picker.set_delivery_point(self.next_delivery)
        return actions

    def _ask_for_layer(self, now: float) -> list[FetchAction]:
        if self.layer is not None or self._layer_asked is not None or not self._peers:
            return []
        count = self.manifest.num_blocks
        if count > wire.Limits().max_hashes:
            # Larger layers would need range requests with proofs; until then such content is origin-only.
            return []
        candidates = [peer for peer in self._peers if peer not in self._no_layer and peer not in self._layer_slow]
        if not candidates:
            return []
        if self._layer_round:  # joins the round, without moving its deadline (unless it had passed)
            if self._layer_lost:
                self._layer_asked_at, self._layer_lost = now, False
            self._layer_slow.update(candidates)
            return [Send(peer, wire.HashRequest(0, count)) for peer in candidates]
        self._layer_asked, self._layer_asked_at, self._layer_lost = candidates[0], now, False
        return [Send(self._layer_asked, wire.HashRequest(0, count))]

    def _on_layer(self, peer: Peer, message: wire.HashResponse, now: float) -> list[FetchAction]:
        if self.layer is not None or (peer != self._layer_asked and peer not in self._layer_slow):
            return []
        if peer == self._layer_asked:
            self._layer_asked = None
        self._layer_slow.discard(peer)
        try:
            if message.first != 0 or message.count != self.manifest.num_blocks:
                raise HashMismatch("hash layer for the wrong range")
            self.manifest.verify_layer(list(message.hashes))
        except HashMismatch as exc:
            self.hash_failures += 1
            self.trust.on_bad_hash_layer(peer)
            return self._close_peer(peer, f"bad hash layer: {exc}", now) + self._ask_for_layer(now)
        self.layer = list(message.hashes)
        self._layer_asked = None
        self._layer_slow.clear()
        actions: list[FetchAction] = []
        for other, bitfield in list(self._peers.items()):
            if bitfield is not None:
                actions += self._join_policy(other, bitfield, now)
        if self._origin_wanted:
            actions += self._translate(self.policy.add_origin(now))
        return actions

    def _join_policy(self, peer: Peer, bitfield: wire.Bitfield, now: float) -> list[FetchAction]:
        self._peers[peer] = None
        self._in_policy.add(peer)
        if self.nearer is not None:  # before the policy hands out work: what it holds is not asked of farther ones
            self.nearer.add(peer, self._distance(peer), bitfield.blocks())
        return self._translate(self.policy.add_peer(peer, now, bitfield_to_bytes(bitfield),
                                                    priority=self.priority is not None and self.priority(peer),
                                                    far=self.distance is not None and self._distance(peer) > 0))

    def _close_peer(self, peer: Peer, reason: str, now: float) -> list[FetchAction]:
        actions: list[FetchAction] = [Close(peer, reason)]
        return actions + self.peer_lost(peer, now)

    def _translate(self, policy_actions: list[PolicyAction]) -> list[FetchAction]:
        """Policy actions (sources and blocks) -> wire sends, origin requests and closes."""
        actions: list[FetchAction] = []
        for action in policy_actions:
            if isinstance(action, Request):
                offset, length = self.manifest.block_span(action.block)
                if action.source is ORIGIN:
                    actions.append(OriginFetch(action.block, offset, length))
                else:
                    if self.distance is not None and self.distance(action.source) > 0:
                        actions.append(Announce(action.block))
                    actions.append(Send(action.source, wire.Request(action.block, 0, length)))
            elif isinstance(action, Cancel):
                if action.source is ORIGIN:
                    actions.append(OriginCancel(action.block))
                else:
                    _offset, length = self.manifest.block_span(action.block)
                    actions.append(Send(action.source, wire.Cancel(action.block, 0, length)))
            elif isinstance(action, Drop):
                if action.source is ORIGIN:
                    self._origin_wanted = False
                else:
                    self._peers.pop(action.source, None)
                    self._in_policy.discard(action.source)
                    if self.nearer is not None:
                        self.nearer.remove(action.source)
                    actions.append(Close(action.source, action.reason))
        return actions
