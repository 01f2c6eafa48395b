"""ServeCore's `shown` hook: what a peer is shown (BITFIELD, HAVE, START) and may ask for (fake clock)."""

from __future__ import annotations

import pytest

from swarm.core.serve import Send, SendBlock, ServeCore, Shared
from swarm.net import wire
from tests.swarm.core.test_serve import BLOCK, LAYER, MANIFEST, NODE, ROOT

PEER = b"p" * 32


class View:
    """The caller's answer, changed by the test; records what it was asked."""

    def __init__(self, allowed) -> None:
        self.allowed = allowed
        self.asked: list[tuple[bytes, bytes]] = []

    def __call__(self, root: bytes, peer: bytes):
        self.asked.append((root, peer))
        return self.allowed


def served(held, allowed) -> tuple[ServeCore, View]:
    view = View(allowed)
    have = wire.Bitfield.from_blocks(MANIFEST.num_blocks, held)
    serve = ServeCore(NODE, {ROOT: Shared(MANIFEST, LAYER, have)}.get, shown=view)
    return serve, view


def bitfield_after_handshake(serve: ServeCore) -> list[int]:
    actions = serve.on_message(wire.Handshake(wire.PROTOCOL_VERSION, PEER, ROOT), 0.0)
    assert actions[0] == Send(wire.Handshake(wire.PROTOCOL_VERSION, NODE, ROOT))
    return list(actions[1].message.blocks())


@pytest.mark.parametrize("held,allowed,bitfield", [
    ([0, 1, 2, 3], None, [0, 1, 2, 3]),  # no restriction: everything held
    ([0, 1, 2, 3], frozenset({1, 3, 7}), [1, 3]),  # only what is both held and allowed
    ([0, 1, 2, 3], frozenset(), []),
    ([], frozenset({1}), []),
])
def test_bitfield_shows_only_the_allowed_blocks_held(held, allowed, bitfield):
    serve, view = served(held, allowed)
    assert bitfield_after_handshake(serve) == bitfield
    assert view.asked == [(ROOT, PEER)]  # asked by the root and the node id of the peer's handshake


@pytest.mark.parametrize("block,expected", [
    (1, SendBlock(1, 0, BLOCK)),  # shown
    (0, Send(wire.Reject(0, 0, BLOCK, wire.RejectReason.NOT_FOUND))),  # held, not shown: as if not held
    (5, Send(wire.Reject(5, 0, BLOCK, wire.RejectReason.NOT_FOUND))),  # not held
])
def test_requests_for_blocks_not_shown_are_refused(block, expected):
    serve, _ = served([0, 1], frozenset({1, 5}))
    bitfield_after_handshake(serve)
    assert serve.on_message(wire.Request(block, 0, BLOCK), 0.0) == [expected]


def test_have_of_a_hidden_block_is_held_back_until_the_view_shows_it():
    serve, view = served([], frozenset({2}))
    bitfield_after_handshake(serve)
    assert serve.on_new_block(2) == [Send(wire.Have(2))]
    assert serve.on_new_block(4) == []  # held back
    assert serve.on_new_block(6) == []
    assert serve.on_view_changed() == []  # the view has not changed
    view.allowed = frozenset({2, 6})
    assert serve.on_view_changed() == [Send(wire.Have(6))]
    assert serve.on_message(wire.Request(6, 0, BLOCK), 0.0) == [SendBlock(6, 0, BLOCK)]
    view.allowed = None  # no restriction any more: all that was still held back, in order
    assert serve.on_view_changed() == [Send(wire.Have(4))]
    assert serve.on_view_changed() == []


def test_what_was_shown_is_never_taken_back():
    serve, view = served([0, 1], frozenset({0, 1}))
    assert bitfield_after_handshake(serve) == [0, 1]
    view.allowed = frozenset()
    assert serve.on_message(wire.Request(1, 0, BLOCK), 0.0) == [SendBlock(1, 0, BLOCK)]


@pytest.mark.parametrize("block,expected", [
    (3, [Send(wire.Start(3))]),  # a block it may take from us: START says we are bringing it in
    (4, []),  # one it may not take from us: nothing to leave to us
])
def test_start_only_about_blocks_shown(block, expected):
    serve, _ = served([], frozenset({3}))
    bitfield_after_handshake(serve)
    assert serve.on_origin_fetch(block) == expected


def test_without_a_view_nothing_is_held_back():
    serve = ServeCore(NODE, {ROOT: Shared(MANIFEST, LAYER, wire.Bitfield.from_blocks(10, [0]))}.get)
    assert bitfield_after_handshake(serve) == [0]
    assert serve.on_new_block(4) == [Send(wire.Have(4))]
    assert serve.on_view_changed() == []
