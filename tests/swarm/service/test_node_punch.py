"""Hole punching through SwarmNodes on loopback (no NAT: the messages, the limits and the dial; the NATs are
tests/bench/test_punch_netns.py's)."""

from __future__ import annotations

import asyncio

import pytest

from swarm.errors import PeerError
from swarm.net import wire
from swarm.net.quic import QuicTransport
from swarm.service.node import SwarmNode
from swarm.service.punch import Punching
from swarm.store.memory import MemoryBlockStore


def node(**punching) -> SwarmNode:
    created = SwarmNode(MemoryBlockStore(), QuicTransport())
    created.punching = Punching(allow_private=True, ttl=None, delay=0.0, **punching)
    return created


async def started(*nodes: SwarmNode) -> None:
    for each in nodes:
        await each.start("127.0.0.1", 0)


async def test_a_node_connects_to_another_through_a_coordinator_both_reach():
    a, b, c = node(), node(), node()
    await started(a, b, c)
    try:
        assert c.listener is not None and b.listener is not None
        rendezvous = await b.punching.rendezvous(b, c.listener.address)
        await registered(c, b)
        connection = await a.punching.connect(a, c.listener.address, b.node_id, timeout=5.0)
        assert connection.remote_address == b.listener.address
        assert a._answered[connection] == b.node_id  # handshakes exchanged
        assert c.punching.coordinator.introduced == 1
        assert a.punching.punched == 1
        await asyncio.wait_for(_until(lambda: b.punching.punched == 1), 5)  # b punched towards a's address
        connection.abort()
        rendezvous.abort()
    finally:
        for each in (a, b, c):
            await each.close()


async def registered(coordinator: SwarmNode, rendezvous: SwarmNode) -> None:
    """Until the coordinator holds the rendezvous session under its node id (once its HANDSHAKE is served)."""
    await asyncio.wait_for(_until(lambda: rendezvous.node_id in coordinator.punching._sessions), 5)


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


async def test_a_node_id_with_no_session_to_the_coordinator_is_unknown():
    a, c = node(), node()
    await started(a, c)
    try:
        assert c.listener is not None
        with pytest.raises(PeerError, match="UNKNOWN_PEER"):
            await a.punching.connect(a, c.listener.address, b"x" * 32, timeout=5.0)
        with pytest.raises(PeerError, match="UNKNOWN_PEER"):  # its own session is no introduction
            await a.punching.connect(a, c.listener.address, a.node_id, timeout=5.0)
    finally:
        for each in (a, c):
            await each.close()


async def test_a_coordinator_introduces_a_requester_a_few_times_a_minute():
    a, b, c = node(), node(), node()
    await started(a, b, c)
    try:
        assert c.listener is not None
        rendezvous = await b.punching.rendezvous(b, c.listener.address)
        await registered(c, b)
        for _ in range(3):
            assert await a.punching.request(a, c.listener.address, b.node_id) is not None
        with pytest.raises(PeerError, match="NOT_ATTEMPTED"):
            await a.punching.request(a, c.listener.address, b.node_id)
        assert c.punching.coordinator.introduced == 3
        rendezvous.abort()
    finally:
        for each in (a, b, c):
            await each.close()


async def test_public_nodes_refuse_to_coordinate_between_private_addresses():
    a, b = node(), node()
    c = SwarmNode(MemoryBlockStore(), QuicTransport())  # the default: the public network only
    await started(a, b, c)
    try:
        assert c.listener is not None
        rendezvous = await b.punching.rendezvous(b, c.listener.address)
        await registered(c, b)
        with pytest.raises(PeerError, match="NOT_ATTEMPTED"):
            await a.punching.request(a, c.listener.address, b.node_id)
        assert c.punching.coordinator.introduced == 0
        rendezvous.abort()
    finally:
        for each in (a, b, c):
            await each.close()


def test_a_punch_peer_is_smaller_than_the_request():
    assert len(wire.PunchPeer(b"n" * 16, wire.PunchStatus.NOT_ATTEMPTED).encode()) < len(
        wire.PunchRequest(b"x" * 32, b"n" * 16).encode())
