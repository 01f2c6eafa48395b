"""One QUIC connection of the QUIC transport: its control stream, request streams and flow-control gate.

The design — streams, routing of replies, backpressure both ways, the bounds on what a peer can make us hold —
is described in `swarm.net.quic`, which holds the endpoint side (aioquic's protocol glue, the listener, the
transport) and re-exports `QuicConnection`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections import OrderedDict, deque
from typing import Any, Protocol

from aioquic.quic import events
from aioquic.quic.connection import QuicConnection as AioquicConnection
from aioquic.quic.connection import stream_is_client_initiated, stream_is_unidirectional

from swarm.errors import ProtocolError
from swarm.net import wire
from swarm.net.decoder import Decoder
from swarm.net.transport import (
    Address,
    BlockPayload,
    CloseCause,
    CloseReason,
    Connection,
    ConnectionSettings,
    read_location,
)
from swarm.net.wire import Block, Cancel, KeepAlive, Message, Reject, Request
from swarm.store.interface import BlockLocation


class _Endpoint(Protocol):
    """What a connection needs of the UDP endpoint that carries it (`swarm.net.quic._Protocol`)."""

    _quic: AioquicConnection

    def _control_opened(self) -> None: ...
    def _terminated(self) -> None: ...
    def _transmit_soon(self) -> None: ...
    def close(self, error_code: int = 0, reason_phrase: str = "") -> None: ...

__all__ = ["ALPN", "CONTROL_STREAM", "QuicConnection"]

logger = logging.getLogger(__name__)

ALPN = "swarmproxy/1"
CONTROL_STREAM = 0

# Application error codes in CONNECTION_CLOSE.
_CLOSED = 0
_PROTOCOL_VIOLATION = 1
_ABORTED = 2

_CLOSE_FLUSH_TIMEOUT = 5.0  # a graceful close waits this long for the peer to acknowledge what we sent
_MAX_CANCELLED_KEYS = 1024
# What an incoming request stream may carry: one REQUEST frame (type byte + body), so its header alone rejects more.
_REQUEST_FRAME_LENGTH = len(Request(0, 0, 1).encode()) - 4

Key = tuple[int, int, int]  # (block, offset, length) of a request


class _Kind(enum.Enum):
    CONTROL = "control"
    OUTGOING = "outgoing request"  # we asked; one reply expected
    INCOMING = "incoming request"  # they asked; we reply


class _Stream:
    __slots__ = ("stream_id", "kind", "decoder", "key", "done")

    def __init__(self, stream_id: int, kind: _Kind, decoder: Decoder, key: Key | None = None) -> None:
        self.stream_id = stream_id
        self.kind = kind
        self.decoder = decoder
        self.key = key
        self.done = False  # control: opening KEEPALIVE seen; outgoing: reply received; incoming: request seen


class QuicConnection(Connection):
    transport_name = "quic"

    def __init__(self, settings: ConnectionSettings, protocol: _Endpoint, is_client: bool) -> None:
        super().__init__(settings, accepted=not is_client)
        self._protocol = protocol
        self._quic: AioquicConnection = protocol._quic
        self._is_client = is_client
        self._streams: dict[int, _Stream] = {}
        self._routes: dict[Key, deque[int]] = {}  # incoming requests awaiting our reply → their stream ids
        self._cancelled: OrderedDict[Key, int] = OrderedDict()  # replies to discard, per key
        self._sending: set[int] = {CONTROL_STREAM}  # streams that may hold unacknowledged bytes
        self._highest_incoming = -1
        self._request_limits = dataclasses.replace(settings.limits, max_frame_size=_REQUEST_FRAME_LENGTH)
        # Stream data that arrived while `receive()`'s queue was over its bound, kept undecoded (module docstring).
        self._backlog: deque[tuple[int, bytes, bool]] = deque()
        self._backlog_bytes = 0
        self._flush_waiter: asyncio.Future[None] | None = None
        self._terminated = False
        self._remote: Address = ("", 0)
        self._local: Address = ("", 0)
        self.requests_opened = 0  # request streams this side opened
        self.requests_accepted = 0  # request streams the peer opened
        self._gate_credit()
        if is_client:
            self._streams[CONTROL_STREAM] = self._new_stream(CONTROL_STREAM, _Kind.CONTROL)

    # --- identity -----------------------------------------------------------------------------------------

    @property
    def remote_address(self) -> Address:
        return self._remote

    @property
    def local_address(self) -> Address:
        return self._local

    @property
    def open_request_streams(self) -> int:
        return sum(1 for stream in self._streams.values() if stream.kind is not _Kind.CONTROL)

    # --- flow control -------------------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        streams = self._quic._streams
        total = 0
        for stream_id in list(self._sending):
            stream = streams.get(stream_id)
            held = len(stream.sender._buffer) if stream is not None else 0
            if held == 0 and stream_id != CONTROL_STREAM:
                self._sending.discard(stream_id)
            total += held
        return total

    def _unread(self) -> int:
        # Partial frames are not counted: the application cannot take them, so withholding credit for them
        # could stall every stream half-way (each is bounded: a reply by our request, a request stream by one
        # REQUEST, the control stream by the largest control frame).
        return self.receive_buffered + self._backlog_bytes

    def _gate_credit(self) -> None:
        """Replace aioquic's MAX_DATA doubling with: credit = bytes the application has taken + receive_limit."""
        quic = self._quic
        original = quic._write_connection_limits

        def write_connection_limits(builder: Any, space: Any) -> None:
            window = self.receive_limit  # read each time: an application may narrow it for a connection
            max_data = quic._local_max_data
            used = max_data.used
            target = used - self._unread() + window
            if target - max_data.value >= window // 4:
                max_data.value = target
            max_data.used = 0  # disables aioquic's own rule (used * 2 > value) for this call
            try:
                original(builder, space)
            finally:
                max_data.used = used

        quic._write_connection_limits = write_connection_limits  # type: ignore[method-assign]

    def _taken(self, size: int) -> None:
        max_data = self._quic._local_max_data
        if max_data.used - self._unread() + self.receive_limit - max_data.value >= self.receive_limit // 4:
            self._protocol._transmit_soon()  # announce the new credit

    def _after_datagram(self) -> None:
        self._buffer_shrank()
        if self._flush_waiter is not None and not self._flush_waiter.done() and self.buffered == 0:
            self._flush_waiter.set_result(None)

    # --- sending ------------------------------------------------------------------------------------------

    def _write(self, stream_id: int, data: bytes | bytearray | memoryview, end_stream: bool = False) -> None:
        try:
            self._quic.send_stream_data(stream_id, data, end_stream)  # type: ignore[arg-type]  # takes any buffer
        except (ValueError, RuntimeError) as exc:
            # aioquic refuses a stream the peer reset or stopped: a request stream's reply is then moot; the
            # control stream being unusable ends the connection.
            if stream_id == CONTROL_STREAM:
                self._fail(CloseReason(CloseCause.LOST, f"control stream unusable: {exc}", exc))
            return
        self._sending.add(stream_id)
        self._protocol._transmit_soon()

    def _send_message(self, message: Message) -> None:
        if isinstance(message, Request):
            stream_id = self._quic.get_next_available_stream_id()
            key = (message.block, message.offset, message.length)
            self._streams[stream_id] = self._new_stream(stream_id, _Kind.OUTGOING, key)
            self.requests_opened += 1
            self._write(stream_id, message.encode(), end_stream=True)
            return
        if isinstance(message, Reject):
            reply = self._reply_stream((message.block, message.offset, message.length))
            if reply is not None:
                self._write(reply, message.encode(), end_stream=reply != CONTROL_STREAM)
            return
        self._write(CONTROL_STREAM, message.encode())

    def _send_block(self, block: int, offset: int, payload: BlockPayload) -> None:
        data = read_location(payload) if isinstance(payload, BlockLocation) else payload
        length = memoryview(data).nbytes
        header = wire.encode_block_header(block, offset, length)
        stream_id = self._reply_stream((block, offset, length))
        if stream_id is not None:
            self._write(stream_id, header)
            self._write(stream_id, data, end_stream=stream_id != CONTROL_STREAM)

    def _reply_stream(self, key: Key) -> int | None:
        """The stream a reply for `key` goes on, or None to discard it (its request was cancelled)."""
        waiting = self._routes.get(key)
        if waiting:
            stream_id = waiting.popleft()
            if not waiting:
                del self._routes[key]
            self._streams.pop(stream_id, None)
            return stream_id
        if self._cancelled.get(key):
            self._cancelled[key] -= 1
            if not self._cancelled[key]:
                del self._cancelled[key]
            return None
        return CONTROL_STREAM

    def _cancel_route(self, key: Key) -> None:
        """The peer cancelled a request we have not answered: end its stream empty, discard our reply."""
        waiting = self._routes.get(key)
        if not waiting:
            return
        stream_id = waiting.popleft()
        if not waiting:
            del self._routes[key]
        self._streams.pop(stream_id, None)
        self._write(stream_id, b"", end_stream=True)
        self._cancelled[key] = self._cancelled.get(key, 0) + 1
        self._cancelled.move_to_end(key)
        while len(self._cancelled) > _MAX_CANCELLED_KEYS:
            self._cancelled.popitem(last=False)

    def send_raw(self, data: bytes) -> None:
        self._check_open()
        self._write(CONTROL_STREAM, bytes(data))

    # --- receiving ----------------------------------------------------------------------------------------

    def _on_event(self, event: events.QuicEvent) -> None:
        try:
            self._dispatch(event)
        except Exception as exc:  # never into aioquic's datagram handler: end this connection only
            logger.exception("quic: error handling %s from %s", type(event).__name__, self._remote)
            self._fail(CloseReason(CloseCause.LOST, f"internal error: {exc!r}", exc))

    def _dispatch(self, event: events.QuicEvent) -> None:
        if isinstance(event, events.StreamDataReceived):
            if self.close_reason is not None:
                pass
            elif self._receiving_paused or self._backlog:
                self._backlog.append((event.stream_id, event.data, event.end_stream))
                self._backlog_bytes += len(event.data)
            else:
                self._stream_data(event.stream_id, event.data, event.end_stream)
        elif isinstance(event, events.StreamReset):
            self._on_stream_reset(event.stream_id)
        elif isinstance(event, events.HandshakeCompleted):
            if event.alpn_protocol != ALPN:
                self._fail(CloseReason(CloseCause.PROTOCOL, f"ALPN {event.alpn_protocol!r}, expected {ALPN!r}"))
        elif isinstance(event, events.ConnectionTerminated):
            self._on_terminated(event)

    def _stream_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        if self.close_reason is None:
            try:
                self._on_stream_data(stream_id, data, end_stream)
            except ProtocolError as exc:
                self._fail(CloseReason(CloseCause.PROTOCOL, str(exc), exc))

    def _resume_receiving(self) -> None:
        while self._backlog and not self._receiving_paused:
            stream_id, data, end_stream = self._backlog.popleft()
            self._backlog_bytes -= len(data)
            self._stream_data(stream_id, data, end_stream)

    def _new_stream(self, stream_id: int, kind: _Kind, key: Key | None = None) -> _Stream:
        limits = self._request_limits if kind is _Kind.INCOMING else self.settings.limits
        return _Stream(stream_id, kind, Decoder(limits, admit_block=self.expected.admit), key)

    def _stream_for(self, stream_id: int) -> _Stream | None:
        stream = self._streams.get(stream_id)
        if stream is not None:
            return stream
        if stream_is_unidirectional(stream_id):
            raise ProtocolError(f"unidirectional stream {stream_id}")
        if stream_is_client_initiated(stream_id) == self._is_client:
            return None  # one of ours, already finished: late bytes are ignored
        if stream_id == CONTROL_STREAM:
            stream = self._new_stream(stream_id, _Kind.CONTROL)
        elif stream_id <= self._highest_incoming:
            return None  # a request stream already answered
        else:  # (may precede the control stream's first bytes: its messages wait in the queue like any other)
            stream = self._new_stream(stream_id, _Kind.INCOMING)
            self._highest_incoming = stream_id
            self.requests_accepted += 1
        self._streams[stream_id] = stream
        return stream

    def _on_stream_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        stream = self._stream_for(stream_id)
        if stream is None:
            return
        messages = stream.decoder.feed(data) if data else []
        if stream.kind is _Kind.CONTROL:
            messages = self._check_control(stream, messages)
        elif stream.kind is _Kind.OUTGOING:
            self._check_reply(stream, messages)
        else:
            self._check_request(stream, messages)
        if end_stream:
            if stream.decoder.buffered:
                raise ProtocolError(f"{stream.kind.value} stream {stream_id} ended mid-frame")
            if stream.kind is _Kind.CONTROL:
                raise ProtocolError("control stream ended before the connection")
            if stream.kind is _Kind.OUTGOING:
                del self._streams[stream_id]
        self._deliver(messages)

    def _check_control(self, stream: _Stream, messages: list[Message]) -> list[Message]:
        if not stream.done and not self._is_client and messages:
            if not isinstance(messages[0], KeepAlive):
                raise ProtocolError("control stream must open with KEEPALIVE")
            stream.done = True
            messages = messages[1:]
            self._protocol._control_opened()
        for message in messages:
            if isinstance(message, Request):
                raise ProtocolError("REQUEST on the control stream")
            if isinstance(message, Cancel):
                self._cancel_route((message.block, message.offset, message.length))
        return messages

    def _check_reply(self, stream: _Stream, messages: list[Message]) -> None:
        for message in messages:
            assert stream.key is not None
            block, offset, _ = stream.key
            if stream.done or not isinstance(message, (Block, Reject)):
                raise ProtocolError(f"unexpected {type(message).__name__} on request stream {stream.stream_id}")
            if (message.block, message.offset) != (block, offset):
                raise ProtocolError(f"reply for {message.block}/{message.offset} on a request for {block}/{offset}")
            stream.done = True

    def _check_request(self, stream: _Stream, messages: list[Message]) -> None:
        for message in messages:
            if stream.done or not isinstance(message, Request):
                raise ProtocolError(f"unexpected {type(message).__name__} on request stream {stream.stream_id}")
            stream.done = True
            stream.key = (message.block, message.offset, message.length)
            self._routes.setdefault(stream.key, deque()).append(stream.stream_id)

    def _on_stream_reset(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        if stream.kind is _Kind.CONTROL:
            self._fail(CloseReason(CloseCause.LOST, "peer reset the control stream"))
        elif stream.kind is _Kind.INCOMING and stream.key is not None:
            waiting = self._routes.get(stream.key)
            if waiting and stream_id in waiting:
                waiting.remove(stream_id)
                if not waiting:
                    del self._routes[stream.key]

    def _on_terminated(self, event: events.ConnectionTerminated) -> None:
        self._terminated = True
        while self._backlog:  # what arrived before the end is still delivered (bounded by the credit granted)
            stream_id, data, end_stream = self._backlog.popleft()
            self._backlog_bytes -= len(data)
            self._stream_data(stream_id, data, end_stream)
        held = sum(stream.decoder.buffered for stream in self._streams.values())
        phrase = event.reason_phrase or ""
        if held:
            reason = CloseReason(CloseCause.LOST, f"connection ended mid-frame ({held} bytes held): {phrase}")
        elif phrase == "Idle timeout":
            reason = CloseReason(CloseCause.LOST, "idle timeout")
        elif event.error_code == _CLOSED:
            reason = CloseReason(CloseCause.REMOTE, f"peer closed the connection{': ' + phrase if phrase else ''}")
        else:
            reason = CloseReason(CloseCause.LOST, f"connection closed with error {event.error_code}: {phrase}")
        self._finished(reason)
        self._protocol._terminated()

    # --- ending -------------------------------------------------------------------------------------------

    def _close_gracefully(self) -> None:
        if self._terminated:
            self._finished()
        elif self.buffered == 0:
            self._protocol.close(error_code=_CLOSED, reason_phrase="closed")
        else:
            self._loop.create_task(self._flush_then_close())

    async def _flush_then_close(self) -> None:
        self._flush_waiter = self._loop.create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._flush_waiter), _CLOSE_FLUSH_TIMEOUT)
        except TimeoutError:
            pass
        finally:
            self._flush_waiter = None
        if not self._terminated:
            self._protocol.close(error_code=_CLOSED, reason_phrase="closed")

    def _abort(self) -> None:
        if self._terminated:
            self._finished()
            return
        reason = self.close_reason
        code = _PROTOCOL_VIOLATION if reason is not None and reason.cause is CloseCause.PROTOCOL else _ABORTED
        self._protocol.close(error_code=code, reason_phrase=str(reason or "aborted")[:200])
