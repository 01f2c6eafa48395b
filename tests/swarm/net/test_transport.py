"""Transports: the same contract over memory, TCP and QUIC (swarm.net.transport), plus what is specific to each.

Synchronisation is on conditions (messages, close reasons, buffered byte counts), never on elapsed time:
`until()` polls a predicate and only fails the test if it stays false for seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from ipaddress import IPv4Address, IPv6Address

import pytest

from swarm.errors import ConnectFailed, ConnectionClosed, ProtocolError, TransportError
from swarm.net import wire
from swarm.net.memory import MemoryNetwork, MemoryTransport
from swarm.net.quic import QuicConnection, QuicTransport
from swarm.net.tcp import TcpTransport
from swarm.net.transport import CloseCause, Connection, ConnectionSettings, Transport, source_address
from swarm.net.wire import (
    Bitfield,
    Block,
    Cancel,
    ClaimEntry,
    ClaimsRequest,
    ClaimsResponse,
    Handshake,
    HashRequest,
    HashResponse,
    Have,
    KeepAlive,
    ManifestRequest,
    ManifestResponse,
    Pex,
    PexPeer,
    Reject,
    RejectReason,
    Request,
    Start,
)
from swarm.store.interface import BlockLocation
from swarm.trust.claims import ManifestClaim

KINDS = ["memory", "tcp", "quic"]


# Overriding `event_loop_policy` is deprecated in pytest-asyncio 1.5 in favour of a `pytest_asyncio_loop_factories`
# hook, which only a conftest can provide; until tests/swarm has one, the fixture stays and its warning is muted.
pytestmark = pytest.mark.filterwarnings("ignore:Overriding the \"event_loop_policy\" fixture")


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def event_loop_policy(request):
    """Every test on both loops: the proxy runs on uvloop, whose transports differ (no loop.sendfile)."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()
H1, H2 = b"\x11" * 32, b"\x22" * 32
MiB = 1024 * 1024

# Every message but REQUEST (which QUIC puts on its own stream) and BLOCK (received only in answer to a REQUEST):
# see test_request_reply. These keep their order.
ORDERED_MESSAGES = [
    KeepAlive(),
    Handshake(wire.PROTOCOL_VERSION, H1, H2),
    Bitfield.from_blocks(13, [0, 7, 8, 12]),
    Have(7),
    Cancel(1, 0, 16384),
    Reject(2, 0, 1, RejectReason.BUSY),
    HashRequest(0, 512),
    HashResponse(0, 4, (H1, H2, H1), (H2,)),
    Pex((PexPeer(IPv4Address("192.0.2.1"), 6881, wire.Transport.TCP),
         PexPeer(IPv6Address("2001:db8::1"), 443, wire.Transport.QUIC))),
    Start(5),
    ManifestRequest(),
    ManifestResponse(b"\x01manifest"),
    ClaimsRequest(H1),
    ClaimsResponse(H1, (ClaimEntry(ManifestClaim(H2, 5, 16384, b"v"), 1, 60),)),
    wire.ReachRequest(40000, wire.Transport.TCP | wire.Transport.QUIC, b"n" * 16),
    wire.ReachProof(wire.reach_proof(b"n" * 16)),
    wire.ReachResult(b"n" * 16, wire.Transport.QUIC, wire.ReachStatus.CONNECTED),
]


def make_transport(kind: str, settings: ConnectionSettings | None = None) -> Transport:
    if kind == "memory":
        return MemoryTransport(MemoryNetwork(), settings)
    if kind == "tcp":
        return TcpTransport(settings)
    return QuicTransport(settings)


async def until(predicate, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.002)


@contextlib.asynccontextmanager
async def connected(kind: str, settings: ConnectionSettings | None = None):
    transport = make_transport(kind, settings)
    listener = await transport.listen("127.0.0.1", 0)
    client = await transport.connect(listener.address)
    server = await asyncio.wait_for(listener.accept(), 10)
    try:
        yield transport, listener, client, server
    finally:
        client.abort()
        server.abort()
        await listener.aclose()
        await asyncio.wait_for(asyncio.gather(client.wait_closed(), server.wait_closed()), 10)


async def receive(connection: Connection) -> wire.Message | None:
    return await asyncio.wait_for(connection.receive(), 10)


