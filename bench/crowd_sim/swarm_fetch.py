"""One swarm fetch: the real `swarm.core.fetch.FetchCore` (picker, request policy, trust, hash checks), fed by a
model of its shell (`swarm.service.fetch_run`) and of the peers that serve it.

Real: which block is asked of whom and when (`FetchCore`, with the picker's 8-block window and rarest-first
order, 8 requests in flight per peer, the origin spread to blocks no peer has), the hash layer asked of one
provider, every block checked against that layer (real SHA-256 over the real bytes), delivery in order.

Reproduced, not run (`swarm.service.swarm_service` and `fetch_run`): a fetch announces its node as a provider at
once, and the node serves the blocks it has verified so far (its BITFIELD at the handshake, then a HAVE per block
to every fetch connected to it; a request for a block or a hash layer it lacks is refused); while it runs it
brings in providers that appeared since (`refresh_waits` of `PROVIDER_REFRESH`, then every `PROVIDER_TOPUP` s
while it has fewer peers than `peers_for`, at most `PROVIDER_POOL` tried, each lookup one DHT latency). A
provider is reached in two round trips (TCP connect, then the handshake); a request reaches it one delay later and
its answer leaves through its uplink, so a crowd that asks the same few providers queues on their uplinks, as the
lab's did (`models.Uplink`: requests queue at the provider and go out one block at a time; a CANCEL that arrives
before its block started takes it back). The origin, when the core asks it for a block (a Range request,
`OriginFetch`, on a new connection each), is the origin model. No provider leaves or lies; the fetch's 30 s
stall watchdog and the providers' serving slots (`swarm.core.slots`: a full node refuses newcomers) are not
modelled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from swarm.core.fetch import (
    Close,
    Deliver,
    FetchAction,
    FetchCore,
    Finished,
    OriginCancel,
    OriginFetch,
    Send,
    Verified,
)
from swarm.net import wire
from swarm.service.fetch_run import ORIGIN_AFTER_PEERS
from swarm.service.swarm_service import PROVIDER_POOL, PROVIDER_REFRESH, PROVIDER_TOPUP, refresh_waits

from .events import Timer
from .models import OriginConn, Uplink

if TYPE_CHECKING:
    from .node import Node
    from .world import World

HEADER = 13  # bytes of a BLOCK frame's header on the wire (`wire.encode_block_header`)


class SwarmFetch:
    """Bytes `start..end-1` of `manifest`, in order, to `on_chunk`; then `on_end()`, or `on_fail(reason)`."""

    def __init__(self, world: World, node: Node, manifest, providers: list[int], start: int, end: int,
                 on_chunk: Callable[[bytes], None], on_end: Callable[[], None],
                 on_fail: Callable[[str], None], layer: list[bytes] | None = None) -> None:
        self.world, self.node, self.host, self.manifest = world, node, node.host, manifest
        self.on_chunk, self.on_end, self.on_fail = on_chunk, on_end, on_fail
        bs = manifest.block_size
        self.core = FetchCore(manifest, layer, first_block=start // bs, last_block=(end - 1) // bs, rng=node.rng)
        # Peers are node indices (ints hash alike in every process: a run is the same for its seed); dicts, not
        # sets, wherever the order is walked.
        self.known = dict.fromkeys(providers)  # every provider tried (never tried again)
        self.first = frozenset(providers)  # those it began with: the origin's Range source waits for them
        self.unheard: int | None = None  # ... how many have not answered yet; None once it was offered
        self.live: dict[int, None] = {}  # joined and not closed
        self.wanted = world.peers_for(manifest)
        self.waits = refresh_waits(PROVIDER_REFRESH, len(self.known), self.wanted)
        self.running = True
        self.timer: Timer | None = None
        self.deadline: float | None = None  # the timer's
        self.origin_conns: dict[int, OriginConn] = {}
        self.asked: dict[tuple[int, int], list] = {}  # (provider, block): requests a CANCEL may still take back

    def start(self) -> None:
        clock = self.world.clock
        actions = self.core.start(clock.now)
        self.node.announce()  # `shares.fetching`: a provider at once, of the blocks it verifies
        for peer in self.known:
            self._connect(peer)
        # The origin's Range source is offered once the providers it began with have answered (their BITFIELDs,
        # two round trips from now) or after ORIGIN_AFTER_PEERS (`fetch_run`); the core then waits for the layer.
        self.unheard = len(self.known) or None
        if self.unheard is None:
            self._run(actions + self.core.add_origin(clock.now))
        else:
            self._run(actions)
            clock.at(clock.now + ORIGIN_AFTER_PEERS, self._offer_origin)
        clock.at(clock.now + self.waits[0], self._refresh, 0)

    def _offer_origin(self) -> None:
        if self.unheard is not None:
            self.unheard = None
            if self.running:
                self._run(self.core.add_origin(self.world.clock.now))

    def stop(self) -> None:
        self.running = False
        if self.timer is not None:
            self.timer.cancel()
        for conn in self.origin_conns.values():
            self.world.swarm_origin.close(conn, self.world.clock.now)
        self.origin_conns.clear()
        for peer in self.live:
            self.world.node_at(peer).watchers.pop(self, None)
        self.live.clear()

    @property
    def origin_bytes(self) -> int:
        return self.core.bytes_from["origin"]

    @property
    def has_layer(self) -> bool:
        return self.core.layer is not None

    # -- providers ---------------------------------------------------------------------------------------------
    def _connect(self, peer: int) -> None:
        self.world.clock.at(self.world.clock.now + 4 * self.world.net.delay, self._joined, peer)  # TCP, handshake

    def _joined(self, peer: int) -> None:
        if not self.running:
            return
        now, provider = self.world.clock.now, self.world.node_at(peer)
        count = self.manifest.num_blocks
        self.live[peer] = None
        provider.watchers[self] = None
        held = range(count) if provider.complete else sorted(provider.held)
        self._run(self.core.add_peer(peer, now))
        if self.running:
            self._run(self.core.on_message(peer, wire.Bitfield.from_blocks(count, held), now))
        if self.unheard is not None and peer in self.first:
            self.unheard -= 1
            if not self.unheard:
                self._offer_origin()

    def _refresh(self, step: int) -> None:
        """`refresh_providers`, after its wait number `step`: the refreshes (while fewer than PROVIDER_POOL were
        tried), then the top-ups (while the fetch has fewer peers than it wants); each a provider lookup."""
        if not self.running:
            return
        world = self.world
        refreshing = step < len(self.waits) and len(self.known) < PROVIDER_POOL
        if refreshing or (step >= len(self.waits) and len(self.live) < self.wanted):
            world.clock.at(world.clock.now + world.dht.lookup_latency(), self._refreshed, step)
            return
        step = max(step + 1, len(self.waits))  # the refreshes are over: top-ups from now on
        world.clock.at(world.clock.now + PROVIDER_TOPUP, self._refresh, step)

    def _refreshed(self, step: int) -> None:
        if not self.running:
            return
        world, now = self.world, self.world.clock.now
        refreshing = step < len(self.waits)
        most = min(self.wanted, PROVIDER_POOL - len(self.known)) if refreshing else self.wanted - len(self.live)
        if most > 0:
            fresh = [p.port for p in world.dht.providers(now, PROVIDER_POOL)
                     if p.port not in self.known and p.port != self.node.index]
            for peer in self.node.rng.sample(fresh, min(most, len(fresh))):
                self.known[peer] = None
                self._connect(peer)
        following = step + 1
        wait = self.waits[following] if following < len(self.waits) else PROVIDER_TOPUP
        world.clock.at(now + wait, self._refresh, following)

    # -- events ------------------------------------------------------------------------------------------------
    def _message(self, peer: int, message: object, block: int | None = None) -> None:
        if block is not None:
            self.asked.pop((peer, block), None)
        if self.running:
            self._run(self.core.on_message(peer, message, self.world.clock.now))

    def have(self, peer: int, block: int) -> None:
        """`peer` verified `block` (its HAVE, sent when it did, lands one delay later)."""
        self.world.clock.at(self.world.clock.now + self.world.net.delay, self._message, peer, wire.Have(block))

    def _timer(self) -> None:
        self.timer, self.deadline = None, None
        if self.running:
            self._run(self.core.on_timer(self.world.clock.now))

    # -- actions -----------------------------------------------------------------------------------------------
    def _run(self, actions: list[FetchAction]) -> None:
        for action in actions:
            if not self.running:
                return
            self._do(action)
        if not self.running:
            return
        if not self.core.finished and not self.core.has_sources and self.core.layer is not None \
                and self.unheard is None:
            self.stop()
            self.on_fail("no source left")
            return
        deadline = self.core.next_deadline()
        if deadline == self.deadline:  # armed already
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.deadline = deadline
        if deadline is not None:
            self.timer = self.world.clock.timer(deadline, self._timer)

    def _do(self, action: FetchAction) -> None:  # noqa: C901 - one arm per action
        world, now = self.world, self.world.clock.now
        match action:
            case Send(peer, wire.HashRequest(first, count)):
                provider = world.node_at(_index(peer))
                if provider.complete or (provider.fetch is not None and provider.fetch.has_layer):
                    hashes = tuple(world.layer[first:first + count])
                    self._ask(_index(peer), 32 * len(hashes) + HEADER, None, wire.HashResponse(first, count, hashes))
                else:  # it has no layer yet (it is fetching too): refused
                    self._refuse(_index(peer), 0, 0)
            case Send(peer, wire.Request(block, _, length)):
                provider = world.node_at(_index(peer))
                if provider.complete or block in provider.held:
                    offset = block * self.manifest.block_size
                    data = world.content[offset:offset + length]
                    self._ask(_index(peer), length + HEADER, block, wire.Block(block, 0, data))
                else:
                    self._refuse(_index(peer), block, length)
            case Send(peer, wire.Cancel(block)):
                if (entry := self.asked.pop((_index(peer), block), None)) is not None:
                    world.clock.at(now + world.net.delay, _cancel, entry)
            case Send():
                pass  # keepalives and the like
            case OriginFetch(block, offset, length):
                self._origin_fetch(block, offset, length)
            case OriginCancel(block):
                if (conn := self.origin_conns.pop(block, None)) is not None:
                    world.swarm_origin.close(conn, now)
            case Close(peer):
                self.live.pop(_index(peer), None)
                world.node_at(peer).watchers.pop(self, None)  # type: ignore[arg-type]
            case Verified(block):
                self.node.gained(block)
            case Deliver(block):
                offset, length = self.manifest.block_span(block)
                self.on_chunk(world.content[offset:offset + length])
            case Finished():
                self.stop()
                self.on_end()

    def _refuse(self, peer: int, block: int, length: int) -> None:
        """`peer` lacks what was asked: its REJECT comes back a round trip later."""
        world = self.world
        refusal = wire.Reject(block, 0, length, wire.RejectReason.NOT_FOUND)
        world.clock.at(world.clock.now + 2 * world.net.delay, self._message, peer, refusal)

    def _ask(self, peer: int, nbytes: int, block: int | None, answer: object) -> None:
        """A request reaches `peer` one delay from now; its answer comes through the peer's uplink."""
        world = self.world
        entry: list = [nbytes, self.host, lambda: self._message(peer, answer, block), True]
        if block is not None:
            self.asked[(peer, block)] = entry
        world.clock.at(world.clock.now + world.net.delay, _queue, world.uplink(world.node_at(peer).host), entry)

    def _origin_fetch(self, block: int, offset: int, length: int) -> None:
        got: list[bytes] = []

        def data(piece: bytes) -> None:
            if self.origin_conns.get(block) is not conn or not self.running:
                return
            got.append(piece)
            if sum(map(len, got)) >= length:
                del self.origin_conns[block]
                self._run(self.core.on_origin_block(block, b"".join(got), self.world.clock.now))

        conn = self.world.swarm_origin.get(self.host, self.world.clock.now, lambda *head: None, data,
                                           offset, offset + length)
        self.origin_conns[block] = conn


def _queue(uplink: Uplink, entry: list) -> None:
    if entry[3]:
        uplink.queue.append(entry)
        if not uplink.busy:
            uplink.next()


def _cancel(entry: list) -> None:
    entry[3] = False  # still queued: it is skipped; already sent: too late, as on the wire


def _index(peer: object) -> int:
    """A core's peer, which this shell names by node index."""
    assert isinstance(peer, int)
    return peer
