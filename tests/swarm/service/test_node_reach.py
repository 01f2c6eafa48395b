"""Connect-backs between real nodes on loopback (TCP and QUIC): `SwarmNode.probe_reachability` against a node that
connects back, and the bounds seen from a requester that asks too much or a stranger that brings a made-up proof.

Every node here is built for a lab (`Reach(allow_private=True)`: loopback counts as the public network), except
where the default is what is shown. Synchronisation is on answers and closes, never on elapsed time; a port nobody
listens on is one held by a socket of the test's that does not listen (TCP: refused; QUIC: silent)."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from swarm.core.reach import PER_SOURCE
from swarm.core.reachability import Outcome, State
from swarm.net import wire
from swarm.net.quic import QuicTransport
from swarm.net.tcp import TcpTransport
from swarm.service.node import SwarmNode
from swarm.service.reach import TRANSPORT_FLAGS, Reach
from swarm.service.swarm_service import SwarmService
from swarm.store.memory import MemoryBlockStore
from tests.swarm.net.test_transport import receive
from tests.swarm.service.test_node_claims import query_session

TRANSPORTS = {"tcp": TcpTransport, "quic": QuicTransport}
SILENT = 0.5  # B's connect-back time where nothing will answer (QUIC to a port that does not read)


@pytest.fixture(params=sorted(TRANSPORTS))
def kind(request) -> str:
    return request.param


@pytest.fixture
async def make_node(kind):
    nodes: list[SwarmNode] = []

    async def make(**reach) -> tuple[SwarmNode, tuple[str, int]]:
        reach.setdefault("allow_private", True)
        node = SwarmNode(MemoryBlockStore(), TRANSPORTS[kind](), reach=Reach(**reach))
        nodes.append(node)
        return node, await node.start("127.0.0.1", 0)

    yield make
    for node in nodes:
        await node.close()


@pytest.fixture
def dials():
    """Count the connections a node's transport opens: what a requester made it dial."""
    counted: dict[SwarmNode, int] = {}

    def count(node: SwarmNode) -> dict[SwarmNode, int]:
        counted[node] = 0
        connect = node.transport.connect

        async def counting(address, **kwargs):
            counted[node] += 1
            return await connect(address, **kwargs)

        node.transport.connect = counting
        return counted

    return count


@pytest.fixture
def closes(caplog):
    caplog.set_level(logging.DEBUG, logger="swarmproxy.swarm")
    return lambda: [record.getMessage() for record in caplog.records if record.getMessage().startswith("closing")]


def now() -> float:
    return asyncio.get_running_loop().time()


async def test_a_peer_connects_back_and_the_asker_is_reachable(make_node, kind, dials):
    a, _ = await make_node()
    b, b_address = await make_node()
    flag = TRANSPORT_FLAGS[kind]
    assert a.reachability.state(flag, now()) is State.UNKNOWN
    counted = dials(b)
    assert await a.probe_reachability(b_address, timeout=10) == {kind: Outcome.PROVED}
    assert counted[b] == 1 and b.reach.dials == 1
    assert a.reachability.state(flag, now()) is State.REACHABLE and a.reachability.announce(now())
    assert "connected back" in a.reachability.why(now())
    # And B learnt something too: A's query session was a stranger's connection (not a connect-back) to its port.
    assert b.reachability.state(flag, now()) is State.REACHABLE
    assert b.reach.status()["transports"][kind]["reached_by"] == "inbound"


async def test_a_port_nobody_listens_on_is_refused_or_silent(make_node, kind, dials):
    a, _ = await make_node()
    b, b_address = await make_node(connect_back_timeout=SILENT)
    counted = dials(b)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM) as held:
        held.bind(("127.0.0.1", 0))  # bound, not listening (nor reading): nothing of ours answers there
        port = held.getsockname()[1]
        outcomes = await a.probe_reachability(b_address, timeout=10, port=port)
    assert outcomes == {kind: Outcome.REFUSED if kind == "tcp" else Outcome.TIMED_OUT}
    assert counted[b] == 1
    # A probe of another port than ours says nothing of ours.
    assert a.reachability.state(TRANSPORT_FLAGS[kind], now()) is State.UNKNOWN


async def test_a_requester_asking_again_and_again_gets_only_the_limit_dialled(make_node, kind, dials):
    a, _ = await make_node()
    b, b_address = await make_node()
    counted = dials(b)
    outcomes = [await a.probe_reachability(b_address, timeout=10) for _ in range(10)]
    assert outcomes == [{kind: Outcome.PROVED}] * PER_SOURCE + [{kind: Outcome.NOT_ATTEMPTED}] * (10 - PER_SOURCE)
    assert counted[b] == PER_SOURCE


async def test_requests_piled_on_one_session_close_it_and_are_not_dialled(make_node, kind, dials, closes):
    a, a_address = await make_node()
    b, _ = await make_node()
    counted = dials(a)
    connection = await query_session(b, a_address, a.node_id)
    try:
        for _ in range(10):
            connection.send_nowait(wire.ReachRequest(b.listener.address[1], TRANSPORT_FLAGS[kind], b"n" * 16))
        while (message := await receive(connection)) is not None:
            assert isinstance(message, wire.ReachResult)  # the first request's, if it came before the close
    finally:
        connection.abort()
    assert any("a second REACH_REQUEST on one query session" in line for line in closes())
    assert counted[a] <= 1


