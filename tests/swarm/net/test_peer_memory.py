"""Peer port memory amplification (issue 19, item 2): what peers can make a node hold, over every transport.

Measured before the fix: 400 connections sending a 14-byte BLOCK header each pinned +1.5 GiB; 200k pipelined
REQUESTs from one peer that never reads grew the node by 188 MB (575 MB with four peers). Each attack here is
scaled down and asserts what is held (bytes buffered, tasks started, requests queued), never time or RSS.
Synchronisation is on conditions, as in test_transport.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os

import pytest

from swarm.core.serve import MAX_QUEUED_REQUESTS, MAX_SENDS_IN_FLIGHT, Send, SendBlock
from swarm.net import wire
from swarm.net.decoder import _SCRATCH_READ
from swarm.net.quic import QuicTransport
from swarm.net.tcp import TcpTransport
from swarm.net.transport import _SMALL_MESSAGE, CloseCause, Connection, ConnectionSettings, ExpectedReplies
from swarm.net.wire import Block, Handshake, KeepAlive, Reject, RejectReason, Request
from swarm.service.node import SwarmNode
from swarm.store.disk import DiskBlockStore
from tests.swarm.core.test_serve import BLOCK, core, handshake

# event_loop_policy: the fixture runs every test here on both loops, as in test_transport
from tests.swarm.net.test_transport import KINDS, MiB, connected, event_loop_policy, receive, until  # noqa: F401

# As in test_transport: the fixture above runs each test on asyncio and on uvloop (the proxy runs uvloop).
pytestmark = pytest.mark.filterwarnings("ignore:Overriding the \"event_loop_policy\" fixture")

NODES = {"tcp": TcpTransport, "quic": QuicTransport}


# --- the rule: a BLOCK only in answer to our REQUEST, at most as long ------------------------------------------


def test_expected_replies_admit_one_block_per_request_at_most_as_long():
    expected = ExpectedReplies(limit=3)
    assert not expected.admit(0, 0, 1)  # nothing asked
    expected.sent(Request(0, 0, 100))
    expected.sent(Request(0, 0, 100))
    assert not expected.admit(0, 0, 101)  # longer than asked
    assert not expected.admit(0, 1, 100)  # elsewhere
    assert expected.admit(0, 0, 100) and expected.admit(0, 0, 50)  # one each; a short reply is the codec's call
    assert not expected.admit(0, 0, 100)  # used up
    expected.sent(Request(1, 0, 10))
    expected.rejected(Reject(1, 0, 10, RejectReason.BUSY))  # a REJECT answers it too
    assert not expected.admit(1, 0, 10)
    for block in range(2, 6):  # past the limit, the oldest are forgotten (long-cancelled requests)
        expected.sent(Request(block, 0, 10))
    assert len(expected) == 3 and not expected.admit(2, 0, 10) and expected.admit(5, 0, 10)


@pytest.mark.parametrize("kind", KINDS)
async def test_an_unrequested_block_header_closes_the_peer_before_its_payload_is_held(kind):
    async with connected(kind) as (_, _, client, server):
        client.send_raw(wire.encode_block_header(0, 0, 4 * MiB) + b"x")  # the attack: 14 bytes
        assert await receive(server) is None
        assert server.close_reason.cause is CloseCause.PROTOCOL
        assert "answers no request" in server.close_reason.detail


@pytest.mark.parametrize("kind", KINDS)
async def test_a_reply_longer_than_asked_or_a_second_copy_is_refused(kind):
    async with connected(kind) as (_, _, client, server):
        await server.send(Request(0, 0, 100))
        assert await receive(client) == Request(0, 0, 100)
        await client.send(Block(0, 0, b"b" * 100))
        assert await receive(server) == Block(0, 0, b"b" * 100)
        client.send_raw(Block(0, 0, b"b" * 100).encode())  # (raw: QUIC would drop a reply it has no request for)
        assert await receive(server) is None
        assert server.close_reason.cause is CloseCause.PROTOCOL
    async with connected(kind) as (_, _, client, server):
        await server.send(Request(1, 0, 100))
        assert await receive(client) == Request(1, 0, 100)
        client.send_raw(wire.encode_block_header(1, 0, 101))
        assert await receive(server) is None
        assert server.close_reason.cause is CloseCause.PROTOCOL


@pytest.mark.parametrize("kind", ["memory", "tcp"])  # (QUIC: a cancelled request's stream ends without its reply)
async def test_a_late_reply_to_a_cancelled_request_is_still_received(kind):
    async with connected(kind) as (_, _, client, server):
        await server.send(Request(2, 0, 10))
        await server.send(wire.Cancel(2, 0, 10))
        assert await receive(client) == Request(2, 0, 10)
        await client.send(Block(2, 0, b"late reply"))
        assert await receive(server) == Block(2, 0, b"late reply")


async def test_quic_an_incoming_request_stream_refuses_any_longer_frame_from_its_header():
    async with connected("quic") as (_, _, client, server):
        stream_id = client._quic.get_next_available_stream_id()
        client._write(stream_id, bytes.fromhex("00002000") + bytes([wire.MessageType.MANIFEST]))  # 8 KiB announced
        assert await receive(server) is None
        assert server.close_reason.cause is CloseCause.PROTOCOL


async def test_quic_frames_past_the_receive_bound_wait_undecoded():
    """Credit already granted still arrives when the application stops reading: 8 MiB of 5-byte frames decoded
    at once were 1.6 million objects. Past the bound they are kept as the bytes they came in."""
    settings = ConnectionSettings(receive_limit=64 * 1024)
    async with connected("quic", settings) as (_, _, client, server):
        for _ in range(40_000):  # 200 KB of KEEPALIVEs, more than the credit
            client.send_nowait(KeepAlive())
        max_data = server._quic._local_max_data
        await until(lambda: max_data.used >= max_data.value)  # the sender has used all the credit it got
        datagram_frames = 1500 // len(KeepAlive().encode())
        assert len(server._inbound) <= settings.receive_limit // _SMALL_MESSAGE + datagram_frames
        assert server._backlog_bytes > 0
        for _ in range(40_000):  # reading resumes the flow: every frame arrives
            assert await receive(server) == KeepAlive()


# --- the node --------------------------------------------------------------------------------------------------


def test_the_serving_core_starts_a_bounded_number_of_sends_for_200k_pipelined_requests():
    serve = core()
    handshake(serve)
    actions = [action for index in range(200_000) for action in serve.on_message(Request(index % 10, 0, BLOCK), 0.0)]
    assert sum(isinstance(action, SendBlock) for action in actions) == MAX_SENDS_IN_FLIGHT  # was one per REQUEST
    assert serve.queued == MAX_QUEUED_REQUESTS
    busy = [action for action in actions if isinstance(action, Send) and action.message.reason is RejectReason.BUSY]
    assert len(busy) == 200_000 - MAX_SENDS_IN_FLIGHT - MAX_QUEUED_REQUESTS
    assert serve.on_sent(1.0) == [SendBlock(MAX_SENDS_IN_FLIGHT % 10, 0, BLOCK)]  # one done, the next one goes


@contextlib.asynccontextmanager
async def seed_node(kind: str, tmp_path, block_size: int, blocks: int, settings: ConnectionSettings | None = None):
    path = tmp_path / "content"
    path.write_bytes(os.urandom(block_size * blocks))
    node = SwarmNode(DiskBlockStore(tmp_path / "store"), NODES[kind](settings))
    try:
        address = await node.start("127.0.0.1", 0)
        manifest = await node.seed_file(path, block_size=block_size)
        yield node, address, manifest
    finally:
        await node.close()


async def test_block_headers_from_many_connections_are_refused_at_once(tmp_path):
    async with seed_node("tcp", tmp_path, 16384, 4) as (node, address, _):
        attackers = [await asyncio.open_connection(*address) for _ in range(32)]  # (within max_peers)
        for _, writer in attackers:
            writer.write(wire.encode_block_header(0, 0, 4 * MiB) + b"x")
        for reader, writer in attackers:  # each is closed on its header: no handshake timeout waited for
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
        await until(lambda: len(node.slots) == 0)


def serving(node: SwarmNode, root: bytes):
    connection, core = next(iter(node._serving[root].items()))
    return connection, core


@pytest.mark.parametrize("kind, requests", [("tcp", 1000), ("quic", 100)])  # (QUIC: at most 128 streams open)
async def test_a_peer_that_pipelines_requests_and_never_reads_gets_a_bounded_share(kind, requests, tmp_path,
                                                                                     monkeypatch):
    block = 64 * 1024
    settings = ConnectionSettings(send_limit=1 * MiB)
    arrived = collections.Counter()  # REQUESTs each connection's transport decoded
    deliver = Connection._deliver
    monkeypatch.setattr(Connection, "_deliver", lambda connection, messages: (
        arrived.update({connection: sum(type(message) is Request for message in messages)}),
        deliver(connection, messages))[1])
    async with seed_node(kind, tmp_path, block, 16, settings) as (node, address, manifest):
        attacker = await NODES[kind](ConnectionSettings(receive_limit=block)).connect(address)
        try:
            attacker.send_nowait(Handshake(wire.PROTOCOL_VERSION, b"a" * 32, manifest.root))
            for index in range(requests):  # and it never calls receive()
                attacker.send_nowait(Request(index % 16, 0, block))
            await until(lambda: manifest.root in node._serving and node._serving[manifest.root])
            connection, core = serving(node, manifest.root)
            # Steady: every REQUEST reached the node, whose send buffer is full; the node waits on it — reading
            # nothing more — and so do the sends under way.
            await until(lambda: arrived[connection] == requests and connection.buffered > connection.send_limit
                        and len(connection._drain_waiters) >= 1 + core.in_flight, timeout=20)
            assert len(node._tasks) <= 1 + MAX_SENDS_IN_FLIGHT  # the serving loop and the sends: not one per REQUEST
            assert connection.buffered <= connection.send_limit + MAX_SENDS_IN_FLIGHT * (block + 64)
            assert core.queued <= MAX_QUEUED_REQUESTS
        finally:
            attacker.abort()


async def test_200k_pipelined_requests_stay_in_the_peers_socket(tmp_path):
    settings = ConnectionSettings(send_limit=256 * 1024)
    async with seed_node("tcp", tmp_path, 16384, 8, settings) as (node, address, manifest):
        reader, writer = await asyncio.open_connection(*address)
        try:
            writer.write(Handshake(wire.PROTOCOL_VERSION, b"a" * 32, manifest.root).encode())
            writer.write(b"".join(Request(index % 8, 0, 16384).encode() for index in range(200_000)))
            await until(lambda: manifest.root in node._serving and node._serving[manifest.root])
            connection, core = serving(node, manifest.root)
            await until(lambda: connection._receiving_paused or len(node._tasks) > 100, timeout=20)
            assert len(node._tasks) <= 1 + MAX_SENDS_IN_FLIGHT
            assert core.queued <= MAX_QUEUED_REQUESTS
            # What waits unread is the serving bound plus what one read brought, the rest stays in the socket.
            one_read = (_SCRATCH_READ // len(Request(0, 0, 1).encode()) + 1) * _SMALL_MESSAGE
            assert connection.receive_buffered <= ConnectionSettings().accepted_receive_limit + one_read
        finally:
            writer.close()
