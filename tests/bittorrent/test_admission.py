"""The BitTorrent listener's admission (`bittorrent.admission`): which sources go over a bound, for how long."""

from __future__ import annotations

import pytest

from bittorrent.admission import BLOCK_FOR, MAX_BLOCK, Admission


def fill(admission: Admission, host: str, count: int, *, start: int = 0, now: float = 0.0, handshake: bool = False):
    """`count` connections from `host`; the blocks their arrivals made."""
    made = []
    for port in range(start, start + count):
        if (block := admission.arrived((host, port), host, now)) is not None:
            made.append(block)
        if handshake:
            admission.handshaken((host, port))
    return made


@pytest.mark.parametrize(("host", "opening", "handshaken", "source", "first", "last"), [
    # Before their handshake, 4 per address: the fifth blocks the address alone.
    ("93.184.216.7", 5, 0, "93.184.216.7", "93.184.216.7", "93.184.216.7"),
    ("127.0.3.1", 5, 0, "127.0.3.1", "127.0.3.1", "127.0.3.1"),
    # Handshaken ones count to 16 per address.
    ("93.184.216.7", 0, 17, "93.184.216.7", "93.184.216.7", "93.184.216.7"),
    # A public IPv6 address counts as its /64 (one subscriber): the block covers all of it.
    ("2a00:1450:1:2::5", 5, 0, "2a00:1450:1:2::/64", "2a00:1450:1:2::", "2a00:1450:1:2:ffff:ffff:ffff:ffff"),
    # An IPv4-mapped address is the IPv4 one.
    ("::ffff:93.184.216.7", 5, 0, "93.184.216.7", "93.184.216.7", "93.184.216.7"),
])
def test_an_address_over_its_bound_is_blocked(host, opening, handshaken, source, first, last):
    admission = Admission(200)
    made = fill(admission, host, handshaken, handshake=True) + fill(admission, host, opening, start=1000)
    assert [(b.source, b.first, b.last) for b in made] == [(source, first, last)]
    assert made[0].until == BLOCK_FOR
    assert admission.blocked(host, 1.0) == made[0]


@pytest.mark.parametrize(("host", "opening", "handshaken"), [
    ("93.184.216.7", 4, 0), ("93.184.216.7", 0, 16), ("93.184.216.7", 4, 12), ("127.0.0.1", 4, 12),
])
def test_an_address_within_its_bounds_is_not(host, opening, handshaken):
    admission = Admission(200)
    assert fill(admission, host, handshaken, handshake=True) + fill(admission, host, opening, start=1000) == []
    assert admission.blocked(host, 0.0) is None


def test_a_network_of_many_addresses_is_blocked_as_one():
    admission = Admission(200)
    made = []
    for n in range(1, 40):  # 39 addresses of one /24, one connection each: under every address bound
        made += fill(admission, f"81.2.69.{n}", 1, handshake=n <= 20)
    # 16 opening from the /24 (addresses 21..36) are allowed, the 17th blocks the network.
    assert [(b.source, b.first, b.last) for b in made] == [("81.2.69.0/24", "81.2.69.0", "81.2.69.255")]
    assert admission.blocked("81.2.69.200", 0.0) is not None  # every address of it
    assert admission.blocked("81.2.70.1", 0.0) is None  # not the next network


def test_handshaken_connections_of_one_network_are_bounded_too():
    admission = Admission(200)
    made = []
    for n in range(1, 34):
        made += fill(admission, f"81.2.69.{n}", 1, handshake=True)
    assert [b.source for b in made] == ["81.2.69.0/24"]  # the 33rd


def test_on_loopback_or_a_lan_each_address_is_its_own_network():
    admission = Admission(200)
    for n in range(1, 100):  # 99 addresses of 127.0.3.x: 99 networks
        assert fill(admission, f"127.0.3.{n}", 1) == []
    for n in range(1, 60):
        assert fill(admission, f"192.168.1.{n}", 1, handshake=True) == []