# --- shared behaviour ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_listener_binds_a_real_port_and_addresses_are_exposed(kind):
    async with connected(kind) as (_, listener, client, server):
        host, port = listener.address
        assert host == "127.0.0.1" and port > 0
        assert client.remote_address == listener.address
        assert server.remote_address == client.local_address or kind == "quic"  # (QUIC: client binds 0.0.0.0)
        assert server.remote_address[1] == client.local_address[1]


@pytest.mark.parametrize("listen_host, destination, source", [
    ("127.0.0.21", "127.0.0.22", "127.0.0.21"),  # the lab: one loopback address per node
    ("192.0.2.7", "198.51.100.1", "192.0.2.7"),  # a multi-homed host listening on one interface
    ("2001:db8::7", "2001:db8::8", "2001:db8::7"),
    ("0.0.0.0", "192.0.2.1", None),  # listening everywhere: the kernel picks the route's address
    ("::", "2001:db8::8", None),
    (None, "192.0.2.1", None),  # never listened
    ("", "192.0.2.1", None),
    ("127.0.0.1", "192.0.2.1", None),  # a loopback source cannot reach another network
    ("192.0.2.7", "127.0.0.1", "192.0.2.7"),  # (the host's own address reaches its loopback)
    ("192.0.2.7", "2001:db8::8", None),  # across families
    ("2001:db8::7", "192.0.2.1", None),
    ("192.0.2.7", "peer.example", None),  # a name: the kernel decides
    ("localhost", "127.0.0.1", None),
])
def test_outgoing_connections_leave_from_the_address_we_listen_on(listen_host, destination, source):
    assert source_address(listen_host, destination) == source


@pytest.mark.parametrize("kind", ["tcp", "quic"])
async def test_a_peer_sees_us_at_the_address_we_listen_on(kind):
    """Without this, every node of a lab on 127.x.y.z connected from 127.0.0.1: to the emulated network they were
    one host, sharing one downlink."""
    ours, theirs = make_transport(kind), make_transport(kind)
    own_listener = await ours.listen("127.0.0.21", 0)
    their_listener = await theirs.listen("127.0.0.22", 0)
    client = await ours.connect(their_listener.address)
    server = await asyncio.wait_for(their_listener.accept(), 10)
    try:
        assert server.remote_address[0] == "127.0.0.21"
    finally:
        client.abort()
        server.abort()
        await own_listener.aclose()
        await their_listener.aclose()
        await asyncio.wait_for(asyncio.gather(client.wait_closed(), server.wait_closed()), 10)


@pytest.mark.parametrize("kind", KINDS)
async def test_every_message_round_trips_both_ways_in_order(kind):
    async with connected(kind) as (_, _, client, server):
        for sender, receiver in ((client, server), (server, client)):
            for message in ORDERED_MESSAGES:
                await sender.send(message)
            assert [await receive(receiver) for _ in ORDERED_MESSAGES] == ORDERED_MESSAGES


@pytest.mark.parametrize("kind", KINDS)
async def test_request_reply(kind):
    async with connected(kind) as (_, _, client, server):
        await client.send(Handshake(wire.PROTOCOL_VERSION, H1, H2))
        assert await receive(server) == Handshake(wire.PROTOCOL_VERSION, H1, H2)
        await client.send(Request(4, 0, 5))
        await client.send(Request(5, 0, 9))
        assert await receive(server) == Request(4, 0, 5)
        assert await receive(server) == Request(5, 0, 9)
        await server.send(Block(4, 0, b"block"))
        await server.send(Reject(5, 0, 9, RejectReason.NOT_FOUND))
        replies = {await receive(client), await receive(client)}
        assert replies == {Block(4, 0, b"block"), Reject(5, 0, 9, RejectReason.NOT_FOUND)}
        # and the other way round
        await server.send(Request(1, 16384, 3))
        assert await receive(client) == Request(1, 16384, 3)
        await client.send_block(1, 16384, bytearray(b"abc"))
        assert await receive(server) == Block(1, 16384, b"abc")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_thousand_small_messages_arrive_in_order(kind):
    async with connected(kind) as (_, _, client, server):
        for index in range(1000):
            client.send_nowait(Have(index))
            server.send_nowait(Start(index))
        await client.drain()
        assert [await receive(server) for _ in range(1000)] == [Have(index) for index in range(1000)]
        assert [await receive(client) for _ in range(1000)] == [Start(index) for index in range(1000)]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_4_mib_block_from_bytes_and_from_a_file_range(kind, tmp_path):
    data = os.urandom(4 * MiB)
    path = tmp_path / "content"
    path.write_bytes(b"x" * 1000 + data + b"y" * 1000)
    async with connected(kind) as (_, _, client, server):
        await client.send(Request(0, 0, len(data)))
        await client.send(Request(1, 0, len(data)))
        assert await receive(server) == Request(0, 0, len(data))
        assert await receive(server) == Request(1, 0, len(data))

        async def reply() -> None:  # concurrently with reading: two 4 MiB blocks exceed the send bound
            await server.send_block(0, 0, data)
            await server.send_block(1, 0, BlockLocation(str(path), 1000, len(data)))
            server.send_nowait(Have(9))

        replying = asyncio.create_task(reply())
        received = [await receive(client) for _ in range(3)]
        await replying
        blocks = {message.block: message.data for message in received if isinstance(message, Block)}
        assert blocks == {0: data, 1: data}
        assert Have(9) in received


