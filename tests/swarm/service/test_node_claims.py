"""Claims asked of a node directly, over real loopback sockets (TCP and QUIC): `SwarmNode.ask_claims` against a
node answering from its `OwnClaims`, and the query session's bounds seen from a peer that breaks them.

Synchronisation is on messages and closes, never on elapsed time; the claims' ages are made by putting them in
the past, not by waiting."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from swarm.content.manifest import build_manifest
from swarm.core.serve import MAX_QUERIES_PER_SESSION
from swarm.discovery.own_claims import OwnClaims
from swarm.discovery.seam import IN_PROGRESS_ROOT, ManifestClaim
from swarm.errors import PeerError
from swarm.net import wire
from swarm.net.quic import QuicTransport
from swarm.net.tcp import TcpTransport
from swarm.service.node import SwarmNode
from swarm.service.swarm_service import SwarmService
from swarm.store.memory import MemoryBlockStore
from tests.swarm.net.test_transport import receive, until
from tests.swarm.service.test_node import BLOCK, content

TRANSPORTS = {"tcp": TcpTransport, "quic": QuicTransport}
K1, K2 = b"\x01" * 32, b"\x02" * 32
CLAIM = ManifestClaim(b"r" * 32, 1_000_000, 262_144, b'"etag-1"')
FETCHING = ManifestClaim(IN_PROGRESS_ROOT, 1_000_000, 0, b'"etag-1"')


@pytest.fixture(params=sorted(TRANSPORTS))
def kind(request) -> str:
    return request.param


@pytest.fixture
async def make_node(kind):
    nodes: list[SwarmNode] = []

    async def make(host: str = "127.0.0.1", **kwargs) -> tuple[SwarmNode, tuple[str, int]]:
        node = SwarmNode(MemoryBlockStore(), TRANSPORTS[kind](), **kwargs)
        nodes.append(node)
        return node, await node.start(host, 0)

    yield make
    for node in nodes:
        await node.close()


@pytest.fixture
def closes(caplog):
    """The reasons the serving side gave for closing connections (it logs them)."""
    caplog.set_level(logging.DEBUG, logger="swarmproxy.swarm")
    return lambda: [record.getMessage() for record in caplog.records if record.getMessage().startswith("closing")]


MS = 0.001


async def test_a_claim_put_by_one_node_is_given_to_another_that_asks(make_node):
    a, address = await make_node()
    b, _ = await make_node()
    made = time.time() - 30.5  # made half a minute ago, to live ten
    a.own_claims.put(K1, CLAIM, now=made, ttl=600)
    before = time.time()
    answer = (await b.ask_claims(address, K1, timeout=10)).claims
    took = time.time() - before
    ((claim, published_at, expires_at),) = answer
    assert claim == CLAIM
    # By B's clock, from the age A gave in milliseconds: late by at most the time the answer took to come, and a
    # millisecond's rounding. (Whole seconds made it up to a second late, which shuffled a crowd's claim order.)
    assert made - MS <= published_at <= made + took + MS
    assert made + 600 - took - 1 <= expires_at <= made + 600 + took + 1  # (the time left: whole seconds)
    assert (await b.ask_claims(address, K2, timeout=10)).claims == []  # nothing under another key


async def test_what_is_replaced_expired_or_withdrawn_is_not_given(make_node):
    a, address = await make_node()
    b, _ = await make_node()
    a.own_claims.put(K1, FETCHING, now=time.time(), ttl=120)
    a.own_claims.put(K1, CLAIM, now=time.time(), ttl=600)  # the real claim replaces the in-progress one
    assert [claim for claim, _, _ in (await b.ask_claims(address, K1, timeout=10)).claims] == [CLAIM]
    a.own_claims.put(K2, CLAIM, now=time.time() - 100, ttl=60)  # expired 40 s ago
    assert (await b.ask_claims(address, K2, timeout=10)).claims == []
    a.own_claims.withdraw(K1)
    assert (await b.ask_claims(address, K1, timeout=10)).claims == []


async def test_a_node_given_a_table_answers_from_it(make_node):
    table = OwnClaims()
    a, address = await make_node(own_claims=table)
    b, _ = await make_node()
    assert a.own_claims is table
    table.put(K1, CLAIM, now=time.time(), ttl=60)
    assert [claim for claim, _, _ in (await b.ask_claims(address, K1, timeout=10)).claims] == [CLAIM]


async def test_a_node_does_not_ask_itself(make_node):
    a, address = await make_node()
    a.own_claims.put(K1, CLAIM, now=time.time(), ttl=60)
    with pytest.raises(PeerError, match="this node itself"):
        await a.ask_claims(address, K1, timeout=10)


async def test_a_query_session_holds_a_slot_and_no_content(make_node):
    a, address = await make_node()
    b, _ = await make_node()
    connection = await query_session(b, address, a.node_id)
    try:
        await until(lambda: len(a.slots) == 1)
        assert a.links() == []  # about no content: nothing to tell it of, nothing to count
    finally:
        connection.abort()
    await until(lambda: len(a.slots) == 0)


async def test_a_query_session_that_asks_for_content_is_closed(make_node, closes):
    a, address = await make_node()
    b, _ = await make_node()
    connection = await query_session(b, address, a.node_id)
    connection.send_nowait(wire.ClaimsRequest(K1))
    assert await receive(connection) == wire.ClaimsResponse(K1, ())
    connection.send_nowait(wire.Request(0, 0, BLOCK))
    assert await receive(connection) is None
    assert any("Request on a query session" in line for line in closes())
    await until(lambda: len(a.slots) == 0)


async def test_the_query_past_the_last_closes_the_session(make_node, closes):
    a, address = await make_node()
    b, _ = await make_node()
    a.own_claims.put(K1, CLAIM, now=time.time(), ttl=600)
    connection = await query_session(b, address, a.node_id)
    for _ in range(MAX_QUERIES_PER_SESSION):
        connection.send_nowait(wire.ClaimsRequest(K1))
        answer = await receive(connection)
        assert isinstance(answer, wire.ClaimsResponse) and [e.claim for e in answer.entries] == [CLAIM]
    connection.send_nowait(wire.ClaimsRequest(K1))
    assert await receive(connection) is None
    assert any(f"more than {MAX_QUERIES_PER_SESSION} CLAIMS_REQUESTs" in line for line in closes())


async def test_a_content_session_that_asks_for_claims_is_closed(make_node, closes):
    a, address = await make_node()
    b, _ = await make_node()
    data = content(4 * BLOCK, seed=21)
    manifest = seed(a, data)
    connection = await b.open_connection(address, manifest.root, 10)
    try:
        assert isinstance(await receive(connection), wire.Bitfield)
        connection.send_nowait(wire.ClaimsRequest(K1))
        assert await receive(connection) is None
    finally:
        connection.abort()
    assert any("CLAIMS_REQUEST outside a query session" in line for line in closes())


async def test_ask_claims_of_a_node_that_closes_at_the_handshake_is_a_peer_error(make_node, kind):
    """As a node older than query sessions does: the zero root is not shared there."""
    b, _ = await make_node()
    listener = await TRANSPORTS[kind]().listen("127.0.0.1", 0)

    async def old_node() -> None:
        server = await listener.accept()
        assert isinstance(await server.receive(), wire.Handshake)
        server.close(f"content {wire.QUERY_ROOT.hex()[:16]}… is not shared here")

    task = asyncio.create_task(old_node())
    try:
        with pytest.raises(PeerError, match="closed the connection"):
            await b.ask_claims(listener.address, K1, timeout=10)
        await task
    finally:
        task.cancel()
        await listener.aclose()


def test_a_service_hands_one_table_to_the_node_of_every_transport():
    table = OwnClaims()
    service = SwarmService(MemoryBlockStore(), {name: cls() for name, cls in TRANSPORTS.items()}, None,
                           own_claims=table)
    assert service.own_claims is table
    assert all(node.own_claims is table for node in service.nodes.values())
    fresh = SwarmService(MemoryBlockStore(), {"tcp": TcpTransport()}, None)
    assert isinstance(fresh.own_claims, OwnClaims) and fresh.own_claims is not table
    assert fresh.nodes["tcp"].own_claims is fresh.own_claims


# --- helpers ---------------------------------------------------------------------------------------------------


async def query_session(node: SwarmNode, address, answering: bytes):
    """A raw query session from `node` to `address`, its HANDSHAKE answered by the node id `answering`."""
    connection = await node.transport.connect(address)
    connection.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, node.node_id, wire.QUERY_ROOT))
    assert await receive(connection) == wire.Handshake(wire.PROTOCOL_VERSION, answering, wire.QUERY_ROOT)
    return connection


def seed(node: SwarmNode, data: bytes):
    """`data` in `node`'s store, shared; its manifest."""
    manifest, layer = build_manifest([data], len(data), block_size=BLOCK)
    node.store.create(manifest, layer, pin=True)
    for block in range(manifest.num_blocks):
        offset, length = manifest.block_span(block)
        assert node.store.write_block(manifest.root, block, data[offset:offset + length])
    node.share(manifest.root)
    return manifest


