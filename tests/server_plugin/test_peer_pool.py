"""The peers a busy origin lists (`PeerPool`): one entry per address, never the requester's own, the older first,
bounded in entries, in slots and per network, whatever one party asks."""

from __future__ import annotations

import random
import tracemalloc

import pytest

import addresses
from server_plugin.peer_pool import PeerPool

ROOT, OTHER = b"r" * 32, b"o" * 32
ASKER = "13.0.0.1"  # a client that names no port: it is given peers and never listed


def pool(**kwargs) -> PeerPool:
    return PeerPool(rng=random.Random(1), **kwargs)


def hosts(listed) -> set[str]:
    return {host for host, _ in listed}


def test_a_client_gets_those_before_it_then_is_listed():
    peers = pool()
    assert peers.exchange(ROOT, "11.0.0.1", 6881, now=0.0) == []
    assert peers.exchange(ROOT, "11.0.1.2", 7000, now=1.0) == [("11.0.0.1", 6881)]
    assert sorted(peers.exchange(ROOT, "11.0.2.3", None, now=2.0)) == [("11.0.0.1", 6881), ("11.0.1.2", 7000)]
    assert len(peers) == 2  # one that named no port is not listed
    assert peers.exchange(OTHER, "11.0.2.3", 6881, now=3.0) == []  # per file


def test_one_entry_per_address_and_never_ones_own():
    peers = pool()
    for port in range(2000, 2100):  # one host, many ports (or many connections)
        peers.exchange(ROOT, "11.0.0.1", port, now=float(port - 2000))
    assert len(peers) == 1 and peers.slots == 1
    assert peers.exchange(ROOT, ASKER, None, now=100.0) == [("11.0.0.1", 2099)]  # its newest
    assert peers.exchange(ROOT, "11.0.0.1", 2100, now=101.0) == []
    for host in ("2a00:1:2:3::1", "2a00:1:2:3::2"):  # one public IPv6 /64: one subscriber
        peers.exchange(ROOT, host, 6881, now=102.0)
    listed = peers.exchange(ROOT, ASKER, None, now=103.0)
    assert ("2a00:1:2:3::2", 6881) in listed and ("2a00:1:2:3::1", 6881) not in listed
    assert peers.exchange(ROOT, "2a00:1:2:3::3", None, now=104.0) == [("11.0.0.1", 2100)]
    for host in ("::ffff:8.8.8.8", "2002:808:808::1", "2002:808:808:ffff::2", "64:ff9b::808:808"):
        peers.exchange(ROOT, host, 6881, now=105.0)  # spellings of one IPv4 host (6to4: its whole /48)
    assert len(peers) == 3


@pytest.mark.parametrize("host", ["unix-socket", None, "", "fe80::1", "169.254.169.254", "203.0.113.7",
                                  "0.0.0.0", "224.0.0.1", "2001:db8::1"])
def test_what_no_node_may_dial_is_not_listed(host):
    peers = pool()
    assert peers.exchange(ROOT, host, 6881, now=0.0) == []
    assert len(peers) == 0 and peers.slots == 0


def test_the_older_entries_first_when_there_are_enough():
    peers = pool()
    for i in range(40):  # a crowd's first second: these hold the file by now ...
        peers.exchange(ROOT, f"11.{i}.0.1", 6881, now=i / 40)
    for i in range(200):  # ... and these came in the last half second: still fetching
        peers.exchange(ROOT, f"12.{i}.0.1", 6881, now=1.5 + i / 400)
    listed = peers.exchange(ROOT, ASKER, None, now=2.0, want=16)
    assert len(listed) == 16 and all(host.startswith("11.") for host in hosts(listed))
    few = pool()
    for i in range(20):  # fewer old ones than twice what is given: any of them
        few.exchange(ROOT, f"11.{i}.0.1", 6881, now=5.0 if i < 10 else 9.9)
    assert hosts(few.exchange(ROOT, ASKER, None, now=10.0, want=16)) & {f"11.{i}.0.1" for i in range(10, 20)}
    assert few.exchange(ROOT, ASKER, None, now=10.0, want=-1) == []


