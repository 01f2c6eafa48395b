"""The TCP transport: asyncio protocols (not streams: one callback per chunk, no reader task), TCP_NODELAY.

Contract: `swarm.net.transport`. Framing is `swarm.net.wire` on a plain byte stream.

Writing. Messages go straight to the asyncio transport (`writelines` of header and payload for a BLOCK, so the
payload is not concatenated; uvloop sends both with one writev). A BLOCK given as a `BlockLocation` is sent
zero-copy with `os.sendfile`, in a worker thread on a `dup` of the socket's descriptor:

* `loop.sendfile` is not used: uvloop does not implement it, and asyncio's version pauses *reading* for the
  whole transfer — two peers sending blocks to each other that way would both stop reading and deadlock once
  their socket buffers fill.
* While a file range is being sent, later messages queue behind it (`_queue`) so bytes never interleave; before
  it starts, the transport's own buffer is drained to empty (asyncio calls `pause_writing` when limits are set
  below the buffered size, `resume_writing` when it empties).
* One thread job sends a run of what is queued, up to `_RUN_BYTES`: the ranges and the headers and frames between
  them (written with `os.send` by the same thread, in order). A job per 16 KiB block cost a thread hop each, 55-65
  µs of the loop's CPU, and was the largest single share of an agent's CPU in the cluster lab.
* The thread owns a duplicate descriptor so that the event loop closing the socket (peer reset) can never make
  it write into a reused descriptor number; the duplicate is closed only after the thread has returned.
* The threads come from a pool of their own (`_SENDFILE_THREADS`); a thread is held while the peer absorbs the
  block, so a fast peer costs microseconds and a slow one a thread (waiting in poll(), no CPU).
* Where `os.sendfile` is missing the range is read (`pread`) and written like bytes.
* A range of at most `_INLINE_MAX` bytes that the page cache holds whole is read on the loop and written like bytes:
  `preadv` with `RWF_NOWAIT` returns at once or says the disk would be needed (then the thread sends it). In the
  cluster lab each connection has one 16 KiB block queued at a time, so a run is one block and the hop stayed.

`buffered` = the asyncio transport's write buffer + queued messages + what the running thread job has left.
The transport's high-water mark is `send_limit`, so `pause_writing`/`resume_writing` drive `drain()`.

Reading. The socket is read into the `Decoder`'s buffers (`get_buffer`: BLOCK payloads in place); a
`ProtocolError` aborts the connection (`CloseCause.PROTOCOL`).
Past `receive_limit` of undelivered messages the transport stops reading, so the peer's writes back up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import select
import socket
import threading
from collections import deque
from typing import cast

from swarm.errors import ConnectFailed, ProtocolError
from swarm.net import wire
from swarm.net.decoder import Decoder
from swarm.net.transport import (
    CONNECT_TIMEOUT,
    Address,
    BlockPayload,
    CloseCause,
    CloseReason,
    Connection,
    ConnectionSettings,
    Listener,
    Transport,
    read_location,
    source_address,
)
from swarm.net.wire import Message
from swarm.store.interface import BlockLocation

__all__ = ["TcpTransport", "TcpListener", "TcpConnection"]

_SENDFILE_AVAILABLE = hasattr(os, "sendfile")
# Its own pool: a thread is held for as long as a peer takes to absorb a block, and slow peers must not starve
# the default executor (the block store's writes run there). Beyond this many concurrent file sends, they queue.
_SENDFILE_THREADS = 64
_sendfile_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _sendfile_executor
    if _sendfile_executor is None:
        _sendfile_executor = concurrent.futures.ThreadPoolExecutor(_SENDFILE_THREADS, thread_name_prefix="sendfile")
    return _sendfile_executor
_SENDFILE_CHUNK = 1024 * 1024  # per os.sendfile call; the stop flag is checked between calls
_COALESCE = 4096  # queued writes shorter than this are appended to the previous one (control frames, headers)
_POLL_MS = 100  # how long the sendfile thread waits for room before re-checking its stop flag
_RUN_BYTES = 1024 * 1024  # a thread job takes queued items until this much (at least one range): 64 blocks of 16 KiB
# Ranges up to this long are read on the loop when cached (a copy of 64 KiB costs microseconds; longer ones go out
# zero-copy by sendfile, where a hop is small beside the bytes it moves).
_INLINE_MAX = 64 * 1024
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)  # Linux: a read that fails with EAGAIN rather than wait for the disk


class _SendfileStopped(Exception):
    pass


def _send_run_blocking(socket_fd: int, run: list[bytes | bytearray | BlockLocation], stop: threading.Event) -> None:
    """Send `run` in order on a non-blocking socket descriptor: file ranges with sendfile, bytes with send, waiting
    for room with poll(); runs in a thread. A file is opened once for the ranges of it in a row."""
    poller = select.poll()
    poller.register(socket_fd, select.POLLOUT)
    path, file_fd = None, -1
    try:
        for item in run:
            if not isinstance(item, BlockLocation):
                _send_bytes(socket_fd, memoryview(item), poller, stop)
                continue
            if item.path != path:
                if file_fd >= 0:
                    os.close(file_fd)
                    file_fd = -1
                file_fd, path = os.open(item.path, os.O_RDONLY), item.path
            offset, remaining = item.offset, item.length
            while remaining:
                if stop.is_set():
                    raise _SendfileStopped()
                try:
                    sent = os.sendfile(socket_fd, file_fd, offset, min(remaining, _SENDFILE_CHUNK))
                except BlockingIOError:
                    poller.poll(_POLL_MS)
                    continue
                if sent == 0:
                    raise OSError(f"{item.path} ends before offset {offset} + {remaining}")
                offset += sent
                remaining -= sent
    finally:
        if file_fd >= 0:
            os.close(file_fd)


def _read_cached(location: BlockLocation) -> bytearray | None:
    """The bytes of a short file range if the page cache holds every one of them, else None (the read never waits
    for the disk: `RWF_NOWAIT`; a file system that cannot say, a short file or any error also give None, and the
    thread path then sends the range or reports why it cannot). The open may read the file's inode from the disk
    when it is not cached: the store's files being sent from are in use, so theirs is."""
    if not _RWF_NOWAIT or location.length > _INLINE_MAX:
        return None
    buffer = bytearray(location.length)
    try:
        fd = os.open(location.path, os.O_RDONLY)
        try:
            got = os.preadv(fd, [buffer], location.offset, _RWF_NOWAIT)
        finally:
            os.close(fd)
    except OSError:
        return None
    return buffer if got == location.length else None