async def test_a_claimer_passes_on_the_other_claimers_that_asked_it(make_node, kind):
    # A claims; B and C claim too and ask A, saying their ports; D only asks. Each learns the others that said so,
    # by the address its connection came from, never by what the PEX entry names (B's says 0.0.0.0).
    flag = int(wire.Transport.QUIC if kind == "quic" else wire.Transport.TCP)
    a, address = await make_node("127.0.0.11")
    b, b_address = await make_node("127.0.0.12")
    c, c_address = await make_node("127.0.0.13")
    d, _ = await make_node("127.0.0.14")
    a.own_claims.put(K1, FETCHING, now=time.time(), ttl=120)
    first = await b.ask_claims(address, K1, timeout=10, claiming=(b_address[1], flag))
    assert [claim for claim, _, _ in first.claims] == [FETCHING] and first.others == []
    second = await c.ask_claims(address, K1, timeout=10, claiming=(c_address[1], flag))
    assert second.others == [b_address]
    third = await d.ask_claims(address, K1, timeout=10)
    assert third.others == [b_address, c_address]  # the first first; D said nothing, so it is not passed on
    assert (await b.ask_claims(address, K1, timeout=10)).others == [c_address]  # not itself
    assert (await d.ask_claims(address, K2, timeout=10)).others == []  # another key


