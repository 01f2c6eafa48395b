"""A byte pipe between two connections at the protocol level: what arrives on one is written to the other from the
transport's own callback, with no stream object, task or await per chunk, and no copy of ours.

Both directions apply backpressure the way asyncio's transports mean it: when a transport's write buffer passes its
high-water mark it calls `pause_writing` on its protocol, here the pipe's side of that connection, which stops
reading the other connection until `resume_writing`. A reader slower than its writer so costs the proxy at most
the high-water mark plus one read per direction, whatever the other end sends.

A connection aiohttp has opened (the client's, after CONNECT or an accepted upgrade; the origin's, after its 101) is
adopted: its protocol hands over the bytes it read past the head (`set_parser`), the transport is given the pipe's
protocol, and aiohttp's protocol is still told when the connection is lost (its bookkeeping, and the handler's
cancellation when the client leaves).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from .stats import RequestRecord

log = logging.getLogger("swarmproxy.tunnel")


class _Tail:
    """Stands in for aiohttp's parser while a connection is adopted: keeps the bytes read past the head."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.eof = False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.data.append(bytes(data))
        return False, b""

    def feed_eof(self) -> None:
        self.eof = True

    def set_exception(self, exc: BaseException, exc_cause: BaseException | None = None) -> None:
        self.eof = True