def test_bounded_and_aged():
    with pytest.raises(ValueError):
        PeerPool(per_file=8, total=4)  # one file alone could then hold more than the total
    peers = pool(per_file=4, total=6, max_age=10.0)
    for i in range(10):
        peers.exchange(ROOT, f"11.{i}.0.1", 6881, now=float(i))
    assert len(peers) == 4  # the ring keeps the last four
    assert sorted(hosts(peers.exchange(ROOT, ASKER, None, now=9.5))) == [f"11.{i}.0.1" for i in range(6, 10)]
    assert sorted(hosts(peers.exchange(ROOT, ASKER, None, now=17.5))) == ["11.8.0.1", "11.9.0.1"]
    assert peers.exchange(ROOT, ASKER, None, now=100.0) == []  # all too old
    for i in range(3):  # another file: 7 slots in all, over the total of 6: the least recent file goes
        peers.exchange(OTHER, f"12.{i}.0.1", 6881, now=100.0)
    assert len(peers) == 3 and peers.exchange(ROOT, ASKER, None, now=100.0) == []
    for i in range(3):
        peers.exchange(ROOT, f"12.{i}.0.1", 6881, now=101.0)  # re-listed: the ring refills
    assert len(peers) == 6 and peers.slots == 6


def test_a_full_ring_keeps_each_address_once():
    peers = pool(per_file=8)
    for step in range(100):  # five addresses claiming again and again: each keeps its one slot
        peers.exchange(ROOT, f"11.{step % 5}.0.1", 7000 + step, now=float(step))
    listed = peers.exchange(ROOT, ASKER, None, now=100.0)
    assert sorted(listed) == [(f"11.{i}.0.1", 7095 + i) for i in range(5)]
    assert len(peers) == 5 and peers.slots == 5


def test_an_entry_asked_again_after_it_expired_is_listed_anew():
    peers = pool(max_age=10.0)
    peers.exchange(ROOT, "11.0.0.1", 6881, now=0.0)
    assert peers.exchange(ROOT, ASKER, None, now=11.0) == []  # too old
    peers.exchange(ROOT, "11.0.0.1", 6882, now=12.0)
    assert peers.exchange(ROOT, ASKER, None, now=14.0) == [("11.0.0.1", 6882)]


# -- attacks ----------------------------------------------------------------------------------------------------


def test_one_address_asking_again_and_again_pushes_nobody_out():
    """Each new claim used to take a new slot, the old one left behind: one address asking 4,096 times (a busy NAT
    address does it honestly) emptied a file's ring, and the few live entries among the left-behind slots were
    seldom found by a pick."""
    peers = pool()
    for i in range(1000):
        peers.exchange(ROOT, f"11.{i >> 8}.{i & 255}.1", 6881, now=i / 1000)
    for i in range(4096):
        peers.exchange(ROOT, "99.0.0.1", 1024 + i % 60000, now=2.0 + i / 10000)
    assert len(peers) == 1001 and peers.slots == 1001
    listed = peers.exchange(ROOT, ASKER, None, now=3.0)
    assert len(listed) == 16 and "99.0.0.1" not in hosts(listed)  # the honest entries are the older


def test_slots_stay_within_the_total_however_entries_are_left_behind():
    """Left-behind slots were not counted against the total: a few addresses re-asking after their entries expired
    grew every file's ring to `per_file` slots while the pool counted one entry each."""
    peers = pool(per_file=64, total=256, max_age=10.0)
    for round_ in range(40):
        for file in range(16):
            for i in range(3):
                peers.exchange(bytes([file]) * 32, f"11.{i}.0.1", 6881, now=round_ * 11.0)
    assert sum(len(entries.times) for entries in peers._files.values()) <= 256
    for entries in peers._files.values():
        assert len(entries.times) <= 3 + 32  # live ones and at most `_COMPACT_FROM` left behind


