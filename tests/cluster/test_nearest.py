"""Nearest first: a block a nearer source holds is left to it (a START from it) rather than asked of a far one."""

from __future__ import annotations

from cluster.nearest import NearestFirst

ROOT, OTHER = b"r" * 32, b"o" * 32


def test_a_representants_rack_peer_starts_what_it_holds():
    core = NearestFirst()
    core.joined("rack", ROOT, 0)
    assert core.offer("rack", [1]) == {}  # no farther source yet: nothing to leave to it
    core.joined("dc", ROOT, 1)
    assert core.offer("rack", [2, 3]) == {"rack": [2, 3]}
    assert core.offer("rack", [2]) == {}  # known already


def test_a_far_offer_of_a_block_a_nearer_source_holds_is_left_to_it():
    core = NearestFirst()
    core.joined("rack", ROOT, 0)
    core.joined("dc", ROOT, 1)
    core.joined("seeder", ROOT, 2)
    core.offer("rack", [1, 2])
    assert core.offer("dc", [1, 3]) == {"dc": [1, 3], "rack": [1]}  # the DC source is nearer than the seeder
    assert core.offer("seeder", [1, 3, 4]) == {"rack": [1], "dc": [3]}  # however long ago they got them
    assert core.offer("seeder", [1]) == {"rack": [1]}  # offered again (a HAVE after a BITFIELD): again


def test_a_source_that_left_holds_nothing_and_contents_are_apart():
    core = NearestFirst()
    core.joined("rack", ROOT, 0)
    core.joined("dc", ROOT, 1)
    core.joined("dc-other", OTHER, 1)
    core.offer("rack", [1])
    assert core.offer("dc-other", [1]) == {}  # another content: the rack does not hold it
    core.left("rack")
    assert core.offer("dc", [1]) == {}
    assert core.offer("never-joined", [1, 2]) == {}
    assert not core.farther_exists("never-joined")
