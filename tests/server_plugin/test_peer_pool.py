"""The peers a busy origin lists (`PeerPool`): one entry per address, never the requester's own, the older first,
bounded."""

from __future__ import annotations

import random

from server_plugin.peer_pool import PeerPool

ROOT, OTHER = b"r" * 32, b"o" * 32


def pool(**kwargs) -> PeerPool:
    return PeerPool(rng=random.Random(1), **kwargs)


def test_a_client_gets_those_before_it_then_is_listed():
    peers = pool()
    assert peers.exchange(ROOT, "203.0.113.1", 6881, now=0.0) == []
    assert peers.exchange(ROOT, "203.0.113.2", 7000, now=1.0) == [("203.0.113.1", 6881)]
    assert sorted(peers.exchange(ROOT, "203.0.113.3", None, now=2.0)) == [("203.0.113.1", 6881),
                                                                           ("203.0.113.2", 7000)]
    assert len(peers) == 2  # one that named no port is not listed
    assert peers.exchange(OTHER, "203.0.113.3", 6881, now=3.0) == []  # per file


def test_one_entry_per_address_and_never_ones_own():
    peers = pool()
    for port in range(2000, 2100):  # one host, many ports (or many connections)
        peers.exchange(ROOT, "203.0.113.1", port, now=float(port - 2000))
    assert len(peers) == 1
    assert peers.exchange(ROOT, "203.0.113.9", None, now=100.0) == [("203.0.113.1", 2099)]  # its newest
    assert peers.exchange(ROOT, "203.0.113.1", 2100, now=101.0) == []
    for host in ("2a00:1:2:3::1", "2a00:1:2:3::2"):  # one public IPv6 /64: one subscriber
        peers.exchange(ROOT, host, 6881, now=102.0)
    listed = peers.exchange(ROOT, "203.0.113.9", None, now=103.0)
    assert ("2a00:1:2:3::2", 6881) in listed and ("2a00:1:2:3::1", 6881) not in listed
    assert peers.exchange(ROOT, "2a00:1:2:3::3", None, now=104.0) == [("203.0.113.1", 2100)]


def test_not_an_address_is_not_listed():
    peers = pool()
    assert peers.exchange(ROOT, "unix-socket", 6881, now=0.0) == []
    assert peers.exchange(ROOT, None, 6881, now=0.0) == []
    assert len(peers) == 0


def test_the_older_entries_first_when_there_are_enough():
    peers = pool()
    for i in range(40):  # a crowd's first second: these hold the file by now ...
        peers.exchange(ROOT, f"198.51.100.{i}", 6881, now=i / 40)
    for i in range(200):  # ... and these came in the last half second: still fetching
        peers.exchange(ROOT, f"203.0.113.{i}", 6881, now=1.5 + i / 400)
    listed = peers.exchange(ROOT, "192.0.2.1", None, now=2.0, want=16)
    assert len(listed) == 16 and all(host.startswith("198.51.100.") for host, _ in listed)
    few = pool()
    for i in range(20):  # fewer old ones than twice what is given: any of them
        few.exchange(ROOT, f"203.0.113.{i}", 6881, now=5.0 if i < 10 else 9.9)
    assert {host for host, _ in few.exchange(ROOT, "192.0.2.1", None, now=10.0, want=16)} & \
        {f"203.0.113.{i}" for i in range(10, 20)}


def test_bounded_and_aged():
    peers = pool(per_file=4, total=6, max_age=10.0)
    for i in range(10):
        peers.exchange(ROOT, f"203.0.113.{i}", 6881, now=float(i))
    assert len(peers) == 4  # the ring keeps the last four
    assert sorted(h for h, _ in peers.exchange(ROOT, "198.51.100.1", None, now=9.5)) == \
        ["203.0.113.6", "203.0.113.7", "203.0.113.8", "203.0.113.9"]
    assert sorted(h for h, _ in peers.exchange(ROOT, "198.51.100.1", None, now=17.5)) == ["203.0.113.8",
                                                                                          "203.0.113.9"]
    assert peers.exchange(ROOT, "198.51.100.1", None, now=100.0) == []  # all too old
    for i in range(3):  # another file: 7 entries in all, over the total of 6: the least recent file goes
        peers.exchange(OTHER, f"198.51.100.{i}", 6881, now=100.0)
    assert len(peers) == 3 and peers.exchange(ROOT, "192.0.2.1", None, now=100.0) == []
    for i in range(3):
        peers.exchange(ROOT, f"198.51.100.{i}", 6881, now=101.0)  # re-listed: the ring refills
    assert len(peers) == 6


def test_a_full_ring_keeps_each_address_once():
    peers = pool(per_file=8)
    for step in range(100):  # five addresses claiming again and again: stale slots are skipped and reused
        peers.exchange(ROOT, f"203.0.113.{step % 5}", 7000 + step, now=float(step))
    listed = peers.exchange(ROOT, "192.0.2.1", None, now=100.0)
    assert sorted(listed) == [(f"203.0.113.{i}", 7095 + i) for i in range(5)]
    assert len(peers) == 5