def test_one_network_fills_at_most_per_network_of_a_file():
    """A free /48 (a tunnel broker's) is 65,536 /64s: one entry each filled every ring; so could a /24."""
    peers = pool(per_network=16)
    for i in range(100):
        peers.exchange(ROOT, f"11.{i}.0.1", 6881, now=0.0)
    for i in range(65536 // 16):
        peers.exchange(ROOT, f"2a00:1:2:{i:x}::1", 6881, now=0.5 + i / 1e5)
        peers.exchange(ROOT, f"99.0.0.{i & 255}", 6881, now=0.5 + i / 1e5)
    assert len(peers) == 100 + 16 + 16
    listed = peers.exchange(ROOT, ASKER, None, now=2.0)
    assert len(listed) == 16
    assert sum(host.startswith(("2a00:", "99.")) for host in hosts(listed)) <= 8  # 32 of 132 entries: 3.9 of 16
    newest = [f"2a00:1:2:{i:x}::1" for i in range(65536 // 16 - 16, 65536 // 16)]
    assert {h for h, _ in peers.exchange(ROOT, ASKER, None, now=2.0, want=200) if h.startswith("2a00:")} <= \
        set(newest)  # the network keeps its newest


def test_a_party_cycling_through_its_network_pushes_out_its_share_and_an_eighth_once():
    """A network at its cap leaves its oldest slot behind at each new ask and takes another: in a full ring that
    pushed out the oldest live entry, so 17 addresses of one /24 emptied a file (found by fuzzing)."""
    tiny = pool(per_file=4, per_network=1, total=4)
    tiny.exchange(ROOT, "11.0.0.1", 2000, now=0.0)
    tiny.exchange(ROOT, "11.1.0.1", 2000, now=0.0)
    for i, host in enumerate(["99.0.0.1", "99.0.0.2"] * 10):
        tiny.exchange(ROOT, host, 2000, now=1.0 + i)
    assert hosts(tiny.exchange(ROOT, ASKER, None, now=30.0)) == {"11.0.0.1", "11.1.0.1", "99.0.0.2"}
    peers = pool(per_file=256)
    for i in range(256):
        peers.exchange(ROOT, f"11.{i}.0.1", 6881, now=i / 1000)
    for i in range(20_000):
        peers.exchange(ROOT, f"99.0.0.{i % 17}", 6881, now=1.0 + i / 1000)
    honest = sum(host.startswith("11.") for host, _ in peers.exchange(ROOT, ASKER, None, now=25.0, want=1000))
    assert honest >= 256 - 16 - 256 // 8  # the 16 entries its network may hold, an eighth of the ring: 209 here


def test_expired_entries_do_not_shield_left_behind_slots():
    """Expired entries counted as live ones: after a crowd expired, a party's asks filled the listable part of
    the ring with left-behind slots and a pick found one or two entries among them (found by fuzzing)."""
    peers = pool(per_file=4096, max_age=10.0)
    for i in range(4000):  # an earlier crowd, expired by now
        peers.exchange(ROOT, f"11.{i >> 8}.{i & 255}.1", 6881, now=i / 1000)
    for i in range(2000):
        if i % 100 == 0:
            peers.exchange(ROOT, f"12.{i // 100}.0.1", 6881, now=20.0 + i / 1000)
        peers.exchange(ROOT, f"99.0.0.{i % 17}", 6881, now=20.0 + i / 1000)
    answers = [peers.exchange(ROOT, ASKER, None, now=30.0) for _ in range(20)]
    assert all(len(listed) == 16 for listed in answers)  # 36 listable entries: 20 honest, 16 of the party's
    assert peers.slots < 200


def test_a_clock_that_steps_back_does_not_break_the_picks():
    peers = pool()
    for i in range(11):
        peers.exchange(ROOT, f"11.{i}.0.1", 6881, now=100.0 + i)
    peers.exchange(ROOT, "12.0.0.1", 6881, now=5.0)  # held at 110: the times stay in order
    assert len(peers.exchange(ROOT, ASKER, None, now=200.0, want=16)) == 12


def test_a_slot_takes_what_the_stated_memory_says():
    """SECURITY.md and `TOTAL`'s comment say 30 MB for a pool full of public clients (each in its own network,
    the most a slot holds): 453 B a slot at 65,536; measured here on a file's 4,096."""
    peers, clients = pool(), [f"11.{i >> 8}.{i & 255}.1" for i in range(4096)]
    for host in clients:  # `addresses`' caches (bounded, 4,096 each) filled first: not the pool's
        addresses.source(host), addresses.kind_of(host)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i, host in enumerate(clients):
        peers.exchange(ROOT, host, 6881, now=i / 1e4)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert peers.slots == 4096
    assert used / 4096 < 480, f"{used / 4096:.0f} B a slot"