def layer(first: int) -> HashResponse:
    """A 256 KiB control message (a hash layer): large, and unlike a BLOCK it needs no request."""
    return HashResponse(first, 8192, (H1,) * 8192)


@pytest.mark.parametrize("kind", KINDS)
async def test_backpressure_a_receiver_that_does_not_read_blocks_the_sender(kind):
    settings = ConnectionSettings(send_limit=1 * MiB, receive_limit=1 * MiB)
    chunk = bytes(layer(0).encode())
    async with connected(kind, settings) as (_, _, client, server):
        sent = 0

        async def flood() -> None:
            nonlocal sent
            while True:
                await client.send(layer(sent))
                sent += 1

        task = asyncio.create_task(flood())
        try:
            # The sender ends up waiting in drain() with its buffer at the bound...
            await until(lambda: client._drain_waiters and client.buffered > settings.send_limit, timeout=15)
            assert not task.done()
            # ...and the receiver holds at most its bound (plus the message that crossed it).
            assert server.receive_buffered <= settings.receive_limit + len(chunk) + 64
            blocked_at = sent
            # Reading resumes the flow.
            for index in range(blocked_at + 8):
                message = await receive(server)
                assert isinstance(message, HashResponse) and message.first == index
            assert sent > blocked_at
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await task


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("garbage", [b"\x00\x00\x00\x05\xfe" + b"\xff" * 60, b"\x7f\xff\xff\xff\x05", b"\x00" * 8])
async def test_garbage_closes_that_connection_with_a_protocol_error_and_the_listener_goes_on(kind, garbage):
    transport = make_transport(kind)
    listener = await transport.listen("127.0.0.1", 0)
    try:
        bad = await transport.connect(listener.address)
        victim = await asyncio.wait_for(listener.accept(), 10)
        await bad.send(Have(1))
        assert await receive(victim) == Have(1)
        bad.send_raw(garbage)
        assert await receive(victim) is None
        assert victim.close_reason.cause is CloseCause.PROTOCOL
        assert isinstance(victim.close_reason.error, ProtocolError)
        await asyncio.wait_for(bad.wait_closed(), 10)  # the offender is disconnected
        assert await receive(bad) is None
        # The listener keeps accepting.
        good = await transport.connect(listener.address)
        peer = await asyncio.wait_for(listener.accept(), 10)
        await good.send(Have(2))
        assert await receive(peer) == Have(2)
        good.abort()
        await asyncio.wait_for(peer.wait_closed(), 10)
    finally:
        await listener.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_peer_disconnecting_mid_block_ends_the_stream_cleanly(kind):
    async with connected(kind) as (_, _, client, server):
        await server.send(Request(0, 0, 4 * MiB))
        assert await receive(client) == Request(0, 0, 4 * MiB)
        await client.send(Have(1))
        client.send_raw(wire.encode_block_header(0, 0, 4 * MiB) + b"partial" * 100)
        await client.aclose()
        assert await receive(server) == Have(1)
        assert await receive(server) is None
        reason = await asyncio.wait_for(server.wait_closed(), 10)
        assert reason.cause is CloseCause.LOST and "mid-frame" in reason.detail


