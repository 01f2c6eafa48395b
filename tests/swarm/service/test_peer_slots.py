"""Peer slot exhaustion (issue 19, item 3): idle connections cannot keep a downloader out.

Before: the 64 serving slots counted only handshaken connections, had no idle timeout, and a 65th peer was
refused for as long as 64 idle ones stayed. Now slots count from arrival, each connection has handshake, idle and
stall timeouts (`ServeCore`, fake clock here), and a newcomer takes the slot of the least useful connection
(`SlotPolicy`, fake clock) — checked end to end over memory, TCP and QUIC.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import pytest
from aioquic.asyncio import connect as quic_connect
from aioquic.quic.configuration import QuicConfiguration

from swarm.content.manifest import build_manifest
from swarm.core.serve import HANDSHAKE_TIMEOUT, IDLE_TIMEOUT, STALL_TIMEOUT, Close, SendBlock, ServeCore
from swarm.core.slots import PROTECT_FOR, Evict, Refuse, SlotPolicy
from swarm.core.throttle import TokenBucket, on_the_wire
from swarm.net import wire
from swarm.net.memory import MemoryNetwork, MemoryTransport
from swarm.net.quic import ALPN, QuicTransport
from swarm.net.tcp import TcpTransport
from swarm.service.node import SwarmNode
from swarm.store.memory import MemoryBlockStore
from tests.swarm.core.test_serve import core, handshake
from tests.swarm.net.test_transport import event_loop_policy, receive, until  # noqa: F401 (every test on both loops)
from tests.swarm.service.test_node import BLOCK, content, download

# As in test_transport: the fixture above runs each test on asyncio and on uvloop (the proxy runs uvloop).
pytestmark = pytest.mark.filterwarnings("ignore:Overriding the \"event_loop_policy\" fixture")

# --- the slot policy -------------------------------------------------------------------------------------------


def test_slots_count_every_connection_and_a_newcomer_replaces_the_oldest_idle_one():
    slots = SlotPolicy(3)
    assert [slots.admit(peer, float(peer)) for peer in range(3)] == [[], [], []]
    assert slots.admit("newcomer", 10.0) == [Evict(0, "slot given to a newcomer: took nothing for 10 s")]
    assert 0 not in slots and "newcomer" in slots and len(slots) == 3
    assert slots.admit("next", 11.0)[0].peer == 1  # idle connections push out each other, oldest first
    slots.release(2)
    assert slots.admit("free", 12.0) == []


def test_a_peer_downloading_keeps_its_slot_and_idle_time_counts_from_its_last_block():
    slots = SlotPolicy(3)
    for peer in ("a", "b", "c"):
        slots.admit(peer, 0.0)
    slots.downloaded("a", 58.0)
    slots.downloaded("b", 60.0)
    slots.downloaded("c", 61.0)
    # At 70 all took a block within PROTECT_FOR: the node is at work, the newcomer is refused.
    assert slots.admit("x", 70.0) == [Refuse("x", "all 3 slots serve peers that are downloading")]
    # Later the one whose last block is oldest makes room...
    assert slots.admit("y", 60.0 + PROTECT_FOR) == [Evict("a", "slot given to a newcomer: took nothing for 17 s")]
    assert slots.admit("z", 60.5 + PROTECT_FOR) == [Evict("b", "slot given to a newcomer: took nothing for 16 s")]
    # A newcomer that has taken nothing yet goes before a peer downloading ("c", 14.6 s ago)...
    assert slots.admit("v", 60.6 + PROTECT_FOR) == [Evict("y", "slot given to a newcomer: took nothing for 1 s")]
    # ...and is protected from its first block on.
    for peer in ("c", "z", "v"):
        slots.downloaded(peer, 76.0)
    assert slots.admit("w", 76.0) == [Refuse("w", "all 3 slots serve peers that are downloading")]


# --- per-connection timeouts -----------------------------------------------------------------------------------


def test_a_connection_that_says_nothing_is_closed_at_the_handshake_timeout():
    serve = ServeCore(b"n" * 32, {}.get, now=100.0)
    assert serve.next_deadline() == 100.0 + HANDSHAKE_TIMEOUT
    assert serve.on_timer(100.0 + HANDSHAKE_TIMEOUT - 0.1) == []
    assert isinstance(serve.on_timer(100.0 + HANDSHAKE_TIMEOUT).pop(), Close)


def test_a_peer_that_asks_for_nothing_is_closed_at_the_idle_timeout():
    serve = core()
    handshake(serve)  # at 0
    assert serve.next_deadline() == IDLE_TIMEOUT
    assert serve.on_message(wire.Request(1, 0, BLOCK), 30.0) == [SendBlock(1, 0, BLOCK)]
    serve.on_sent(31.0)
    assert serve.next_deadline() == 31.0 + IDLE_TIMEOUT  # idle counts from its last block
    serve.on_message(wire.KeepAlive(), 100.0)  # keepalives and announcements are no use to us
    assert serve.on_timer(31.0 + IDLE_TIMEOUT - 1) == []
    assert serve.on_timer(31.0 + IDLE_TIMEOUT) == [Close(f"asked for nothing for {IDLE_TIMEOUT:g} s")]


def test_a_peer_that_does_not_read_its_blocks_is_closed_at_the_stall_timeout():
    serve = core()
    handshake(serve)
    serve.on_message(wire.Request(1, 0, BLOCK), 10.0)
    serve.on_message(wire.Request(2, 0, BLOCK), 10.0)
    serve.on_sent(20.0)  # block 1 left; block 2 (and then 3) wait on the peer
    serve.on_message(wire.Request(3, 0, BLOCK), 21.0)
    assert serve.next_deadline() == 20.0 + STALL_TIMEOUT
    assert serve.on_timer(20.0 + STALL_TIMEOUT) == [Close(f"took no block for {STALL_TIMEOUT:g} s: not reading")]


def test_requests_waiting_on_our_upload_budget_are_not_a_stall():
    on_wire = on_the_wire(BLOCK)  # what a block costs the cap: its bytes on the link
    serve = core(upload=TokenBucket(rate=on_wire / 1000, burst=on_wire))  # one block per 1000 s
    handshake(serve)
    assert serve.on_message(wire.Request(1, 0, BLOCK), 0.0) == [SendBlock(1, 0, BLOCK)]
    assert serve.on_message(wire.Request(2, 0, BLOCK), 0.0) == []
    serve.on_sent(1.0)
    assert serve.next_deadline() == pytest.approx(1000.0)  # the budget, no timeout: the wait is ours
    assert serve.on_timer(999.0) == []
    assert serve.on_timer(1000.0) == [SendBlock(2, 0, BLOCK)]


# --- the node, over every transport ----------------------------------------------------------------------------


def transport_of(kind: str, network: MemoryNetwork):
    return {"memory": lambda: MemoryTransport(network), "tcp": TcpTransport, "quic": QuicTransport}[kind]()


@contextlib.asynccontextmanager
async def seeded(kind: str, leecher_host: str = "127.0.0.1", **kwargs):
    network = MemoryNetwork()
    data = content(8 * BLOCK, seed=19)
    seed = SwarmNode(MemoryBlockStore(), transport_of(kind, network), **kwargs)
    leecher = SwarmNode(MemoryBlockStore(), transport_of(kind, network))
    try:
        address = await seed.start("127.0.0.1", 0)
        await leecher.start(leecher_host, 0)  # (its connections leave from the address it listens on)
        manifest, layer = build_manifest([data], len(data), block_size=BLOCK)
        seed.store.create(manifest, layer, pin=True)
        for block in range(manifest.num_blocks):
            offset, length = manifest.block_span(block)
            seed.store.write_block(manifest.root, block, data[offset:offset + length])
        seed.share(manifest.root)
        yield seed, address, manifest, leecher, data
    finally:
        await leecher.close()
        await seed.close()


@pytest.mark.parametrize("kind", ["memory", "tcp", "quic"])
async def test_idle_handshaken_peers_in_every_slot_do_not_keep_a_downloader_out(kind):
    async with seeded(kind, max_peers=4) as (seed, address, manifest, leecher, data):
        idle = []
        for index in range(4):  # content roots are public: anyone can connect, handshake and sit there
            connection = await leecher.transport.connect(address)
            connection.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, bytes([index]) * 32, manifest.root))
            assert isinstance(await receive(connection), wire.Handshake)
            idle.append(connection)
        try:
            assert await asyncio.wait_for(download(leecher, manifest, [address]), 20) == data
            await until(lambda: idle[0].close_reason is not None)  # the longest idle made room
            assert all(connection.close_reason is None for connection in idle[1:])
        finally:
            for connection in idle:
                connection.abort()


@pytest.mark.parametrize("kind", ["memory", "tcp", "quic"])
async def test_connections_count_against_the_slots_before_their_handshake(kind):
    async with seeded(kind, max_peers=4, handshake_timeout=300.0) as (seed, address, manifest, leecher, data):
        silent = [await leecher.transport.connect(address) for _ in range(10)]  # and they say nothing
        try:
            await until(lambda: sum(connection.close_reason is None for connection in silent) <= 4)
            assert len(seed.slots) <= 4
            assert await asyncio.wait_for(download(leecher, manifest, [address]), 20) == data
        finally:
            for connection in silent:
                connection.abort()


@pytest.mark.parametrize("kind", ["tcp", "quic"])
async def test_downloading_connections_from_one_address_in_every_slot_do_not_keep_a_newcomer_out(kind):
    """Issue 35: 64 connections from one IP, each taking a block every 8 s, all counted as downloading, kept every
    newcomer out. Scaled to 8 slots: the flood's connections have all just taken a block (so every one is
    protected) when a downloader from another address arrives; it is served, in the place of a flood connection."""
    async with seeded(kind, leecher_host="127.0.0.3", max_peers=8) as (seed, address, manifest, leecher, data):
        attacker = transport_of(kind, MemoryNetwork())
        attacker.listen_host = "127.0.0.2"  # every flood connection leaves from this one address
        flood = [await attacker.connect(address) for _ in range(8)]
        try:
            for index, connection in enumerate(flood):
                connection.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, bytes([index]) * 32, manifest.root))
                connection.send_nowait(wire.Request(index, 0, BLOCK))
            for connection in flood:
                while not isinstance(message := await receive(connection), wire.Block):
                    assert message is not None, connection.close_reason
            await until(lambda: len(seed.slots) == 8  # every slot is the flood's, and every one is downloading
                        and all(slot.last_download is not None for slot in seed.slots._slots.values()))
            assert await asyncio.wait_for(download(leecher, manifest, [address]), 20) == data
            assert seed.slots.held_by("127.0.0.2") <= 7
            await until(lambda: sum(connection.close_reason is not None for connection in flood) >= 1)
        finally:
            for connection in flood:
                connection.abort()


async def test_quic_a_connection_that_never_opens_its_control_stream_is_closed():
    transport = QuicTransport(open_timeout=0.2)
    listener = await transport.listen("127.0.0.1", 0)
    configuration = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], verify_mode=ssl.CERT_NONE,
                                      server_name="swarmproxy")
    try:
        async with quic_connect(*listener.address, configuration=configuration, wait_connected=True) as client:
            await asyncio.wait_for(client.wait_closed(), 10)  # the server closed it
        await until(lambda: len(listener.gate) == 0)  # and holds nothing for it
        assert not listener._live
    finally:
        await listener.aclose()
