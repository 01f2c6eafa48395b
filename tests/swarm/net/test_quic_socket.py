"""QUIC: a transport that listens dials from its listener's UDP socket (swarm.net.quic, "One socket")."""

from __future__ import annotations

import asyncio

import pytest

from swarm.errors import ConnectFailed
from swarm.net.quic import QuicTransport
from swarm.net.wire import PROTOCOL_VERSION, Handshake, Have

H = b"\x11" * 32


async def receive(connection):
    return await asyncio.wait_for(connection.receive(), 10)


async def test_a_dialled_connection_leaves_from_the_listeners_port():
    ours, theirs = QuicTransport(), QuicTransport()
    own = await ours.listen("127.0.0.1", 0)
    their = await theirs.listen("127.0.0.1", 0)
    client = await ours.connect(their.address)
    server = await asyncio.wait_for(their.accept(), 10)
    try:
        assert client.local_address == own.address
        assert server.remote_address == own.address  # what the peer (or a NAT between) sees
        await client.send(Handshake(PROTOCOL_VERSION, H, H))
        assert await receive(server) == Handshake(PROTOCOL_VERSION, H, H)
        await server.send(Have(3))
        assert await receive(client) == Have(3)
    finally:
        client.abort()
        server.abort()
        await own.aclose()
        await their.aclose()


async def test_a_transport_that_does_not_listen_dials_from_a_socket_of_its_own():
    ours, theirs = QuicTransport(), QuicTransport()
    their = await theirs.listen("127.0.0.1", 0)
    client = await ours.connect(their.address)
    server = await asyncio.wait_for(their.accept(), 10)
    try:
        assert client.local_address[1] not in (0, their.address[1])
        assert server.remote_address[1] == client.local_address[1]
    finally:
        client.abort()
        server.abort()
        await their.aclose()


async def test_two_nodes_dialling_each_other_at_once_get_two_connections_on_one_socket_each():
    """The crossing of a hole punch: each side's socket carries its accepted connection and its dialled one."""
    a, b = QuicTransport(), QuicTransport()
    a_listener, b_listener = await a.listen("127.0.0.1", 0), await b.listen("127.0.0.1", 0)
    a_to_b, b_to_a = await asyncio.gather(a.connect(b_listener.address), b.connect(a_listener.address))
    at_b = await asyncio.wait_for(b_listener.accept(), 10)
    at_a = await asyncio.wait_for(a_listener.accept(), 10)
    try:
        assert at_b.remote_address == a_listener.address and at_a.remote_address == b_listener.address
        for sender, receiver, n in ((a_to_b, at_b, 1), (b_to_a, at_a, 2), (at_b, a_to_b, 3), (at_a, b_to_a, 4)):
            await sender.send(Have(n))
            assert await receive(receiver) == Have(n)
    finally:
        for connection in (a_to_b, b_to_a, at_a, at_b):
            connection.abort()
        await a_listener.aclose()
        await b_listener.aclose()


async def test_a_dialled_connection_outlives_its_listener_and_later_dials_use_their_own_socket():
    ours, theirs = QuicTransport(), QuicTransport()
    own = await ours.listen("127.0.0.1", 0)
    their = await theirs.listen("127.0.0.1", 0)
    first = await ours.connect(their.address)
    first_server = await asyncio.wait_for(their.accept(), 10)
    await own.aclose()
    second = await ours.connect(their.address)
    second_server = await asyncio.wait_for(their.accept(), 10)
    try:
        await first.send(Have(1))
        assert await receive(first_server) == Have(1)
        await first_server.send(Have(2))
        assert await receive(first) == Have(2)
        assert second.local_address[1] != own.address[1]
        assert second_server.remote_address[1] == second.local_address[1]
    finally:
        for connection in (first, first_server, second, second_server):
            connection.abort()
        await their.aclose()
    await asyncio.wait_for(first.wait_closed(), 10)
    await asyncio.sleep(0)
    assert own._server is None  # the socket went with the last connection on it


async def test_a_failed_dial_on_the_listeners_socket_leaves_it_listening():
    ours, theirs = QuicTransport(), QuicTransport()
    own = await ours.listen("127.0.0.1", 0)
    gone = await theirs.listen("127.0.0.1", 0)
    address = gone.address
    await gone.aclose()
    with pytest.raises(ConnectFailed):
        await ours.connect(address, timeout=0.5)
    their = await theirs.listen("127.0.0.1", 0)
    client = await ours.connect(their.address)
    server = await asyncio.wait_for(their.accept(), 10)
    try:
        assert server.remote_address == own.address
    finally:
        client.abort()
        server.abort()
        await own.aclose()
        await their.aclose()
