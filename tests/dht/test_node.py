"""DhtNode behaviour not covered by the swarm tests: IPv6, hostnames, maintenance, expiry, lifecycle errors."""

from __future__ import annotations

import asyncio
import os
import random
import socket
from dataclasses import replace

import pytest

from dht.bootstrap import REJOIN_SECONDS
from dht.errors import InvalidArgument, NotRunning
from dht.identity import NodeIdentity
from dht.node import _READ_SLACK, MAINTENANCE_JITTER, DhtNode, jittered
from dht.records import KIND_PROVIDER
from dht.storage import StoreLimits

from .conftest import TEST_CONFIG, start_swarm, stop_swarm
from .test_network import found_by


async def test_ipv6_loopback():
    nodes = []
    try:
        for _ in range(4):
            node = DhtNode(NodeIdentity.generate(), TEST_CONFIG)
            await node.start("::1", 0, maintenance=False)
            nodes.append(node)
        for node in nodes[1:]:
            assert await node.bootstrap([nodes[0].address]) >= 1
        root = os.urandom(32)
        assert await nodes[1].announce(root, "::1", 8443) >= 2
        assert await found_by(nodes[3], root, 8443)
    finally:
        await stop_swarm(nodes)


async def test_bootstrap_accepts_hostnames(monkeypatch):
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo

    async def stub(host, *args, **kwargs):  # a stub resolver: no DNS query leaves this machine
        if host != "localhost":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return await real(host, *args, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", stub)
    nodes = await start_swarm(3)
    newcomer = DhtNode(NodeIdentity.generate(), TEST_CONFIG)
    await newcomer.start("127.0.0.1", 0, maintenance=False)
    try:
        assert await newcomer.bootstrap([("localhost", nodes[0].address[1])]) >= 1
        assert await newcomer.bootstrap([("no-such-host.invalid", 1)]) >= 1  # unresolvable: skipped, no raise
    finally:
        await newcomer.stop()
        await stop_swarm(nodes)


@pytest.mark.parametrize("by", ["lookup", "maintenance"])
async def test_a_node_left_alone_joins_again_when_its_bootstrap_node_answers(by):
    # Its bootstrap node was down when it started: it had no contact, answered every lookup with nothing, and
    # nobody would ever have contacted it. It asks again, at most every REJOIN_SECONDS, before a lookup or in
    # maintenance.
    nodes = await start_swarm(4)
    entry, clock = nodes[0], [1000.0]
    host, port = entry.address
    await entry.stop()
    newcomer = DhtNode(NodeIdentity.generate(), TEST_CONFIG, monotonic=lambda: clock[0])
    await newcomer.start("127.0.0.1", 0, maintenance=False)
    try:
        assert await newcomer.bootstrap([(host, port)]) == 0
        await entry.start(host, port, maintenance=False)  # back, at the same address
        target = os.urandom(20)
        assert await newcomer.find_node(target) == []  # too soon to ask again
        clock[0] += REJOIN_SECONDS
        if by == "maintenance":
            await newcomer.maintain()
            assert len(newcomer.routing) >= 2
        found = {c.node_id for c in await newcomer.find_node(target)}
        assert entry.node_id in found and len(found) >= 3
    finally:
        await newcomer.stop()
        await stop_swarm(nodes)


def test_maintenance_rounds_drift_apart():
    # Nodes started in the same second must not keep refreshing in the same second: every wait differs,
    # within the interval give or take the jitter.
    rng = random.Random(7)
    waits = [jittered(30.0, rng) for _ in range(200)]
    assert all(30.0 * (1 - MAINTENANCE_JITTER) <= w <= 30.0 * (1 + MAINTENANCE_JITTER) for w in waits)
    assert len(set(waits)) == len(waits)
    assert min(waits) < 25.0 and max(waits) > 35.0  # spread over the range, not bunched at 30


async def test_maintenance_loop_survives_errors():
    node = DhtNode(NodeIdentity.generate(), replace(TEST_CONFIG, maintenance_interval_s=0.01))
    second_round = asyncio.Event()
    calls = []

    async def flaky_maintain():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient")
        second_round.set()

    node.maintain = flaky_maintain  # type: ignore[method-assign]
    await node.start("127.0.0.1", 0)
    try:
        await asyncio.wait_for(second_round.wait(), 5)
        assert node.counters["maintenance_errors"] == 1
    finally:
        await node.stop()


async def test_records_expire_in_maintenance():
    wall = [1_000_000.0]
    nodes = await start_swarm(4)
    publisher = DhtNode(NodeIdentity.generate(), TEST_CONFIG, clock=lambda: wall[0])
    storer = DhtNode(NodeIdentity.generate(), TEST_CONFIG, clock=lambda: wall[0])
    for node in (publisher, storer):
        await node.start("127.0.0.1", 0, maintenance=False)
        await node.bootstrap([nodes[0].address])
    try:
        root = os.urandom(32)
        await publisher.announce(root, "127.0.0.1", 1, ttl_s=60)
        assert storer.store.get(KIND_PROVIDER, root, wall[0])
        wall[0] += 61
        await storer.maintain()
        assert storer.store.count(KIND_PROVIDER) == 0
    finally:
        await publisher.stop()
        await storer.stop()
        await stop_swarm(nodes)


async def test_lifecycle_and_argument_errors():
    node = DhtNode(NodeIdentity.generate(), TEST_CONFIG)
    with pytest.raises(NotRunning):
        _ = node.address
    with pytest.raises(NotRunning):
        await node.ping(("127.0.0.1", 9))
    with pytest.raises(InvalidArgument):
        DhtNode(NodeIdentity.generate(), replace(TEST_CONFIG, rate_limit_by="port"))
    await node.start("127.0.0.1", 0, maintenance=False)
    try:
        with pytest.raises(InvalidArgument):
            await node.find_node(b"short")
        with pytest.raises(InvalidArgument):
            [r async for r in node.find_providers(b"short")]
        with pytest.raises(InvalidArgument):
            await node.announce(os.urandom(32), "not-an-ip", 1)
        assert await node.announce(os.urandom(32), "127.0.0.1", 1) == 1  # alone: stored locally only
    finally:
        await node.stop()
    assert not node.running
    assert node.stats()["address"] is None


async def test_unanswered_contacts_leave_the_routing_table():
    nodes = await start_swarm(6)
    try:
        victim = nodes[5]
        await stop_swarm([victim])
        observer = nodes[0]
        assert victim.node_id in {c.node_id for c in observer.routing.contacts()}
        for _ in range(3):  # lookups that would ask the dead node
            await observer.find_node(victim.node_id)
        assert victim.node_id not in {c.node_id for c in observer.routing.contacts()}
    finally:
        await stop_swarm(nodes)


class Read:
    """The requests one read sent: (to whom, how many of its requests had been answered when it was sent)."""

    def __init__(self) -> None:
        self.sent: list[tuple[tuple[str, int], int]] = []
        self.replies = 0

    def replied(self, _future) -> None:
        self.replies += 1


async def test_a_second_read_of_a_key_asks_its_closest_nodes_again_in_one_round():
    """A download waiting for vouches reads one key every half second: after the first walk, each read asks that
    walk's k closest at once, before any of them answered (one round trip, where a walk asks alpha at a time and
    waits), and still finds a record published in between."""
    config = replace(TEST_CONFIG, k=8, replicas=8)
    nodes = await start_swarm(40, config=config)
    try:
        reader, root = nodes[0], os.urandom(32)
        await nodes[1].announce(root, "127.0.0.1", 1, ttl_s=60)
        read = Read()
        send = reader._protocol.request

        def counted(address, message, timeout):
            current = read  # a late answer (or cancellation) of an earlier read counts there
            current.sent.append((address, current.replies))
            future = send(address, message, timeout)
            future.add_done_callback(current.replied)
            return future
        reader._protocol.request = counted
        assert {r.port async for r in reader.find_providers(root)} == {1}
        first_walk = {address for address, _ in read.sent}
        read = Read()
        await nodes[2].announce(root, "127.0.0.1", 2, ttl_s=60)  # published between two reads
        assert {r.port async for r in reader.find_providers(root)} == {1, 2}
        first_round = read.sent[:config.k]
        assert len(first_round) == config.k
        # the first walk's closest (all but the stragglers it did not wait for), and our own nearest contacts
        assert len({address for address, _ in first_round} & first_walk) >= config.k - _READ_SLACK
        assert all(before == 0 for _, before in first_round), read.sent  # all asked at once
        # (a nearer node that the first walk missed, named in a reply, is asked after that reply)
    finally:
        await stop_swarm(nodes)


async def test_external_host_from_ping_replies():
    from dht.discovery import DhtDiscovery

    nodes = await start_swarm(4)
    lonely = DhtNode(NodeIdentity.generate(), TEST_CONFIG)
    await lonely.start("0.0.0.0", 0, maintenance=False)
    try:
        assert lonely.external_host() is None
        with pytest.raises(InvalidArgument, match="public address"):
            await DhtDiscovery(lonely).announce(os.urandom(32), ("0.0.0.0", 1))
        await lonely.bootstrap([nodes[0].address, nodes[1].address])
        assert lonely.external_host() == "127.0.0.1"
        assert lonely.stats()["external_host"] == "127.0.0.1"
        # one liar among several answering nodes cannot move the answer
        lonely._observed_by[b"\x01" * 20] = "203.0.113.66"
        assert lonely.external_host() == "127.0.0.1"
    finally:
        await lonely.stop()
        await stop_swarm(nodes)


async def test_a_record_refused_by_full_storers_is_not_republished_as_thin():
    """A hot key's slots are full at every storer: the table growing would not change that, so the announcement
    is not thin (it was republished every maintenance round before), while one that reached too few is."""
    config = replace(TEST_CONFIG, replicas=3, store_limits=StoreLimits(providers_per_key=1))
    nodes = await start_swarm(6, config=config)
    try:
        root = os.urandom(32)
        assert await nodes[0].announce(root, "127.0.0.1", 1000) >= 3
        assert await nodes[1].announce(root, "127.0.0.1", 1001) <= 1  # the key is full at the storers
        assert nodes[1].announcements.grown(10_000) == []  # not thin: the full storers answered
        await stop_swarm([nodes[0], *nodes[2:]])  # everyone else gone: the next one reaches itself at most
        other = os.urandom(32)
        await nodes[1].announce(other, "127.0.0.1", 1001)
        assert [e.key for e in nodes[1].announcements.grown(10_000)] == [other]
        assert (KIND_PROVIDER, root) in nodes[1].announcements
    finally:
        await stop_swarm([nodes[1]])
