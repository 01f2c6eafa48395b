"""The discovery seam's contract (`swarm.discovery.seam`), run against the DHT's backend and the in-memory one
side by side: they behave alike, so tests that use the memory backend show what the DHT would do."""

from __future__ import annotations

import os
from contextlib import aclosing

import pytest

from dht.discovery import DhtDiscovery
from dht.records import Transport, representation_key
from swarm.discovery import ManifestClaim
from swarm.discovery.memory import MemoryDiscovery, MemoryDiscoveryNetwork

from .conftest import start_swarm, stop_swarm


@pytest.fixture(params=["memory", "dht"])
async def three_peers(request):
    """Three `Discovery` instances that see each other."""
    if request.param == "memory":
        network = MemoryDiscoveryNetwork()
        yield [MemoryDiscovery(network) for _ in range(3)]
        return
    nodes = await start_swarm(10)
    try:
        yield [DhtDiscovery(node) for node in nodes[:3]]
    finally:
        await stop_swarm(nodes)


def node_id_of(discovery) -> bytes:
    return discovery.node_id if isinstance(discovery, MemoryDiscovery) else discovery.node.node_id


async def test_own_id_and_host(three_peers):
    """What the seam asks of both beyond the calls (checked in tests/swarm/discovery/test_seam.py)."""
    for discovery in three_peers:
        assert discovery.node_id == node_id_of(discovery)
        assert discovery.own_host() == "127.0.0.1"
    lonely = MemoryDiscovery(external_host=None)
    assert lonely.own_host() is None


async def test_announce_find_withdraw(three_peers):
    a, b, c = three_peers
    root = os.urandom(32)
    await a.announce(root, ("127.0.0.1", 7001), Transport.TCP | Transport.QUIC)
    await b.announce(root, ("127.0.0.1", 7002))
    found = {p.node_id: p async for p in c.find_providers(root)}
    assert set(found) == {node_id_of(a), node_id_of(b)}
    assert found[node_id_of(a)].address == ("127.0.0.1", 7001)
    assert found[node_id_of(a)].transports == Transport.TCP | Transport.QUIC
    await a.withdraw(root)
    assert {p.node_id async for p in c.find_providers(root)} == {node_id_of(b)}
    assert [p async for p in c.find_providers(os.urandom(32))] == []


async def test_unspecified_host_means_our_address_as_others_see_it(three_peers):
    a, _, c = three_peers
    root = os.urandom(32)
    await a.announce(root, ("0.0.0.0", 7009))
    assert [p.address async for p in c.find_providers(root)] == [("127.0.0.1", 7009)]


async def test_find_providers_can_stop_early(three_peers):
    a, b, c = three_peers
    root = os.urandom(32)
    await a.announce(root, ("127.0.0.1", 7001))
    await b.announce(root, ("127.0.0.1", 7002))
    async with aclosing(c.find_providers(root)) as providers:
        first = await anext(providers)
    assert first.port in (7001, 7002)


async def test_manifests(three_peers):
    a, b, c = three_peers
    key = representation_key("https://example.org/x", '"v"')
    summary = ManifestClaim(os.urandom(32), 123456, 1 << 16, b'"v"')
    await a.put_manifest(key, summary)
    await b.put_manifest(key, summary)
    found = await c.get_manifests(key)
    assert sorted(m.publisher_id for m in found) == sorted([node_id_of(a), node_id_of(b)])
    assert {(m.content_root, m.size, m.block_size, m.validator) for m in found} == {
        (summary.content_root, 123456, 1 << 16, b'"v"')
    }
    assert await c.get_manifests(os.urandom(32)) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda d: d.announce(b"short", ("127.0.0.1", 1)),
        lambda d: d.announce(os.urandom(32), ("example.org", 1)),
        lambda d: d.announce(os.urandom(32), ("127.0.0.1", 0)),
        lambda d: d.announce(os.urandom(32), ("127.0.0.1", 1), 0),
        # a block size is opaque to the DHT (`dht.records`): only one outside the record's u32 is invalid here
        lambda d: d.put_manifest(os.urandom(32), ManifestClaim(os.urandom(32), 1, -1, b"v")),
        lambda d: d.put_manifest(os.urandom(32), ManifestClaim(os.urandom(32), 1, 1 << 14, b"")),
        lambda d: d.put_manifest(b"short", ManifestClaim(os.urandom(32), 1, 1 << 14, b"v")),
    ],
)
async def test_invalid_arguments_rejected_alike(three_peers, call):
    with pytest.raises(ValueError):  # a caller's bug, refused alike
        await call(three_peers[0])