def _send_bytes(socket_fd: int, data: memoryview, poller: select.poll, stop: threading.Event) -> None:
    while data:
        if stop.is_set():
            raise _SendfileStopped()
        try:
            sent = os.write(socket_fd, data)
        except BlockingIOError:
            poller.poll(_POLL_MS)
            continue
        data = data[sent:]


class TcpConnection(Connection, asyncio.BufferedProtocol):
    transport_name = "tcp"

    def __init__(self, settings: ConnectionSettings, listener: TcpListener | None = None) -> None:
        super().__init__(settings, accepted=listener is not None)
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._decoder = Decoder(settings.limits, admit_block=self.expected.admit)
        self._discard: bytearray | None = None
        self._peername: Address = ("", 0)
        self._sockname: Address = ("", 0)
        self._low_water = settings.send_limit // 2
        self._writing_paused = False
        self._empty_waiter: asyncio.Future[None] | None = None
        # Items behind a file range; the writer task sends them in order.
        self._queue: deque[bytes | bytearray | BlockLocation] = deque()
        self._queued_bytes = 0
        self._writer: asyncio.Task[None] | None = None
        self._sendfile_left = 0
        self._sendfile_fd: int | None = None
        self._sendfile_stop = threading.Event()
        self._sendfile_running = False
        self._close_when_flushed = False
        self._lost_reason: CloseReason | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # (uvloop's transports are not asyncio.Transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._peername = _address(transport.get_extra_info("peername"))
        self._sockname = _address(transport.get_extra_info("sockname"))
        cast(asyncio.Transport, transport).set_write_buffer_limits(high=self.send_limit, low=self._low_water)
        if self._listener is not None:
            self._listener._offer(self)

    # Reading goes through asyncio's BufferedProtocol (uvloop too): the socket is read straight into the
    # decoder's buffers, BLOCK payloads into the very bytearray they are delivered in (one copy per byte).

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.close_reason is not None:
            self._discard = self._discard or bytearray(64 * 1024)  # ended: whatever still arrives is dropped
            return memoryview(self._discard)
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.close_reason is not None:
            return
        try:
            messages = self._decoder.buffer_updated(nbytes)
        except ProtocolError as exc:
            self._fail(CloseReason(CloseCause.PROTOCOL, str(exc), exc))
            return
        self._deliver(messages)

    def eof_received(self) -> bool:
        held = self._decoder.buffered
        if held:
            self._record_close(CloseReason(CloseCause.LOST, f"peer closed mid-frame ({held} bytes held)"))
        else:
            self._record_close(CloseReason(CloseCause.REMOTE, "peer closed the connection"))
        return False  # no half-open connections: close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if exc is not None:
            self._record_close(CloseReason(CloseCause.LOST, str(exc) or type(exc).__name__, exc))
        self._sendfile_stop.set()
        self._wake_empty_waiter()
        self._wake_drainers()
        if not self._sendfile_running:
            self._release()
        # else: the writer task releases once the sendfile thread has returned

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake_empty_waiter()
        self._buffer_shrank()

    # --- Connection ---------------------------------------------------------------------------------------

    @property
    def remote_address(self) -> Address:
        return self._peername

    @property
    def local_address(self) -> Address:
        return self._sockname

    @property
    def buffered(self) -> int:
        transport = self._transport
        in_transport = transport.get_write_buffer_size() if transport is not None else 0
        return in_transport + self._queued_bytes + self._sendfile_left

    def _send_message(self, message: Message) -> None:
        self._write(message.encode())

    def send_raw(self, data: bytes) -> None:
        self._check_open()
        self._write(bytes(data))

    def _send_block(self, block: int, offset: int, payload: BlockPayload) -> None:
        length = payload.length if isinstance(payload, BlockLocation) else memoryview(payload).nbytes
        header = wire.encode_block_header(block, offset, length)
        if isinstance(payload, BlockLocation):
            if not _SENDFILE_AVAILABLE or self._socket_fd() is None:
                payload = read_location(payload)
            elif (cached := _read_cached(payload)) is not None:
                payload = cached
            else:
                self._enqueue(header)
                self._enqueue(payload)
                return
        if self._writer is None and (transport := self._open_transport()) is not None:
            transport.writelines((header, payload))
        else:
            self._enqueue(header)
            self._enqueue(payload if type(payload) is bytearray else bytes(payload))

    def _write(self, data: bytes) -> None:
        if self._writer is None:
            if (transport := self._open_transport()) is not None:
                transport.write(data)
        else:
            self._enqueue(data)

    def _open_transport(self) -> asyncio.Transport | None:
        """The asyncio transport while it can still send. After a reset it is closing until `connection_lost`
        runs, and every write meanwhile is dropped by asyncio with a 'socket.send() raised exception' log line."""
        transport = self._transport
        return None if transport is None or transport.is_closing() else transport

    def _enqueue(self, item: bytes | bytearray | BlockLocation) -> None:
        queue = self._queue
        if type(item) is bytes and len(item) < _COALESCE:
            # Small frames queued behind a file range share one buffer: a deque entry of its own cost a 22-byte
            # REJECT 60 bytes more, so `buffered` (the send bound) undercounted the memory held threefold.
            if queue and type(queue[-1]) is bytearray:
                queue[-1] += item
            else:
                queue.append(bytearray(item))
        else:
            queue.append(item)
        self._queued_bytes += _length(item)
        if self._writer is None:
            self._writer = self._loop.create_task(self._write_queue())

    def _socket_fd(self) -> int | None:
        transport = self._transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        try:
            return sock.fileno() if sock is not None else None
        except (OSError, ValueError):
            return None

    async def _write_queue(self) -> None:
        try:
            while self._queue and self._open_transport() is not None:
                item = self._queue.popleft()
                if isinstance(item, BlockLocation):
                    run, size = self._take_run(item)
                    self._queued_bytes -= size
                    self._sendfile_left = size
                    try:
                        await self._sendfile(run)
                    finally:
                        self._sendfile_left = 0
                else:
                    self._queued_bytes -= len(item)
                    assert self._transport is not None  # the writer runs from connection_made on
                    self._transport.write(item)
                self._buffer_shrank()
        except _SendfileStopped:
            pass
        except OSError as exc:
            self._fail(CloseReason(CloseCause.LOST, f"sendfile: {exc}", exc))
        finally:
            self._writer = None
            self._queue.clear()
            self._queued_bytes = 0
            if self._transport is None:
                self._release()
            elif self._close_when_flushed:
                self._transport.close()
            self._buffer_shrank()

    def _take_run(self, first: BlockLocation) -> tuple[list[bytes | bytearray | BlockLocation], int]:
        """`first` and the queued items after it, up to `_RUN_BYTES`, for one thread job, and their length; a run
        ends with a range (bytes after the last one go out through the transport, which needs no thread)."""
        size, taken, run_size = first.length, 0, first.length
        for count, item in enumerate(self._queue, 1):
            if size >= _RUN_BYTES:
                break
            size += _length(item)
            if isinstance(item, BlockLocation):
                taken, run_size = count, size
        run: list[bytes | bytearray | BlockLocation] = [first]
        run += (self._queue.popleft() for _ in range(taken))
        return run, run_size

    async def _sendfile(self, run: list[bytes | bytearray | BlockLocation]) -> None:
        await self._wait_transport_empty()
        if self._transport is None:
            raise _SendfileStopped()
        if self._sendfile_fd is None:
            fd = self._socket_fd()
            if fd is None:
                raise _SendfileStopped()
            self._sendfile_fd = os.dup(fd)
        self._sendfile_running = True
        try:
            await self._loop.run_in_executor(
                _executor(), _send_run_blocking, self._sendfile_fd, run, self._sendfile_stop
            )
        finally:
            self._sendfile_running = False

    async def _wait_transport_empty(self) -> None:
        transport = self._transport
        if transport is None or transport.get_write_buffer_size() == 0:
            return
        # Limits below the buffered size make asyncio call pause_writing now and resume_writing at empty.
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            while self._transport is not None and self._transport.get_write_buffer_size():
                self._empty_waiter = self._loop.create_future()
                await self._empty_waiter
        finally:
            self._empty_waiter = None
            if self._transport is not None:
                self._transport.set_write_buffer_limits(high=self.send_limit, low=self._low_water)

    def _wake_empty_waiter(self) -> None:
        if self._empty_waiter is not None and not self._empty_waiter.done():
            self._empty_waiter.set_result(None)

    def _pause_receiving(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def _resume_receiving(self) -> None:
        if self._transport is not None and self.close_reason is None:
            self._transport.resume_reading()

    def _close_gracefully(self) -> None:
        if self._transport is None:
            self._release()
        elif self._writer is not None:
            self._close_when_flushed = True
        else:
            self._transport.close()

    def _abort(self) -> None:
        self._sendfile_stop.set()
        if self._sendfile_fd is not None and self._sendfile_running:
            try:  # wakes the thread's poll() at once
                _shutdown(self._sendfile_fd)
            except OSError:
                pass
        if self._transport is not None:
            self._transport.abort()
        elif not self._sendfile_running:
            self._release()

    def _release(self) -> None:
        if self._sendfile_fd is not None:
            os.close(self._sendfile_fd)
            self._sendfile_fd = None
        self._finished()


def _length(item: bytes | bytearray | BlockLocation) -> int:
    return item.length if isinstance(item, BlockLocation) else len(item)


def _shutdown(fd: int) -> None:
    sock = socket.socket(fileno=os.dup(fd))
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()


def _address(value: object) -> Address:
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return ("", 0)


class TcpListener(Listener):
    def __init__(self, settings: ConnectionSettings) -> None:
        super().__init__(settings)
        self._server: asyncio.AbstractServer | None = None
        self._address: Address = ("", 0)

    @property
    def address(self) -> Address:
        return self._address

    def _stop(self) -> None:
        if self._server is not None:
            self._server.close()


class TcpTransport(Transport):
    name = "tcp"

    async def listen(self, host: str, port: int = 0) -> TcpListener:
        loop = asyncio.get_running_loop()
        listener = TcpListener(self.settings)
        listener._server = await loop.create_server(
            lambda: TcpConnection(self.settings, listener), host, port, reuse_address=True
        )
        listener._address = _address(listener._server.sockets[0].getsockname())
        self.listen_host = host
        return listener

    async def connect(self, address: Address, *, timeout: float = CONNECT_TIMEOUT, own_socket: bool = False
                      ) -> TcpConnection:
        loop = asyncio.get_running_loop()
        host, port = address
        source = source_address(self.listen_host, host)
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    lambda: TcpConnection(self.settings), host, port,
                    local_addr=None if source is None else (source, 0))
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"tcp: cannot connect to {host}:{port}: {str(exc) or 'timed out'}") from exc
        return connection
