"""SwarmNode's extension points over the memory transport: `shown` (what a served peer sees) and `links()` (each
connection's peer and byte counters). Synchronisation is on messages, never on elapsed time."""

from __future__ import annotations

import asyncio

import pytest

from swarm.net import wire
from swarm.net.memory import MemoryTransport
from swarm.net.transport import ConnectionCounters
from swarm.service.node import SwarmNode
from swarm.service.swarm_service import SwarmService
from swarm.store.memory import MemoryBlockStore
from tests.swarm.service.test_node import BLOCK, Swarm, content

PEER = b"\x07" * 32


@pytest.fixture
async def swarm():
    s = Swarm()
    yield s
    await s.close()


async def next_of(connection, kind):
    async with asyncio.timeout(10):
        while not isinstance(message := await connection.receive(), kind):
            assert message is not None, connection.close_reason
        return message


async def handshake(swarm: Swarm, address, root: bytes, peer: bytes = PEER):
    connection = await MemoryTransport(swarm.network).connect(address)
    connection.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, peer, root))
    await next_of(connection, wire.Handshake)
    return connection, list((await next_of(connection, wire.Bitfield)).blocks())


async def test_a_served_peer_sees_only_what_shown_allows_and_is_refused_the_rest(swarm):
    allowed = {PEER: frozenset({1, 3})}
    asked = []

    def shown(root: bytes, peer: bytes):
        asked.append((root, peer))
        return allowed.get(peer, frozenset())

    node, address, manifest = await swarm.seed(content(6 * BLOCK), shown=shown)
    connection, bitfield = await handshake(swarm, address, manifest.root)
    other, other_bitfield = await handshake(swarm, address, manifest.root, peer=b"\x08" * 32)
    assert (bitfield, other_bitfield) == ([1, 3], [])
    assert (manifest.root, PEER) in asked  # by the id each peer gave in its handshake
    for block, answer in ((1, wire.Block), (2, wire.Reject), (3, wire.Block)):
        connection.send_nowait(wire.Request(block, 0, BLOCK))
        reply = await next_of(connection, (wire.Block, wire.Reject))
        assert isinstance(reply, answer) and reply.block == block
    assert bytes(reply.data) == content(6 * BLOCK)[3 * BLOCK:4 * BLOCK]
    assert node.reveal() == 0  # nothing changed
    allowed[PEER] = frozenset({1, 2, 3, 5})
    assert node.reveal() == 2
    assert [(await next_of(connection, wire.Have)).block for _ in range(2)] == [2, 5]
    connection.send_nowait(wire.Request(2, 0, BLOCK))
    reply = await next_of(connection, (wire.Block, wire.Reject))
    assert (type(reply), reply.block, bytes(reply.data)) == (wire.Block, 2, content(6 * BLOCK)[2 * BLOCK:3 * BLOCK])
    connection.abort()
    other.abort()


async def test_links_show_each_connection_with_its_peer_and_the_block_bytes_it_carried(swarm):
    """The seed shows the leecher block 0 only, so the fetch waits, both connections up, until `reveal`."""
    data = content(5 * BLOCK + 77)
    allowed: dict[bytes, frozenset[int] | None] = {}
    seed, seed_address, manifest = await swarm.seed(data, shown=lambda root, peer: allowed.get(peer, frozenset()))
    leecher, _ = await swarm.node()
    allowed[leecher.node_id] = frozenset({0})
    assert seed.links() == leecher.links() == []
    chunks = []
    async for chunk in leecher.fetch(manifest, [seed_address]):
        chunks.append(chunk)
        if len(chunks) > 1:
            continue
        [fetching], [serving] = leecher.links(), seed.links()
        assert (fetching.address, fetching.peer, fetching.root, fetching.serving) == (
            seed_address, seed.node_id, manifest.root, False)
        assert (serving.peer, serving.root, serving.serving) == (leecher.node_id, manifest.root, True)
        assert fetching.counters == ConnectionCounters(blocks_received=1, bytes_received=BLOCK)
        assert serving.counters == ConnectionCounters(blocks_sent=1, bytes_sent=BLOCK)
        allowed[leecher.node_id] = None  # everything, from now on
        assert seed.reveal() == 5
    assert b"".join(chunks) == data
    # The counters outlive their connections: all the fetch's bytes, each counted once.
    assert fetching.counters == ConnectionCounters(blocks_received=6, bytes_received=len(data))
    assert serving.counters == ConnectionCounters(blocks_sent=6, bytes_sent=len(data))


async def test_the_service_gives_every_node_the_view_and_reveals_on_all(swarm):
    def shown(root: bytes, peer: bytes):
        return frozenset()

    service = SwarmService(MemoryBlockStore(), {"memory": MemoryTransport(swarm.network)}, None, shown=shown)
    assert all(node.shown is shown for node in service.nodes.values())
    assert service.reveal() == 0
    assert SwarmNode(MemoryBlockStore(), MemoryTransport(swarm.network)).shown is None  # the proxy's default
