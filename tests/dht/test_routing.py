"""Routing facade over kademlia's table: exact closest(), cache invalidation, eviction pings, stale contacts."""

from __future__ import annotations

import asyncio
import random

import pytest
from kademlia.node import Node as KadNode
from kademlia.routing import KBucket

from dht.routing import GOOD_CONTACT_SECONDS, RoutingTableFacade, _shared_prefix_bits
from dht.wire import Contact


async def _alive(contact: Contact) -> bool:
    return True


def brute_force(contacts, target, k, exclude=None):
    position = int.from_bytes(target, "big")
    pool = [c for c in contacts if exclude is None or c.address != exclude]
    return sorted(pool, key=lambda c: int.from_bytes(c.node_id, "big") ^ position)[:k]


async def test_closest_matches_brute_force_through_adds_and_removes():
    rng = random.Random(7)
    own = rng.randbytes(20)
    table = RoutingTableFacade(own, k=8, ping=_alive, spawn=asyncio.ensure_future)
    for step in range(600):
        contact = Contact(rng.randbytes(20), "127.0.0.1", 1000 + step)
        table.add(contact, 0.0)
        if step % 7 == 0 and len(table):
            table.remove(rng.choice(table.contacts()))
        if step % 5 == 0 and len(table):  # often: adds between checks extend the cached list
            target = rng.randbytes(20)
            members = table.contacts()
            assert table.closest(target, 8) == brute_force(members, target, 8)
            excluded = members[0].address
            assert table.closest(target, 8, exclude=excluded) == brute_force(members, target, 8, excluded)
    await asyncio.sleep(0)  # let eviction pings scheduled by full buckets run (they all answer)


async def test_closest_stays_exact_for_targets_asked_again():
    # The same few targets asked between adds and removes, as in a flash crowd: the kept answers must follow
    # every change, including tables smaller than k.
    rng = random.Random(11)
    table = RoutingTableFacade(rng.randbytes(20), k=8, ping=_alive, spawn=asyncio.ensure_future)
    targets = [rng.randbytes(20) for _ in range(3)]
    for step in range(400):
        table.add(Contact(rng.randbytes(20), "127.0.0.1", 2000 + step), 0.0)
        if step % 11 == 10:
            table.remove(rng.choice(table.contacts()))
        if step % 13 == 12:  # a known contact at a new address
            moved = rng.choice(table.contacts())
            table.add(Contact(moved.node_id, "127.0.0.2", moved.port), 0.0)
        members = table.contacts()
        for target in targets:
            assert table.closest(target, 8) == brute_force(members, target, 8)
            assert table.closest(target, 3) == brute_force(members, target, 3)
            excluded = rng.choice(members).address
            assert table.closest(target, 8, exclude=excluded) == brute_force(members, target, 8, excluded)
    await asyncio.sleep(0)


async def test_address_change_is_seen():
    table = RoutingTableFacade(b"\x00" * 20, k=8, ping=_alive, spawn=asyncio.ensure_future)
    table.add(Contact(b"\x01" * 20, "127.0.0.1", 1), 0.0)
    assert table.closest(b"\x01" * 20)[0].port == 1
    table.add(Contact(b"\x01" * 20, "127.0.0.1", 2), 0.0)
    assert table.closest(b"\x01" * 20)[0].port == 2
    assert len(table) == 1


async def test_self_and_bad_ids_are_not_added():
    table = RoutingTableFacade(b"\x00" * 20, k=8, ping=_alive, spawn=asyncio.ensure_future)
    table.add(Contact(b"\x00" * 20, "127.0.0.1", 1), 0.0)
    table.add(Contact(b"\x01" * 5, "127.0.0.1", 1), 0.0)
    assert len(table) == 0


def _full_bucket(ping, head_heard_at: float) -> tuple[RoutingTableFacade, Contact]:
    # kademlia splits a full bucket only if it holds our own id or its nodes' shared prefix is not a multiple
    # of 5 bits. Own id 0xff..., two contacts sharing exactly 5 leading zero bits fill the k=2 bucket.
    table = RoutingTableFacade(b"\xff" * 20, k=2, ping=ping, spawn=asyncio.ensure_future)
    head = Contact(b"\x00" + b"\x00" * 19, "127.0.0.1", 1)
    table.add(head, head_heard_at)
    table.add(Contact(b"\x04" + b"\x00" * 19, "127.0.0.1", 2), head_heard_at)
    return table, head


NEWCOMER = Contact(b"\x06" + b"\x00" * 19, "127.0.0.1", 3)


@pytest.mark.parametrize("silent_for, pinged", [
    (GOOD_CONTACT_SECONDS + 1, True),   # a head silent for long is asked whether it lives
    (GOOD_CONTACT_SECONDS, True),
    (GOOD_CONTACT_SECONDS - 1, False),  # a good head keeps its place without a ping
    (0.0, False),
])
async def test_a_full_bucket_pings_its_head_only_when_it_fell_silent(silent_for, pinged):
    asked = []

    async def dead(contact: Contact) -> bool:
        asked.append(contact)
        return False

    table, head = _full_bucket(dead, 100.0)
    table.add(NEWCOMER, 100.0 + silent_for)
    for _ in range(3):
        await asyncio.sleep(0)  # let a scheduled eviction ping (an immediate coroutine) run
    assert asked == ([head] if pinged else [])
    assert (head not in table.contacts()) is pinged  # it did not answer: the newcomer took its place
    assert (NEWCOMER in table.contacts()) is pinged


