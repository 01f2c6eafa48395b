"""`swarm.core.starts.StartBook` on a fake clock, and `NearerHolders`: who holds a block back from sources at which
distance."""

from __future__ import annotations

import pytest

from swarm.core.starts import NearerHolders, StartBook


def test_a_start_holds_back_farther_sources_for_its_ttl():
    book = StartBook(ttl=5.0)
    book.on_start("a", 1, 7, now=10.0)
    assert 7 in book.blocked(2, 10.0) and 7 not in book.blocked(1, 10.0) and 7 not in book.blocked(0, 10.0)
    assert 7 in book.blocked(2, 14.9) and 7 not in book.blocked(2, 15.0)
    assert book.next_expiry() == 15.0
    version = book.version
    assert not book.expire(14.9) and book.expire(15.0)
    assert book.version > version and book.next_expiry() is None


def test_a_renewed_start_lasts_from_its_renewal():
    book = StartBook(ttl=5.0)
    book.on_start("a", 0, 1, now=0.0)
    book.on_start("a", 0, 1, now=4.0)  # asked again after a timeout: announced again
    assert book.next_expiry() == 9.0  # the first entry is stale and skipped
    assert not book.expire(5.0) and 1 in book.blocked(1, 5.0)
    assert book.expire(9.0) and 1 not in book.blocked(1, 9.0)


@pytest.mark.parametrize(("renewed_at", "let_go_at"), [
    ([0.0, 4.0, 8.0, 12.0], 10.0),  # renewed every 4 s: held at most 2 TTLs from the first START
    ([0.0, 9.9, 19.8, 29.7, 39.6], 10.0),  # an announcer that never delivers: not for as long as it renews
    ([0.0, 6.0, 40.0, 60.0], 10.0),  # a pause changes nothing: the first START still counts
    ([0.0], 5.0),  # announced once: one TTL
])
def test_one_peer_holds_a_block_back_at_most_hold_max_in_all(renewed_at, let_go_at):
    """An admitted cluster peer that announces START for a block and never delivers it held it back from every
    farther source for as long as it kept renewing; now for `hold_max` (2 TTLs) from its first START at most, until
    its HAVE."""
    book = StartBook(ttl=5.0)
    assert book.hold_max == 10.0
    held = []
    for now in renewed_at:
        book.on_start("a", 1, 7, now=now)
        held.append(7 in book.blocked(2, now))
    assert held == [now < let_go_at for now in renewed_at]
    assert 7 in book.blocked(2, let_go_at - 0.1)
    assert all(7 not in book.blocked(2, t) for t in (let_go_at, let_go_at + 30.0))
    book.on_have("a", 7)
    book.on_start("a", 1, 7, now=100.0)  # (a HAVE clears the count: a START after it is a new one)
    assert 7 in book.blocked(2, 100.0)


def test_a_have_fulfils_the_start_and_forget_lets_go_at_once():
    book = StartBook(ttl=5.0)
    book.on_start("a", 0, 3, now=0.0)
    version = book.version
    book.on_have("a", 3)  # it got it: take it from "a" (or, stalled, from anyone)
    assert 3 not in book.blocked(1, 1.0) and book.version > version and book.next_expiry() is None
    book.on_start("b", 1, 4, now=0.0)
    assert 4 in book.blocked(2, 0.0) and 4 not in book.blocked(1, 0.0)
    version = book.version
    book.forget("b")
    assert 4 not in book.blocked(2, 0.0) and book.version > version


def test_ignored_peers_hold_nothing_back():
    book = StartBook()
    book.on_start("slow", 0, 1, now=0.0)
    book.on_start("slow", 0, 2, now=0.0)
    assert 1 in book.blocked(1, 0.0) and 2 in book.blocked(1, 0.0)
    assert 1 not in book.blocked(1, 0.0, {"slow"}) and 2 not in book.blocked(1, 0.0, {"slow"})


def test_nearest_sources_never_wait():
    book = StartBook()
    book.on_start("a", 0, 0, now=0.0)
    assert 0 not in book.blocked(0, 0.0)
    with pytest.raises(ValueError):
        StartBook(ttl=0)


def test_a_block_a_nearer_source_holds_is_held_back_from_farther_ones():
    book = NearerHolders(8)
    book.add("rack", 0, [1, 2])
    book.add("dc", 1, [3])
    assert 1 in book.blocked(1) and 1 in book.blocked(2) and 1 not in book.blocked(0)
    assert 3 in book.blocked(2) and 3 not in book.blocked(1)  # only nearer holders count
    assert 5 not in book.blocked(2)
    book.have("rack", 5)
    assert 5 in book.blocked(1)
    version = book.version
    book.remove("rack")
    assert 1 not in book.blocked(2) and 5 not in book.blocked(1) and book.version > version
    assert 3 in book.blocked(2)


def test_a_snubbed_holder_holds_nothing_back_until_it_answers_again():
    book = NearerHolders(4)
    book.add("slow", 0, [0])
    version = book.version
    book.mute({"slow"})
    assert 0 not in book.blocked(1) and book.version > version
    book.have("slow", 1)  # still counted nowhere while muted
    assert 1 not in book.blocked(1)
    book.mute(set())
    assert 0 in book.blocked(1) and 1 in book.blocked(1)
    book.mute({"slow"})
    book.remove("slow")  # removed while muted: nothing to take back twice
    book.mute(set())
    assert 0 not in book.blocked(1)


def test_a_holder_that_refuses_a_block_holds_it_back_no_longer():
    book = NearerHolders(4)
    book.add("rack", 0, [0, 1])
    version = book.version
    book.refused("rack", 0)  # a REJECT of a block it announced (evicted from its store)
    assert 0 not in book.blocked(1) and 1 in book.blocked(1) and book.version > version
    book.refused("rack", 0)  # twice: nothing more to take back
    book.refused("gone", 1)
    book.remove("rack")
    assert 1 not in book.blocked(1)