async def test_a_proof_with_an_unknown_nonce_closes_the_session_and_proves_nothing(make_node, kind, closes):
    a, a_address = await make_node()
    b, _ = await make_node()
    connection = await query_session(b, a_address, a.node_id)
    try:
        connection.send_nowait(wire.ReachProof(wire.reach_proof(b"?" * 16)))
        assert await receive(connection) is None
    finally:
        connection.abort()
    assert any("connect-back taken" in line for line in closes())
    # Neither a proof of ours nor a stranger's connection: nothing learnt.
    assert a.reachability.state(TRANSPORT_FLAGS[kind], now()) is State.UNKNOWN


async def test_by_default_a_requester_on_loopback_is_not_dialled(make_node, kind, dials):
    """Off a lab, connect-backs are for the public network: a loopback source may be a forwarder on this host."""
    a, _ = await make_node()
    b, b_address = await make_node(allow_private=False)
    counted = dials(b)
    assert await a.probe_reachability(b_address, timeout=10) == {kind: Outcome.NOT_ATTEMPTED}
    assert counted[b] == 0
    assert a.reachability.state(TRANSPORT_FLAGS[kind], now()) is State.UNKNOWN


async def test_a_node_that_answers_no_connect_back_is_no_answer(make_node, kind):
    """As a node older than connect-backs does: its decoder drops the connection at the unknown type."""
    a, _ = await make_node()
    listener = await TRANSPORTS[kind]().listen("127.0.0.1", 0)

    async def old_node() -> None:
        server = await listener.accept()
        hello = await server.receive()
        assert isinstance(hello, wire.Handshake)
        server.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, b"o" * 32, wire.QUERY_ROOT))
        assert isinstance(await server.receive(), wire.ReachRequest)  # (ours knows it; an old one would not)
        server.abort("unknown message type 16")

    task = asyncio.create_task(old_node())
    try:
        assert await a.probe_reachability(listener.address, timeout=10) == {kind: Outcome.NO_ANSWER}
        await task
    finally:
        task.cancel()
        await listener.aclose()


async def test_one_probe_asks_for_both_transports_and_each_proof_comes_back_by_its_own():
    """A service's nodes share one `Reach`: the session goes over TCP, the QUIC proof arrives at the QUIC node."""
    services = [SwarmService(MemoryBlockStore(), {name: cls() for name, cls in TRANSPORTS.items()}, None,
                             reach=Reach(allow_private=True)) for _ in range(2)]
    try:
        a, b = services
        await a.start("127.0.0.1", 0)
        b_address = await b.start("127.0.0.1", 0)
        assert all(node.reach is a.reach for node in a.nodes.values())
        assert await a.probe_reachability(b_address, timeout=10) == {"tcp": Outcome.PROVED, "quic": Outcome.PROVED}
        assert b.reach.dials == 2
        reachability = a.reach.reachability
        assert [reachability.state(flag, now()) for flag in wire.Transport] == [State.REACHABLE] * 2
        status = a.reach.status()
        assert status["announce"] is True and status["connect_backs"] == {"dialled": 0, "under_way": 0}
    finally:
        for service in services:
            await service.stop()


async def test_a_connect_back_comes_from_a_socket_other_than_the_listeners(make_node, kind):
    """Behind a NAT that filters by address and port, whatever comes from an address and port we talked to passes
    (QUIC dials from its listener's socket: a rendezvous or a fetch makes such a flow with the prober). A
    connect-back from there "proved" a port strangers cannot reach (seen behind a port-restricted NAT on the test
    internet); from a socket of its own it comes as a stranger's would."""
    a, _ = await make_node()
    b, b_address = await make_node()
    sources: list = []
    arrived = a.reach.proof_arrived

    def record(name, connection, proof):
        sources.append(connection.remote_address)
        arrived(name, connection, proof)

    a.reach.proof_arrived = record
    assert await a.probe_reachability(b_address, timeout=10) == {kind: Outcome.PROVED}
    assert len(sources) == 1 and sources[0][1] != b_address[1], (sources, b_address)


async def test_a_connection_from_a_host_our_quic_socket_sent_to_is_no_evidence():
    """Behind a port-restricted NAT, a host we dialled (or punched to) from the QUIC listener's socket gets in, and
    a stranger does not. Counted as a stranger's, one such connection — a coordinator of our rendezvous dialling
    us from its own listener's socket, or the peer of one punch — made the node "reachable" for 45 minutes, and it
    dropped its rendezvous (the hole-punch attack review; seen on the test internet)."""
    a = SwarmNode(MemoryBlockStore(), QuicTransport(), reach=Reach(allow_private=True))
    b = SwarmNode(MemoryBlockStore(), QuicTransport(), reach=Reach(allow_private=True))
    try:
        a_address, b_address = await a.start("127.0.0.1", 0), await b.start("127.0.0.1", 0)
        session = await a.open_connection(b_address, wire.QUERY_ROOT, 5.0)  # a dials b from its listener's socket
        session.abort()
        dialling_back = await b.open_connection(a_address, wire.QUERY_ROOT, 5.0)  # ... so b's dial gets in
        dialling_back.send_nowait(wire.ClaimsRequest(b"k" * 32))
        assert isinstance(await receive(dialling_back), wire.ClaimsResponse)
        assert a.reachability.state(wire.Transport.QUIC, now()) is State.UNKNOWN
        dialling_back.abort()
    finally:
        await a.close()
        await b.close()
