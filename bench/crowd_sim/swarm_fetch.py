"""One swarm fetch: the real `swarm.core.fetch.FetchCore` (picker, request policy, trust, hash checks), fed by a
model of its shell (`swarm.service.fetch_run`) and of the peers that serve it.

Real: which block is asked of whom and when (`FetchCore`, with the picker's 8-block window and rarest-first
order, 8 requests in flight per peer, the origin spread to blocks no peer has), the hash layer asked of one
provider, every block checked against that layer (real SHA-256 over the real bytes), delivery in order.

Reproduced, not run: a provider is reached in two round trips (TCP connect, then the handshake, whose BITFIELD
says it holds every block: only complete holders announce a root); a request reaches it one delay later and its
answer leaves through its uplink, so a crowd that asks the same few providers queues on their uplinks, as the
lab's did (`models.Uplink`: requests queue at the provider and go out one block at a time; a CANCEL that arrives
before its block started takes it back). The origin, when the core asks it for a block (a Range request,
`OriginFetch`, on a new connection each), is the origin model. No provider leaves or lies; the fetch's 30 s
stall watchdog and the providers' serving slots (`swarm.core.slots`: a full node refuses newcomers) are not
modelled.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from swarm.core.fetch import Close, Deliver, FetchAction, FetchCore, Finished, OriginCancel, OriginFetch, Send
from swarm.net import wire

from .events import Timer
from .models import OriginConn, Uplink

if TYPE_CHECKING:
    from .world import World

HEADER = 13  # bytes of a BLOCK frame's header on the wire (`wire.encode_block_header`)


class SwarmFetch:
    """Bytes `start..end-1` of `manifest`, in order, to `on_chunk`; then `on_end()`, or `on_fail(reason)`."""

    def __init__(self, world: World, host: str, manifest, layer: list[bytes], providers: list[str], start: int,
                 end: int, rng: random.Random, on_chunk: Callable[[bytes], None], on_end: Callable[[], None],
                 on_fail: Callable[[str], None]) -> None:
        self.world, self.host, self.manifest, self.layer = world, host, manifest, layer
        self.on_chunk, self.on_end, self.on_fail = on_chunk, on_end, on_fail
        bs = manifest.block_size
        self.core = FetchCore(manifest, None, first_block=start // bs, last_block=(end - 1) // bs, rng=rng)
        self.providers = providers
        self.running = True
        self.timer: Timer | None = None
        self.origin_conns: dict[int, OriginConn] = {}
        self.peer_bytes = 0
        self.asked: dict[tuple[str, int], list] = {}  # requests a CANCEL may still take back

    def start(self) -> None:
        clock, delay = self.world.clock, self.world.net.delay
        self._run(self.core.start(clock.now))
        for peer in self.providers:  # TCP connect, then the handshake both ways
            clock.at(clock.now + 4 * delay, self._joined, peer)
        # An origin Range source is offered once the layer is known (`FetchCore.add_origin` waits for it).
        self._run(self.core.add_origin(clock.now))

    def stop(self) -> None:
        self.running = False
        if self.timer is not None:
            self.timer.cancel()
        for conn in self.origin_conns.values():
            self.world.swarm_origin.close(conn, self.world.clock.now)
        self.origin_conns.clear()

    @property
    def origin_bytes(self) -> int:
        return self.core.bytes_from["origin"]

    # -- events ------------------------------------------------------------------------------------------------
    def _joined(self, peer: str) -> None:
        if not self.running:
            return
        now = self.world.clock.now
        count = self.manifest.num_blocks
        self._run(self.core.add_peer(peer, now))
        if self.running:
            self._run(self.core.on_message(peer, wire.Bitfield.from_blocks(count, range(count)), now))

    def _message(self, peer: str, message: object, block: int | None = None) -> None:
        if block is not None:
            self.asked.pop((peer, block), None)
        if self.running:
            self._run(self.core.on_message(peer, message, self.world.clock.now))

    def _timer(self) -> None:
        self.timer = None
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
        if not self.core.finished and not self.core.has_sources and self.core.layer is not None:
            self.running = False
            self.on_fail("no source left")
            return
        deadline = self.core.next_deadline()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if deadline is not None:
            self.timer = self.world.clock.timer(deadline, self._timer)

    def _do(self, action: FetchAction) -> None:
        world, now = self.world, self.world.clock.now
        match action:
            case Send(peer, wire.HashRequest(first, count)):
                hashes = tuple(self.layer[first:first + count])
                self._ask(str(peer), 32 * len(hashes) + HEADER, None, wire.HashResponse(first, count, hashes))
            case Send(peer, wire.Request(block, _, length)):
                offset = block * self.manifest.block_size
                self.peer_bytes += length
                data = world.content[offset:offset + length]
                self._ask(str(peer), length + HEADER, block, wire.Block(block, 0, data))
            case Send(peer, wire.Cancel(block)):
                if (entry := self.asked.pop((str(peer), block), None)) is not None:
                    world.clock.at(now + world.net.delay, _cancel, entry)
            case Send():
                pass  # keepalives and the like
            case OriginFetch(block, offset, length):
                self._origin_fetch(block, offset, length)
            case OriginCancel(block):
                if (conn := self.origin_conns.pop(block, None)) is not None:
                    world.swarm_origin.close(conn, now)
            case Close():
                pass  # the core forgot the peer already
            case Deliver(block):
                offset, length = self.manifest.block_span(block)
                self.on_chunk(world.content[offset:offset + length])
            case Finished():
                self.running = False
                if self.timer is not None:
                    self.timer.cancel()
                self.on_end()

    def _ask(self, peer: str, nbytes: int, block: int | None, answer: object) -> None:
        """A request reaches `peer` one delay from now; its answer comes through the peer's uplink."""
        world = self.world
        entry: list = [nbytes, self.host, lambda: self._message(peer, answer, block), True]
        if block is not None:
            self.asked[(peer, block)] = entry
        world.clock.at(world.clock.now + world.net.delay, _queue, world.uplink(peer), entry)

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
