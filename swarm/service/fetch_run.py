"""One fetch of a `SwarmNode`: the asyncio shell around its `FetchCore` (split from `swarm.service.node`).

It owns the fetch's connections, origin requests, timer, store writer and delivery queue; the node creates it
in `SwarmNode.fetch` and it calls back into the node to open connections and announce blocks. Write
backpressure (`max_pending_writes`) is described in `swarm.service.node`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import TYPE_CHECKING, Protocol, cast

from swarm.content.manifest import Manifest
from swarm.core.fetch import (
    LAYER_TIMEOUT,
    Announce,
    Close,
    Deliver,
    FetchCore,
    Finished,
    OriginCancel,
    OriginFetch,
    Send,
    Verified,
)
from swarm.errors import FetchFailed, OriginSourceError, PeerError, StoreError, TransportError
from swarm.net import wire
from swarm.net.transport import Address, Connection
from swarm.service.report import FetchReport

if TYPE_CHECKING:
    from swarm.core.policy import PolicyConfig
    from swarm.store.interface import BlockStore

log = logging.getLogger("swarmproxy.swarm")

QUIET_LOG_AFTER = 2.0  # s without a block before a fetch says (at debug level) what it is waiting for
SLOW_WRITE = 0.2  # s a batch of blocks may take to reach the store before a fetch says so (at debug level)
# The Range source is offered to the core once every provider the fetch began with has answered (its first message:
# the BITFIELD) or failed, or after this long. Offered at once, it was the only source until the bitfields came, so
# each fetch of a crowd asked the busy origin for its first blocks and took them back a round trip later: on the
# crowd simulator (10,000 clients at 1,000/s, with the origin's plugin) 43,000 Range requests, four per client, and
# the origin busy with them to the crowd's end (bench/README.md, "Flash crowd at internet scale, simulated").
ORIGIN_AFTER_PEERS = 0.5


class RangeSource(Protocol):
    """The fetch's Range source, a source with every block and its own cap (`swarm.core.policy`'s ORIGIN): the
    origin over HTTP (`swarm.service.origin_source.OriginRangeSource`), or a BitTorrent swarm
    (`bittorrent.download.TorrentSource`). `fetch` raises `OriginSourceError` (`permanent`: stop asking it);
    the bytes are checked against the block hashes like a peer's."""

    @property
    def bytes_received(self) -> int: ...  # bytes still arriving count as progress (the fetch's watchdog)

    async def fetch(self, offset: int, length: int) -> bytes: ...


class FetchHost(Protocol):
    """What a fetch needs of the `swarm.service.node.SwarmNode` that runs it: its store and settings, connections
    to peers, and telling the peers it serves what the fetch verified or asks the origin for."""

    store: BlockStore
    policy: PolicyConfig | None
    max_pending_writes: int
    fetch_totals: FetchReport

    async def open_connection(self, address: Address, root: bytes, timeout: float) -> Connection: ...
    def peer_id(self, connection: Connection) -> bytes | None: ...
    def announce_block(self, root: bytes, block: int) -> None: ...
    def announce_origin_fetch(self, root: bytes, block: int) -> None: ...


