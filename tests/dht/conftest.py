"""Helpers for DHT integration tests: many real nodes over UDP on 127.0.0.1 (port 0) in one event loop."""

from __future__ import annotations

import asyncio
import random

import pytest

from dht.config import DhtConfig
from dht.identity import NodeIdentity
from dht.node import DhtNode
from dht.storage import StoreLimits

# Short timeouts so dead nodes cost little; limits keyed by IP:port because every node here is 127.0.0.1.
TEST_CONFIG = DhtConfig(
    k=20,
    alpha=3,
    replicas=20,
    rpc_timeout_s=0.5,
    lookup_deadline_s=6.0,
    rate_limit_by="address",
    routing_contacts_per_ip=None,
    request_rate=500.0,
    request_burst=1000.0,
    store_limits=StoreLimits(),
    lan_discovery=False,  # tests of LAN discovery turn it on explicitly, on a private group port
    # ...and on loopback: a test that turns discovery on (tests/dht/lan_peer.py) beacons on lo, never on the
    # machine's real network, whatever address its node binds.
    lan_interface="127.0.0.1",
)


def pytest_configure(config):
    config.addinivalue_line("markers",
                            "slow: DHT test that takes long on a 2-core machine (deselect with -m 'not slow')")


async def start_swarm(count: int, config: DhtConfig = TEST_CONFIG, seed: int = 0) -> list[DhtNode]:
    """Start `count` nodes; each joins through a few random earlier nodes, then all refresh once."""
    rng = random.Random(seed)
    nodes = []
    for _ in range(count):
        node = DhtNode(NodeIdentity.generate(), config)
        await node.start("127.0.0.1", 0, maintenance=False)
        nodes.append(node)
    # Join in waves so early nodes are not all asked at once; every node joins through up to 3 earlier ones.
    for index, node in enumerate(nodes[1:], start=1):
        contacts = [nodes[j].address for j in rng.sample(range(index), min(3, index))]
        await node.bootstrap(contacts)
    # A second self-lookup once everyone is in: early joiners learn about the late ones.
    await asyncio.gather(*(node.find_node(node.node_id) for node in nodes))
    return nodes


async def stop_swarm(nodes: list[DhtNode]) -> None:
    await asyncio.gather(*(node.stop(save=False) for node in nodes))


@pytest.fixture
def identity() -> NodeIdentity:
    return NodeIdentity.generate()


class RawClient(asyncio.DatagramProtocol):
    """A bare UDP socket for sending hand-made datagrams (hostile or not) and reading replies."""

    def __init__(self) -> None:
        self.replies: asyncio.Queue = asyncio.Queue()
        self.transport = None

    @classmethod
    async def open(cls) -> RawClient:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_datagram_endpoint(cls, local_addr=("127.0.0.1", 0))
        return protocol

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data, addr) -> None:
        self.replies.put_nowait(data)

    def send(self, data: bytes, address) -> None:
        self.transport.sendto(data, address)

    async def reply(self, timeout: float = 2.0) -> bytes | None:
        try:
            return await asyncio.wait_for(self.replies.get(), timeout)
        except TimeoutError:
            return None

    def drain(self) -> int:
        count = 0
        while not self.replies.empty():
            self.replies.get_nowait()
            count += 1
        return count

    def close(self) -> None:
        self.transport.close()
