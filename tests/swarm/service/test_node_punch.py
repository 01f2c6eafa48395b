"""Hole punching through SwarmNodes on loopback (no NAT: the messages, the limits and the dial; the NATs are
tests/bench/test_punch_netns.py's)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator

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
    async with rendezvous_at(c, b, a):
        assert c.listener is not None and b.listener is not None
        connection = await a.punching.connect(a, c.listener.address, b.listener.address, timeout=5.0)
        assert connection.remote_address == b.listener.address
        assert a._answered[connection] == b.node_id  # handshakes exchanged
        assert c.punching.coordinator.introduced == 1
        assert a.punching.punched == 1
        await asyncio.wait_for(_until(lambda: b.punching.punched == 1), 5)  # b punched towards a's address
        connection.abort()


@contextlib.asynccontextmanager
async def rendezvous_at(coordinator: SwarmNode, target: SwarmNode, *others: SwarmNode) -> AsyncIterator[None]:
    """`target` (started) keeps a rendezvous with `coordinator` (started), registered there, for the block; every
    node given is closed after it, however it ends."""
    try:
        assert coordinator.listener is not None
        rendezvous = await target.punching.rendezvous(target, coordinator.listener.address)
        await registered(coordinator, target)
        yield
        rendezvous.abort()
    finally:
        for each in (coordinator, target, *others):
            await each.close()


async def registered(coordinator: SwarmNode, rendezvous: SwarmNode) -> None:
    """Until the coordinator holds the rendezvous session under its address (once its HANDSHAKE is served)."""
    assert rendezvous.listener is not None
    await asyncio.wait_for(_until(lambda: rendezvous.listener.address in coordinator.punching._sessions), 5)


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


async def test_an_address_with_no_session_to_the_coordinator_is_unknown():
    a, c = node(), node()
    await started(a, c)
    try:
        assert c.listener is not None and a.listener is not None
        with pytest.raises(PeerError, match="UNKNOWN_PEER"):
            await a.punching.connect(a, c.listener.address, ("127.0.0.1", 9), timeout=5.0)
        with pytest.raises(PeerError, match="UNKNOWN_PEER"):  # its own session is no introduction
            await a.punching.connect(a, c.listener.address, a.listener.address, timeout=5.0)
    finally:
        for each in (a, c):
            await each.close()


async def test_a_coordinator_introduces_a_requester_a_few_times_a_minute():
    a, b, c = node(), node(), node()
    await started(a, b, c)
    async with rendezvous_at(c, b, a):
        assert c.listener is not None
        assert b.listener is not None
        b_at = b.listener.address
        for _ in range(3):
            assert await a.punching.request(a, c.listener.address, b_at) is not None
        with pytest.raises(PeerError, match="NOT_ATTEMPTED"):
            await a.punching.request(a, c.listener.address, b_at)
        assert c.punching.coordinator.introduced == 3


async def test_public_nodes_refuse_to_coordinate_between_private_addresses():
    a, b = node(), node()
    c = SwarmNode(MemoryBlockStore(), QuicTransport())  # the default: the public network only
    await started(a, b, c)
    async with rendezvous_at(c, b, a):
        assert c.listener is not None
        assert b.listener is not None
        b_at = b.listener.address
        with pytest.raises(PeerError, match="NOT_ATTEMPTED"):
            await a.punching.request(a, c.listener.address, b_at)
        assert c.punching.coordinator.introduced == 0


async def test_a_stranger_stating_a_nodes_id_does_not_take_its_introductions():
    """The attack on sessions kept by node id: a stranger opens a query session to the coordinator whose HANDSHAKE
    states the victim's node id, after the victim's rendezvous. Kept by node id, the latest won, and a requester
    asking for the victim was introduced to the stranger. Kept by the address the transport proved, it is not."""
    a, b, c = node(), node(), node()
    await started(a, b, c)
    stranger = SwarmNode(MemoryBlockStore(), QuicTransport(), node_id=b.node_id)
    async with rendezvous_at(c, b, a, stranger):
        assert c.listener is not None and b.listener is not None
        squatter = await stranger.open_connection(c.listener.address, wire.QUERY_ROOT, 5.0)
        await asyncio.wait_for(_until(lambda: len(c.punching._sessions) == 2), 5)
        assert await a.punching.request(a, c.listener.address, b.listener.address) == b.listener.address
        await asyncio.wait_for(_until(lambda: b.punching.punched == 1), 5)  # b, not the stranger, was told
        squatter.abort()


async def test_a_node_asking_its_own_coordinator_keeps_its_rendezvous_there():
    """A node's rendezvous and the session it opens to ask the same coordinator for a punch come from one address
    (its listener's socket). Kept one per address, the request's session took the rendezvous's place and, ending,
    removed it: the node could no longer be introduced there (found by the NAT matrix's lab)."""
    a, b, c = node(), node(), node()
    await started(a, b, c)
    async with rendezvous_at(c, b, a):
        assert c.listener is not None and b.listener is not None
        with pytest.raises(PeerError, match="UNKNOWN_PEER"):  # b asks for somebody c does not know
            await b.punching.request(b, c.listener.address, ("127.0.0.1", 9))
        await asyncio.wait_for(_until(lambda: len(c.punching._sessions[b.listener.address]) == 1), 5)
        assert await a.punching.request(a, c.listener.address, b.listener.address) == b.listener.address
        await asyncio.wait_for(_until(lambda: b.punching.punched == 1), 5)  # told on its rendezvous


async def test_a_coordinator_cannot_choose_where_we_punch():
    """An honest coordinator finds the peer by the address asked, and names it back. A PUNCH_PEER naming another
    address (a loopback service, a victim) made the requester punch and dial there and take the asked address for
    punched (the hole-punch attack review): now it is refused."""
    a, c = node(), node()
    await started(a, c)
    try:
        assert c.listener is not None

        def lying(connection, action, now):
            connection.send_nowait(wire.PunchPeer(action.nonce, wire.PunchStatus.PEER,
                                                  ipaddress.ip_address("127.0.0.1"), 9))
            return wire.PunchStatus.PEER

        c.punching.introduce = lying
        with pytest.raises(PeerError, match="not the address asked"):
            await a.punching.request(a, c.listener.address, ("127.0.0.1", 4000))
        assert a.punching.punched == 0
    finally:
        for each in (a, c):
            await each.close()


async def test_one_requester_cannot_use_up_the_introductions_a_node_acts_on():
    """An introduced node acted on 3 introductions a minute per coordinator, whoever asked: a stranger asking 3
    times left every honest requester introduced (told PEER) to a node that did not punch (the hole-punch attack
    review). Now each requester gets its 3, and the coordinator's 20 in all."""
    a, b, c, stranger = node(), node(), node(), node()
    await started(b, c)
    await stranger.start("127.0.0.3", 0)  # (two requesters: two addresses)
    await a.start("127.0.0.4", 0)
    async with rendezvous_at(c, b, a, stranger):
        assert c.listener is not None and b.listener is not None
        for _ in range(3):
            await stranger.punching.request(stranger, c.listener.address, b.listener.address)
        await asyncio.wait_for(_until(lambda: b.punching.punched == 3), 5)
        await a.punching.request(a, c.listener.address, b.listener.address)
        await asyncio.wait_for(_until(lambda: b.punching.punched == 4), 5)  # b punched towards a too
