"""SwarmNodes over real loopback sockets, TCP and QUIC: the same scenarios as over memory, smaller."""

from __future__ import annotations

import asyncio

import pytest

from swarm.core.policy import PolicyConfig, RequestPolicy
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


async def seeded(make_node, path, cls=SwarmNode, **kwargs):
    node, address = await make_node(cls, **kwargs)
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


# Leechers of one seed that all dial one another: over QUIC each of the n·(n+1) connections costs a handshake in
# pure Python, and twenty took 30 s of a 2-core machine's suite (TCP: 3 s); eight still make every leecher take
# blocks from others (the memory transport's test_node.py runs twenty).
LEECHERS = {"tcp": 20, "quic": 8}


async def test_one_seed_many_leechers(make_node, tmp_path, request):
    data = content(32 * BLOCK, seed=13)
    (tmp_path / "f").write_bytes(data)
    # The seed's upload capped at 50 blocks a second: alone it would take seconds to give every leecher every
    # block, so the leechers take blocks from one another however fast the machine is (uncapped, a busy machine
    # once let the seed serve all twenty before any leecher had a block to give).
    seed, seed_address, manifest = await seeded(make_node, tmp_path / "f", upload_rate=50 * BLOCK)
    leechers = [await make_node() for _ in range(LEECHERS[request.node.callspec.params["make_node"]])]
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


async def test_the_priority_source_is_known_by_its_handshakes_node_id_not_by_the_address_dialled(tmp_path,
                                                                                                 monkeypatch):
    """`fetch(priority=)` (the cluster's pusher: `cluster.run.TransferRun.pusher`) marks a peer by the node id its
    handshake gave. Dialled as "localhost", the seed is still marked, though its connection's address says
    127.0.0.1 (matching the two as strings marked nothing); the other seed is not."""
    marked: dict[int, bool] = {}  # a seed's port -> whether the fetch's policy took it as a priority source
    real = RequestPolicy.add_peer

    def add_peer(policy, source, now, bitfield=None, **kwargs):
        marked[source.remote_address[1]] = kwargs.get("priority", False)
        return real(policy, source, now, bitfield, **kwargs)

    monkeypatch.setattr(RequestPolicy, "add_peer", add_peer)
    data = content(256 * 1024, seed=13)
    (tmp_path / "f").write_bytes(data)
    nodes = [SwarmNode(DiskBlockStore(tmp_path / f"node{i}"), TcpTransport()) for i in range(3)]
    try:
        (pusher, other), leecher = nodes[:2], nodes[2]
        ports = [(await node.start("127.0.0.1", 0))[1] for node in (pusher, other)]
        manifest = [await node.seed_file(tmp_path / "f", block_size=BLOCK) for node in (pusher, other)][0]
        peers = [("localhost", ports[0]), ("127.0.0.1", ports[1])]
        assert await fetch_all(leecher, manifest, peers, priority=lambda peer: peer == pusher.node_id) == data
        assert marked == {ports[0]: True, ports[1]: False}
    finally:
        for node in nodes:
            await node.close()
