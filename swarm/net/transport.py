"""Peer transports: one connection abstraction over memory, TCP and QUIC, all speaking the `swarm.net.wire` codec.

A `Transport` makes connections: `await transport.listen(host, port)` returns a `Listener` bound to a real
address (`listener.address`; port 0 picks a free one) whose `accept()` / `async for` yields incoming
`Connection`s; `await transport.connect(address)` returns an outgoing one or raises `ConnectFailed`.

A `Connection` carries `swarm.net.wire` messages both ways:

* **Sending.** `send_nowait(message)` queues a message and returns; `send(message)` queues it, then waits in
  `drain()`. `send_block(block, offset, payload)` sends a BLOCK whose payload is bytes-like or a
  `swarm.store.interface.BlockLocation` (a file range: TCP hands it to `sendfile`, the others read it). A range that
  cannot be read raises `OSError` from memory and QUIC, which read it up front; TCP finds out while sending and ends
  the connection (`CloseCause.LOST`).
  Order is preserved per connection for everything but QUIC's request streams (below).
* **Backpressure.** `buffered` counts outgoing bytes this side holds on the peer's behalf: queued in user space,
  or (QUIC) handed to the QUIC stack and not yet acknowledged. `drain()` returns once `buffered <= send_limit`
  and raises `ConnectionClosed` if the connection closes first. A peer that stops reading stops the flow: every
  transport also bounds what it has *received* but the application has not yet taken with `receive()`
  (`receive_limit`; `accepted_receive_limit`, much lower, on connections a listener accepts: the connecting side
  asks, and only the side that asked receives BLOCKs): past it the transport stops reading (TCP), stops granting
  flow-control credit (QUIC) or counts it against the sender's `buffered` (memory). A decoded control message
  is charged its Python objects, not its few wire bytes. So a receiver that never reads makes the sender's
  `buffered` reach `send_limit` and its `send()` block.
  `send_nowait` never blocks and may overshoot the bound by whatever the caller queues; it is for small replies
  that must not wait, and a caller that answers a peer with it stops reading that peer while it is over the
  bound (as the node does).
* **Only requested BLOCKs.** A BLOCK is received only in answer to a REQUEST this side sent (`send`/`send_nowait`),
  for the same block and offset and at most the requested length; each REQUEST admits one BLOCK (a REJECT
  answering it, too, uses it up; a CANCEL does not, so a late reply still arrives). Anything else is a protocol
  violation seen from the BLOCK's 13-byte header, before its payload is held (`ExpectedReplies`,
  `swarm.net.decoder`): a peer cannot make us buffer megabytes by announcing them.
* **Receiving.** `await receive()` returns the next message, or None at the end of the stream;
  `async for message in connection` does the same. Messages that arrived before the peer closed are still
  delivered first (after a protocol violation, except those decoded from the same chunk of bytes as the fault:
  the decoder drops them); after a local `close()` the rest are discarded.
* **Counting.** `counters` (`ConnectionCounters`) holds the BLOCKs and their payload bytes each way: a BLOCK
  sent is counted when it is queued (`send_block`, or `send_nowait` of a `Block`), a BLOCK received when
  `receive()` hands it over. Whoever holds a connection reads them (the cluster mode's bytes per rack, DC and
  outside) instead of wrapping its methods; they outlive the connection.
* **Ending.** Whatever ends a connection — `close()` (graceful: queued bytes are flushed first), `abort()`
  (immediate), the peer closing, a reset, bytes the codec rejects, an oversized frame — is recorded once in
  `close_reason` (a `CloseReason` with a `CloseCause`) and resolves the `closed` future with it. Peer faults never
  raise into the application: they end that connection, and `receive()` returns None. Only sending on a
  connection that has ended raises (`ConnectionClosed`). A listener survives anything a single peer does.

QUIC (`swarm.net.quic`) carries a control stream plus **one bidirectional stream per block request**; the
routing is inside the transport, invisible to the caller: `send(Request(...))` opens a new stream, the responder's
`send(Block(...))` / `send_block(...)` / `send(Reject(...))` for that (block, offset, length) goes back on the
request's stream, which then ends. Replies therefore can overtake control messages, as they would with any
two-stream design; everything else keeps its order.

Implementations: `swarm.net.memory.MemoryTransport` (in-process, with fault injection for tests),
`swarm.net.tcp.TcpTransport`, `swarm.net.quic.QuicTransport`.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import logging
import os
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import ClassVar

from swarm.content.merkle import HASH_SIZE
from swarm.errors import ConnectionClosed, TransportError
from swarm.net import wire
from swarm.net.wire import Block, Limits, Message, Reject, Request
from swarm.store.interface import BlockLocation

__all__ = [
    "CONNECT_TIMEOUT",
    "Address",
    "BlockPayload",
    "CloseCause",
    "CloseReason",
    "ConnectionCounters",
    "ConnectionSettings",
    "Connection",
    "ExpectedReplies",
    "Listener",
    "Transport",
    "message_size",
    "read_location",
]

logger = logging.getLogger(__name__)

Address = tuple[str, int]
BlockPayload = bytes | bytearray | memoryview | BlockLocation

MiB = 1024 * 1024

#: Default seconds for a connection to be made, for every transport and for the node's connects.
CONNECT_TIMEOUT = 10.0


class CloseCause(enum.Enum):
    LOCAL = "local"  # this side called close() or abort()
    REMOTE = "remote"  # the peer closed the connection cleanly
    PROTOCOL = "protocol"  # the peer sent bytes the codec rejects; `error` is the ProtocolError
    LOST = "lost"  # reset, truncated mid-frame, timed out, I/O error, injected fault


@dataclass(frozen=True, slots=True)
class CloseReason:
    cause: CloseCause
    detail: str = ""
    error: BaseException | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.cause.value}: {self.detail}" if self.detail else self.cause.value


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Per-connection bounds. Defaults: two 4 MiB blocks each way; the lab tunes them."""

    limits: Limits = field(default_factory=Limits)
    send_limit: int = 8 * MiB  # `drain()` waits while more than this is buffered outgoing
    receive_limit: int = 8 * MiB  # stop taking bytes from the peer while more than this awaits `receive()`
    # The same for connections a listener accepts, from their first byte: their peers send requests and small
    # control frames (well over a thousand fit), never the blocks a connection we open receives.
    accepted_receive_limit: int = 256 * 1024
    backlog: int = 128  # accepted connections a listener holds for `accept()`; more are refused


