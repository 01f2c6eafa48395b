"""The QUIC transport (aioquic): a control stream plus one bidirectional stream per block request.

Contract: `swarm.transport`. Every stream carries `swarm.wire` frames, each decoded by its own `Decoder`.

Identity. Each `QuicTransport` generates an in-memory self-signed ECDSA P-256 certificate. Clients do not verify
certificate chains (`CERT_NONE`): peers are authenticated at the application layer later, from the node id. ALPN
is `swarmproxy/1`; a peer negotiating anything else is closed.

Streams.

* **Control stream**: the client's first bidirectional stream (id 0). The client opens it with one KEEPALIVE
  frame, which the server's transport consumes (a QUIC stream exists for the peer only once bytes flow on it); the
  server offers the connection to `accept()` at that moment. Every message that is not a request or its reply
  travels here, in order.
* **Request streams**: `send(Request(block, offset, length))` opens a new bidirectional stream and writes the
  REQUEST with FIN. The responder's transport remembers the stream under (block, offset, length); the
  application's reply for that key — `send(Block(...))`, `send_block(...)`, or `send(Reject(...))` — is written
  on it with FIN. The requester accepts exactly one BLOCK or REJECT for the same (block, offset) there; anything
  else on a request stream is a protocol error. Two requests for the same key are answered in order.
* **CANCEL** goes on the control stream and reaches the application as usual. If the responder has not yet
  replied, its transport also ends that request's stream empty and discards the application's later reply for
  it (a cancelled request's data is never sent). A reply for a key with no open request (late, unsolicited)
  goes on the control stream, as over TCP; the receiving application judges it.

Backpressure, sending. aioquic accepts any amount of stream data. `buffered` is the sum, over the streams we wrote,
of the bytes aioquic holds in their send buffers — handed to it and not yet acknowledged by the peer (aioquic
drops each stream's acknowledged prefix from `QuicStreamSender._buffer`; its length is what we read). It is
re-checked after every datagram received (acknowledgements arrive there) to wake `drain()`.

Backpressure, receiving. aioquic grants flow-control credit by doubling windows as bytes *arrive*, whether or not
anyone reads them. We replace its MAX_DATA rule with a sliding window: credit = bytes the application has taken
(received minus the complete messages waiting in `receive()`'s queue) + `receive_limit`. So a receiver that
stops reading stops the sender within `receive_limit`, and the sender's `buffered` then grows to `send_limit`.
(This patches `_write_connection_limits` on each aioquic connection object; checked against aioquic 1.7.2.)

Datagram size: aioquic's default (1200 bytes) is safe anywhere; `max_datagram_size` may be raised where the path
MTU is known (loopback, LAN). aioquic has no path MTU discovery.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import socket
import ssl
from collections import OrderedDict, deque
from typing import Any

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.asyncio.server import QuicServer
from aioquic.quic import events
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection as AioquicConnection
from aioquic.quic.connection import stream_is_client_initiated, stream_is_unidirectional
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from swarm import wire
from swarm.errors import ConnectFailed, ProtocolError
from swarm.store import BlockLocation
from swarm.transport import (
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
from swarm.wire import Block, Cancel, Decoder, KeepAlive, Message, Reject, Request

__all__ = ["ALPN", "QuicTransport", "QuicListener", "QuicConnection", "generate_certificate"]

logger = logging.getLogger(__name__)

ALPN = "swarmproxy/1"
CONTROL_STREAM = 0

# Application error codes in CONNECTION_CLOSE.
_CLOSED = 0
_PROTOCOL_VIOLATION = 1
_ABORTED = 2

_CLOSE_FLUSH_TIMEOUT = 5.0  # a graceful close waits this long for the peer to acknowledge what we sent
_MAX_CANCELLED_KEYS = 1024
_SOCKET_BUFFER = 4 * 1024 * 1024  # UDP buffers: the kernel default drops bursts at full speed

Key = tuple[int, int, int]  # (block, offset, length) of a request


def generate_certificate(common_name: str = "swarmproxy") -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A fresh self-signed ECDSA P-256 certificate, valid from yesterday for a year (clock skew tolerant)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .sign(key, hashes.SHA256())
    )
    return certificate, key


class _Kind(enum.Enum):
    CONTROL = "control"
    OUTGOING = "outgoing request"  # we asked; one reply expected
    INCOMING = "incoming request"  # they asked; we reply


class _Stream:
    __slots__ = ("stream_id", "kind", "decoder", "key", "done")

    def __init__(self, stream_id: int, kind: _Kind, limits: wire.Limits, key: Key | None = None) -> None:
        self.stream_id = stream_id
        self.kind = kind
        self.decoder = Decoder(limits)
        self.key = key
        self.done = False  # control: opening KEEPALIVE seen; outgoing: reply received; incoming: request seen


class QuicConnection(Connection):
    transport_name = "quic"

    def __init__(self, settings: ConnectionSettings, protocol: _Protocol, is_client: bool) -> None:
        super().__init__(settings)
        self._protocol = protocol
        self._quic: AioquicConnection = protocol._quic
        self._is_client = is_client
        self._streams: dict[int, _Stream] = {}
        self._routes: dict[Key, deque[int]] = {}  # incoming requests awaiting our reply → their stream ids
        self._cancelled: OrderedDict[Key, int] = OrderedDict()  # replies to discard, per key
        self._sending: set[int] = {CONTROL_STREAM}  # streams that may hold unacknowledged bytes
        self._highest_incoming = -1
        self._flush_waiter: asyncio.Future[None] | None = None
        self._terminated = False
        self._remote: Address = ("", 0)
        self._local: Address = ("", 0)
        self.requests_opened = 0  # request streams this side opened
        self.requests_accepted = 0  # request streams the peer opened
        self._gate_credit()
        if is_client:
            self._streams[CONTROL_STREAM] = _Stream(CONTROL_STREAM, _Kind.CONTROL, settings.limits)

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
        # could stall every stream half-way (their size is bounded by the requests in flight anyway).
        return self.receive_buffered

    def _gate_credit(self) -> None:
        """Replace aioquic's MAX_DATA doubling with: credit = bytes the application has taken + receive_limit."""
        quic = self._quic
        original = quic._write_connection_limits
        window = self.receive_limit

        def write_connection_limits(builder: Any, space: Any) -> None:
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
            self._quic.send_stream_data(stream_id, data, end_stream)
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
            self._streams[stream_id] = _Stream(stream_id, _Kind.OUTGOING, self.settings.limits, key)
            self.requests_opened += 1
            self._write(stream_id, message.encode(), end_stream=True)
            return
        if isinstance(message, Reject):
            stream_id = self._reply_stream((message.block, message.offset, message.length))
            if stream_id is not None:
                self._write(stream_id, message.encode(), end_stream=stream_id != CONTROL_STREAM)
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
            if self.close_reason is None:
                try:
                    self._on_stream_data(event.stream_id, event.data, event.end_stream)
                except ProtocolError as exc:
                    self._fail(CloseReason(CloseCause.PROTOCOL, str(exc), exc))
        elif isinstance(event, events.StreamReset):
            self._on_stream_reset(event.stream_id)
        elif isinstance(event, events.HandshakeCompleted):
            if event.alpn_protocol != ALPN:
                self._fail(CloseReason(CloseCause.PROTOCOL, f"ALPN {event.alpn_protocol!r}, expected {ALPN!r}"))
        elif isinstance(event, events.ConnectionTerminated):
            self._on_terminated(event)

    def _stream_for(self, stream_id: int) -> _Stream | None:
        stream = self._streams.get(stream_id)
        if stream is not None:
            return stream
        if stream_is_unidirectional(stream_id):
            raise ProtocolError(f"unidirectional stream {stream_id}")
        if stream_is_client_initiated(stream_id) == self._is_client:
            return None  # one of ours, already finished: late bytes are ignored
        if stream_id == CONTROL_STREAM:
            stream = _Stream(stream_id, _Kind.CONTROL, self.settings.limits)
        elif stream_id <= self._highest_incoming:
            return None  # a request stream already answered
        else:  # (may precede the control stream's first bytes: its messages wait in the queue like any other)
            stream = _Stream(stream_id, _Kind.INCOMING, self.settings.limits)
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


