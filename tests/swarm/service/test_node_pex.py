"""Peer exchange on content sessions (`swarm.core.pex`), over real TCP on loopback, each node on its own 127.0.0.x:
a leecher that knows only the seed is told of the one that fetched it before, connects to it, and takes blocks
from it; without the exchange it never learns of it."""

from __future__ import annotations

import contextlib

import pytest

from swarm.core.policy import PolicyConfig
from swarm.net import wire
from swarm.net.tcp import TcpTransport
from swarm.service.node import SwarmNode
from swarm.store.disk import DiskBlockStore
from tests.swarm.service.test_node import BLOCK, content

SEED_RATE = 256 * 1024  # B/s the seed uploads: the leechers hold blocks the other lacks for a while


@pytest.fixture
async def make_node(tmp_path):
    nodes: list[SwarmNode] = []

    async def make(host: str, *, exchange: bool, **kwargs) -> tuple[SwarmNode, tuple[str, int]]:
        node = SwarmNode(DiskBlockStore(tmp_path / host), TcpTransport(), policy=PolicyConfig(request_timeout=5.0),
                         **kwargs)
        nodes.append(node)
        address = await node.start(host, 0)
        node.peer_exchange = exchange  # (what `SwarmService.start` sets)
        node.pex_entry = (address[1], int(wire.Transport.TCP))
        return node, address

    yield make
    for node in nodes:
        await node.close()


async def herd(make_node, tmp_path, *, exchange: bool) -> tuple[SwarmNode, SwarmNode, bytes, bytes]:
    """A seed (slow uplink) and two leechers that know only the seed; the second starts once the first has a
    block (so the first said it fetches before the second asks). Both fetches' bytes and the first leecher."""
    data = content(16 * BLOCK, seed=31)
    (tmp_path / "f").write_bytes(data)
    seed, seed_address = await make_node("127.0.0.10", exchange=exchange, upload_rate=SEED_RATE)
    manifest = await seed.seed_file(tmp_path / "f", block_size=BLOCK)
    first, _ = await make_node("127.0.0.11", exchange=exchange)
    second, _ = await make_node("127.0.0.12", exchange=exchange)
    for node in (first, second):
        node.share(manifest.root)  # (a fetching node serves what it holds: the proxy's service shares it so)
    chunks = first.fetch(manifest, [seed_address])
    got_first = [await anext(chunks)]
    got_second = b"".join([chunk async for chunk in second.fetch(manifest, [seed_address])])
    got_first += [chunk async for chunk in chunks]
    with contextlib.suppress(Exception):
        await chunks.aclose()
    assert b"".join(got_first) == data and got_second == data
    return first, second, data, got_second


async def test_a_leecher_told_of_another_takes_blocks_from_it(make_node, tmp_path):
    first, second, _, _ = await herd(make_node, tmp_path, exchange=True)
    assert first.bytes_uploaded > 0  # the second leecher connected to it, and took blocks from it


async def test_without_the_exchange_the_leechers_never_meet(make_node, tmp_path):
    first, second, _, _ = await herd(make_node, tmp_path, exchange=False)
    assert first.bytes_uploaded == 0 and second.bytes_uploaded == 0