@dataclass(slots=True)
class ConnectionCounters:
    """BLOCKs one connection carried and their payload bytes (headers and control messages aside), each way:
    what a caller accounts per peer, by level or by address (`Connection.counters`)."""

    blocks_sent: int = 0
    bytes_sent: int = 0
    blocks_received: int = 0
    bytes_received: int = 0


# What a decoded control message is charged in the receive bound: its Python objects (a queued REQUEST measured
# ~190 bytes), not its 5-22 wire bytes — else a bound meant as 8 MiB held 90 MB of queued REQUESTs.
_SMALL_MESSAGE = 192
# REQUESTs remembered for their reply. Far above what a fetch keeps outstanding per peer; what overflows is the
# oldest, in practice requests cancelled long ago whose late replies will never come.
_MAX_EXPECTED = 1024


def message_size(message: Message) -> int:
    """Roughly the bytes a decoded message holds, for the receive bound (exact for the large ones)."""
    if isinstance(message, Block):
        return wire.BLOCK_HEADER_SIZE + len(message.data)
    if isinstance(message, wire.ManifestResponse):
        return wire.FRAME_HEADER_SIZE + len(message.data)
    if isinstance(message, wire.Bitfield):
        return wire.FRAME_HEADER_SIZE + 4 + len(message.bits)
    if isinstance(message, wire.HashResponse):
        return wire.FRAME_HEADER_SIZE + 9 + HASH_SIZE * (len(message.hashes) + len(message.proof))
    if isinstance(message, wire.Pex):
        return wire.FRAME_HEADER_SIZE + 2 + 20 * len(message.peers)
    if isinstance(message, wire.ClaimsResponse):  # up to 2 KiB: a stranger may send them to a served connection
        entries = sum(wire._CLAIM_ENTRY.size + len(entry.claim.validator) for entry in message.entries)
        return wire.FRAME_HEADER_SIZE + wire._CLAIMS_HEAD.size + entries
    return _SMALL_MESSAGE


def read_location(location: BlockLocation) -> bytes:
    """The bytes of a file range (the fallback where zero-copy is not available); short file → OSError."""
    fd = os.open(location.path, os.O_RDONLY)
    try:
        data = os.pread(fd, location.length, location.offset)
    finally:
        os.close(fd)
    if len(data) != location.length:
        raise OSError(f"{location.path}: {len(data)} bytes at {location.offset}, expected {location.length}")
    return data