def test_a_full_session_makes_the_network_holding_most_give_way():
    admission = Admission(100)  # full at 90
    for n in range(1, 11):  # ten networks of 8 connections (their share): nothing to take from them
        for a in range(1, 9):
            assert fill(admission, f"81.3.{n}.{a}", 1, handshake=True) == []
    made = []
    for a in range(1, 11):  # one network holding 10: the session is full at its 10th, and it holds more than 8
        made += fill(admission, f"93.184.216.{a}", 1, handshake=True)
    assert [b.source for b in made] == ["93.184.216.0/24"]
    assert "the session is full" in made[0].reason


def test_a_full_session_of_fair_shares_blocks_nobody():
    admission = Admission(100)
    for n in range(1, 26):  # 25 networks of 4
        for a in range(1, 5):
            assert fill(admission, f"81.3.{n}.{a}", 1, handshake=True) == []


def test_blocks_end_and_a_repeat_offender_is_blocked_twice_as_long():
    admission = Admission(200)
    host = "93.184.216.7"
    first = fill(admission, host, 5)[0]
    assert not admission.expire(BLOCK_FOR - 0.1)
    assert admission.expire(BLOCK_FOR)
    assert admission.blocked(host, BLOCK_FOR) is None and admission.blocks() == []
    for port in range(5):
        admission.left((host, port))
    second = fill(admission, host, 5, now=100.0)[0]
    assert second.until - 100.0 == 2 * (first.until - 0.0)
    # Offences double up to the longest block.
    now, lengths = second.until, []
    for _ in range(8):
        admission.expire(now)
        for port in range(5):
            admission.left((host, port))
        block = fill(admission, host, 5, now=now)[0]
        lengths.append(block.until - now)
        now = block.until
    assert lengths == [min(BLOCK_FOR * 2 ** n, MAX_BLOCK) for n in range(2, 10)]


def test_an_offence_is_forgotten_after_a_while():
    admission = Admission(200, remember_for=100.0)
    host = "93.184.216.7"
    fill(admission, host, 5)
    admission.expire(BLOCK_FOR)
    for port in range(5):
        admission.left((host, port))
    block = fill(admission, host, 5, now=BLOCK_FOR + 101.0)[0]
    assert block.until - (BLOCK_FOR + 101.0) == BLOCK_FOR


def test_connections_that_end_free_their_source():
    admission = Admission(200)
    host = "93.184.216.7"
    for _ in range(10):  # reconnecting one at a time forever is fine
        assert fill(admission, host, 4) == []
        for port in range(4):
            admission.left((host, port))
    assert admission.status()["connections"] == 0


def test_what_it_does_not_know_counts_in_nothing():
    admission = Admission(200)
    admission.left(("81.2.69.1", 1))  # a connection this node dialled: never arrived
    admission.handshaken(("81.2.69.1", 1))
    assert fill(admission, "not-an-address", 50) == []
    assert admission.status() == {"connections": 0, "opening": 0, "blocked": [], "blocks_made": 0}


def test_a_reset_forgets_connections_but_keeps_blocks():
    admission = Admission(200)
    fill(admission, "93.184.216.7", 5)
    fill(admission, "81.2.69.1", 3)
    admission.reset()
    assert admission.status()["connections"] == 0
    assert admission.blocked("93.184.216.7", 1.0) is not None
    assert fill(admission, "81.2.69.1", 4, start=100) == []  # its 3 before the reset no longer count


def test_offenders_are_remembered_in_bounded_memory():
    admission = Admission(200)
    for n in range(5000):
        host = f"10.{n // 250}.{n % 250}.1"
        fill(admission, host, 5)
        for port in range(5):
            admission.left((host, port))
        admission.expire(float(BLOCK_FOR))
    assert len(admission._offenders) <= 4096


def test_bounds_are_checked():
    with pytest.raises(ValueError):
        Admission(0)
    with pytest.raises(ValueError):
        Admission(10, block_for=10, max_block=5)
