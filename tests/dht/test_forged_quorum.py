"""The forged-quorum attack over real DHT nodes on 127.0.0.x: one party, one address, many keys and many claimed
hosts. Storing nodes accept a manifest record only from the host it names and say where each record came from;
a reader counts a publisher's network only where storing nodes in two networks (or its own store) saw it."""

from __future__ import annotations

import asyncio
import time

import pytest

from addresses import network_prefix
from dht.discovery import DhtDiscovery
from dht.identity import NodeIdentity
from dht.node import DhtNode
from dht.records import KIND_MANIFEST, ManifestRecord, representation_key
from dht.storage import RecordStore
from dht.wire import Contact
from swarm.trust import Vouch, decide, parse_trust

from .conftest import TEST_CONFIG
from .liars import LyingStore

HONEST_HOSTS = [f"127.0.0.{i}" for i in range(31, 39)]
ATTACKER_HOST = "127.0.0.66"
KEY = representation_key("http://example.org/setup.exe", '"v1"')
GOOD_ROOT, EVIL_ROOT = b"G" * 32, b"E" * 32
SIZE, BLOCK = 10_000_000, 1 << 20
# Public addresses in as many networks as the attacker likes to claim: it controls none of them.
CLAIMED = ["198.51.100.7", "203.0.113.9", "192.0.2.33", "100.64.7.1", "2001:db8:77::1", "198.18.0.1"]
# ... and hosts in public networks (AS112, AMT: no route out of the test; nothing is sent to them).
FAR_PUBLIC = ["192.31.196.7", "192.175.48.9", "192.52.193.66", "2620:4f:1::1"]


async def start_node(host: str, bootstrap: list[tuple[str, int]], identity: NodeIdentity | None = None) -> DhtNode:
    node = DhtNode(identity or NodeIdentity.generate(), TEST_CONFIG)
    await node.start(host, 0, maintenance=False)
    if bootstrap:
        await node.bootstrap(bootstrap)
    return node


@pytest.fixture
async def network():
    nodes: list[DhtNode] = []
    try:
        for host in HONEST_HOSTS:
            nodes.append(await start_node(host, [n.address for n in nodes[:3]]))
        await asyncio.gather(*(n.find_node(n.node_id) for n in nodes))
        yield nodes
    finally:
        await asyncio.gather(*(n.stop(save=False) for n in nodes))


async def attackers(network: list[DhtNode], count: int, hosts: tuple[str, ...] = (ATTACKER_HOST,)) -> list[DhtNode]:
    """`count` lying DHT nodes of one party, on `hosts` in turn (one address by default; different ports)."""
    nodes = []
    for index in range(count):
        node = await start_node(hosts[index % len(hosts)], [network[0].address, network[1].address])
        node.store = LyingStore(node.config.store_limits)
        nodes.append(node)
    await asyncio.gather(*(n.find_node(n.node_id) for n in network))  # honest nodes learn about them too
    return nodes


def forged(identity: NodeIdentity, host: str) -> ManifestRecord:
    return ManifestRecord.create(identity, repr_key=KEY, content_root=EVIL_ROOT, size=SIZE, block_size=BLOCK,
                                 validator='"v1"', host=host, now=time.time(), ttl_s=3600)


def vouches(found) -> list[Vouch]:
    return list(found)  # the DHT's claims are the trust rule's vouches


async def test_many_keys_and_claimed_hosts_from_one_address_make_no_quorum(network):
    lying = await attackers(network, 2)
    try:
        for index, host in enumerate(CLAIMED):  # six keys, six claimed networks, one real address
            record = forged(NodeIdentity.generate(), host)
            await lying[index % 2].publish(record)
            # ... and the lying nodes hold every forged record, swearing to each claimed host
            for liar in lying:
                liar.store._insert((KIND_MANIFEST, KEY), record, "self", None)
        # No honest storing node took a single forged record: each came from an address it does not name.
        assert sum(n.store.count(KIND_MANIFEST) for n in network) == 0
        assert sum(n.counters["store_address_mismatch"] for n in network) > 0

        reader = DhtDiscovery(network[-1])
        found = await reader.get_manifests(KEY)
        # (a reply holds about four such records: the reader sees a sample of them, from both liars)
        assert {s.content_root for s in found} == {EVIL_ROOT} and len(found) >= 4
        assert {s.publisher_host for s in found} == {None}  # two liars on one address are one network
        decision = decide(vouches(found), parse_trust("quorum:2"))
        assert decision.accepted is None and decision.reason == "below-quorum" and decision.publishers == 0
    finally:
        await asyncio.gather(*(n.stop(save=False) for n in lying))