class ExpectedReplies:
    """The BLOCKs a connection may receive: one per REQUEST it sent, at most that long (sans-I/O).

    `sent(request)` records a REQUEST; `admit(block, offset, length)` — a BLOCK's header arrived — says whether
    it answers one and uses that one up; `rejected(reject)` uses up the one a REJECT answers.
    """

    def __init__(self, limit: int = _MAX_EXPECTED) -> None:
        self.limit = limit
        self._lengths: OrderedDict[tuple[int, int], list[int]] = OrderedDict()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def sent(self, request: Request) -> None:
        key = (request.block, request.offset)
        self._lengths.setdefault(key, []).append(request.length)
        self._lengths.move_to_end(key)
        self._count += 1
        while self._count > self.limit:
            oldest = next(iter(self._lengths))
            self._use(oldest, 0)

    def admit(self, block: int, offset: int, length: int) -> bool:
        lengths = self._lengths.get((block, offset))
        if lengths is None:
            return False
        for index, requested in enumerate(lengths):
            if length <= requested:
                self._use((block, offset), index)
                return True
        return False

    def rejected(self, reject: Reject) -> None:
        lengths = self._lengths.get((reject.block, reject.offset))
        if lengths is not None and reject.length in lengths:
            self._use((reject.block, reject.offset), lengths.index(reject.length))

    def _use(self, key: tuple[int, int], index: int) -> None:
        lengths = self._lengths[key]
        del lengths[index]
        if not lengths:
            del self._lengths[key]
        self._count -= 1


def payload_length(payload: BlockPayload) -> int:
    return payload.length if isinstance(payload, BlockLocation) else memoryview(payload).nbytes


