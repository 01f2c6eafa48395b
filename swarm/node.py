"""A block-engine node: the asyncio shell around `FetchCore` and `ServeCore`.

    node = SwarmNode(store, transport)
    address = await node.start("127.0.0.1", 0)        # serve what the store shares
    manifest = await node.seed_file(path)              # hash a file, store it, share it
    async for chunk in node.fetch(manifest, peers=[...], origin=range_source):
        ...                                            # verified bytes, in order

Everything that decides lives in the cores; this module moves bytes and time. Store writes run in a
thread (`asyncio.to_thread`), batched: creating an entry fsyncs and a write can stall behind writeback. Reads are
inline (page cache). Verified blocks are kept in memory only until they are written and delivered; if the
store cannot take them (disk full), the fetch still completes from memory and the content is simply not
shared.

**Write backpressure.** Peers can deliver faster than the store writes (four seeds on loopback do). Once
`max_pending_writes` bytes of verified blocks wait for the store writer, a fetch stops taking messages from its
peers until the writer is below the bound again: the transports then stop reading (`receive_limit`) and the
peers' sends block, so memory stays bounded instead of growing by the difference of the two rates. While it is
paused, the FetchCore's clock stands still (`_FetchRun.now`): a request is not declared timed out because *we*
were not reading the reply. Origin ranges already requested still arrive (at most `origin_max_outstanding`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from . import wire
from .errors import NotInStore, OriginSourceError, PeerError, StoreError, SwarmError, TransportError
from .fetch_core import (Close, Deliver, FetchCore, Finished, OriginCancel, OriginFetch, Send, Verified)
from .manifest import Manifest, build_manifest, decode
from .policy import PolicyConfig
from .serve_core import Close as ServeClose
from .serve_core import Send as ServeSend
from .serve_core import SendBlock, ServeCore, Shared
from .store import BlockLocation, BlockStore, Evicted, StoreFailed
from .throttle import TokenBucket
from .transport import Address, Connection, Listener, Transport

if TYPE_CHECKING:  # a type only: importing it pulls in aiohttp, ~0.15 s of start-up for `swarm get`
    from .origin_source import OriginRangeSource

__all__ = ["SwarmNode", "FetchFailed"]

log = logging.getLogger("swarmproxy.swarm")

READ_SIZE = 1 << 20


class FetchFailed(SwarmError):
    """A fetch cannot complete: no source is left that could supply the missing blocks."""


class SwarmNode:
    def __init__(
        self,
        store: BlockStore,
        transport: Transport,
        *,
        node_id: bytes | None = None,
        upload_rate: float | None = None,
        max_peers: int = 64,
        policy: PolicyConfig | None = None,
        handshake_timeout: float = 10.0,
        max_pending_writes: int = 32 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.transport = transport
        self.node_id = node_id or secrets.token_bytes(32)
        self.upload = TokenBucket(upload_rate)
        self.max_peers = max_peers
        self.policy = policy
        self.handshake_timeout = handshake_timeout
        self.max_pending_writes = max_pending_writes  # bytes verified and waiting for the store, per fetch
        self.listener: Listener | None = None
        self._shared: set[bytes] = set()
        self._serving: dict[bytes, dict[Connection, ServeCore]] = {}
        self._fetching: dict[bytes, _FetchRun] = {}
        self._tasks: set[asyncio.Task] = set()
        self._accept_task: asyncio.Task | None = None
        self.bytes_uploaded = 0
        # Totals over finished fetches, for metrics: hash_failures, banned, bytes_origin, bytes_peers.
        self.fetch_totals: collections.Counter[str] = collections.Counter()
        self.events: list[object] = []  # store events (Evicted, StoreFailed) for the owner to inspect
        store.add_listener(self._on_store_event)
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> Address:
        self._loop = asyncio.get_running_loop()
        self.listener = await self.transport.listen(host, port)
        self._accept_task = asyncio.create_task(self._accept_loop(self.listener))
        return self.listener.address

    async def close(self) -> None:
        if self.listener is not None:
            await self.listener.aclose()
        tasks = [t for t in (self._accept_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for connections in self._serving.values():
            for connection in connections:
                connection.abort("node closing")

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- sharing ------------------------------------------------------------------------------------------------

    def share(self, root: bytes) -> None:
        self._shared.add(root)

    def unshare(self, root: bytes) -> None:
        self._shared.discard(root)
        for connection, core in list(self._serving.pop(root, {}).items()):
            self._apply_serve(connection, core, core.on_unshared())

    def _lookup(self, root: bytes) -> Shared | None:
        if root not in self._shared:
            return None
        try:
            if root in self.store.roots():
                if not self.store.shareable(root):
                    return None
                return Shared(self.store.manifest(root), self.store.hash_layer(root), self.store.have(root))
        except StoreError:
            return None
        run = self._fetching.get(root)
        if run is not None:
            # Being fetched, nothing stored yet: peers may connect now and hear HAVE as blocks arrive.
            manifest = run.manifest
            return Shared(manifest, run.core.layer or (), wire.Bitfield.from_blocks(manifest.num_blocks, ()))
        return None

    def _on_store_event(self, event: object) -> None:
        # Listeners may run in the store's writer thread: hop back to the loop.
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._store_event, event)

    def _store_event(self, event: object) -> None:
        self.events.append(event)
        if isinstance(event, (Evicted, StoreFailed)):
            log.warning("content %s is no longer shared: %s", event.root.hex()[:16], event)
            self.unshare(event.root)

    def _announce_block(self, root: bytes, block: int) -> None:
        for connection, core in list(self._serving.get(root, {}).items()):
            self._apply_serve(connection, core, core.on_new_block(block))

    def _announce_origin_fetch(self, root: bytes, block: int) -> None:
        for connection, core in list(self._serving.get(root, {}).items()):
            self._apply_serve(connection, core, core.on_origin_fetch(block))

    async def seed_file(self, path: str | os.PathLike, *, block_size: int | None = None) -> Manifest:
        """Hash `path`, put it in the store and share it. Returns its manifest.

        A store that can `adopt` takes the file as it is (the disk store hard-links it: no copy, which for
        several seeds of one file on one machine was most of the page cache in use); the file must not change
        while it is hashed. Otherwise, or to complete an incomplete entry already there, it is written in.
        """

        def build() -> tuple[Manifest, list[bytes]]:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                return build_manifest(iter(lambda: handle.read(READ_SIZE), b""), size, block_size=block_size)

        manifest, layer = await asyncio.to_thread(build)

        def fill() -> None:
            adopt = getattr(self.store, "adopt", None)
            if adopt is None:
                self.store.create(manifest, layer, pin=True)
            elif adopt(manifest, layer, path, pin=True) or self.store.complete(manifest.root):
                return
            with open(path, "rb") as handle:
                for block in range(manifest.num_blocks):
                    offset, length = manifest.block_span(block)
                    data = os.pread(handle.fileno(), length, offset)
                    if not self.store.write_block(manifest.root, block, data):
                        raise StoreError(f"the store refused block {block} of {path}")

        await asyncio.to_thread(fill)
        self.share(manifest.root)
        return manifest

    # -- serving ------------------------------------------------------------------------------------------------

    async def _accept_loop(self, listener: Listener) -> None:
        async for connection in listener:
            if sum(len(c) for c in self._serving.values()) >= self.max_peers:
                connection.abort("too many peers")
                continue
            self._spawn(self._serve(connection))

    async def _serve(self, connection: Connection) -> None:
        loop = asyncio.get_running_loop()
        core = ServeCore(self.node_id, self._lookup, upload=self.upload)
        receiving: asyncio.Task | None = None
        try:
            while True:
                receiving = receiving or asyncio.ensure_future(connection.receive())
                deadline = core.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                if core.root is None:  # a connection must say what it wants, promptly
                    timeout = self.handshake_timeout
                done, _ = await asyncio.wait({receiving}, timeout=timeout)
                if not done:
                    if core.root is None:
                        return
                    self._apply_serve(connection, core, core.on_timer(loop.time()))
                    continue
                message, receiving = receiving.result(), None
                if message is None:
                    return
                was_new = core.root is None
                self._apply_serve(connection, core, core.on_message(message, loop.time()))
                if was_new and core.root is not None:
                    self._serving.setdefault(core.root, {})[connection] = core
        finally:
            if receiving is not None:
                receiving.cancel()
            if core.root is not None:
                self._serving.get(core.root, {}).pop(connection, None)
            connection.abort("served")

    def _apply_serve(self, connection: Connection, core: ServeCore, actions: list) -> None:
        for action in actions:
            if isinstance(action, ServeSend):
                with contextlib.suppress(TransportError):
                    connection.send_nowait(action.message)
            elif isinstance(action, SendBlock):
                self._spawn(self._send_block(connection, core, action))
            elif isinstance(action, ServeClose):
                log.debug("closing %s: %s", connection, action.reason)
                connection.close(action.reason)

    async def _send_block(self, connection: Connection, core: ServeCore, action: SendBlock) -> None:
        root = core.root
        assert root is not None
        try:
            location = self.store.block_location(root, action.block)
            if location is not None:
                payload: bytes | BlockLocation = BlockLocation(location.path, location.offset + action.offset,
                                                               action.length)
            else:
                data = self.store.read_block(root, action.block)
                payload = data[action.offset:action.offset + action.length]
            await connection.send_block(action.block, action.offset, payload)
            self.bytes_uploaded += action.length
        except NotInStore:
            with contextlib.suppress(TransportError):
                connection.send_nowait(wire.Reject(action.block, action.offset, action.length,
                                                   wire.RejectReason.NOT_FOUND))
        except (TransportError, StoreError, OSError) as exc:
            log.debug("sending block %d to %s failed: %s", action.block, connection, exc)
            connection.abort(str(exc))

    # -- fetching -----------------------------------------------------------------------------------------------

    async def fetch_manifest(self, root: bytes, peers: Iterable[Address], *, timeout: float = 10.0) -> Manifest:
        """Ask peers for the manifest of `root`; the first one whose manifest has that root wins."""
        errors = []
        for address in peers:
            try:
                connection = await self._open(address, root, timeout)
            except (TransportError, PeerError, asyncio.TimeoutError) as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            try:
                connection.send_nowait(wire.ManifestRequest())
                async with asyncio.timeout(timeout):
                    while (message := await connection.receive()) is not None:
                        if isinstance(message, wire.ManifestResponse):
                            manifest = decode(message.data)
                            if manifest.root != root:
                                raise PeerError("its manifest has another root")
                            return manifest
                raise PeerError("closed without sending the manifest")
            except (PeerError, TransportError, asyncio.TimeoutError) as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc or type(exc).__name__}")
            finally:
                connection.abort("manifest fetched")
        raise FetchFailed(f"no peer gave the manifest of {root.hex()}: " + ("; ".join(errors) or "no peers"))

    async def _open(self, address: Address, root: bytes, timeout: float) -> Connection:
        """Connect and exchange handshakes for `root`; the peer's BITFIELD is left for the caller."""
        connection = await self.transport.connect(address, timeout=timeout)
        try:
            connection.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, self.node_id, root))
            async with asyncio.timeout(timeout):
                answer = await connection.receive()
            if answer is None:
                raise PeerError(f"closed the connection ({connection.close_reason})")
            if not isinstance(answer, wire.Handshake) or answer.root != root:
                raise PeerError(f"answered {type(answer).__name__} instead of a HANDSHAKE for our root")
            if answer.node_id == self.node_id:
                raise PeerError("that is this node itself")
            return connection
        except BaseException:
            connection.abort("handshake failed")
            raise

    async def fetch(
        self,
        manifest: Manifest,
        peers: Iterable[Address] = (),
        *,
        origin: OriginRangeSource | None = None,
        layer: list[bytes] | None = None,
        start: int = 0,
        end: int | None = None,
        connect_timeout: float = 10.0,
        stall_timeout: float = 60.0,
        window: int = 8,
        into_store: bool = False,
        report: dict | None = None,
    ) -> AsyncIterator[bytes]:
        """Bytes `start..end-1` of `manifest`'s content, verified and in order, from `peers` and `origin`.

        Blocks the store already holds are used as they are; new blocks go into the store (and are served
        to others while the root is shared). `window` blocks after the delivery point are fetched first
        (streaming); beyond it, rarest first. Raises FetchFailed when no source is left, or when nothing
        verifies for `stall_timeout` seconds.

        `into_store=True` is for a consumer that wants the content in the store rather than in memory
        (`swarm get` takes the store's file as its output): a block is handed over only once the store has
        taken or refused it; one the store holds comes as `b""` (its bytes are not kept in memory, however
        far ahead of the delivery point it arrived), one it refused (disk full) as its bytes.
        """
        end = manifest.size if end is None else end
        if not 0 <= start <= end <= manifest.size:
            raise ValueError(f"range {start}..{end} outside 0..{manifest.size}")
        if start == end:
            return
        run = _FetchRun(self, manifest, layer, start, end, origin, window, into_store)
        run.report = report
        self._fetching.setdefault(manifest.root, run)
        run.begin(peers, connect_timeout, stall_timeout)
        try:
            async for chunk in run.chunks():
                yield chunk
        finally:
            if self._fetching.get(manifest.root) is run:
                del self._fetching[manifest.root]
            await run.stop()

    def add_peers(self, root: bytes, peers: Iterable[Address], *, connect_timeout: float = 10.0) -> int:
        """More peers for the fetch of `root` under way (providers that appeared since it began); the number
        of connections started, 0 when no fetch of `root` runs."""
        run = self._fetching.get(root)
        if run is None or run.done or run.failure:
            return 0
        started = 0
        for address in peers:
            run.pending_connects += 1
            run.spawn(run.peer(address, connect_timeout))
            started += 1
        return started

    def peer_count(self, root: bytes) -> int | None:
        """Peers the fetch of `root` is connected or connecting to; None when no fetch of `root` runs."""
        run = self._fetching.get(root)
        if run is None or run.done or run.failure:
            return None
        return len(run.connections) + run.pending_connects