async def test_liars_in_two_networks_add_two_to_a_quorum_whatever_they_claim(network):
    """Lying storing nodes in two networks swear to every host they like: before, each claimed host counted (six
    networks from two), so `quorum:3` fell to them; now each attested host spends an attesting network of its own,
    and the two add two, as two publishers of their own would."""
    lying = await attackers(network, 4, hosts=(ATTACKER_HOST, "127.0.0.67"))
    try:
        for host in FAR_PUBLIC:
            record = forged(NodeIdentity.generate(), host)
            for liar in lying:
                liar.store._insert((KIND_MANIFEST, KEY), record, "self", None)
        reader = network[-1]
        reader.store = RecordStore(reader.config.store_limits)  # not a storing node of its own: remote words only
        found = await DhtDiscovery(reader).get_manifests(KEY)
        attested = [s for s in found if s.publisher_host is not None]
        assert len({network_prefix(s.publisher_host) for s in attested}) >= 3  # the lie is believed host by host ...
        assert all(s.attested_by == {ATTACKER_HOST + "/32", "127.0.0.67/32"} for s in attested)
        decision = decide(vouches(found), parse_trust("quorum:3"))
        assert decision.accepted is None and decision.reason == "below-quorum"  # ... but weighs two
        assert decision.publishers == 2
    finally:
        await asyncio.gather(*(n.stop(save=False) for n in lying))


async def test_honest_quorum_stands_beside_the_forgers(network):
    lying = await attackers(network, 2)
    try:
        for publisher in network[:2]:  # two honest nodes fetched the file from the origin
            await publisher.put_manifest(KEY, GOOD_ROOT, SIZE, BLOCK, '"v1"')
        for _index, host in enumerate(CLAIMED):
            record = forged(NodeIdentity.generate(), host)
            for liar in lying:
                liar.store._insert((KIND_MANIFEST, KEY), record, "self", None)
        found = await DhtDiscovery(network[-1]).get_manifests(KEY)
        hosts = {s.publisher_id: s.publisher_host for s in found}
        assert hosts[network[0].node_id] == network[0].address[0]
        assert hosts[network[1].node_id] == network[1].address[0]
        decision = decide(vouches(found), parse_trust("quorum:2"))
        assert decision.accepted is not None and decision.accepted.content_root == GOOD_ROOT
    finally:
        await asyncio.gather(*(n.stop(save=False) for n in lying))


async def test_relayed_records_keep_the_address_they_were_observed_from(network):
    alice = network[0]
    await alice.put_manifest(KEY, GOOD_ROOT, SIZE, BLOCK, '"v1"')
    stored = [n for n in network[1:] if n.store.get(KIND_MANIFEST, KEY, alice.clock())]
    assert len(stored) >= 2
    for node in stored:  # each storing node saw the record come from Alice, not from anyone in between
        assert [observed for _, observed in node.store.get_observed(KIND_MANIFEST, KEY, alice.clock())] == \
            [alice.address[0]]

    # A reader that is not a storing node hears of Alice's address from the storing nodes, relayed to it.
    reader = await start_node("127.0.0.40", [network[2].address])
    try:
        reader.store = RecordStore(reader.config.store_limits)  # it holds nothing itself
        [(record, host, attesters)] = await reader.get_manifests(KEY)
        assert record.publisher_id == alice.node_id and host == alice.address[0]
        assert len(attesters) >= 2  # the storing nodes' networks, as the reader sees them
    finally:
        await reader.stop(save=False)

    # Someone else relaying Alice's own signed record does not move her: refused, and her slot stays hers.
    relay = await start_node(ATTACKER_HOST, [network[1].address])
    try:
        [(record, _, _)] = await network[-1].get_manifests(KEY)
        fresh = await start_node("127.0.0.41", [network[1].address])
        try:
            # a node that does not hold it yet
            relay.routing.add(Contact(fresh.node_id, *fresh.address), relay.monotonic())
            before = fresh.counters["store_address_mismatch"]
            await relay.publish(record)
            assert fresh.counters["store_address_mismatch"] == before + 1
            assert fresh.store.get(KIND_MANIFEST, KEY, fresh.clock()) == []
        finally:
            await fresh.stop(save=False)
    finally:
        await relay.stop(save=False)


async def test_a_record_published_into_a_small_network_counts_once_others_join():
    """Published when only one other node stores it, a manifest is attested by nobody but that one; once more
    nodes have joined, the publisher's next maintenance round hands it to them, and readers count it."""
    alice = await start_node(HONEST_HOSTS[0], [])
    nodes = [alice, await start_node(HONEST_HOSTS[1], [alice.address])]
    try:
        await alice.put_manifest(KEY, GOOD_ROOT, SIZE, BLOCK, '"v1"')
        for host in HONEST_HOSTS[2:6]:
            nodes.append(await start_node(host, [alice.address]))
        reader = nodes[-1]
        [(_, host, _)] = await reader.get_manifests(KEY)
        assert host is None  # one storing node saw it: one network
        await alice.maintain()
        assert alice.counters["republished"] == 1
        [(_, host, _)] = await reader.get_manifests(KEY)
        assert host == alice.address[0]
    finally:
        await asyncio.gather(*(n.stop(save=False) for n in nodes))