class Connection(ABC):
    """One peer connection. Subclasses implement the byte movement; this class holds the shared contract."""

    transport_name: ClassVar[str] = ""

    def __init__(self, settings: ConnectionSettings, *, accepted: bool = False) -> None:
        self.settings = settings
        self.send_limit = settings.send_limit
        self.receive_limit = min(settings.receive_limit, settings.accepted_receive_limit) if accepted \
            else settings.receive_limit
        self._loop = asyncio.get_running_loop()
        self.expected = ExpectedReplies()  # decoders admit BLOCKs through `expected.admit`
        self._inbound: deque[tuple[Message, int]] = deque()
        self._inbound_bytes = 0
        self._receiving_paused = False
        self._receive_waiter: asyncio.Future[None] | None = None
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.close_reason: CloseReason | None = None
        self.closed: asyncio.Future[CloseReason] = self._loop.create_future()
        self.counters = ConnectionCounters()

    # --- identity -----------------------------------------------------------------------------------------

    @property
    @abstractmethod
    def remote_address(self) -> Address: ...

    @property
    @abstractmethod
    def local_address(self) -> Address: ...

    def __repr__(self) -> str:
        state = f" closed ({self.close_reason})" if self.close_reason else ""
        return f"<{type(self).__name__} {self.local_address} -> {self.remote_address}{state}>"

    # --- sending ------------------------------------------------------------------------------------------

    @property
    @abstractmethod
    def buffered(self) -> int:
        """Outgoing bytes held on the peer's behalf (queued, or handed to QUIC and not yet acknowledged)."""

    def send_nowait(self, message: Message) -> None:
        """Queue `message` without waiting; `ConnectionClosed` if the connection has ended."""
        self._check_open()
        if type(message) is Request:
            self.expected.sent(message)
        if isinstance(message, Block):
            self._send_block(message.block, message.offset, message.data)
            self._count_sent(len(message.data))
        else:
            self._send_message(message)

    async def send(self, message: Message) -> None:
        """Queue `message`, then wait until `buffered <= send_limit` (see `drain`)."""
        self.send_nowait(message)
        await self.drain()

    async def send_block(self, block: int, offset: int, payload: BlockPayload) -> None:
        """Send a BLOCK from bytes or a file range (`BlockLocation`), then `drain()`."""
        self._check_open()
        length = payload_length(payload)
        if length < 1:
            raise ValueError("a BLOCK carries at least one byte")
        self._send_block(block, offset, payload)
        self._count_sent(length)
        await self.drain()

    def _count_sent(self, length: int) -> None:
        counters = self.counters
        counters.blocks_sent += 1
        counters.bytes_sent += length

    async def drain(self) -> None:
        """Wait until `buffered <= send_limit`; `ConnectionClosed` if the connection ends first."""
        while self.close_reason is None and self.buffered > self.send_limit:
            waiter = self._loop.create_future()
            self._drain_waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._drain_waiters:
                    self._drain_waiters.remove(waiter)
        self._check_open()

    def _check_open(self) -> None:
        if self.close_reason is not None:
            raise ConnectionClosed(self.close_reason)

    def _buffer_shrank(self) -> None:
        """Subclasses call this whenever `buffered` may have dropped: wakes `drain()` callers to re-check."""
        if self._drain_waiters and self.buffered <= self.send_limit:
            self._wake_drainers()

    def _wake_drainers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    @abstractmethod
    def _send_message(self, message: Message) -> None:
        """Queue a non-BLOCK message."""

    @abstractmethod
    def _send_block(self, block: int, offset: int, payload: BlockPayload) -> None:
        """Queue a BLOCK from bytes or a file range."""

    # --- receiving ----------------------------------------------------------------------------------------

    @property
    def receive_buffered(self) -> int:
        """Bytes (roughly) of received messages not yet taken with `receive()`."""
        return self._inbound_bytes

    def _deliver(self, messages: list[Message]) -> None:
        """Subclasses hand decoded messages here; crossing `receive_limit` pauses the peer."""
        if self.close_reason is not None and self.close_reason.cause is CloseCause.LOCAL:
            return
        for message in messages:
            if type(message) is Reject:
                self.expected.rejected(message)
            size = message_size(message)
            self._inbound.append((message, size))
            self._inbound_bytes += size
        if messages:
            self._wake_receiver()
        if not self._receiving_paused and self._inbound_bytes > self.receive_limit:
            self._receiving_paused = True
            self._pause_receiving()

    def _wake_receiver(self) -> None:
        waiter = self._receive_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def receive(self) -> Message | None:
        """The next message, or None once the connection has ended and every received message was taken."""
        while not self._inbound:
            if self.close_reason is not None:
                return None
            self._receive_waiter = self._loop.create_future()
            try:
                await self._receive_waiter
            finally:
                self._receive_waiter = None
        message, size = self._inbound.popleft()
        self._inbound_bytes -= size
        if type(message) is Block:
            counters = self.counters
            counters.blocks_received += 1
            counters.bytes_received += len(message.data)
        self._taken(size)
        if self._receiving_paused and self._inbound_bytes <= self.receive_limit // 2:
            self._receiving_paused = False
            self._resume_receiving()
        return message

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while (message := await self.receive()) is not None:
            yield message

    def _pause_receiving(self) -> None:
        """Stop taking bytes from the peer (hook)."""

    def _resume_receiving(self) -> None:
        """Take bytes from the peer again (hook)."""

    def _taken(self, size: int) -> None:
        """The application took `size` bytes of messages (hook; the memory transport wakes the sender)."""

    # --- ending -------------------------------------------------------------------------------------------

    def close(self, detail: str = "") -> None:
        """End the connection gracefully: what is queued is still sent, nothing new is accepted."""
        if self._record_close(CloseReason(CloseCause.LOCAL, detail or "closed")):
            self._close_gracefully()

    def abort(self, detail: str = "") -> None:
        """End the connection at once, discarding what is queued."""
        if self.close_reason is None or not self.closed.done():
            self._record_close(CloseReason(CloseCause.LOCAL, detail or "aborted"))
            self._abort()

    async def aclose(self, detail: str = "") -> CloseReason:
        """`close()` and wait until the connection is gone; returns the close reason."""
        self.close(detail)
        return await self.wait_closed()

    async def wait_closed(self) -> CloseReason:
        return await asyncio.shield(self.closed)

    def _record_close(self, reason: CloseReason) -> bool:
        """Record why the connection ends (the first cause wins); True if this call ended it."""
        if self.close_reason is not None:
            return False
        self.close_reason = reason
        if reason.cause is CloseCause.LOCAL:
            self._inbound.clear()
            self._inbound_bytes = 0
        if reason.cause is CloseCause.PROTOCOL:
            logger.info("%s: peer %s broke the protocol: %s", self.transport_name, self.remote_address, reason)
        self._wake_receiver()
        self._wake_drainers()
        return True

    def _fail(self, reason: CloseReason) -> None:
        """A peer fault or a lost connection: record it and tear down without flushing."""
        if self._record_close(reason):
            self._abort()

    def _finished(self, reason: CloseReason | None = None) -> None:
        """Subclasses call this once the underlying resources are released."""
        if reason is not None:
            self._record_close(reason)
        elif self.close_reason is None:
            self._record_close(CloseReason(CloseCause.LOST, "connection gone"))
        if not self.closed.done():
            assert self.close_reason is not None
            self.closed.set_result(self.close_reason)

    @abstractmethod
    def _close_gracefully(self) -> None:
        """Flush what is queued, then release the connection and call `_finished()`."""

    @abstractmethod
    def _abort(self) -> None:
        """Release the connection now and call `_finished()` (possibly later, from a callback)."""

    # --- fault injection (tests) --------------------------------------------------------------------------

    @abstractmethod
    def send_raw(self, data: bytes) -> None:
        """Write bytes past the codec (tests only: garbage, truncated frames). QUIC: on the control stream."""


