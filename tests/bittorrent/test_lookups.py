"""`Lookups`: a lookup is over once a stats answer asked after it started shows no traversal."""

from __future__ import annotations

from bittorrent.lookups import Lookups


def drained(heard) -> list:
    got = []
    while not heard.empty():
        got.append(heard.get_nowait())
    return got


def test_a_lookup_ends_with_the_first_quiet_answer_asked_after_it():
    lookups = Lookups()
    lookups.stats_asked()  # asked before the lookup: its answer says nothing of it
    heard = lookups.start(b"k")
    lookups.on_stats(traversing=False)  # that earlier answer
    assert drained(heard) == [] and lookups.waiting
    lookups.stats_asked()
    lookups.on_peers(b"k", [("55.55.1.1", 4000)])
    lookups.on_peers(b"other", [("55.55.9.9", 4000)])  # another key's answer is not ours
    lookups.on_stats(traversing=True)  # still under way
    assert drained(heard) == [[("55.55.1.1", 4000)]]
    lookups.stats_asked()
    lookups.on_stats(traversing=False)
    assert drained(heard) == [None] and not lookups.waiting
    lookups.over(b"k", heard)
    assert len(lookups) == 0


def test_two_lookups_of_one_key_and_a_listener_that_leaves():
    lookups = Lookups()
    first, second = lookups.start(b"k"), lookups.start(b"k")
    lookups.on_peers(b"k", [("55.55.1.1", 4000)])
    assert drained(first) == drained(second) == [[("55.55.1.1", 4000)]]
    lookups.over(b"k", first)
    assert lookups.waiting and len(lookups) == 1  # the second still listens
    lookups.stats_asked()
    lookups.on_stats(traversing=False)
    assert drained(second) == [None] and drained(first) == []
    lookups.clear()
    assert len(lookups) == 0 and not lookups.waiting


def test_clear_ends_every_lookup():
    lookups = Lookups()
    heard = lookups.start(b"k")
    lookups.clear()  # the session stopped
    assert drained(heard) == [None]