class _FetchRun:
    """One fetch: the FetchCore, its connections, origin requests, timer and delivery queue."""

    def __init__(self, node: FetchHost, manifest: Manifest, layer: list[bytes] | None, start: int, end: int,
                 origin: RangeSource | None, window: int, into_store: bool = False, rng=None,
                 distance=None, policy: PolicyConfig | None = None,
                 priority: Callable[[bytes], bool] | None = None) -> None:
        self.node, self.manifest, self.start, self.end, self.origin = node, manifest, start, end, origin
        self.root = manifest.root
        self.loop = asyncio.get_running_loop()
        store = node.store
        if layer is None and self.root in store.roots():
            layer = list(store.hash_layer(self.root))
        held = set(store.have(self.root).blocks()) if self.root in store.roots() else set()
        first, last = start // manifest.block_size, (end - 1) // manifest.block_size
        # The priority sources (`SwarmNode.fetch`'s `priority`), known by the node id their handshake gave, not by
        # an address: the one a provider was dialled at may be a hostname or another spelling of the address the
        # connection reports. Marked as each is opened, before its BITFIELD reaches the core.
        self.priority = priority
        self.marked: set[Connection] = set()
        self.core = FetchCore(manifest, layer, first_block=first, last_block=last, held=held,
                              config=policy or node.policy, window=window, rng=rng, distance=distance,
                              priority=None if priority is None else self.marked.__contains__)
        self.entry: bool | None = self.root in store.roots()  # None: it cannot be stored, never again this run
        if self.entry:
            store.pin(self.root)
        self.memory: dict[int, bytes | bytearray] = {}  # verified, not yet both written and delivered
        self.written: set[int] = set()  # blocks the store has taken or refused
        self.handed = 0  # blocks before this one were handed to the consumer
        self.deliveries: asyncio.Queue[int | None] = asyncio.Queue()
        self.connections: set[Connection] = set()
        self.origin_tasks: dict[int, asyncio.Task] = {}
        self.tasks: set[asyncio.Task] = set()
        # Verified blocks wait here for the writer task, which takes all of them in one thread hop.
        self.write_queue: list[tuple[int, bytes | bytearray]] = []
        self.writer: asyncio.Task | None = None
        self.into_store = into_store
        self.report: FetchReport | None = None  # the caller's, filled in when the fetch stops
        self.stopped = False
        self.unsettled: set[int] = set()  # queued or being written (only tracked with into_store)
        self.settled = asyncio.Event()
        # Write backpressure (module docstring): bytes queued for or being written by the writer, and the bound;
        # at least a block, or one block could stop the fetch for good.
        self.pending = 0
        self.write_limit = max(node.max_pending_writes, manifest.block_size)
        self.room = asyncio.Event()
        self.room.set()
        self.paused_since: float | None = None
        self.paused_total = 0.0
        self.progress = asyncio.Event()
        self.timer: asyncio.TimerHandle | None = None
        self.pending_connects = 0
        self.unheard = 0  # providers the fetch began with, not yet heard from: the Range source waits for them
        self.origin_wait: asyncio.TimerHandle | None = None
        self.origin_offered = False
        self.failure: str | None = None
        self.done = False

    def begin(self, peers: Iterable[Address], timeout: float, stall_timeout: float) -> None:
        self.spawn(self.watchdog(stall_timeout))
        self.apply(self.core.start(self.now()))
        for address in peers:
            self.pending_connects += 1
            self.unheard += 1
            self.spawn(self.peer(address, timeout, first=True))
        if self.origin is not None and self.unheard:
            self.origin_wait = self.loop.call_later(ORIGIN_AFTER_PEERS, self.offer_origin)
        else:
            self.offer_origin()
        self.check_stalled()

    def offer_origin(self) -> None:
        """Give the core the Range source, once (`ORIGIN_AFTER_PEERS`)."""
        if self.origin_wait is not None:
            self.origin_wait.cancel()
        self.origin_wait, self.unheard = None, 0
        if self.origin is not None and not self.origin_offered and not self.done:
            self.origin_offered = True
            self.apply(self.core.add_origin(self.now()))

    def heard(self) -> None:
        """One of the providers the fetch began with answered or failed: the last one offers the Range source."""
        if self.unheard:
            self.unheard -= 1
            if not self.unheard:
                self.offer_origin()

    def now(self) -> float:
        """The FetchCore's clock: the loop's, stopped while we do not read from peers for the store writer."""
        return (self.loop.time() if self.paused_since is None else self.paused_since) - self.paused_total

    def written_out(self, nbytes: int) -> None:
        """`nbytes` of queued blocks left the writer's hands: resume reading once below the bound."""
        self.pending = max(0, self.pending - nbytes)
        self.progress.set()  # a slow disk is not a stalled fetch (the watchdog)
        if self.paused_since is not None and self.pending < self.write_limit:
            paused = self.loop.time() - self.paused_since
            log.debug("fetch of %s: reading resumed after %.3f s waiting for the store writer", self.root.hex()[:16],
                      paused)
            self.paused_total += paused
            self.paused_since = None
            self.room.set()
            self.rearm()

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def watchdog(self, stall_timeout: float) -> None:
        """Fail a fetch that verifies nothing for `stall_timeout` seconds (sources that say nothing).

        Origin bytes still arriving count as progress: in a crowd a Range request shares the origin with
        hundreds of others and may take longer than the timeout to complete one block, yet it is moving. The
        lab's 100-client large file lost four downloads to this: failed at 30 s, they took the rest of the file
        from the origin alone, at a few KB/s, and never asked a peer again."""
        origin_bytes = self.origin_bytes()
        while not self.done and not self.failure:
            try:
                quiet = min(QUIET_LOG_AFTER, stall_timeout)
                with contextlib.suppress(asyncio.TimeoutError):  # a quiet spell: say why (debug), once per spell
                    await asyncio.wait_for(self.progress.wait(), quiet)
                if not self.progress.is_set() and not self.done and log.isEnabledFor(logging.DEBUG):
                    log.debug("fetch of %s: no block for %g s: %s", self.root.hex()[:16], quiet,
                              self.core.describe(self.now()))
                if not self.progress.is_set():  # (a wait_for of 0 s raises even for a set event)
                    await asyncio.wait_for(self.progress.wait(), stall_timeout - quiet)
            except TimeoutError:
                if (now_bytes := self.origin_bytes()) > origin_bytes:
                    origin_bytes = now_bytes
                    continue
                self.failure = f"no block arrived for {stall_timeout:g} s from {len(self.connections)} peer(s)"
                self.deliveries.put_nowait(None)
                return
            self.progress.clear()
            origin_bytes = self.origin_bytes()

    def origin_bytes(self) -> int:
        return self.origin.bytes_received if self.origin is not None else 0

    def stranded(self) -> list[bytes]:
        """The node ids of the peers whose requests timed out and alone hold blocks we lack
        (`FetchCore.stranded`)."""
        ids = (self.node.peer_id(peer) for peer in self.core.stranded() if isinstance(peer, Connection))
        return [peer_id for peer_id in ids if peer_id is not None]

    async def peer(self, address: Address, timeout: float, *, first: bool = False) -> None:
        """Fetch from the provider at `address` while it serves (`first`: one the fetch began with)."""
        try:
            connection = await self.node.open_connection(address, self.root, timeout)
        except (TimeoutError, TransportError, PeerError, OSError) as exc:
            log.debug("peer %s:%s not used: %s", address[0], address[1], exc)
            self.pending_connects -= 1
            if first:
                self.heard()
            self.check_stalled()
            return
        self.connections.add(connection)
        if self.priority is not None and (peer_id := self.node.peer_id(connection)) is not None \
                and self.priority(peer_id):
            self.marked.add(connection)
        try:
            self.pending_connects -= 1  # counted as a source from here on
            self.apply(self.core.add_peer(connection, self.now()))
            while True:
                if not self.room.is_set():  # the store writer is behind: leave the bytes with the peer
                    await self.room.wait()
                if (message := await connection.receive()) is None:
                    break
                self.apply(self.core.on_message(connection, message, self.now()))
                if first:
                    first = False
                    self.heard()
                if self.done:
                    return
        finally:
            self.connections.discard(connection)
            self.marked.discard(connection)
            connection.abort("fetch over" if self.done else "peer lost")
            if first:  # it left before it said anything
                self.heard()
            if not self.done:
                self.apply(self.core.peer_lost(connection, self.now()))
                self.check_stalled()

    async def origin_fetch(self, action: OriginFetch) -> None:
        assert self.origin is not None
        try:
            data = await self.origin.fetch(action.offset, action.length)
        except OriginSourceError as exc:
            log.info("origin range %d+%d failed: %s", action.offset, action.length, exc)
            self.apply(self.core.on_origin_failure(action.block, self.now(), permanent=exc.permanent))
            self.check_stalled()
            return
        finally:
            self.origin_tasks.pop(action.block, None)
        self.apply(self.core.on_origin_block(action.block, data, self.now()))
        self.check_stalled()  # a block failing its hash bans the origin: perhaps the last source

    def apply(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, Send):
                with contextlib.suppress(TransportError):
                    cast(Connection, action.peer).send_nowait(action.message)  # the core's peers are ours
            elif isinstance(action, Close):
                log.info("dropping peer %s: %s", action.peer, action.reason)
                cast(Connection, action.peer).abort(action.reason)
            elif isinstance(action, OriginFetch):
                if action.block not in self.origin_tasks:
                    self.origin_tasks[action.block] = self.spawn(self.origin_fetch(action))
                    self.node.announce_origin_fetch(self.root, action.block)
            elif isinstance(action, Announce):  # the same START a crowd's origin fetch sends
                self.node.announce_origin_fetch(self.root, action.block)
            elif isinstance(action, OriginCancel):
                task = self.origin_tasks.pop(action.block, None)
                if task is not None:
                    task.cancel()
            elif isinstance(action, Verified):
                self.memory[action.block] = action.data
                self.progress.set()
                if self.entry is not None:
                    self.write_queue.append((action.block, action.data))
                    self.pending += len(action.data)
                    if self.pending >= self.write_limit and self.paused_since is None:
                        self.paused_since = self.loop.time()
                        self.room.clear()
                    if self.into_store:
                        self.unsettled.add(action.block)
                    if self.writer is None:
                        self.writer = asyncio.ensure_future(self.write())
            elif isinstance(action, Deliver):
                self.deliveries.put_nowait(action.block)
            elif isinstance(action, Finished):
                self.done = True
                self.deliveries.put_nowait(None)
        self.rearm()

    def rearm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        deadline = self.core.next_deadline()
        if deadline is not None and not self.done:
            self.timer = self.loop.call_at(deadline + self.paused_total, self.fire)

    def fire(self) -> None:
        self.timer = None
        if self.paused_since is not None:  # the core's clock stands still; `written_out` re-arms
            return
        actions = self.core.on_timer(self.now())
        if log.isEnabledFor(logging.DEBUG):  # why a fetch goes quiet: its requests expiring, and to whom
            for action in actions:
                if isinstance(action, Send) and isinstance(action.message, wire.Cancel):
                    log.debug("fetch of %s: request for block %d to %s expired", self.root.hex()[:16],
                              action.message.block, action.peer)
        self.apply(actions)
        self.check_stalled()

    def check_stalled(self) -> None:
        if self.done or self.failure or self.pending_connects or self.core.has_sources:
            return
        if self.core.layer is None:  # no block can be verified without it, the origin's neither
            self.failure = (f"no peer sent the hash layer within {LAYER_TIMEOUT:g} s of being asked"
                            if self.core.layer_lost else "no source left: every peer left before the hash layer")
        else:
            self.failure = ("no source left: every peer failed or left" +
                            (" and the origin cannot serve ranges" if self.origin is not None else ""))
        self.deliveries.put_nowait(None)

    def _write_batch(self, batch: list) -> list[int]:  # in a worker thread
        """The blocks of `batch` the store took."""
        return [block for block, data in batch if self.node.store.write_block(self.root, block, data)]

    async def write(self) -> None:
        """Drain `write_queue` into the store, a batch per thread hop (a hop per block cost more CPU than the
        write itself). Creating the entry, which fsyncs, comes first, once the hash layer is known."""
        store = self.node.store
        ok = False
        try:
            if not self.entry:
                if self.core.layer is None:
                    return
                try:
                    await asyncio.to_thread(store.create, self.manifest, self.core.layer, pin=True)
                    self.entry = True
                except (StoreError, PeerError) as exc:
                    log.warning("content %s will not be stored or shared: %s", self.root.hex()[:16], exc)
                    self.entry = None  # never again for this run
                    return
            while self.write_queue:
                batch, self.write_queue = self.write_queue, []
                started = self.loop.time()
                stored = await asyncio.to_thread(self._write_batch, batch)
                if (took := self.loop.time() - started) > SLOW_WRITE:
                    log.debug("fetch of %s: %d block(s) took %.3f s to store (announced after)",
                              self.root.hex()[:16], len(batch), took)
                for block in stored:
                    self.node.announce_block(self.root, block)
                    if self.into_store:  # the consumer wants it from the store: memory is done
                        self.memory.pop(block, None)
                for block, _ in batch:  # stored or refused: either way memory is needed only until handed out
                    self.written.add(block)
                    if block < self.handed:
                        self.memory.pop(block, None)
                self.unsettled.difference_update(block for block, _ in batch)
                self.settled.set()
                self.written_out(sum(len(data) for _, data in batch))
            ok = True
        finally:
            self.writer = None
            if not ok:  # refused, failed or cancelled: nothing more gets written, nobody may wait for it
                self.write_queue = []
                self.unsettled.clear()
                self.settled.set()
                self.written_out(self.pending)

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        block_size = self.manifest.block_size
        while True:
            block = await self.deliveries.get()
            if block is None:
                if self.failure:
                    raise FetchFailed(self.failure)
                return
            while block in self.unsettled:
                self.settled.clear()
                await self.settled.wait()
            if self.into_store:
                self.handed = block + 1
                data = self.memory.pop(block, None)  # still here only if the store refused it
                yield b"" if data is None else cast(bytes, data)  # a bytearray block goes out as is: it is only read
                continue
            data = self.memory.get(block)
            if data is None:
                data = self.node.store.read_block(self.root, block)
            if block in self.written or self.entry is None:  # stored, or never will be: memory is done
                self.memory.pop(block, None)
            self.handed = block + 1
            offset = block * block_size
            lo, hi = max(self.start - offset, 0), min(self.end - offset, len(data))
            yield cast(bytes, data if (lo, hi) == (0, len(data)) else data[lo:hi])  # (bytes or bytearray, read only)

    async def stop(self) -> None:
        if not self.stopped:  # stop() may be called twice; count once
            self.stopped = True
            stats = FetchReport(hash_failures=self.core.hash_failures, banned=self.core.trust.banned_count(),
                                bytes_origin=self.core.bytes_from["origin"], bytes_peers=self.core.bytes_from["peers"])
            self.node.fetch_totals.add(stats)
            if self.report is not None:
                self.report.add(stats)
                self.report = None
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
        if self.origin_wait is not None:
            self.origin_wait.cancel()
        for connection in list(self.connections):
            connection.abort("fetch over")
        for task in self.tasks:
            task.cancel()
        # Store writes are left to finish (they are quick): what was verified stays shareable.
        await asyncio.gather(*self.tasks, *([self.writer] if self.writer else []), return_exceptions=True)
        if self.entry:
            with contextlib.suppress(StoreError, ValueError):
                self.node.store.unpin(self.root)
