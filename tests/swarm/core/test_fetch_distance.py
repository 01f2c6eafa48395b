"""Work stealing by START across distances in the fetch core (`FetchCore(distance=...)`, `swarm.core.starts`),
on a fake clock: a far source is not asked for what a nearer peer is fetching, requests to far sources are
announced, a HAVE, a stale START, a snubbed or a lost starter lets the block go."""

from __future__ import annotations

from swarm.core.policy import PolicyConfig
from swarm.core.starts import START_TTL
from swarm.net import wire
from tests.swarm.core.test_fetch import BLOCK, Sim, content

DISTANCE = {"near": 0, "far": 1, "farther": 2}


def sim(blocks: int = 6, **kwargs) -> Sim:
    return Sim(content(blocks * BLOCK), window=0, distance=DISTANCE.__getitem__, **kwargs)


def test_requests_to_far_sources_are_announced_and_near_ones_not():
    s = sim()
    s.join("near", blocks={0, 1})
    s.join("far")
    assert s.finished
    assert {b for p, b in s.requests if p == "near"} == {0, 1}
    assert sorted(s.announced) == sorted(b for p, b in s.requests if p == "far") == [2, 3, 4, 5]


def test_without_distances_nothing_is_announced_or_held_back():
    s = Sim(content(4 * BLOCK), window=0)
    s.join("near", blocks={0})
    s.run(s.core.on_message("near", wire.Start(3), s.now))
    s.join("far")
    assert s.finished and s.announced == [] and ("far", 3) in s.requests


def test_a_near_start_holds_the_block_back_until_it_goes_stale():
    s = sim(blocks=4)
    s.join("near", blocks=set())
    s.run(s.core.on_message("near", wire.Start(3), s.now))  # near fetches block 3 from further away
    s.join("far")
    assert {b for p, b in s.requests if p == "far"} == {0, 1, 2} and not s.finished
    s.advance(START_TTL - 0.1)
    assert not s.finished  # still near's to bring
    s.advance(0.2)  # near never said HAVE: its START is stale, the block is stolen
    assert s.finished and ("far", 3) in s.requests


def test_a_start_followed_by_have_is_taken_from_the_near_peer():
    s = sim(blocks=3)
    s.join("near", blocks=set())
    s.run(s.core.on_message("near", wire.Start(2), s.now))
    s.join("far")
    s.have["near"].add(2)
    s.run(s.core.on_message("near", wire.Have(2), s.now))
    assert s.finished and ("near", 2) in s.requests and ("far", 2) not in s.requests


def test_a_start_holds_back_only_farther_sources():
    s = sim(blocks=2)
    s.join("far", behaviour="silent", blocks=set())  # at distance 1, fetching too
    s.run(s.core.on_message("far", wire.Start(0), s.now))
    s.join("farther")  # at distance 2: block 0 is left to "far"
    assert {b for p, b in s.requests if p == "farther"} == {1}
    s2 = sim(blocks=2)
    s2.join("far", blocks=set())
    s2.run(s2.core.on_message("far", wire.Start(0), s2.now))
    s2.join("near")  # nearer than the starter: asked for anything
    assert s2.finished and {b for p, b in s2.requests if p == "near"} == {0, 1}


def test_a_snubbed_starter_holds_nothing_back():
    s = sim(blocks=3, config=PolicyConfig(request_timeout=2.0))
    s.join("near", behaviour="silent", blocks={1})  # never sends what it has
    s.run(s.core.on_message("near", wire.Start(0), s.now))
    s.join("far")
    assert not s.finished and ("far", 0) not in s.requests
    s.advance(2.1)  # its request for block 1 timed out: snubbed, its START no longer counts
    assert s.finished and ("far", 0) in s.requests


def test_a_lost_starter_lets_its_blocks_go():
    s = sim(blocks=3)
    s.join("near", behaviour="silent", blocks=set())
    for block in (0, 1):
        s.run(s.core.on_message("near", wire.Start(block), s.now))
    s.join("far")
    assert not s.finished
    s.run(s.core.peer_lost("near", s.now))
    assert s.finished and {("far", 0), ("far", 1)} <= set(s.requests)


def test_describe_says_what_a_quiet_fetch_waits_for():
    """The line a fetch logs after a quiet spell: what is missing and why each source is not asked for it."""
    s = sim(blocks=4)
    s.join("near", behaviour="silent", blocks={0})
    s.run(s.core.on_message("near", wire.Start(3), s.now))  # near is bringing block 3 from further away
    s.join("far", behaviour="silent")
    line = s.core.describe(s.now)
    assert line.startswith("4 block(s) missing (first [0, 1, 2, 3])")
    assert "near: holds 1, asked [0], retry later 0, left to a nearer peer 0" in line
    # block 0: near holds it; block 3: near fetches it (START)
    assert "far: holds 4, asked [1, 2], retry later 0, left to a nearer peer 2" in line


def test_a_far_source_is_not_asked_for_what_a_nearer_peer_holds():
    """Nearest first: once a nearer peer holds a block (BITFIELD or HAVE), a farther source is not asked for it,
    however long ago the nearer peer got it (START alone would hold it back only until that HAVE)."""
    s = sim(blocks=12)
    s.join("near", behaviour="silent", blocks=set(range(10)))  # busy: 8 requests outstanding, 2 blocks left over
    s.join("far")
    assert {b for p, b in s.requests if p == "far"} == {10, 11}
    s.have["near"].add(11)
    s.run(s.core.on_message("near", wire.Have(11), s.now))
    assert {b for p, b in s.requests if p == "far"} == {10, 11}  # asked before near had it: not taken back


def test_a_nearer_holder_that_is_snubbed_or_lost_lets_the_block_go():
    s = sim(blocks=3, config=PolicyConfig(request_timeout=2.0))
    s.join("near", behaviour="silent", blocks={0, 1})  # holds two blocks, never sends them
    s.join("far")
    assert not s.finished and ("far", 0) not in s.requests and ("far", 1) not in s.requests
    s.advance(2.1)  # near's requests timed out: snubbed, it holds nothing back
    assert s.finished and ("far", 0) in s.requests and ("far", 1) in s.requests
    s2 = sim(blocks=2)
    s2.join("near", behaviour="silent", blocks={0})
    s2.join("far")
    assert ("far", 0) not in s2.requests
    s2.run(s2.core.peer_lost("near", s2.now))
    assert s2.finished and ("far", 0) in s2.requests


def test_a_nearer_holder_that_refuses_the_block_leaves_it_to_a_farther_source():
    """A rack peer that announced a block and then refuses it (REJECT: evicted from its store) holds it back no
    longer: the far source is asked at once, not after the rack peer has been struck out."""
    s = sim(blocks=2)
    s.join("near", behaviour="rejects", blocks={0, 1})
    s.join("far")
    assert s.finished and {b for p, b in s.requests if p == "far"} == {0, 1}