async def test_a_node_that_claims_nothing_under_a_key_keeps_nobody_for_it(make_node, kind):
    # Else any node would be a meeting point for a stranger's keys.
    flag = int(wire.Transport.QUIC if kind == "quic" else wire.Transport.TCP)
    a, address = await make_node("127.0.0.21")
    b, b_address = await make_node("127.0.0.22")
    c, _ = await make_node("127.0.0.23")
    assert (await b.ask_claims(address, K1, timeout=10, claiming=(b_address[1], flag))).others == []
    assert (await c.ask_claims(address, K1, timeout=10)).others == []
    assert len(a.claimers) == 0


@pytest.mark.parametrize("at_the_pex", ["closes", "says nothing"])
async def test_a_node_that_gives_no_other_claimers_still_gives_its_claims(make_node, kind, at_the_pex):
    # An older node closes at the PEX after a CLAIMS; a stranger may never answer it: either way the asker keeps
    # the claims (after at most OTHERS_WAIT), and knows no others.
    b, _ = await make_node()
    listener = await TRANSPORTS[kind]().listen("127.0.0.1", 0)
    answered = asyncio.Event()

    async def node() -> None:
        server = await listener.accept()
        assert isinstance(await server.receive(), wire.Handshake)
        server.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, b"o" * 32, wire.QUERY_ROOT))
        assert await server.receive() == wire.ClaimsRequest(K1)
        server.send_nowait(wire.ClaimsResponse(K1, (wire.ClaimEntry(CLAIM, 1500, 60),)))
        assert isinstance(await server.receive(), wire.Pex)
        answered.set()
        if at_the_pex == "closes":
            server.close("Pex on a query session")
        else:
            await asyncio.Event().wait()  # silent until the test ends

    task = asyncio.create_task(node())
    try:
        answer = await b.ask_claims(listener.address, K1, timeout=10, claiming=(4000, int(wire.Transport.TCP)))
        assert answered.is_set()
        assert [claim for claim, _, _ in answer.claims] == [CLAIM] and answer.others == []
    finally:
        task.cancel()
        await listener.aclose()
