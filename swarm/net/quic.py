"""The QUIC transport (aioquic): a control stream plus one bidirectional stream per block request.

Contract: `swarm.net.transport`. Every stream carries `swarm.net.wire` frames, each decoded by its own `Decoder`.
This module is the endpoint side (aioquic's protocol glue, listener, transport, identity); one connection's streams
live in `swarm.net.quic_connection` (`QuicConnection`, re-exported here).

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
(received minus what waits in `receive()`'s queue) + `receive_limit`. So a receiver that stops reading stops the
sender within `receive_limit`, and the sender's `buffered` then grows to `send_limit`. Credit already granted
still arrives: while `receive()`'s queue is over its bound, stream data is kept as it came (its wire bytes) and
decoded only once the application reads again — decoded at once, 8 MiB of 5-byte frames were 1.6 million
objects. (This patches `_write_connection_limits` on each aioquic connection object; checked against aioquic
1.7.2.)

Bounds on what a peer can make us hold: BLOCKs only in answer to our requests (`swarm.net.transport`); an incoming
request stream carries one REQUEST, so its decoder refuses any longer frame from its header; aioquic caps the
peer's concurrent streams (128).

Bounds on connections being opened. Each Initial for an unknown connection id would have aioquic create a
connection, TLS state and our first flight included (a flood of 28 MB of them from one socket took a node from 70
to 630 MB, kept after they were gone). `_Server` asks the listener's `swarm.net.handshakes.HandshakeGate`
first, and creates nothing for an Initial it drops or answers with a Retry (aioquic's stateless address
validation, its token bound to the source address): at most `backlog` connections open at a time, from their
first Initial until their control stream opens, at most 8 of them from one address and 32 from one network, and a
source not yet validated gets a Retry when it already has one opening or when many are. A connection that has
not opened its control stream within `open_timeout` of its first Initial is closed, and its state goes with it.

One socket. A transport that listens dials from its listener's UDP socket too: an outgoing connection is registered
with the listener's endpoint (`_Server`) under its connection ids, as aioquic registers the connections it accepts,
and every datagram is routed by its destination connection id to whichever of them it is for; only an Initial for an
unknown id makes a new (server) connection, behind the gate. So a peer — and a NAT between — sees our dialled
connections come from the port we listen on, which hole punching needs (the mapping a peer observed is the one a
third peer aims at, and our outgoing packets open the NAT's filter for the peer we dial). Where the listener cannot
carry the connection (closed, another address family, bound to an address that cannot reach the peer), and on a
transport that does not listen, a client has a UDP socket of its own, as before. The listener's socket is released
once it is closed and the last connection on it, accepted or dialled, has ended.

Datagram size: aioquic's default (1200 bytes) is safe anywhere; `max_datagram_size` may be raised where the path
MTU is known (loopback, LAN). aioquic has no path MTU discovery.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
from functools import partial
from typing import Any

from aioquic.asyncio import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.buffer import Buffer
from aioquic.quic import events
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE, QuicConfiguration
from aioquic.quic.connection import QuicConnection as AioquicConnection
from aioquic.quic.packet import QuicPacketType, pull_quic_header
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from addresses import canonical_host
from swarm.errors import ConnectFailed
from swarm.net.handshakes import RETRY_ABOVE, Decision, HandshakeGate
from swarm.net.quic_connection import ALPN, CONTROL_STREAM, QuicConnection
from swarm.net.transport import (
    CONNECT_TIMEOUT,
    Address,
    Connection,
    ConnectionSettings,
    Listener,
    Transport,
    source_address,
)
from swarm.net.wire import KeepAlive

__all__ = ["ALPN", "QuicTransport", "QuicListener", "QuicConnection", "generate_certificate"]

_OPEN_TIMEOUT = 10.0  # from its first Initial, a peer has this long to open its control stream
# Seconds after we sent to a host from the listener's socket that its connections to us prove nothing of strangers':
# a NAT keeps a flow's filter open 2 min at least after its last packet (RFC 4787 REQ-5), and a dial's connection
# may carry packets for minutes more.
CONTACT_MEMORY = 600.0
MAX_CONTACTED = 4096  # hosts remembered: the oldest go first
_SOCKET_BUFFER = 4 * 1024 * 1024  # UDP buffers: the kernel default drops bursts at full speed


def generate_certificate(common_name: str = "swarmproxy") -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A fresh self-signed ECDSA P-256 certificate, valid from yesterday for a year (clock skew tolerant)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
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


def _abandon(protocol: _Protocol | None) -> None:
    """End a dial that did not complete: its connection aborted, its socket closed if its own, and aioquic's
    handshake waiter let go (else its ConnectionError, set when the connection ends, is logged as never retrieved)."""
    if protocol is None:
        return
    waiter, protocol._connected_waiter = protocol._connected_waiter, None
    if waiter is not None and not waiter.done():
        waiter.cancel()
    protocol.connection.abort("connect failed")
    if protocol._owns_transport and protocol._transport is not None:
        protocol._transport.close()


class _Protocol(QuicConnectionProtocol):
    """aioquic's asyncio glue for one connection, feeding its events to our `QuicConnection`."""

    def __init__(
        self,
        quic: AioquicConnection,
        stream_handler: Any = None,
        *,
        settings: ConnectionSettings,
        listener: QuicListener | None = None,
        open_timeout: float = _OPEN_TIMEOUT,
        dialled_from: QuicListener | None = None,
    ) -> None:
        super().__init__(quic, stream_handler)
        self._listener = listener
        self._dialled_from = dialled_from  # a client on its listener's socket (module docstring, "One socket")
        # A client has its own UDP socket unless its transport listens; a server shares the listener's.
        self._owns_transport = listener is None and dialled_from is None
        self.connection = QuicConnection(settings, self, is_client=listener is None)
        self._open_timer: asyncio.TimerHandle | None = None
        if dialled_from is not None:
            self.connection._local = dialled_from.address
            dialled_from._dialled.add(self.connection)
        if listener is not None:
            self.connection._local = listener.address
            listener._opened(self.connection)
            self._open_timer = asyncio.get_running_loop().call_later(open_timeout, self._open_expired)

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

    def _open_expired(self) -> None:
        self._open_timer = None
        self.connection.abort("control stream not opened in time")

    def _control_opened(self) -> None:
        if self._open_timer is not None:
            self._open_timer.cancel()
            self._open_timer = None
        if self._listener is not None:
            self._listener._offer(self.connection)

    def _terminated(self) -> None:
        if self._open_timer is not None:
            self._open_timer.cancel()
            self._open_timer = None
        if self._owns_transport and self._transport is not None:
            self._transport.close()
        if self._listener is not None:
            self._listener._connection_ended(self.connection)
        if self._dialled_from is not None:
            self._dialled_from._connection_ended(self.connection)