@pytest.mark.parametrize("kind", KINDS)
async def test_graceful_close_delivers_what_was_sent_then_ends(kind):
    async with connected(kind) as (_, _, client, server):
        await server.send(Request(0, 0, MiB))
        assert await receive(client) == Request(0, 0, MiB)
        for index in range(3):
            client.send_nowait(Have(index))
        client.send_nowait(Block(0, 0, bytes(MiB)))
        client.close()
        assert client.close_reason.cause is CloseCause.LOCAL
        with pytest.raises(ConnectionClosed):
            await client.send(Have(9))
        assert await receive(client) is None
        received = [await receive(server) for _ in range(4)]
        assert Block(0, 0, bytes(MiB)) in received  # (QUIC: on the request's stream, it may overtake the HAVEs)
        assert [message for message in received if isinstance(message, Have)] == [Have(0), Have(1), Have(2)]
        assert await receive(server) is None
        assert (await asyncio.wait_for(server.wait_closed(), 10)).cause is CloseCause.REMOTE
        assert (await asyncio.wait_for(client.wait_closed(), 10)).cause is CloseCause.LOCAL
        with pytest.raises(ConnectionClosed):
            server.send_nowait(Have(1))


@pytest.mark.parametrize("kind", KINDS)
async def test_abort_ends_both_sides(kind):
    async with connected(kind) as (_, _, client, server):
        server.abort("enough")
        assert server.close_reason.detail == "enough"
        assert await receive(client) is None
        assert client.close_reason.cause in (CloseCause.LOST, CloseCause.REMOTE)
        assert (await asyncio.wait_for(server.wait_closed(), 10)).cause is CloseCause.LOCAL


@pytest.mark.parametrize("kind", KINDS)
async def test_closing_the_listener_leaves_accepted_connections_alone(kind):
    async with connected(kind) as (_, listener, client, server):
        await listener.aclose()
        with pytest.raises(TransportError):
            await listener.accept()
        assert [connection async for connection in listener] == []
        await client.send(Have(3))
        assert await receive(server) == Have(3)
        await server.send(Have(4))
        assert await receive(client) == Have(4)


@pytest.mark.parametrize("kind", KINDS)
async def test_connecting_to_nothing_fails_cleanly(kind):
    transport = make_transport(kind)
    listener = await transport.listen("127.0.0.1", 0)
    address = listener.address
    await listener.aclose()
    with pytest.raises(ConnectFailed):
        await transport.connect(address, timeout=1.0)


# --- QUIC: one stream per request --------------------------------------------------------------------------------


async def test_quic_many_concurrent_requests_each_answered_on_its_own_stream():
    async with connected("quic") as (_, _, client, server):
        assert isinstance(client, QuicConnection) and isinstance(server, QuicConnection)
        requests = [Request(block, 0, 1000 + block) for block in range(64)]
        for request in requests:
            client.send_nowait(request)
        received = [await receive(server) for _ in requests]
        assert sorted(received, key=lambda request: request.block) == requests
        assert client.requests_opened == server.requests_accepted == len(requests)
        # Answer in reverse order; each reply finds its own stream.
        for request in reversed(requests):
            if request.block % 7 == 0:
                server.send_nowait(Reject(request.block, 0, request.length, RejectReason.BUSY))
            else:
                server.send_nowait(Block(request.block, 0, bytes([request.block]) * request.length))
        replies = [await receive(client) for _ in requests]
        for reply in replies:
            if isinstance(reply, Reject):
                assert reply.block % 7 == 0
            else:
                assert reply.data == bytes([reply.block]) * (1000 + reply.block)
        assert {reply.block for reply in replies} == set(range(64))
        await until(lambda: client.open_request_streams == 0 and server.open_request_streams == 0)


