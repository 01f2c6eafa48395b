"""FetchCore driven by simulated peers and a fake clock: no sockets, no sleeps."""

from __future__ import annotations

import hashlib
import random

import pytest

from swarm.content.manifest import build_manifest
from swarm.core.fetch import (
    LAYER_TIMEOUT,
    Announce,
    Close,
    Deliver,
    FetchCore,
    Finished,
    OriginCancel,
    OriginFetch,
    Send,
    Verified,
    bitfield_to_bytes,
)
from swarm.core.policy import PolicyConfig
from swarm.net import wire

BLOCK = 16384


def content(size: int, seed: int = 1) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(b"%d-%d" % (seed, counter)).digest()
        counter += 1
    return bytes(out[:size])


class Sim:
    """Peers that answer requests according to their behaviour, an origin, and a fake clock."""

    def __init__(self, data: bytes, *, block_size: int = BLOCK, config: PolicyConfig | None = None, **core_kwargs):
        self.data = data
        self.manifest, self.layer = build_manifest([data], len(data), block_size=block_size)
        self.core = FetchCore(self.manifest, config=config, rng=random.Random(0), **core_kwargs)
        self.now = 0.0
        self.behaviour: dict[str, str] = {}
        self.have: dict[str, set[int]] = {}
        self.closed: dict[str, str] = {}
        self.delivered: list[int] = []
        self.verified: dict[int, bytes] = {}
        self.finished = False
        self.origin_ok = True
        self.origin_pending: list[OriginFetch] = []
        self.requests: list[tuple[str, int]] = []
        self.announced: list[int] = []
        self.queue: list = []
        for block in core_kwargs.get("held", ()):  # held blocks were verified before the core existed
            self.verified[block] = self.block_bytes(block)
        self.run(self.core.start(self.now))

    def join(self, peer: str, behaviour: str = "good", blocks: set[int] | None = None) -> None:
        self.behaviour[peer] = behaviour
        self.have[peer] = set(range(self.manifest.num_blocks)) if blocks is None else blocks
        self.run(self.core.add_peer(peer, self.now))
        bitfield = wire.Bitfield.from_blocks(self.manifest.num_blocks, self.have[peer])
        self.run(self.core.on_message(peer, bitfield, self.now))

    def block_bytes(self, block: int) -> bytes:
        offset, length = self.manifest.block_span(block)
        return self.data[offset:offset + length]

    def answer(self, peer: str, message) -> list:
        behaviour = self.behaviour[peer]
        if isinstance(message, wire.HashRequest):
            if behaviour == "mute-layer":  # serves blocks, never answers for the layer
                return []
            hashes = list(self.layer)
            if behaviour == "bad-layer":
                hashes[0] = bytes(32)
            return self.core.on_message(peer, wire.HashResponse(0, len(hashes), tuple(hashes), ()), self.now)
        if isinstance(message, wire.Request):
            self.requests.append((peer, message.block))
            if behaviour == "silent":
                return []
            if behaviour == "rejects":
                return self.core.on_message(peer, wire.Reject(message.block, 0, message.length,
                                                              wire.RejectReason(1)), self.now)
            data = self.block_bytes(message.block)
            if behaviour == "liar":
                data = bytes(len(data))
            if behaviour == "short":
                data = data[:-1]
            return self.core.on_message(peer, wire.Block(message.block, 0, data), self.now)
        return []

    def run(self, actions: list) -> None:
        self.queue.extend(actions)
        while self.queue:
            action = self.queue.pop(0)
            if isinstance(action, Send):
                if action.peer not in self.closed:
                    self.queue.extend(self.answer(action.peer, action.message))
            elif isinstance(action, Close):
                self.closed[action.peer] = action.reason
            elif isinstance(action, Verified):
                assert action.data == self.block_bytes(action.block)  # nothing unverified gets out
                self.verified[action.block] = action.data
            elif isinstance(action, Deliver):
                assert action.block in self.verified
                self.delivered.append(action.block)
            elif isinstance(action, Finished):
                self.finished = True
            elif isinstance(action, OriginFetch):
                self.origin_pending.append(action)
            elif isinstance(action, OriginCancel):
                self.origin_pending = [f for f in self.origin_pending if f.block != action.block]
            elif isinstance(action, Announce):
                self.announced.append(action.block)

    def serve_origin(self) -> None:
        while self.origin_pending:
            fetch = self.origin_pending.pop(0)
            data = self.data[fetch.offset:fetch.offset + fetch.length]
            self.run(self.core.on_origin_block(fetch.block, data, self.now))

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while True:
            deadline = self.core.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            self.run(self.core.on_timer(self.now))
        self.now = target