class Side(asyncio.Protocol):
    """One connection of a pipe. What it reads goes to the other side's transport; while its own transport cannot
    take more (`pause_writing`), the other side is not read."""

    def __init__(self, pipe: Pipe) -> None:
        self.pipe = pipe
        self.other: Side = self  # set by the pipe
        self.transport: Any = None  # a stream transport: uvloop's are no asyncio.Transport
        self.writing_paused = False  # our transport's buffer is above its high-water mark
        self.previous: Any = None  # aiohttp's protocol of an adopted connection, told of the connection's loss
        self.pending: list[bytes] = []  # read before the pipe ran
        self.record: RequestRecord | None = None  # bytes written to this side count in its bytes_origin

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The transport's own marks (64 and 16 KiB under uvloop and asyncio): marks of 256 KiB or 1 MiB moved no
        # more bytes a second through a tunnel here, and would let a slow reader hold more.
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        pipe = self.pipe
        if not pipe.running:
            if not pipe.finished:  # the origin may speak before the client's side is ready: kept, no more read
                self.pending.append(data)
                self.set_reading(False)
            return
        if pipe.finished:
            return  # read only so that closing sends no reset: dropped
        pipe.moved = pipe.loop.time()
        self.other.write(data)

    def eof_received(self) -> bool:
        # Either side's EOF ends the tunnel, a client's passed on first as a half-close: aiohttp's server closes a
        # client's connection at its EOF, and the tunnel has always ended there. False: the transport closes.
        if self is self.pipe.client:
            self.other.write_eof()
        self.pipe.finish(None)
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.pipe.finish(exc)
        previous, self.previous = self.previous, None
        if previous is not None:
            previous.connection_lost(exc)

    def pause_writing(self) -> None:
        self.writing_paused = True
        if self.pipe.running and not self.pipe.finished:
            self.other.set_reading(False)

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.pipe.running and not self.pipe.finished:
            self.other.set_reading(True)

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(data)
        if self.record is not None:
            self.record.bytes_origin += len(data)

    def write_eof(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing() and transport.can_write_eof():
            try:
                transport.write_eof()
            except (OSError, RuntimeError):
                pass  # the connection went meanwhile: nothing to pass on

    def adopt(self, protocol: Any, transport: Any, hand_over: Callable[[Any], object]) -> None:
        """Take over the connection aiohttp's `protocol` holds. `hand_over(feed)` is its `set_parser`, through
        which it gives the bytes it read past the head; it reads nothing more once the transport is ours."""
        tail = _Tail()
        hand_over(tail)
        self.pending = tail.data
        self.previous = protocol
        self.writing_paused = protocol.writing_paused  # the transport tells a protocol only of changes
        transport.set_protocol(self)
        self.connection_made(transport)
        if tail.eof or transport.is_closing():
            self.pipe.finish(None)
        else:
            self.set_reading(False)  # until the pipe runs

    def set_reading(self, wanted: bool) -> None:
        transport = self.transport
        # uvloop raises when asked to pause a paused transport, resume a reading one, or pause a closing one.
        if transport is not None and not transport.is_closing() and transport.is_reading() != wanted:
            if wanted:
                transport.resume_reading()
            else:
                transport.pause_reading()


class Pipe:
    """Copies bytes both ways between `client` and `origin` until either side is done, or no byte moved either way
    for `idle` s. Bytes written to the client are counted in `record.bytes_origin`."""

    def __init__(self, record: RequestRecord, idle: float | None) -> None:
        self.loop = asyncio.get_running_loop()
        self.client = Side(self)
        self.origin = Side(self)
        self.client.other, self.origin.other = self.origin, self.client
        self.client.record = record
        self.idle = idle
        self.moved = self.loop.time()  # when a byte last went either way
        self.running = False
        self.finished = False
        self.ended: BaseException | None = None  # what ended the tunnel, if it failed
        self._done: asyncio.Future[None] = self.loop.create_future()
        self._timer: asyncio.TimerHandle | None = None

    def origin_protocol(self) -> Side:
        """The protocol factory of the origin's connection (`loop.create_connection`)."""
        return self.origin

    async def run(self) -> None:
        """Copy until the tunnel ends: either side's EOF or loss, or the idle limit."""
        if not self.finished:
            self.running = True
            self.moved = self.loop.time()
            for side in (self.client, self.origin):
                pending, side.pending = side.pending, []
                for data in pending:
                    side.other.write(data)
            for side in (self.client, self.origin):
                side.set_reading(not side.other.writing_paused)
            if self.idle is not None:
                self._timer = self.loop.call_at(self.moved + self.idle, self._check_idle)
        await self._done
        if self.ended is not None:
            log.debug("tunnel ended: %s", self.ended)

    def finish(self, exc: BaseException | None) -> None:
        """End the tunnel (`run` returns); both connections are still read, and what they send dropped, so that
        closing them sends no reset that could destroy bytes still on their way to the client."""
        if self.finished:
            return
        self.finished, self.ended = True, exc
        if self._timer is not None:
            self._timer.cancel()
        for side in (self.client, self.origin):
            side.set_reading(True)
        if not self._done.done():
            self._done.set_result(None)

    def close(self) -> None:
        """End the tunnel and close the origin's connection, once what was written to it went. The client's is
        closed by its server when the handler returns."""
        self.finish(None)
        if self.origin.transport is not None:
            self.origin.transport.close()

    def _check_idle(self) -> None:
        # A tunnel holds a --max-connections slot and two sockets: one nobody uses must not hold them forever.
        assert self.idle is not None
        if (left := self.moved + self.idle - self.loop.time()) > 0:  # a byte moved meanwhile: look again then
            self._timer = self.loop.call_later(left, self._check_idle)
            return
        self._timer = None
        log.info("tunnel closed: no byte either way for %g s (--tunnel-idle-timeout)", self.idle)
        self.finish(None)


class Body(asyncio.Protocol):
    """The rest of a response body of known length, from the origin's connection straight to the client's transport.

    It adopts the origin's connection mid-body (what aiohttp's reader already holds is written first), counts the
    bytes in `record.bytes_origin`, and holds the origin while the client's transport is above its high-water mark
    (`writing_paused` of aiohttp's protocol there, whose `drain` then tells when it may go on). `run` raises what
    aiohttp's reader would have: `ClientPayloadError` when the origin ends early, `SocketTimeoutError` after
    `silence` s without a byte while not held; `ConnectionResetError` when the client is gone. The origin's
    connection is no longer aiohttp's to reuse: its parser is left mid-body, so it is closed afterwards."""

    def __init__(self, record: RequestRecord, client: Any, client_protocol: Any, writer: Any, left: int,
                 silence: float | None) -> None:
        self.loop = asyncio.get_running_loop()
        self.record, self.client, self.client_protocol, self.writer = record, client, client_protocol, writer
        self.left = left
        self.silence = silence
        self.transport: Any = None
        self.previous: Any = None  # aiohttp's protocol of the origin's connection, told of its loss
        self.held = False
        self.outcome: asyncio.Future[None] = self.loop.create_future()
        self._wake: asyncio.Future[None] = self.loop.create_future()
        self._moved = self.loop.time()
        self._timer: asyncio.TimerHandle | None = None

    def adopt(self, protocol: Any, transport: Any, buffered: bytes) -> None:
        """Take the connection from aiohttp's `protocol`, after writing the body bytes its reader held."""
        self.previous = protocol
        transport.set_protocol(self)
        self.transport = transport
        if buffered:
            self.data_received(buffered)
        if not self.outcome.done() and not self.held and not transport.is_reading():
            transport.resume_reading()  # aiohttp's reader may have paused it; its flow control is ours now
        if self.silence is not None:
            self._timer = self.loop.call_at(self._moved + self.silence, self._check_silence)

    async def run(self) -> None:
        try:
            while not self.outcome.done():
                await asyncio.wait([self.outcome, self._wake], return_when=asyncio.FIRST_COMPLETED)
                if self._wake.done():
                    self._wake = self.loop.create_future()
                if self.held and not self.outcome.done():
                    await self.writer.drain()  # until the client's transport is below its low-water mark
                    self._go_on()
            self.outcome.result()
        finally:
            if self._timer is not None:
                self._timer.cancel()
            if not self.outcome.done():  # cancelled (the client left): what the origin's close says is no one's
                self.outcome.cancel()

    def data_received(self, data: bytes) -> None:
        if self.outcome.done():
            return
        if self.client is None or self.client.is_closing():
            self._end(ConnectionResetError("client closed the connection"))
            return
        if len(data) > self.left:
            data = data[:self.left]  # what an origin sends past its Content-Length is no part of the body
        self.client.write(data)
        self.left -= len(data)
        self.writer.output_size += len(data)  # aiohttp's count of what was sent, which its error handler reads
        self.record.bytes_origin += len(data)
        self._moved = self.loop.time()
        if not self.left:
            self._end(None)
        elif self.client_protocol.writing_paused and not self.held:
            self.held = True  # until aiohttp's drain says the client took enough
            self.transport.pause_reading()
            if not self._wake.done():
                self._wake.set_result(None)

    def eof_received(self) -> bool:
        self._end(None if not self.left else _cut("the origin closed the connection"))
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self._end(None if not self.left else _cut(f"the origin's connection was lost: {exc or 'closed'}"))
        previous, self.previous = self.previous, None
        if previous is not None:
            previous.connection_lost(exc)

    def _go_on(self) -> None:
        self.held = False
        self._moved = self.loop.time()  # the silence is the origin's from here, not the client's wait
        if not self.transport.is_closing() and not self.transport.is_reading():
            self.transport.resume_reading()

    def _check_silence(self) -> None:
        assert self.silence is not None
        if self.outcome.done():
            return
        left = self._moved + self.silence - self.loop.time()
        if self.held or left > 0:
            self._timer = self.loop.call_later(max(left, self.silence if self.held else 0), self._check_silence)
            return
        self._end(aiohttp.SocketTimeoutError("Timeout on reading data from socket"))

    def _end(self, exc: BaseException | None) -> None:
        if self.outcome.done():
            return
        if exc is None:
            self.outcome.set_result(None)
        else:
            self.outcome.set_exception(exc)
        if self.transport is not None and not self.transport.is_closing() and self.transport.is_reading():
            self.transport.pause_reading()  # nothing more is wanted from it: the relay closes it


def _cut(why: str) -> aiohttp.ClientPayloadError:
    return aiohttp.ClientPayloadError(f"Response payload is not completed: {why}")