class _Protocol(QuicConnectionProtocol):
    """aioquic's asyncio glue for one connection, feeding its events to our `QuicConnection`."""

    def __init__(
        self,
        quic: AioquicConnection,
        stream_handler: Any = None,
        *,
        settings: ConnectionSettings,
        listener: QuicListener | None = None,
    ) -> None:
        super().__init__(quic, stream_handler)
        self._listener = listener
        self._owns_transport = listener is None  # a client has its own UDP socket; a server shares one
        self.connection = QuicConnection(settings, self, is_client=listener is None)
        if listener is not None:
            self.connection._local = listener.address

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._owns_transport:
            _enlarge_buffers(transport)
            self.connection._local = _address(transport.get_extra_info("sockname"))

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        if not self.connection._remote[0]:
            self.connection._remote = _address(addr)
        super().datagram_received(data, addr)
        self.connection._after_datagram()

    def quic_event_received(self, event: events.QuicEvent) -> None:
        self.connection._on_event(event)

    def _control_opened(self) -> None:
        if self._listener is not None:
            self._listener._offer(self.connection)

    def _terminated(self) -> None:
        if self._owns_transport and self._transport is not None:
            self._transport.close()
        if self._listener is not None:
            self._listener._connection_ended(self.connection)


def _enlarge_buffers(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, _SOCKET_BUFFER)
        except OSError:
            pass


