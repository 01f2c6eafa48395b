"""SwarmNodes over real loopback sockets, TCP and QUIC: the same scenarios as over memory, smaller."""

from __future__ import annotations

import asyncio

import pytest

from swarm.core.policy import PolicyConfig
from swarm.net.quic import QuicTransport
from swarm.net.tcp import TcpTransport
from swarm.service.node import SwarmNode
from swarm.store.disk import DiskBlockStore
from tests.swarm.service.test_node import BLOCK, LyingNode, content

TRANSPORTS = {"tcp": TcpTransport, "quic": QuicTransport}


@pytest.fixture(params=sorted(TRANSPORTS))
async def make_node(request, tmp_path):
    nodes: list[SwarmNode] = []

    async def make(cls=SwarmNode, **kwargs) -> tuple[SwarmNode, tuple[str, int]]:
        store = DiskBlockStore(tmp_path / f"node{len(nodes)}")
        node = cls(store, TRANSPORTS[request.param](), policy=PolicyConfig(request_timeout=5.0), **kwargs)
        nodes.append(node)
        return node, await node.start("127.0.0.1", 0)

    yield make
    for node in nodes:
        await node.close()


async def seeded(make_node, path, cls=SwarmNode):
    node, address = await make_node(cls)
    manifest = await node.seed_file(path, block_size=BLOCK)
    return node, address, manifest


async def fetch_all(node, manifest, peers, **kwargs) -> bytes:
    return b"".join([chunk async for chunk in node.fetch(manifest, peers, **kwargs)])


async def test_one_seed_one_leecher_from_disk(make_node, tmp_path):
    data = content(2 * 1024 * 1024 + 5, seed=11)
    (tmp_path / "f").write_bytes(data)
    _, address, manifest = await seeded(make_node, tmp_path / "f")
    leecher, _ = await make_node()
    assert await leecher.fetch_manifest(manifest.root, [address]) == manifest
    assert await fetch_all(leecher, manifest, [address]) == data
    assert leecher.store.complete(manifest.root)


async def test_four_seeds_one_leecher(make_node, tmp_path):
    data = content(1024 * 1024, seed=12)
    (tmp_path / "f").write_bytes(data)
    seeds = [await seeded(make_node, tmp_path / "f") for _ in range(4)]
    leecher, _ = await make_node()
    assert await fetch_all(leecher, seeds[0][2], [address for _, address, _ in seeds]) == data
    assert sum(1 for node, _, _ in seeds if node.bytes_uploaded) >= 2


async def test_one_seed_twenty_leechers(make_node, tmp_path):
    data = content(32 * BLOCK, seed=13)
    (tmp_path / "f").write_bytes(data)
    seed, seed_address, manifest = await seeded(make_node, tmp_path / "f")
    leechers = [await make_node() for _ in range(20)]
    everyone = [seed_address] + [address for _, address in leechers]
    for node, _ in leechers:
        node.share(manifest.root)
    results = await asyncio.gather(*(
        fetch_all(node, manifest, [a for a in everyone if a != own], window=0) for node, own in leechers))
    assert all(result == data for result in results)
    assert sum(node.bytes_uploaded for node, _ in leechers) > 0  # they shared among themselves


async def test_lying_seed_beside_an_honest_one(make_node, tmp_path):
    data = content(16 * BLOCK, seed=14)
    (tmp_path / "f").write_bytes(data)
    _, bad_address, manifest = await seeded(make_node, tmp_path / "f", cls=LyingNode)
    _, good_address, _ = await seeded(make_node, tmp_path / "f")
    leecher, _ = await make_node()
    assert await fetch_all(leecher, manifest, [bad_address, good_address]) == data
