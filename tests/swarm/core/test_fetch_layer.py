"""A provider that never sends the hash layer costs a fetch at most LAYER_TIMEOUT before it moves on.

Without the layer (BEP 52's piece layers, checked against the content root) no block can be verified, the origin's
neither. A fetch asks one peer first; one silent for LAYER_TIMEOUT is asked no longer alone: every other peer is
asked at once, and once none answered LAYER_TIMEOUT after that, the fetch has no source, and its caller takes the
origin (`proxy.download.core` reopens it). Before, such a fetch waited for its 30 s stall watchdog: a quorum for
the right root served by peers that never answered took 50 s instead of 20 (bench/attacks/withheld_layer.py).
On a fake clock; tests/swarm/service/test_withheld_layer.py runs real nodes.
"""

from __future__ import annotations

import hashlib

from swarm.content.manifest import build_manifest
from swarm.core.fetch import LAYER_TIMEOUT, FetchCore, Send
from swarm.core.picker import ORIGIN
from swarm.net import wire

BLOCK = 16384
DATA = b"".join(hashlib.sha256(b"layer %d" % i).digest() for i in range(8 * BLOCK // 32))
MANIFEST, LAYER = build_manifest([DATA], len(DATA), block_size=BLOCK)
EVERYTHING = wire.Bitfield.from_blocks(MANIFEST.num_blocks, range(MANIFEST.num_blocks))


def asked(actions) -> list:
    return [a.peer for a in actions if isinstance(a, Send) and isinstance(a.message, wire.HashRequest)]


def core_with(*peers: str) -> FetchCore:
    """A fetch with the origin as a Range source and `peers` that hold everything, the first asked for the layer."""
    core = FetchCore(MANIFEST)
    core.start(0.0)
    assert core.add_origin(0.0) == []  # no origin request before the layer: nothing could verify its bytes
    for peer in peers:
        core.add_peer(peer, 0.0)
        core.on_message(peer, EVERYTHING, 0.0)
    return core


def test_one_silent_provider_leaves_the_fetch_without_a_source_after_the_timeout() -> None:
    core = core_with("silent")
    assert core.has_sources and core.next_deadline() == LAYER_TIMEOUT
    assert core.on_timer(LAYER_TIMEOUT - 0.01) == [] and core.has_sources
    assert core.on_timer(LAYER_TIMEOUT) == []  # nobody else to ask
    # The origin does not count without the layer (before, it did, and the fetch stalled until its watchdog).
    assert not core.has_sources and core.layer_lost
    assert core.next_deadline() is None  # and no timer keeps firing for it


def test_after_one_silent_provider_every_other_is_asked_at_once() -> None:
    """However many providers stay silent, a fetch waits LAYER_TIMEOUT for the first one, and as long for all the
    others together (asked one after the other, each would cost LAYER_TIMEOUT)."""
    core = core_with("first", "second", "third")
    assert asked(core.on_timer(LAYER_TIMEOUT)) == ["second", "third"] and core.has_sources
    assert core.next_deadline() == 2 * LAYER_TIMEOUT
    core.add_peer("late", 7.0)  # joins the round: asked at once, the round's deadline stays
    assert core.next_deadline() == 2 * LAYER_TIMEOUT
    core.on_timer(2 * LAYER_TIMEOUT)
    assert not core.has_sources and core.next_deadline() is None


def test_a_late_layer_from_the_round_is_used() -> None:
    core = core_with("first", "second")
    core.on_timer(LAYER_TIMEOUT)
    core.on_message("first", wire.HashResponse(0, len(LAYER), tuple(LAYER), ()), 6.0)  # the first, late
    assert core.layer == list(LAYER) and core.has_sources and core.next_deadline() != 2 * LAYER_TIMEOUT


def test_a_layer_from_a_provider_that_joined_in_time_is_used() -> None:
    core = core_with("silent")
    core.on_timer(LAYER_TIMEOUT)
    assert not core.has_sources
    core.add_peer("honest", 6.0)  # a provider found since (the fetch's refresh): asked at once
    core.on_message("honest", EVERYTHING, 6.0)
    assert core.has_sources and not core.layer_lost
    core.on_message("honest", wire.HashResponse(0, len(LAYER), tuple(LAYER), ()), 6.1)
    assert core.layer == list(LAYER) and ORIGIN in core.policy.sources()  # the origin joins the sources now
    assert core.has_sources


def test_a_provider_that_has_no_layer_yet_is_waited_for_as_long_as_a_silent_one() -> None:
    """A REJECT says it fetches too and has none yet: a HAVE later means it has it now. Without one, the fetch
    waits LAYER_TIMEOUT from its ask, as for silence (a peer that refuses on purpose gains nothing over silence)."""
    core = core_with("fetching")
    core.on_message("fetching", wire.Reject(0, 0, 1, wire.RejectReason.INVALID), 0.1)
    assert core.has_sources and core.next_deadline() == LAYER_TIMEOUT
    assert asked(core.on_message("fetching", wire.Have(0), 3.0)) == ["fetching"]  # it has the layer now
    assert core.next_deadline() == 3.0 + LAYER_TIMEOUT
    core.on_message("fetching", wire.Reject(0, 0, 1, wire.RejectReason.INVALID), 3.1)
    core.on_timer(3.0 + LAYER_TIMEOUT)
    assert not core.has_sources


def test_a_fetch_whose_providers_all_left_before_the_layer_has_no_source() -> None:
    core = core_with("gone")
    core.peer_lost("gone", 1.0)
    assert not core.has_sources  # the origin alone cannot verify a byte


def test_a_fetch_with_the_layer_keeps_the_origin_as_a_source() -> None:
    core = FetchCore(MANIFEST, LAYER)
    core.start(0.0)
    core.add_origin(0.0)
    assert core.has_sources and not core.layer_lost