def _enlarge_buffers(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, _SOCKET_BUFFER)
        except OSError:
            pass


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _address(value: object) -> Address:
    if isinstance(value, tuple) and len(value) >= 2:
        host = str(value[0])
        return (host.removeprefix("::ffff:") if "." in host else host, int(value[1]))
    return ("", 0)


class _Server(QuicServer):
    """aioquic's server endpoint, asking the listener's gate before an Initial creates a connection."""

    def __init__(self, listener: QuicListener, **kwargs: Any) -> None:
        super().__init__(retry=True, **kwargs)
        self._listener = listener
        self._tokens = self._retry  # aioquic's Retry token handler (an AES-GCM key of this endpoint)

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        header = self._new_connection(data)  # type: ignore[arg-type]
        if header is None:  # for a connection we have, or nothing aioquic would create one for
            super().datagram_received(data, addr)
            return
        source = _address(addr)
        validated = bool(header.token)  # (aioquic checks the token before it creates anything)
        decision = self._listener.gate.decide(source[0], validated)
        if decision is Decision.DROP:
            return
        # With `_retry` set, aioquic answers an Initial without a token with a Retry, and checks a token.
        # (aioquic reads None as "no Retry", as its constructor sets it, though the attribute's annotation omits it)
        self._retry = self._tokens if decision is Decision.RETRY or validated else None  # type: ignore[assignment]
        self._listener._arriving = source  # (for `QuicListener._opened`, if aioquic creates the connection)
        try:
            super().datagram_received(data, addr)
        finally:
            self._listener._arriving = ("", 0)

    def _attach(self, protocol: _Protocol) -> None:
        """A client connection leaves from this endpoint's socket: datagrams to its connection ids go to it, as
        aioquic routes them to the connections it accepted."""
        assert self._transport is not None
        protocol.connection_made(self._transport)
        protocol._connection_id_issued_handler = partial(self._connection_id_issued, protocol=protocol)
        protocol._connection_id_retired_handler = partial(self._connection_id_retired, protocol=protocol)
        protocol._connection_terminated_handler = partial(self._connection_terminated, protocol=protocol)
        self._protocols[protocol._quic.host_cid] = protocol

    def _new_connection(self, data: bytes):
        """The header of a datagram that would make aioquic create a connection (its conditions), else None."""
        if len(data) < SMALLEST_MAX_DATAGRAM_SIZE or not data[0] & 0x80:  # (a short header: data, parsed once)
            return None
        try:
            header = pull_quic_header(Buffer(data=data), host_cid_length=self._configuration.connection_id_length)
        except ValueError:
            return None
        if (header.packet_type != QuicPacketType.INITIAL or header.destination_cid in self._protocols
                or header.version not in self._configuration.supported_versions):
            return None
        return header