class _FetchRun:
    """One fetch: the FetchCore, its connections, origin requests, timer and delivery queue."""

    def __init__(self, node: SwarmNode, manifest: Manifest, layer: list[bytes] | None, start: int, end: int,
                 origin: OriginRangeSource | None, window: int, into_store: bool = False) -> None:
        self.node, self.manifest, self.start, self.end, self.origin = node, manifest, start, end, origin
        self.root = manifest.root
        self.loop = asyncio.get_running_loop()
        store = node.store
        if layer is None and self.root in store.roots():
            layer = list(store.hash_layer(self.root))
        held = set(store.have(self.root).blocks()) if self.root in store.roots() else set()
        first, last = start // manifest.block_size, (end - 1) // manifest.block_size
        self.core = FetchCore(manifest, layer, first_block=first, last_block=last, held=held,
                              config=node.policy, window=window)
        self.entry = self.root in store.roots()
        if self.entry:
            store.pin(self.root)
        self.memory: dict[int, bytes] = {}  # verified, not yet both written and delivered
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
        self.report: dict | None = None  # filled with the fetch's statistics when it stops
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
        self.failure: str | None = None
        self.done = False

    def begin(self, peers: Iterable[Address], timeout: float, stall_timeout: float) -> None:
        self.spawn(self.watchdog(stall_timeout))
        self.apply(self.core.start(self.now()))
        for address in peers:
            self.pending_connects += 1
            self.spawn(self.peer(address, timeout))
        if self.origin is not None:
            self.apply(self.core.add_origin(self.now()))
        self.check_stalled()

    def now(self) -> float:
        """The FetchCore's clock: the loop's, stopped while we do not read from peers for the store writer."""
        return (self.loop.time() if self.paused_since is None else self.paused_since) - self.paused_total

    def written_out(self, nbytes: int) -> None:
        """`nbytes` of queued blocks left the writer's hands: resume reading once below the bound."""
        self.pending = max(0, self.pending - nbytes)
        self.progress.set()  # a slow disk is not a stalled fetch (the watchdog)
        if self.paused_since is not None and self.pending < self.write_limit:
            self.paused_total += self.loop.time() - self.paused_since
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
                await asyncio.wait_for(self.progress.wait(), stall_timeout)
            except asyncio.TimeoutError:
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

    async def peer(self, address: Address, timeout: float) -> None:
        try:
            connection = await self.node._open(address, self.root, timeout)
        except (TransportError, PeerError, asyncio.TimeoutError, OSError) as exc:
            log.debug("peer %s:%s not used: %s", address[0], address[1], exc)
            self.pending_connects -= 1
            self.check_stalled()
            return
        self.connections.add(connection)
        try:
            self.pending_connects -= 1  # counted as a source from here on
            self.apply(self.core.add_peer(connection, self.now()))
            while True:
                if not self.room.is_set():  # the store writer is behind: leave the bytes with the peer
                    await self.room.wait()
                if (message := await connection.receive()) is None:
                    break
                self.apply(self.core.on_message(connection, message, self.now()))
                if self.done:
                    return
        finally:
            self.connections.discard(connection)
            connection.abort("fetch over" if self.done else "peer lost")
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
                    action.peer.send_nowait(action.message)
            elif isinstance(action, Close):
                log.info("dropping peer %s: %s", action.peer, action.reason)
                action.peer.abort(action.reason)
            elif isinstance(action, OriginFetch):
                if action.block not in self.origin_tasks:
                    self.origin_tasks[action.block] = self.spawn(self.origin_fetch(action))
                    self.node._announce_origin_fetch(self.root, action.block)
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
        self.apply(self.core.on_timer(self.now()))
        self.check_stalled()

    def check_stalled(self) -> None:
        if self.done or self.failure or self.pending_connects or self.core.has_sources:
            return
        self.failure = ("no source left: every peer failed or left" +
                        (" and the origin cannot serve ranges" if self.origin is not None else ""))
        self.deliveries.put_nowait(None)

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
                stored = await asyncio.to_thread(
                    lambda: [block for block, data in batch if store.write_block(self.root, block, data)])
                for block in stored:
                    self.node._announce_block(self.root, block)
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

    async def chunks(self) -> AsyncIterator[bytes]:
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
                yield b"" if data is None else data
                continue
            data = self.memory.get(block)
            if data is None:
                data = self.node.store.read_block(self.root, block)
            if block in self.written or self.entry is None:  # stored, or never will be: memory is done
                self.memory.pop(block, None)
            self.handed = block + 1
            offset = block * block_size
            lo, hi = max(self.start - offset, 0), min(self.end - offset, len(data))
            yield data if (lo, hi) == (0, len(data)) else data[lo:hi]

    async def stop(self) -> None:
        if not self.stopped:  # stop() may be called twice; count once
            self.stopped = True
            stats = {"hash_failures": self.core.hash_failures, "banned": self.core.trust.banned_count(),
                     "bytes_origin": self.core.bytes_from["origin"], "bytes_peers": self.core.bytes_from["peers"]}
            self.node.fetch_totals.update(stats)
            if self.report is not None:
                self.report.update(stats)
                self.report = None
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
        for connection in list(self.connections):
            connection.abort("fetch over")
        for task in self.tasks:
            task.cancel()
        # Store writes are left to finish (they are quick): what was verified stays shareable.
        await asyncio.gather(*self.tasks, *([self.writer] if self.writer else []), return_exceptions=True)
        if self.entry:
            with contextlib.suppress(StoreError, ValueError):
                self.node.store.unpin(self.root)
