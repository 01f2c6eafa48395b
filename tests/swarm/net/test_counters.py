"""`Connection.counters`: the BLOCKs a connection carried and their payload bytes, each way, over every transport.

Synchronisation is on messages (each `receive` awaits one), never on elapsed time.
"""

from __future__ import annotations

import pytest

from swarm.net import wire
from swarm.net.transport import ConnectionCounters
from swarm.store.interface import BlockLocation
from tests.swarm.net.test_transport import KINDS, connected, receive

LENGTHS = (1000, 1, 16384)  # the payload of each BLOCK the server answers with


async def send_bytes(connection, block: int, data: bytes, _path) -> None:
    await connection.send_block(block, 0, data)


async def send_range(connection, block: int, data: bytes, path) -> None:
    path.write_bytes(b"-" * 7 + data)  # the block's bytes at an offset of a file (sendfile on TCP)
    await connection.send_block(block, 0, BlockLocation(str(path), 7, len(data)))


async def send_message(connection, block: int, data: bytes, _path) -> None:
    connection.send_nowait(wire.Block(block, 0, data))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("send", [send_bytes, send_range, send_message])
async def test_counters_count_exactly_the_block_payload_bytes_each_way(kind, send, tmp_path):
    async with connected(kind) as (_, _listener, client, server):
        for block, length in enumerate(LENGTHS):
            client.send_nowait(wire.Request(block, 0, length))
        client.send_nowait(wire.Have(3))  # control messages are not counted, either way
        for _ in range(len(LENGTHS) + 1):
            await receive(server)
        server.send_nowait(wire.KeepAlive())
        for block, length in enumerate(LENGTHS):
            await send(server, block, bytes([block]) * length, tmp_path / f"block{block}")
        assert server.counters == ConnectionCounters(blocks_sent=3, bytes_sent=sum(LENGTHS))
        received = [await receive(client) for _ in range(len(LENGTHS) + 1)]
        assert [len(m.data) for m in received if isinstance(m, wire.Block)] == list(LENGTHS)
        assert client.counters == ConnectionCounters(blocks_received=3, bytes_received=sum(LENGTHS))
        assert server.counters == ConnectionCounters(blocks_sent=3, bytes_sent=sum(LENGTHS))  # nothing came back


@pytest.mark.parametrize("kind", KINDS)
async def test_a_block_is_counted_received_when_the_application_takes_it(kind):
    async with connected(kind) as (_, _listener, client, server):
        client.send_nowait(wire.Request(0, 0, 10))
        await receive(server)
        await server.send_block(0, 0, b"x" * 10)
        server.send_nowait(wire.Have(0))
        assert client.counters.blocks_received == 0  # not taken yet, whether or not its bytes are here
        for _ in range(2):  # (QUIC: the BLOCK, on its request's stream, may come before or after the HAVE)
            before = client.counters.blocks_received
            message = await receive(client)
            taken = isinstance(message, wire.Block)
            assert client.counters == ConnectionCounters(blocks_received=before + taken,
                                                         bytes_received=(before + taken) * 10)
        assert client.counters == ConnectionCounters(blocks_received=1, bytes_received=10)
