"""LeveledTransport: bytes tallied (from the engine's per-connection counters) and throttled by level, what a peer
across a level is shown (`cluster.push`'s filter). Nearest first is the engine's rule (tests/swarm/core/
test_fetch_distance.py)."""

from __future__ import annotations

import asyncio

import pytest

from cluster.overlay import Level, Location
from cluster.transport import LeveledTransport
from swarm.net import wire

ROOT = bytes(range(32))
HERE, OTHER_RACK = Location("d", "r1"), Location("d", "r2")


async def pair(server: LeveledTransport, client: LeveledTransport):
    listener = await server.listen("127.0.0.1", 0)
    outgoing = await client.connect(listener.address)
    incoming = await listener.accept()
    return listener, outgoing, incoming


async def next_message(connection, kind):
    async with asyncio.timeout(5):
        while True:
            message = await connection.receive()
            if isinstance(message, kind):
                return message


async def test_blocks_counted_by_level_on_both_sides():
    server = LeveledTransport(HERE, lambda host: OTHER_RACK)
    client = LeveledTransport(OTHER_RACK, lambda host: OTHER_RACK)
    listener, outgoing, incoming = await pair(server, client)
    try:
        outgoing.send_nowait(wire.Request(0, 0, 1000))
        await next_message(incoming, wire.Request)
        await incoming.send_block(0, 0, b"x" * 1000)
        block = await next_message(outgoing, wire.Block)
        assert len(block.data) == 1000
        assert server.sent == {Level.RACK: 0, Level.DC: 1000, Level.OUTSIDE: 0}
        assert client.received == {Level.RACK: 1000, Level.DC: 0, Level.OUTSIDE: 0}  # same rack, as it sees it
    finally:
        outgoing.abort()
        incoming.abort()
        await listener.aclose()


async def test_bytes_go_to_the_level_the_peer_is_at_when_tallied_and_never_go_down():
    where: dict[str, Location] = {}
    metered = []
    server = LeveledTransport(HERE, where.get, on_bytes=lambda level, n: metered.append((level, n)))
    client = LeveledTransport(OTHER_RACK, lambda host: None)
    listener, outgoing, incoming = await pair(server, client)
    try:
        outgoing.send_nowait(wire.Request(0, 0, 1000))
        outgoing.send_nowait(wire.Request(1, 0, 500))
        await next_message(incoming, wire.Request)
        await next_message(incoming, wire.Request)
        await incoming.send_block(0, 0, b"x" * 1000)
        assert server.sent == {Level.RACK: 0, Level.DC: 0, Level.OUTSIDE: 1000}  # not located yet: outside
        where["127.0.0.1"] = OTHER_RACK  # learnt: from now on its bytes are the DC's, the earlier ones stay
        await incoming.send_block(1, 0, b"y" * 500)
        assert server.sent == {Level.RACK: 0, Level.DC: 500, Level.OUTSIDE: 1000}
        assert metered == [(Level.OUTSIDE, 1000), (Level.DC, 500)]  # the throttle planner's measured bytes
        await next_message(outgoing, wire.Block)
        await next_message(outgoing, wire.Block)
        incoming.abort()
        async with asyncio.timeout(5):
            assert await outgoing.receive() is None
        client.tally()
        server.tally()
        assert client.received == {Level.RACK: 0, Level.DC: 0, Level.OUTSIDE: 1500}
        assert not client._tallied and not server._tallied  # closed and tallied: forgotten
        assert server.sent == {Level.RACK: 0, Level.DC: 500, Level.OUTSIDE: 1000}
    finally:
        outgoing.abort()
        incoming.abort()
        await listener.aclose()


async def test_unknown_host_counts_as_outside():
    transport = LeveledTransport(HERE, lambda host: None)
    assert transport.level_of("10.9.9.9") is Level.OUTSIDE


async def test_uploads_take_from_the_group_of_the_peers_level():
    """The engine's upload hook gets the served peer's level's group (one member per connection and level), at the
    rate the planner set; the connection leaves the group when it closes."""
    server = LeveledTransport(HERE, lambda host: OTHER_RACK)
    client = LeveledTransport(OTHER_RACK, lambda host: HERE)
    now = asyncio.get_running_loop().time()
    server.set_limits({Level.RACK: None, Level.DC: 100_000.0, Level.OUTSIDE: None}, now)
    listener, outgoing, incoming = await pair(server, client)
    try:
        throttle = server.upload_throttle(incoming)
        assert server.upload_throttle(incoming) is throttle
        assert throttle.consume(100_000, now)  # a burst of one second's worth, then 100 kB/s
        assert not throttle.consume(100_000, now)
        assert throttle.delay_for(100_000, now) == pytest.approx(1.0)
        assert throttle.consume(100_000, now + 1.0)
        assert server.groups[Level.DC].members == [incoming]
        after_leave = asyncio.get_running_loop().create_future()
        # done callbacks run in the order they were added: this one after the transport's, which leaves the group
        incoming.closed.add_done_callback(lambda _closed: after_leave.set_result(None))
        incoming.abort()
        await after_leave
        assert server.groups[Level.DC].members == []
    finally:
        outgoing.abort()
        incoming.abort()
        await listener.aclose()