def test_one_seed_delivers_everything_in_order():
    sim = Sim(content(20 * BLOCK + 5))
    sim.join("a")
    assert sim.finished
    assert sim.delivered == list(range(21))
    assert sim.core.bytes_from == {"origin": 0, "peers": 20 * BLOCK + 5}


def test_layer_comes_from_a_peer_and_a_bad_one_is_banned():
    sim = Sim(content(8 * BLOCK))
    sim.join("liar", "bad-layer")
    assert "bad hash layer" in sim.closed["liar"]
    assert sim.core.layer is None and not sim.delivered
    sim.join("good")
    assert sim.finished and sim.delivered == list(range(8))
    sim.run(sim.core.add_peer("liar", sim.now))  # a banned peer that comes back is refused at once
    assert sim.closed["liar"] == "banned"


def test_a_peer_silent_about_the_layer_is_not_waited_for():
    sim = Sim(content(8 * BLOCK))
    sim.join("mute", "mute-layer")
    sim.join("good")
    assert sim.core.layer is None and not sim.delivered  # "mute" was asked first
    assert sim.core.next_deadline() == LAYER_TIMEOUT
    sim.advance(LAYER_TIMEOUT)  # then "good" is asked
    assert sim.finished and sim.delivered == list(range(8))
    assert "mute" not in sim.closed  # silent about the layer, not a liar: it still serves blocks


def test_a_slow_peers_layer_still_counts_after_another_was_asked():
    sim = Sim(content(8 * BLOCK))
    sim.join("slow", "mute-layer")
    sim.join("also", "mute-layer")
    sim.advance(LAYER_TIMEOUT)  # "also" is asked, and says nothing either
    assert sim.core.layer is None
    late = wire.HashResponse(0, len(sim.layer), tuple(sim.layer), ())
    sim.run(sim.core.on_message("slow", late, sim.now))  # the first one's answer, late
    assert sim.finished and sim.delivered == list(range(8))
    assert sim.core.next_deadline() is None  # nothing waits on the layer any more


def test_wrong_bytes_ban_the_sender_and_the_block_comes_from_elsewhere():
    sim = Sim(content(6 * BLOCK))
    sim.join("good", blocks=set())  # gives the layer, holds nothing yet
    sim.join("liar", "liar")
    assert "liar" in sim.closed
    assert not sim.delivered
    sim.run(sim.core.add_origin(sim.now))
    sim.serve_origin()
    assert sim.finished and sim.delivered == list(range(6))
    assert sim.core.bytes_from["peers"] == 0


def test_a_block_of_the_wrong_length_closes_the_peer():
    sim = Sim(content(4 * BLOCK))
    sim.join("short", "short")
    assert "asked 0+" in sim.closed["short"]


def test_silent_peer_times_out_and_the_origin_finishes():
    sim = Sim(content(10 * BLOCK), config=PolicyConfig(request_timeout=2.0, retry_backoff=1.0))
    sim.join("silent", "silent")
    sim.run(sim.core.add_origin(sim.now))
    sim.serve_origin()
    sim.advance(3.0)
    for _ in range(20):
        sim.serve_origin()
        sim.advance(3.0)
        if sim.finished:
            break
    assert sim.finished and sim.delivered == list(range(10))


def test_only_the_wanted_range_is_fetched_and_delivered():
    sim = Sim(content(30 * BLOCK), first_block=10, last_block=14)
    sim.join("a")
    assert sim.finished
    assert sim.delivered == [10, 11, 12, 13, 14]
    assert {block for _, block in sim.requests} == {10, 11, 12, 13, 14}


def test_held_blocks_are_delivered_but_never_requested():
    sim = Sim(content(12 * BLOCK), held={0, 1, 2, 3, 7})
    assert sim.delivered == [0, 1, 2, 3]
    sim.join("a")
    assert sim.finished and sim.delivered == list(range(12))
    assert {block for _, block in sim.requests} == set(range(12)) - {0, 1, 2, 3, 7}


def test_start_delivers_the_held_prefix_in_order():
    data = content(12 * BLOCK)
    manifest, layer = build_manifest([data], len(data), block_size=BLOCK)
    core = FetchCore(manifest, layer, held={0, 1, 2, 5})
    actions = core.start(0.0)
    assert [a.block for a in actions if isinstance(a, Deliver)] == [0, 1, 2]
    assert core.next_delivery == 3