class QuicListener(Listener):
    def __init__(self, settings: ConnectionSettings) -> None:
        super().__init__(settings)
        self._server: _Server | None = None
        self._address: Address = ("", 0)
        self._live: set[QuicConnection] = set()
        self._dialled: set[QuicConnection] = set()  # connections our transport opened from this socket
        # Connections opening: from their first Initial until their control stream opens, or they end.
        self.gate = HandshakeGate(total=settings.backlog, retry_above=min(settings.backlog // 4, RETRY_ABOVE))
        self._arriving: Address = ("", 0)  # the sender of the datagram `_Server` is handing to aioquic

    @property
    def address(self) -> Address:
        return self._address

    def _opened(self, connection: QuicConnection) -> None:
        connection._remote = self._arriving
        self.gate.opened(connection, self._arriving[0])

    def _offer(self, connection: Connection) -> None:
        assert isinstance(connection, QuicConnection)
        self.gate.ended(connection)
        self._live.add(connection)
        super()._offer(connection)

    def _connection_ended(self, connection: QuicConnection) -> None:
        self.gate.ended(connection)
        self._live.discard(connection)
        self._dialled.discard(connection)
        if self.is_closed and not self._live and not self._dialled:
            self._release()

    def _stop(self) -> None:
        # Accepted and dialled connections share the listening UDP socket: release it once the last has ended.
        if not self._live and not self._dialled:
            self._release()

    def _socket_for(self, family: int, host: str) -> _Server | None:
        """The endpoint a connection to `host` (of address `family`) may leave from: this listener's, if it is
        open, of that family, and bound to an address that can reach `host`; else None (a socket of its own)."""
        server = self._server
        if self.is_closed or server is None or server._transport is None:
            return None
        sock = server._transport.get_extra_info("socket")
        if sock is None or sock.family != family:
            return None
        bound = self._address[0]
        if source_address(bound, host) is None and not _unspecified(bound):
            return None  # (bound to loopback towards another network, say)
        return server

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
        open_timeout: float = _OPEN_TIMEOUT,
        congestion_control: str = "reno",
    ) -> None:
        super().__init__(settings)
        self.certificate, self._private_key = generate_certificate()
        self.max_datagram_size = max_datagram_size
        self.idle_timeout = idle_timeout
        self.open_timeout = open_timeout
        self.congestion_control = congestion_control
        self.listener: QuicListener | None = None  # the last `listen`'s: outgoing connections leave from its socket
        # Hosts the listener's socket sent to (a dial, a punch), by loop time: a NAT in front of us lets their
        # datagrams in for a while, so their connections to us say nothing of whether strangers' would pass.
        self._contacted: dict[str, float] = {}

    def contacted(self, host: str, now: float) -> bool:
        """Whether the listener's socket sent to `host` within `CONTACT_MEMORY` s of `now` (loop time)."""
        when = self._contacted.get(canonical_host(host) or host)
        return when is not None and now - when < CONTACT_MEMORY

    def _contact(self, host: str) -> None:
        key = canonical_host(host) or host
        self._contacted.pop(key, None)
        self._contacted[key] = asyncio.get_running_loop().time()
        while len(self._contacted) > MAX_CONTACTED:
            del self._contacted[next(iter(self._contacted))]

    def _configuration(self, is_client: bool) -> QuicConfiguration:
        receive_limit = self.settings.receive_limit
        if not is_client:  # the credit granted up front is received whether or not anyone reads
            receive_limit = min(receive_limit, self.settings.accepted_receive_limit)
        configuration = QuicConfiguration(
            is_client=is_client,
            alpn_protocols=[ALPN],
            idle_timeout=self.idle_timeout,
            max_data=receive_limit,
            max_stream_data=receive_limit,
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
            return _Protocol(quic, stream_handler, settings=self.settings, listener=listener,
                             open_timeout=self.open_timeout)

        _, server = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: _Server(listener, configuration=self._configuration(False), create_protocol=create_protocol),
            local_addr=(host, port))
        assert isinstance(server, _Server) and server._transport is not None
        _enlarge_buffers(server._transport)
        listener._server = server
        listener._address = _address(server._transport.get_extra_info("sockname"))
        self.listen_host = host
        self.listener = listener
        return listener

    def punch(self, address: Address, ttl: int | None = None) -> bool:
        """Send one small datagram (one zero byte, which no QUIC endpoint takes for a packet) to `address` from the
        listener's socket, with IP TTL (hop limit) `ttl` if given: it opens a NAT's mapping and filter between us and
        `address` for the peer's packets (`swarm.core.punch`). False if the transport does not listen (nothing
        sent)."""
        listener = self.listener
        server = listener._server if listener is not None and not listener.is_closed else None
        sock = server._transport.get_extra_info("socket") if server is not None and server._transport else None
        if sock is None:
            return False
        host, port = address
        family = sock.family
        if family == socket.AF_INET6 and ipaddress.ip_address(host).version == 4:
            host = "::ffff:" + host
        punch = socket.fromfd(sock.fileno(), family, socket.SOCK_DGRAM)  # (a duplicate: the same socket)
        try:
            if ttl is None:
                punch.sendto(b"\x00", (host, port))
            elif family == socket.AF_INET6:
                punch.sendmsg([b"\x00"], [(socket.IPPROTO_IPV6, socket.IPV6_HOPLIMIT, ttl.to_bytes(4, "little"))], 0,
                              (host, port))
            else:
                punch.sendmsg([b"\x00"], [(socket.IPPROTO_IP, socket.IP_TTL, ttl.to_bytes(4, "little"))], 0,
                              (host, port))
        except OSError:
            return False
        finally:
            punch.close()
        self._contact(address[0])
        return True

    async def connect(self, address: Address, *, timeout: float = CONNECT_TIMEOUT, own_socket: bool = False
                      ) -> QuicConnection:
        loop = asyncio.get_running_loop()
        host, port = address
        protocol: _Protocol | None = None
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
                family, _, _, _, remote = infos[0]
                quic = AioquicConnection(configuration=self._configuration(True))
                shared = (self.listener._socket_for(family, str(remote[0]))
                          if self.listener is not None and not own_socket else None)
                if shared is not None:
                    protocol = _Protocol(quic, settings=self.settings, dialled_from=self.listener)
                    shared._attach(protocol)
                    self._contact(str(remote[0]))
                else:
                    local_host = source_address(self.listen_host, str(remote[0])) or (
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
            _abandon(protocol)
            raise ConnectFailed(f"quic: cannot connect to {host}:{port}: {str(exc) or 'timed out'}") from exc
        except BaseException:  # cancelled by the caller: a dial left alone would resend its Initials for 30 s
            _abandon(protocol)
            raise
        connection = protocol.connection
        if connection.close_reason is not None:
            raise ConnectFailed(f"quic: connection to {host}:{port} closed during setup: {connection.close_reason}")
        connection._write(CONTROL_STREAM, KeepAlive().encode())  # opens the control stream (see docstring)
        return connection