class Listener(ABC):
    """Accepts connections on `address`; `accept()` or `async for connection in listener`."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.settings = settings
        self._queue: deque[Connection] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    @property
    @abstractmethod
    def address(self) -> Address: ...

    @property
    def is_closed(self) -> bool:
        return self._closed

    def _offer(self, connection: Connection) -> None:
        """Implementations hand each new connection here; beyond the backlog it is refused."""
        if self._closed or len(self._queue) >= self.settings.backlog:
            connection.abort("listener closed" if self._closed else "listener backlog full")
            return
        self._queue.append(connection)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def accept(self) -> Connection:
        """The next incoming connection; `TransportError` once the listener is closed."""
        while True:
            while self._queue:
                connection = self._queue.popleft()
                if connection.close_reason is None:
                    return connection
            if self._closed:
                raise TransportError("listener closed")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def __aiter__(self) -> AsyncIterator[Connection]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Connection]:
        while True:
            try:
                yield await self.accept()
            except TransportError:
                return

    def close(self) -> None:
        """Stop accepting; connections not yet accepted are aborted, accepted ones are left alone."""
        if self._closed:
            return
        self._closed = True
        self._stop()
        while self._queue:
            self._queue.popleft().abort("listener closed")
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def aclose(self) -> None:
        self.close()
        await self._wait_stopped()

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @abstractmethod
    def _stop(self) -> None:
        """Stop listening (release the socket)."""

    async def _wait_stopped(self) -> None:
        """Wait until the socket is released (hook)."""


def source_address(listen_host: str | None, destination: str) -> str | None:
    """The address to send from when connecting to `destination`: the one we listen on, when that is one
    specific address, so peers see us where we announced ourselves (a multi-homed host, the lab's one
    address per node); None lets the kernel choose. Never a loopback source towards another network (it
    could not reach it), nor across address families; a destination that is a name is left to the kernel."""
    if not listen_host:
        return None
    try:
        source, target = ipaddress.ip_address(listen_host), ipaddress.ip_address(destination)
    except ValueError:
        return None
    if source.is_unspecified or source.version != target.version or (source.is_loopback and not target.is_loopback):
        return None
    return listen_host


class Transport(ABC):
    """Makes connections of one kind. Not to be confused with `swarm.net.wire.Transport`, the PEX flag set."""

    name: ClassVar[str] = ""

    def __init__(self, settings: ConnectionSettings | None = None) -> None:
        self.settings = settings or ConnectionSettings()
        self.listen_host: str | None = None  # set by `listen`; outgoing connections leave from it (see above)

    @abstractmethod
    async def listen(self, host: str, port: int = 0) -> Listener:
        """Listen on (host, port); port 0 picks a free port, see `Listener.address`."""

    @abstractmethod
    async def connect(self, address: Address, *, timeout: float = CONNECT_TIMEOUT, own_socket: bool = False
                      ) -> Connection:
        """Connect to a listener; `ConnectFailed` if that cannot be done within `timeout` seconds. `own_socket`: from
        a socket of the connection's own even where the transport would dial from its listener's (a connect-back:
        a NAT lets in what comes from an address and port we talked to, and a stranger's would not be)."""
