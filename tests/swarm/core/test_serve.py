"""ServeCore: only shared roots, only held blocks, paced by the upload bucket (fake clock)."""

from __future__ import annotations

import pytest

from swarm.content.manifest import build_manifest
from swarm.core.serve import STALL_TIMEOUT, Close, Send, SendBlock, ServeCore, Shared
from swarm.core.throttle import TokenBucket, on_the_wire
from swarm.net import wire

BLOCK = 16384
DATA = bytes(range(256)) * 64 * 10  # 10 blocks of 16 KiB
MANIFEST, LAYER = build_manifest([DATA], len(DATA), block_size=BLOCK)
NODE = b"n" * 32
ROOT = MANIFEST.root


def core(held=range(10), **kwargs) -> ServeCore:
    have = wire.Bitfield.from_blocks(MANIFEST.num_blocks, held)
    shared = {ROOT: Shared(MANIFEST, LAYER, have)}
    return ServeCore(NODE, shared.get, **kwargs)


def handshake(serve: ServeCore, root: bytes = ROOT, version: int = wire.PROTOCOL_VERSION) -> list:
    return serve.on_message(wire.Handshake(version, b"p" * 32, root), 0.0)


def test_handshake_for_a_shared_root_answers_handshake_and_bitfield():
    serve = core(held=[0, 3])
    actions = handshake(serve)
    assert actions == [Send(wire.Handshake(wire.PROTOCOL_VERSION, NODE, ROOT)),
                       Send(wire.Bitfield.from_blocks(10, [0, 3]))]


@pytest.mark.parametrize("first,reason", [
    (wire.Handshake(wire.PROTOCOL_VERSION, b"p" * 32, b"x" * 32), "not shared here"),
    (wire.Handshake(99, b"p" * 32, ROOT), "protocol version 99"),
    (wire.Request(0, 0, BLOCK), "expected HANDSHAKE"),
])
def test_anything_but_a_handshake_for_a_shared_root_closes_without_data(first, reason):
    actions = core().on_message(first, 0.0)
    assert len(actions) == 1 and isinstance(actions[0], Close) and reason in actions[0].reason


@pytest.mark.parametrize("request_,expected", [
    (wire.Request(2, 0, BLOCK), SendBlock(2, 0, BLOCK)),
    (wire.Request(2, 100, 50), SendBlock(2, 100, 50)),
    (wire.Request(5, 0, BLOCK), Send(wire.Reject(5, 0, BLOCK, wire.RejectReason.NOT_FOUND))),
    (wire.Request(10, 0, BLOCK), Send(wire.Reject(10, 0, BLOCK, wire.RejectReason.INVALID))),
    (wire.Request(2, 1, BLOCK), Send(wire.Reject(2, 1, BLOCK, wire.RejectReason.INVALID))),
])
def test_requests(request_, expected):
    serve = core(held=[0, 1, 2])
    handshake(serve)
    assert serve.on_message(request_, 0.0) == [expected]


def test_upload_bucket_paces_blocks_and_cancel_removes_queued():
    on_wire = on_the_wire(BLOCK)  # a block's bytes on the link, headers included: what the cap counts
    serve = core(upload=TokenBucket(rate=on_wire, burst=on_wire))  # one block per second
    handshake(serve)
    assert serve.on_message(wire.Request(0, 0, BLOCK), 0.0) == [SendBlock(0, 0, BLOCK)]
    assert serve.on_message(wire.Request(1, 0, BLOCK), 0.0) == []
    assert serve.on_message(wire.Request(2, 0, BLOCK), 0.0) == []
    assert serve.next_deadline() == pytest.approx(1.0)
    assert serve.on_message(wire.Cancel(1, 0, BLOCK), 0.1) == []
    assert serve.on_timer(1.0) == [SendBlock(2, 0, BLOCK)]
    assert serve.next_deadline() == STALL_TIMEOUT  # nothing waits on the budget; the sends wait on the peer


def test_queue_bound_rejects_busy():
    serve = core(upload=TokenBucket(rate=1, burst=1), max_queued=2)
    handshake(serve)
    results = [serve.on_message(wire.Request(i, 0, BLOCK), 0.0) for i in range(4)]
    # the first goes out at once (a full bucket lends a larger take), two wait, the fourth is refused
    assert results == [[SendBlock(0, 0, BLOCK)], [], [],
                       [Send(wire.Reject(3, 0, BLOCK, wire.RejectReason.BUSY))]]


def test_new_blocks_become_haves_and_servable():
    serve = core(held=[])
    handshake(serve)
    assert serve.on_message(wire.Request(4, 0, BLOCK), 0.0)[0].message.reason == wire.RejectReason.NOT_FOUND
    assert serve.on_new_block(4) == [Send(wire.Have(4))]
    assert serve.on_new_block(4) == []
    assert serve.on_message(wire.Request(4, 0, BLOCK), 0.0) == [SendBlock(4, 0, BLOCK)]


def test_origin_fetches_become_starts_for_blocks_we_do_not_hold():
    serve = core(held=[0])
    assert serve.on_origin_fetch(3) == []  # before the handshake: no root, nobody to tell
    handshake(serve)
    assert serve.on_origin_fetch(3) == [Send(wire.Start(3))]
    assert serve.on_origin_fetch(0) == []  # held: the peer knows from the bitfield


def test_hash_layer_and_manifest_requests():
    serve = core()
    handshake(serve)
    assert serve.on_message(wire.HashRequest(0, 10), 0.0) == [Send(wire.HashResponse(0, 10, tuple(LAYER), ()))]
    assert serve.on_message(wire.HashRequest(3, 2), 0.0)[0].message.reason == wire.RejectReason.INVALID
    response = serve.on_message(wire.ManifestRequest(), 0.0)[0].message
    assert response == wire.ManifestResponse(MANIFEST.encode())


def test_second_handshake_closes():
    serve = core()
    handshake(serve)
    assert isinstance(handshake(serve)[0], Close)