def _address(value: object) -> Address:
    if isinstance(value, tuple) and len(value) >= 2:
        host = str(value[0])
        return (host.removeprefix("::ffff:") if "." in host else host, int(value[1]))
    return ("", 0)


class QuicListener(Listener):
    def __init__(self, settings: ConnectionSettings) -> None:
        super().__init__(settings)
        self._server: QuicServer | None = None
        self._address: Address = ("", 0)
        self._live: set[QuicConnection] = set()

    @property
    def address(self) -> Address:
        return self._address

    def _offer(self, connection: Connection) -> None:
        assert isinstance(connection, QuicConnection)
        self._live.add(connection)
        super()._offer(connection)

    def _connection_ended(self, connection: QuicConnection) -> None:
        self._live.discard(connection)
        if self.is_closed and not self._live:
            self._release()

    def _stop(self) -> None:
        # Accepted connections share the listening UDP socket: release it once the last of them has ended.
        if not self._live:
            self._release()

    def _release(self) -> None:
        server, self._server = self._server, None
        if server is not None and server._transport is not None:
            server._transport.close()


class QuicTransport(Transport):
    name = "quic"

    def __init__(
        self,
        settings: ConnectionSettings | None = None,
        *,
        max_datagram_size: int | None = None,
        idle_timeout: float = 30.0,
        congestion_control: str = "reno",
    ) -> None:
        super().__init__(settings)
        self.certificate, self._private_key = generate_certificate()
        self.max_datagram_size = max_datagram_size
        self.idle_timeout = idle_timeout
        self.congestion_control = congestion_control

    def _configuration(self, is_client: bool) -> QuicConfiguration:
        configuration = QuicConfiguration(
            is_client=is_client,
            alpn_protocols=[ALPN],
            idle_timeout=self.idle_timeout,
            max_data=self.settings.receive_limit,
            max_stream_data=self.settings.receive_limit,
            congestion_control_algorithm=self.congestion_control,
        )
        if self.max_datagram_size is not None:
            configuration.max_datagram_size = self.max_datagram_size
        if is_client:
            configuration.verify_mode = ssl.CERT_NONE  # identity is checked by the application, not a CA
            configuration.server_name = "swarmproxy"
        else:
            configuration.certificate = self.certificate
            configuration.private_key = self._private_key
        return configuration

    async def listen(self, host: str, port: int = 0) -> QuicListener:
        listener = QuicListener(self.settings)

        def create_protocol(quic: AioquicConnection, stream_handler: Any = None) -> _Protocol:
            return _Protocol(quic, stream_handler, settings=self.settings, listener=listener)

        server = await serve(host, port, configuration=self._configuration(False), create_protocol=create_protocol)
        assert server._transport is not None
        _enlarge_buffers(server._transport)
        listener._server = server
        listener._address = _address(server._transport.get_extra_info("sockname"))
        self.listen_host = host
        return listener

    async def connect(self, address: Address, *, timeout: float = 10.0) -> QuicConnection:
        loop = asyncio.get_running_loop()
        host, port = address
        protocol: _Protocol | None = None
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
                family, _, _, _, remote = infos[0]
                quic = AioquicConnection(configuration=self._configuration(True))
                local_host = source_address(self.listen_host, remote[0]) or (
                    "::" if family == socket.AF_INET6 else "0.0.0.0")
                _, created = await loop.create_datagram_endpoint(
                    lambda: _Protocol(quic, settings=self.settings), local_addr=(local_host, 0), family=family
                )
                assert isinstance(created, _Protocol)
                protocol = created
                protocol.connection._remote = _address(remote)
                protocol.connect(remote)
                await protocol.wait_connected()
        except (OSError, TimeoutError, ConnectionError) as exc:
            if protocol is not None:
                protocol.connection.abort("connect failed")
                if protocol._transport is not None:
                    protocol._transport.close()
            raise ConnectFailed(f"quic: cannot connect to {host}:{port}: {exc or 'timed out'}") from exc
        connection = protocol.connection
        if connection.close_reason is not None:
            raise ConnectFailed(f"quic: connection to {host}:{port} closed during setup: {connection.close_reason}")
        connection._write(CONTROL_STREAM, KeepAlive().encode())  # opens the control stream (see docstring)
        return connection