async def test_quic_cancel_before_the_reply_discards_it():
    async with connected("quic") as (_, _, client, server):
        client.send_nowait(Request(1, 0, 100))
        client.send_nowait(Request(2, 0, 100))
        assert {await receive(server), await receive(server)} == {Request(1, 0, 100), Request(2, 0, 100)}
        # (A CANCEL that overtakes its REQUEST, on another stream, is only passed on: the reply is then sent.)
        client.send_nowait(Cancel(1, 0, 100))
        assert await receive(server) == Cancel(1, 0, 100)
        await server.send(Block(1, 0, b"c" * 100))  # cancelled: discarded by the transport
        await server.send(Block(2, 0, b"d" * 100))
        assert await receive(client) == Block(2, 0, b"d" * 100)
        await server.aclose()
        assert await receive(client) is None  # block 1 never came
        assert client.open_request_streams == 0


async def test_quic_a_reply_on_a_request_stream_must_match_the_request():
    async with connected("quic") as (_, _, client, server):
        client.send_nowait(Request(1, 0, 100))
        assert await receive(server) == Request(1, 0, 100)
        # Forge a reply for another block on the request's stream.
        stream_id = server._reply_stream((1, 0, 100))
        server._write(stream_id, Block(2, 0, b"z" * 100).encode(), end_stream=True)
        assert await receive(client) is None
        assert client.close_reason.cause is CloseCause.PROTOCOL


async def test_quic_certificate_is_per_node_and_alpn_is_ours():
    first, second = QuicTransport(), QuicTransport()
    assert first.certificate.public_key() != second.certificate.public_key()
    assert first._configuration(True).alpn_protocols == ["swarmproxy/1"]


# --- TCP: sendfile -----------------------------------------------------------------------------------------------


async def test_tcp_file_blocks_keep_their_place_in_the_stream(tmp_path):
    path = tmp_path / "content"
    data = os.urandom(3 * MiB)
    path.write_bytes(data)
    async with connected("tcp") as (_, _, client, server):
        for index in range(3):
            await client.send(Request(index, 0, MiB))
            assert await receive(server) == Request(index, 0, MiB)
        server.send_nowait(Have(0))
        for index in range(3):
            await server.send_block(index, 0, BlockLocation(str(path), index * MiB, MiB))
            server.send_nowait(Have(index + 1))
        expected = [Have(0)]
        for index in range(3):
            expected += [Block(index, 0, data[index * MiB : (index + 1) * MiB]), Have(index + 1)]
        assert [await receive(client) for _ in expected] == expected