def test_rejecting_peer_does_not_stall_when_another_has_the_blocks():
    sim = Sim(content(5 * BLOCK), config=PolicyConfig(retry_backoff=0.5))
    sim.join("rejects", "rejects")
    sim.join("good", blocks={0, 1, 2, 3, 4})
    sim.advance(10)
    assert sim.finished and sim.delivered == list(range(5))


def test_peer_lost_mid_fetch_moves_its_blocks():
    sim = Sim(content(8 * BLOCK), config=PolicyConfig(request_timeout=100))
    sim.join("silent", "silent")
    assert sim.requests and all(peer == "silent" for peer, _ in sim.requests)
    sim.run(sim.core.peer_lost("silent", sim.now))
    sim.join("good")
    assert sim.finished


def test_messages_before_or_after_membership_are_harmless():
    sim = Sim(content(3 * BLOCK))
    assert sim.core.on_message("stranger", wire.Have(0), 0.0) == []
    sim.join("a")
    sim.run(sim.core.peer_lost("a", sim.now))
    assert sim.core.on_message("a", wire.Block(0, 0, b"x"), 0.0) == []


@pytest.mark.parametrize("message,needle", [
    (wire.Bitfield.from_blocks(7, []), "bitfield of 7 blocks"),
    (wire.Have(99), "HAVE for block 99"),
    (wire.Start(99), "START for block 99"),
])
def test_malformed_announcements_close_the_peer(message, needle):
    sim = Sim(content(3 * BLOCK))
    sim.behaviour["p"] = "good"
    sim.run(sim.core.add_peer("p", 0.0))
    actions = sim.core.on_message("p", message, 0.0)
    closes = [a for a in actions if isinstance(a, Close)]
    assert closes and needle in closes[0].reason


def test_a_peers_start_keeps_the_origin_off_that_block_until_the_peer_has_it():
    sim = Sim(content(8 * BLOCK), window=2)
    sim.join("a", blocks=set())  # fetching too: nothing yet
    sim.run(sim.core.on_message("a", wire.Start(0), sim.now))  # it asks the origin for block 0
    sim.run(sim.core.add_origin(sim.now))
    asked = [f.block for f in sim.origin_pending]
    assert len(asked) == 2 and 0 not in asked  # not the block a fetches
    sim.have["a"].add(0)
    sim.run(sim.core.on_message("a", wire.Have(0), sim.now))
    assert ("a", 0) in sim.requests and 0 in sim.verified  # from the peer, not the origin
    sim.serve_origin()
    for _ in range(10):
        sim.serve_origin()
    assert sim.finished and sim.delivered == list(range(8))
    assert sim.core.bytes_from["peers"] == BLOCK


def test_bitfield_to_bytes():
    field = wire.Bitfield.from_blocks(11, [0, 3, 10])
    assert bitfield_to_bytes(field) == bytes([1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1])


@pytest.mark.parametrize("peers, wait, stranded", [
    # a silent peer alone holding blocks we lack: named once its requests timed out, not before
    ({"a": ("good", range(0, 5)), "b": ("silent", range(5, 10))}, 1.0, []),
    ({"a": ("good", range(0, 5)), "b": ("silent", range(5, 10))}, 2.5, ["b"]),
    # two silent peers holding the same lacking blocks: both
    ({"a": ("good", range(0, 5)), "b": ("silent", range(5, 10)), "c": ("silent", range(3, 10))}, 2.5, ["b", "c"]),
    # a silent peer whose blocks a responsive one holds too: they come from that one, nobody waits on it
    ({"a": ("good", range(0, 10)), "b": ("silent", range(0, 10))}, 2.5, []),
    # a silent peer holding only blocks we got from elsewhere
    ({"a": ("good", range(0, 10)), "b": ("silent", range(2, 4))}, 2.5, []),
])
def test_a_snubbed_peer_alone_holding_blocks_we_lack_is_named_stranded(peers, wait, stranded):
    sim = Sim(content(10 * BLOCK), config=PolicyConfig(request_timeout=2.0, retry_backoff=10.0))
    for name, (behaviour, blocks) in peers.items():
        sim.join(name, behaviour, set(blocks))
    sim.advance(wait)
    assert sorted(sim.core.stranded()) == stranded


def test_a_stranded_peer_that_delivers_again_is_named_no_longer():
    sim = Sim(content(10 * BLOCK), config=PolicyConfig(request_timeout=2.0, retry_backoff=1.0))
    sim.join("a", "good", set(range(5)))
    sim.join("b", "silent", set(range(5, 10)))
    sim.advance(2.5)
    assert sim.core.stranded() == ["b"]
    sim.behaviour["b"] = "good"  # its connection came back: the next request is answered
    sim.advance(20.0)
    assert sim.finished and sim.core.stranded() == []
