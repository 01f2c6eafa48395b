"""Routing facade over kademlia's table: exact closest(), cache invalidation, eviction callback."""

from __future__ import annotations

import asyncio
import random

from dht.routing import RoutingTableFacade
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
    table = RoutingTableFacade(own, k=8, ping=_alive)
    for step in range(600):
        contact = Contact(rng.randbytes(20), "127.0.0.1", 1000 + step)
        table.add(contact)
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
    table = RoutingTableFacade(rng.randbytes(20), k=8, ping=_alive)
    targets = [rng.randbytes(20) for _ in range(3)]
    for step in range(400):
        table.add(Contact(rng.randbytes(20), "127.0.0.1", 2000 + step))
        if step % 11 == 10:
            table.remove(rng.choice(table.contacts()))
        if step % 13 == 12:  # a known contact at a new address
            moved = rng.choice(table.contacts())
            table.add(Contact(moved.node_id, "127.0.0.2", moved.port))
        members = table.contacts()
        for target in targets:
            assert table.closest(target, 8) == brute_force(members, target, 8)
            assert table.closest(target, 3) == brute_force(members, target, 3)
            excluded = rng.choice(members).address
            assert table.closest(target, 8, exclude=excluded) == brute_force(members, target, 8, excluded)
    await asyncio.sleep(0)


async def test_address_change_is_seen():
    table = RoutingTableFacade(b"\x00" * 20, k=8, ping=_alive)
    table.add(Contact(b"\x01" * 20, "127.0.0.1", 1))
    assert table.closest(b"\x01" * 20)[0].port == 1
    table.add(Contact(b"\x01" * 20, "127.0.0.1", 2))
    assert table.closest(b"\x01" * 20)[0].port == 2
    assert len(table) == 1


async def test_self_and_bad_ids_are_not_added():
    table = RoutingTableFacade(b"\x00" * 20, k=8, ping=_alive)
    table.add(Contact(b"\x00" * 20, "127.0.0.1", 1))
    table.add(Contact(b"\x01" * 5, "127.0.0.1", 1))
    assert len(table) == 0


async def test_dead_bucket_head_is_evicted():
    async def dead(contact: Contact) -> bool:
        return False

    # kademlia splits a full bucket only if it holds our own id or its nodes' shared prefix is not a multiple
    # of 5 bits. Own id 0xff..., contacts sharing exactly 5 leading zero bits: the third one triggers a ping.
    table = RoutingTableFacade(b"\xff" * 20, k=2, ping=dead)
    first = Contact(b"\x00" + b"\x00" * 19, "127.0.0.1", 1)
    table.add(first)
    table.add(Contact(b"\x04" + b"\x00" * 19, "127.0.0.1", 2))
    table.add(Contact(b"\x06" + b"\x00" * 19, "127.0.0.1", 3))  # bucket full: head gets pinged
    for _ in range(3):
        await asyncio.sleep(0)  # let the scheduled eviction ping (an immediate coroutine) run
    assert first not in table.contacts()
    assert Contact(b"\x06" + b"\x00" * 19, "127.0.0.1", 3) in table.contacts()


async def test_lookups_refresh_their_bucket():
    table = RoutingTableFacade(b"\x00" * 20, k=8, ping=_alive)
    for bucket in table._table.buckets:
        bucket.last_updated -= 7200
    assert len(table.lonely_bucket_ranges()) == 1
    table.touch(b"\x42" * 20)
    assert table.lonely_bucket_ranges() == []


async def test_contacts_per_ip_are_capped():
    table = RoutingTableFacade(b"\x00" * 20, k=20, ping=_alive, max_per_ip=3)
    rng = random.Random(3)
    for port in range(1, 11):
        table.add(Contact(rng.randbytes(20), "198.51.100.1", port))
    table.add(Contact(rng.randbytes(20), "198.51.100.2", 1))
    hosts = [c.host for c in table.contacts()]
    assert hosts.count("198.51.100.1") == 3 and hosts.count("198.51.100.2") == 1
    assert table.refused_per_ip == 7
    known = [c for c in table.contacts() if c.host == "198.51.100.1"][0]
    table.add(known)  # a known contact is still refreshed
    table.remove(known)
    table.add(Contact(rng.randbytes(20), "198.51.100.1", 99))  # room again after a removal
    assert [c.host for c in table.contacts()].count("198.51.100.1") == 3