async def test_tcp_small_file_blocks_go_out_a_run_per_thread_job_in_order(tmp_path, monkeypatch):
    """Blocks of 16 KiB from two files, frames between them: one thread job per run of up to 1 MiB, not one per
    block (a hop each cost 55-65 µs of the loop's CPU), and the stream keeps every byte in its place."""
    import swarm.net.tcp as tcp

    block = 16 * 1024
    files = [tmp_path / "a", tmp_path / "b"]
    data = [os.urandom(40 * block) for _ in files]
    for path, content in zip(files, data):
        path.write_bytes(content)
    jobs = _thread_jobs(monkeypatch)
    monkeypatch.setattr(tcp, "_read_cached", lambda location: None)  # as if the page cache held none of them
    order = [(index % 2, index // 2) for index in range(80)]  # a0, b0, a1, b1, ...
    async with connected("tcp") as (_, _, client, server):
        for number, _ in enumerate(order):
            await client.send(Request(number, 0, block))
        for number, _ in enumerate(order):
            assert await receive(server) == Request(number, 0, block)
        for number, (which, index) in enumerate(order):  # queued before the writer task first runs
            await server.send_block(number, 0, BlockLocation(str(files[which]), index * block, block))
            server.send_nowait(Have(number))
        expected = []
        for number, (which, index) in enumerate(order):
            expected += [Block(number, 0, data[which][index * block : (index + 1) * block]), Have(number)]
        assert [await receive(client) for _ in expected] == expected
    assert 2 <= len(jobs) <= 3, jobs  # 1.25 MiB of blocks: a run of 1 MiB, then the rest
    assert sum(map(len, jobs)) < 2 * len(order)  # the last Have of each run went out through the transport


async def test_tcp_short_blocks_the_page_cache_holds_go_out_without_a_thread(tmp_path, monkeypatch):
    """A 16 KiB block just written is in the page cache: it is read on the loop (RWF_NOWAIT) and written like
    bytes, no thread job; one the cache lacks (the read says it would wait) and one longer than 64 KiB take the
    thread, and every byte keeps its place."""
    import swarm.net.tcp as tcp

    path = tmp_path / "content"
    data = os.urandom(4 * 16384 + 131072)
    path.write_bytes(data)
    if not tcp._RWF_NOWAIT:
        pytest.skip("no RWF_NOWAIT reads on this system (Linux only): every range takes the thread")
    with open(path, "rb") as file:  # a file system that cannot say whether it holds a range: nothing to test
        try:
            os.preadv(file.fileno(), [bytearray(16)], 0, tcp._RWF_NOWAIT)
        except OSError as exc:
            pytest.skip(f"no RWF_NOWAIT reads on {tmp_path}: {exc}")
    jobs, real_preadv = _thread_jobs(monkeypatch), os.preadv

    def preadv(fd, buffers, offset, flags=0):  # the third block: not cached
        if offset == 2 * 16384:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real_preadv(fd, buffers, offset, flags)

    monkeypatch.setattr(tcp.os, "preadv", preadv)
    spans = [(0, 16384), (16384, 16384), (2 * 16384, 16384), (3 * 16384, 16384), (4 * 16384, 131072)]
    async with connected("tcp") as (_, _, client, server):
        for number, (_, length) in enumerate(spans):
            await client.send(Request(number, 0, length))
            assert await receive(server) == Request(number, 0, length)
        for number, (offset, length) in enumerate(spans):
            await server.send_block(number, 0, BlockLocation(str(path), offset, length))
        for number, (offset, length) in enumerate(spans):
            assert await receive(client) == Block(number, 0, data[offset : offset + length])
    sent = [(item.offset, item.length) for job in jobs for item in job if isinstance(item, BlockLocation)]
    assert sent == [spans[2], spans[4]], jobs


def _thread_jobs(monkeypatch) -> list[list]:
    """The runs the TCP transport hands its send threads from now on, each as the list of its items."""
    import swarm.net.tcp as tcp

    jobs: list[list] = []
    real = tcp._send_run_blocking

    def counted(socket_fd, run, stop):
        jobs.append(list(run))
        return real(socket_fd, run, stop)

    monkeypatch.setattr(tcp, "_send_run_blocking", counted)
    return jobs


async def test_tcp_a_file_range_past_the_end_of_the_file_loses_the_connection(tmp_path):
    path = tmp_path / "short"
    path.write_bytes(b"x" * 100)
    async with connected("tcp") as (_, _, client, server):
        await client.send(Request(0, 0, 1000))
        assert await receive(server) == Request(0, 0, 1000)
        await server.send_block(0, 0, BlockLocation(str(path), 0, 1000))
        reason = await asyncio.wait_for(server.wait_closed(), 10)
        assert reason.cause is CloseCause.LOST
        assert await receive(client) is None


# --- memory: fault injection -------------------------------------------------------------------------------------


async def test_memory_drop_ends_both_sides_as_lost():
    async with connected("memory") as (_, _, client, server):
        client.drop()
        assert await receive(server) is None
        assert server.close_reason.cause is client.close_reason.cause is CloseCause.LOST


async def test_memory_refused_address():
    network = MemoryNetwork()
    transport = MemoryTransport(network)
    listener = await transport.listen("node-a", 0)
    network.refuse(listener.address)
    with pytest.raises(ConnectFailed):
        await transport.connect(listener.address)
    network.refuse(listener.address, False)
    connection = await transport.connect(listener.address)
    assert (await listener.accept()).remote_address == connection.local_address


class _ClosingTransport:
    """An asyncio transport after a reset, before `connection_lost` has run: it says so and takes no writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def is_closing(self) -> bool:
        return True

    def get_extra_info(self, name, default=None):
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def write(self, data) -> None:
        self.written.append(bytes(data))

    writelines = write


async def test_a_tcp_connection_does_not_write_to_a_transport_that_is_closing():
    from swarm.net.tcp import TcpConnection
    connection = TcpConnection(ConnectionSettings())
    transport = _ClosingTransport()
    connection.connection_made(transport)
    connection.send_nowait(wire.Have(1))
    connection.send_nowait(wire.Block(0, 0, b"x" * 100))
    if connection._writer is not None:  # the queue's writer task, if one started: let it finish
        await connection._writer
    assert transport.written == []