async def test_one_ping_at_a_time_per_head():
    answer = asyncio.get_running_loop().create_future()
    asked = []

    async def slow(contact: Contact) -> bool:
        asked.append(contact)
        return await answer

    table, head = _full_bucket(slow, 0.0)
    for port in range(3, 13):  # a burst of strangers while the head's ping is out
        table.add(Contact(bytes([0x06, port]) + b"\x00" * 18, "127.0.0.1", port), GOOD_CONTACT_SECONDS + port)
        await asyncio.sleep(0)
    assert asked == [head]
    answer.set_result(True)
    for _ in range(3):
        await asyncio.sleep(0)
    assert head in table.contacts()  # alive: it stays; the strangers wait in the replacement cache
    table.add(Contact(b"\x07" + b"\x00" * 19, "127.0.0.1", 99), 2 * GOOD_CONTACT_SECONDS)
    await asyncio.sleep(0)
    assert len(asked) == 2  # the ping was over: a later stranger may ask again


STRANGER = Contact(b"\x80" + b"\x00" * 19, "127.0.0.1", 9)  # a lookup's candidate, never in the table


@pytest.mark.parametrize("replacement, answered, failures, evicted", [
    (True, 30, 1, False),   # one lost datagram costs nothing
    (True, 30, 2, True),    # the second in a row: the waiting contact takes its place
    (True, 0, 2, True),     # a replacement waits: out, however badly we are heard ourselves
    (False, 30, 2, True),   # no replacement, but others answer us: it is dead, not us
    (False, 0, 2, False),   # nobody answers us: our own link is full or down, it may be fine
    (False, 0, 6, False),
    (False, 5, 2, False),   # at the second failure 5 of our last 11 requests were answered: not heard enough
    (False, 6, 2, True),    # 6 of 12: heard
])
async def test_an_unanswering_contact_leaves_only_when_replaced_or_when_we_are_heard(
        replacement, answered, failures, evicted):
    table, head = _full_bucket(_alive, 0.0)
    if replacement:
        table.add(NEWCOMER, 1.0)  # the bucket is full and its head good: the newcomer waits
    for _ in range(answered):
        table.answered()
    for _ in range(4):
        assert table.unanswered(STRANGER) is False  # not ours to judge, but a request of ours went unanswered
    results = [table.unanswered(head) for _ in range(failures)]
    assert (head not in table.contacts()) is evicted
    assert results == ([False] * (failures - 1) + [True] if evicted else [False] * failures)
    assert (NEWCOMER in table.contacts()) is (evicted and replacement)


async def test_a_contact_that_speaks_is_not_stale_any_more():
    table, head = _full_bucket(_alive, 0.0)
    for _ in range(30):
        table.answered()
    assert table.unanswered(head) is False
    table.add(head, 5.0)  # any message from it
    assert table.unanswered(head) is False  # the count started again
    assert head in table.contacts()
    assert table.unanswered(head) is True


@pytest.mark.parametrize("seed", range(20))
def test_shared_prefix_matches_kademlias_depth(seed):
    rng = random.Random(seed)
    prefix = rng.randrange(0, 161)
    base = rng.getrandbits(160)
    nodes = []
    for _ in range(rng.randrange(1, 9)):
        low = rng.getrandbits(160 - prefix) if prefix < 160 else 0
        value = (base >> (160 - prefix) << (160 - prefix) if prefix else 0) | low
        nodes.append(KadNode(value.to_bytes(20, "big")))
    bucket = KBucket(0, 2 ** 160, 20)
    for node in nodes:
        bucket.add_node(node)
    assert _shared_prefix_bits(bucket.nodes.values()) == bucket.depth()


async def test_lookups_refresh_their_bucket():
    table = RoutingTableFacade(b"\x00" * 20, k=8, ping=_alive, spawn=asyncio.ensure_future)
    for bucket in table._table.buckets:
        bucket.last_updated -= 7200
    assert len(table.lonely_bucket_ranges()) == 1
    table.touch(b"\x42" * 20)
    assert table.lonely_bucket_ranges() == []


async def test_contacts_per_ip_are_capped():
    table = RoutingTableFacade(b"\x00" * 20, k=20, ping=_alive, spawn=asyncio.ensure_future, max_per_ip=3)
    rng = random.Random(3)
    for port in range(1, 11):
        table.add(Contact(rng.randbytes(20), "198.51.100.1", port), 0.0)
    table.add(Contact(rng.randbytes(20), "198.51.100.2", 1), 0.0)
    hosts = [c.host for c in table.contacts()]
    assert hosts.count("198.51.100.1") == 3 and hosts.count("198.51.100.2") == 1
    assert table.refused_per_ip == 7
    known = [c for c in table.contacts() if c.host == "198.51.100.1"][0]
    table.add(known, 0.0)  # a known contact is still refreshed
    table.remove(known)
    table.add(Contact(rng.randbytes(20), "198.51.100.1", 99), 0.0)  # room again after a removal
    assert [c.host for c in table.contacts()].count("198.51.100.1") == 3
