"""QUIC handshake-state flood (issue 35, item 5): Initials cannot make a listener hold unbounded connections.

Measured before the fix (`bench/attacks/quic_flood.py`): 28 MB of valid Initials from one UDP socket, each a fresh
client's first flight, took a node from 45 to 475 MB of RSS, still there after 60 s idle — aioquic created a
connection (TLS state, our first flight kept for retransmission) for every one. Here the flood is scaled down
and the connections the listener holds are counted (aioquic's and the gate's), never time or RSS.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time

import pytest
from aioquic.buffer import Buffer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection as AioquicConnection
from aioquic.quic.packet import QuicPacketType, pull_quic_header

from swarm.net.handshakes import PER_ADDRESS, TOTAL
from swarm.net.quic import ALPN, QuicTransport

# event_loop_policy: the fixture runs every test here on both loops, as in test_transport
from tests.swarm.net.test_transport import event_loop_policy, until  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:Overriding the \"event_loop_policy\" fixture")

CLIENT = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], verify_mode=ssl.CERT_NONE,
                           server_name="swarmproxy")


class Flood(asyncio.DatagramProtocol):
    """One UDP socket sending fresh clients' Initials; answers Retry packets with the client's next Initial when
    `answer_retry` (a real source address), and never goes further in any handshake."""

    def __init__(self, answer_retry: bool) -> None:
        self.answer_retry = answer_retry
        self.transport: asyncio.DatagramTransport | None = None
        self.clients: dict[bytes, AioquicConnection] = {}
        self.retries = 0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def initial(self, address) -> None:
        client = AioquicConnection(configuration=CLIENT)
        client.connect(address, now=time.monotonic())
        self.clients[client.host_cid] = client
        self._send(client)

    def _send(self, client: AioquicConnection) -> None:
        for data, address in client.datagrams_to_send(time.monotonic()):
            self.transport.sendto(data, address)

    def datagram_received(self, data: bytes, addr) -> None:
        with contextlib.suppress(ValueError):
            header = pull_quic_header(Buffer(data=data), host_cid_length=8)
            if header.packet_type == QuicPacketType.RETRY:
                self.retries += 1
                client = self.clients.pop(header.destination_cid, None)
                if client is not None and self.answer_retry:
                    client.receive_datagram(data, addr, time.monotonic())
                    self._send(client)


@contextlib.asynccontextmanager
async def flooded_listener(open_timeout: float = 10.0):
    transport = QuicTransport(open_timeout=open_timeout)
    listener = await transport.listen("127.0.0.1", 0)
    floods = []

    async def flood(source: str, answer_retry: bool) -> Flood:
        _, protocol = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: Flood(answer_retry), local_addr=(source, 0), family=socket.AF_INET)
        floods.append(protocol)
        return protocol

    try:
        yield listener, flood
    finally:
        for protocol in floods:
            protocol.transport.close()
        await listener.aclose()


def held(listener) -> int:
    """The connections aioquic holds state for on this listener."""
    return len(set(listener._server._protocols.values()))


async def probe(listener, source: str):
    """A real client from `source`: it completes its handshake only once the listener has taken every datagram
    sent before (one socket, in order), so the counts after it are the flood's."""
    transport = QuicTransport()
    transport.listen_host = source
    return await transport.connect(listener.address, timeout=10.0)


@pytest.mark.parametrize("answer_retry", [False, True], ids=["ignores-retry", "answers-retry"])
async def test_initials_from_one_address_hold_a_bounded_number_of_connections(answer_retry):
    async with flooded_listener() as (listener, flood):
        attacker = await flood("127.0.0.1", answer_retry)
        for _ in range(300):
            attacker.initial(listener.address)
            await asyncio.sleep(0)  # (the listener shares this loop: let it take each datagram in turn)
        connection = await probe(listener, "127.0.0.2")  # and a peer from elsewhere still gets in
        try:
            # Before: one connection per Initial (300). Now the gate's per-address bound, whether or not the
            # attacker answers Retry packets; the probe's connection aside.
            assert held(listener) <= PER_ADDRESS + 1
            assert listener.gate.held_by("127.0.0.1") <= PER_ADDRESS
            assert attacker.retries >= 1
        finally:
            connection.abort()


async def test_initials_from_many_addresses_hold_at_most_the_total():
    async with flooded_listener() as (listener, flood):
        attackers = [await flood(f"127.0.3.{index + 1}", True) for index in range(24)]
        for _ in range(PER_ADDRESS + 2):
            for attacker in attackers:  # each address answers its Retry packets: each may open PER_ADDRESS
                attacker.initial(listener.address)
                await asyncio.sleep(0)
        await until(lambda: held(listener) >= TOTAL)  # (the Retry answers still going round the loop)
        for _ in range(100):
            await asyncio.sleep(0)
        assert held(listener) == TOTAL  # before: one per Initial, 240
        assert all(listener.gate.held_by(f"127.0.3.{index + 1}") <= PER_ADDRESS for index in range(24))


async def test_connections_that_never_complete_are_dropped_with_their_state():
    async with flooded_listener(open_timeout=0.3) as (listener, flood):
        attacker = await flood("127.0.0.1", True)
        for _ in range(40):
            attacker.initial(listener.address)
            await asyncio.sleep(0)
        connection = await probe(listener, "127.0.0.2")
        connection.abort()
        assert held(listener) >= 1
        await until(lambda: held(listener) == 0 and len(listener.gate) == 0)  # nothing left of them


async def test_a_second_connection_from_an_address_with_one_opening_is_validated_by_retry():
    async with flooded_listener() as (listener, flood):
        attacker = await flood("127.0.0.1", False)
        attacker.initial(listener.address)  # one connection opening from 127.0.0.1, that never goes further
        await until(lambda: len(listener.gate) == 1)
        connection = await probe(listener, "127.0.0.1")  # a real client from the same address: one Retry more
        try:
            assert connection._quic._retry_count == 1
            await until(lambda: len(listener._live) == 1)
        finally:
            connection.abort()
