"""Many SwarmNodes in one event loop over the memory transport: seeds, leechers, adversaries.

Every download is compared byte for byte with the content."""

from __future__ import annotations

import asyncio
import hashlib
import inspect

import pytest

from swarm.content.manifest import MAX_BLOCK_SIZE, build_manifest
from swarm.core.policy import PolicyConfig
from swarm.core.serve import SendBlock
from swarm.errors import FetchFailed, HashMismatch
from swarm.net import wire
from swarm.net.memory import MemoryNetwork, MemoryTransport
from swarm.service.node import FETCH_STALL_TIMEOUT, SwarmNode
from swarm.service.report import FetchReport
from swarm.service.swarm_service import SwarmService
from swarm.store.memory import MemoryBlockStore

BLOCK = 16384


def content(size: int, seed: int = 0) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(b"%d/%d" % (seed, counter)).digest() * 64
        counter += 1
    return bytes(out[:size])


FAST = PolicyConfig(request_timeout=1.0, retry_backoff=0.2)


class Swarm:
    def __init__(self) -> None:
        self.network = MemoryNetwork()
        self.nodes: list[SwarmNode] = []

    async def node(self, cls: type[SwarmNode] = SwarmNode, **kwargs) -> tuple[SwarmNode, tuple[str, int]]:
        kwargs.setdefault("policy", FAST)
        node = cls(MemoryBlockStore(), MemoryTransport(self.network), **kwargs)
        address = await node.start(f"10.0.0.{len(self.nodes) + 1}", 0)
        self.nodes.append(node)
        return node, address

    async def seed(self, data: bytes, *, block_size: int = BLOCK, **kwargs):
        node, address = await self.node(**kwargs)
        manifest, layer = build_manifest([data], len(data), block_size=block_size)
        node.store.create(manifest, layer, pin=True)
        for block in range(manifest.num_blocks):
            offset, length = manifest.block_span(block)
            assert node.store.write_block(manifest.root, block, data[offset:offset + length])
        node.share(manifest.root)
        return node, address, manifest

    async def close(self) -> None:
        for node in self.nodes:
            await node.close()


@pytest.fixture
async def swarm():
    s = Swarm()
    yield s
    await s.close()


async def download(node: SwarmNode, manifest, peers, **kwargs) -> bytes:
    return b"".join([chunk async for chunk in node.fetch(manifest, peers, **kwargs)])


async def test_one_seed_one_leecher(swarm):
    data = content(40 * BLOCK + 123)
    _, seed_address, manifest = await swarm.seed(data)
    leecher, _ = await swarm.node()
    assert await download(leecher, manifest, [seed_address]) == data
    assert leecher.store.complete(manifest.root)


async def test_peer_count_follows_the_fetch(swarm):
    data = content(8 * BLOCK)
    _, seed_address, manifest = await swarm.seed(data)
    leecher, _ = await swarm.node()
    assert leecher.peer_count(manifest.root) is None  # no fetch
    chunks = leecher.fetch(manifest, [seed_address, ("10.9.9.9", 1)])
    got = [await anext(chunks)]
    assert leecher.peer_count(manifest.root) in (1, 2)  # the seed, and perhaps the dead address still connecting
    got += [chunk async for chunk in chunks]
    assert b"".join(got) == data
    assert leecher.peer_count(manifest.root) is None  # over


async def test_four_seeds_one_leecher_uses_all(swarm):
    data = content(64 * BLOCK)
    seeds = [await swarm.seed(data) for _ in range(4)]
    manifest = seeds[0][2]
    leecher, _ = await swarm.node()
    assert await download(leecher, manifest, [address for _, address, _ in seeds]) == data
    assert sum(1 for node, _, _ in seeds if node.bytes_uploaded) >= 3  # the work was spread


async def test_peers_added_during_a_fetch_take_part(swarm):
    data = content(64 * BLOCK)
    first, first_address, manifest = await swarm.seed(data)
    later, later_address, _ = await swarm.seed(data)
    leecher, _ = await swarm.node()
    assert leecher.add_peers(manifest.root, [later_address]) == 0  # no fetch of it runs yet
    chunks = leecher.fetch(manifest, [first_address], window=1)
    received = [await anext(chunks)]
    assert leecher.add_peers(manifest.root, [later_address]) == 1
    received += [chunk async for chunk in chunks]
    assert b"".join(received) == data
    assert later.bytes_uploaded > 0  # the peer that joined late served blocks
    assert leecher.add_peers(manifest.root, [later_address]) == 0  # the fetch is over


async def test_manifest_fetched_by_root_and_checked(swarm):
    data = content(5 * BLOCK)
    _, address, manifest = await swarm.seed(data)
    leecher, _ = await swarm.node()
    assert await leecher.fetch_manifest(manifest.root, [address]) == manifest
    with pytest.raises(FetchFailed, match="not shared here|closed"):
        await leecher.fetch_manifest(b"\x01" * 32, [address], timeout=2)


async def test_one_seed_twenty_leechers_share_among_themselves(swarm):
    data = content(64 * BLOCK, seed=3)
    # The seed is the bottleneck; a slow answer is not a dead peer, so requests may wait long.
    seed, seed_address, manifest = await swarm.seed(data, upload_rate=32 * BLOCK)
    patient = PolicyConfig(request_timeout=30)
    leechers = [await swarm.node(policy=patient) for _ in range(20)]
    everyone = [seed_address] + [address for _, address in leechers]
    for node, _ in leechers:
        node.share(manifest.root)  # leechers serve what they have while they fetch

    async def fetch(node, own):  # no streaming window: a file download, rarest first
        return await download(node, manifest, [a for a in everyone if a != own], window=0)

    results = await asyncio.gather(*(fetch(node, address) for node, address in leechers))
    assert all(result == data for result in results)
    # 20 copies left the swarm; the rate-limited seed served only a few of them, the leechers the rest.
    from_leechers = sum(node.bytes_uploaded for node, _ in leechers)
    assert seed.bytes_uploaded + from_leechers >= 20 * len(data)
    assert seed.bytes_uploaded < 6 * len(data) < from_leechers


async def test_a_range_in_the_middle(swarm):
    data = content(30 * BLOCK)
    _, address, manifest = await swarm.seed(data)
    leecher, _ = await swarm.node()
    assert await download(leecher, manifest, [address], start=5 * BLOCK + 7, end=17 * BLOCK + 3) == \
        data[5 * BLOCK + 7:17 * BLOCK + 3]


class LyingNode(SwarmNode):
    """Serves zeros instead of the content."""

    async def _send_block(self, connection, core, action: SendBlock) -> None:
        await connection.send_block(action.block, action.offset, bytes(action.length))


class BadLayerNode(SwarmNode):
    def _apply_serve(self, connection, core, actions):
        patched = []
        for action in actions:
            message = getattr(action, "message", None)
            if isinstance(message, wire.HashResponse):
                hashes = (bytes(32),) + message.hashes[1:]
                action = type(action)(wire.HashResponse(message.first, message.count, hashes, ()))
            patched.append(action)
        super()._apply_serve(connection, core, patched)


class SilentNode(SwarmNode):
    """Accepts requests and never answers them."""

    async def _send_block(self, connection, core, action) -> None:
        await asyncio.Future()


class DisconnectingNode(SwarmNode):
    """Sends half a block frame, then drops the connection."""

    async def _send_block(self, connection, core, action) -> None:
        frame = wire.encode_block_header(action.block, action.offset, action.length) + bytes(action.length // 2)
        connection.send_raw(frame)
        connection.drop()


class FloodingNode(SwarmNode):
    """Answers a handshake with thousands of useless frames."""

    def _apply_serve(self, connection, core, actions):
        super()._apply_serve(connection, core, actions)
        for _ in range(5000):
            connection.send_nowait(wire.KeepAlive())
            connection.send_nowait(wire.Have(0))


@pytest.mark.parametrize("adversary", [LyingNode, BadLayerNode, SilentNode, DisconnectingNode, FloodingNode])
async def test_adversary_next_to_an_honest_seed(swarm, adversary):
    data = content(24 * BLOCK, seed=7)
    _, bad_address, manifest = await swarm.seed(data, cls=adversary)
    _, good_address, _ = await swarm.seed(data)
    leecher, _ = await swarm.node()
    # The adversary is listed first, so it is asked first (and for the hash layer).
    assert await download(leecher, manifest, [bad_address, good_address]) == data


async def test_only_adversaries_fail_cleanly(swarm):
    data = content(8 * BLOCK)
    _, address, manifest = await swarm.seed(data, cls=LyingNode)
    leecher, _ = await swarm.node()
    with pytest.raises(FetchFailed, match="no source left"):
        await download(leecher, manifest, [address])
    assert not leecher.store.has_block(manifest.root, 0) if manifest.root in leecher.store.roots() else True


async def test_nobody_to_ask_fails_at_once(swarm):
    data = content(2 * BLOCK)
    manifest, _ = build_manifest([data], len(data), block_size=BLOCK)
    leecher, _ = await swarm.node()
    with pytest.raises(FetchFailed):
        await download(leecher, manifest, [("10.1.1.1", 1)])


class TrickleOrigin:
    """An origin Range source shared with a crowd: each block arrives in `pieces` pieces, `gap` s apart."""

    def __init__(self, data: bytes, pieces: int, gap: float) -> None:
        self.data, self.pieces, self.gap = data, pieces, gap
        self.bytes_received = 0

    async def fetch(self, offset: int, length: int) -> bytes:
        for _ in range(self.pieces):
            await asyncio.sleep(self.gap)  # the emulated link, not a synchronisation
            self.bytes_received += length // self.pieces
        return self.data[offset:offset + length]


@pytest.mark.parametrize("pieces,fails", [(4, False), (1, True)], ids=["trickling", "silent"])
async def test_an_origin_still_sending_is_not_a_stalled_fetch(swarm, pieces, fails):
    # A block takes 0.4 s, longer than the 0.25 s stall timeout: bytes arriving every 0.1 s keep the
    # fetch alive; an origin silent for the whole 0.4 s is a stall.
    data = content(2 * BLOCK, seed=11)
    manifest, layer = build_manifest([data], len(data), block_size=BLOCK)
    leecher, _ = await swarm.node()
    origin = TrickleOrigin(data, pieces, 0.4 / pieces)
    fetch = download(leecher, manifest, [], origin=origin, layer=layer, stall_timeout=0.25)
    if fails:
        with pytest.raises(FetchFailed, match="no block arrived"):
            await fetch
    else:
        assert await fetch == data


class AskedOrigin(TrickleOrigin):
    """An origin Range source that notes every block asked of it, answered or taken back."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data, 1, 0.0)
        self.asked: list[int] = []

    async def fetch(self, offset: int, length: int) -> bytes:
        self.asked.append(offset // BLOCK)
        return await super().fetch(offset, length)


class HeldNode(SwarmNode):
    """Answers a connection only once `release` is set (`arrived` says one came)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.arrived, self.release = asyncio.Event(), asyncio.Event()

    async def _serve(self, connection) -> None:
        self.arrived.set()
        await self.release.wait()
        await super()._serve(connection)


async def test_the_origin_waits_for_the_providers_first_answer(swarm):
    # Asked at once, the origin was the only source until the providers' BITFIELDs came: every fetch of a crowd
    # asked the busy origin for its first blocks and took them back a round trip later.
    data = content(6 * BLOCK, seed=13)
    seed, seed_address, manifest = await swarm.seed(data, cls=HeldNode)
    leecher, _ = await swarm.node()
    origin = AskedOrigin(data)
    layer = build_manifest([data], len(data), block_size=BLOCK)[1]
    fetch = asyncio.ensure_future(download(leecher, manifest, [seed_address], origin=origin, layer=layer))
    await seed.arrived.wait()
    assert origin.asked == []  # the fetch began, its provider has not answered yet
    seed.release.set()
    assert await fetch == data


async def test_a_silent_provider_holds_the_origin_back_only_so_long(swarm):
    data = content(2 * BLOCK, seed=15)
    _, seed_address, manifest = await swarm.seed(data, cls=HeldNode)  # never released: it never answers
    leecher, _ = await swarm.node()
    origin = AskedOrigin(data)
    layer = build_manifest([data], len(data), block_size=BLOCK)[1]
    assert await download(leecher, manifest, [seed_address], origin=origin, layer=layer) == data
    assert sorted(origin.asked) == [0, 1]  # after ORIGIN_AFTER_PEERS


async def test_the_origin_is_offered_once_every_provider_failed(swarm):
    data = content(3 * BLOCK + 7, seed=14)
    manifest, layer = build_manifest([data], len(data), block_size=BLOCK)
    leecher, _ = await swarm.node()
    origin, report = AskedOrigin(data), FetchReport()
    assert await download(leecher, manifest, [("10.1.1.1", 1), ("10.1.1.2", 1)], origin=origin, layer=layer,
                          report=report) == data
    assert sorted(origin.asked) == [0, 1, 2, 3] and report == FetchReport(bytes_origin=len(data))


class SlowNode(SwarmNode):
    """Serves every block 0.15 s late: a slow but live peer."""

    async def _send_block(self, connection, core, action: SendBlock) -> None:
        await asyncio.sleep(0.15)  # the emulated slow peer, not a synchronisation
        await super()._send_block(connection, core, action)


async def test_a_slow_peer_whose_blocks_keep_coming_is_not_a_stalled_fetch(swarm):
    # Blocks every 0.15 s against a 0.25 s stall timeout: each one is progress, whatever the watchdog's quiet-spell
    # logging does with the rest of the timeout.
    data = content(6 * BLOCK, seed=12)
    _, seed_address, manifest = await swarm.seed(data, cls=SlowNode)
    leecher, _ = await swarm.node()
    assert await download(leecher, manifest, [seed_address], stall_timeout=0.25) == data


async def test_the_report_counts_what_the_fetch_saw(swarm):
    data = content(24 * BLOCK, seed=5)
    _, bad_address, manifest = await swarm.seed(data, cls=LyingNode)
    _, good_address, _ = await swarm.seed(data)
    leecher, _ = await swarm.node()
    report = FetchReport()
    assert await download(leecher, manifest, [bad_address, good_address], report=report) == data
    assert report.hash_failures >= 1
    assert (report.bytes_peers, report.bytes_origin) == (len(data), 0)
    assert leecher.fetch_totals == report  # the node's totals, over its one fetch


async def test_origin_bytes_are_reported_apart(swarm):
    data = content(4 * BLOCK + 5, seed=6)
    manifest, layer = build_manifest([data], len(data), block_size=BLOCK)
    leecher, _ = await swarm.node()
    report = FetchReport()
    origin = TrickleOrigin(data, 1, 0.0)
    assert await download(leecher, manifest, [], origin=origin, layer=layer, report=report) == data
    assert report == FetchReport(bytes_origin=len(data))


async def test_unshared_content_is_never_served(swarm):
    data = content(4 * BLOCK)
    seed, address, manifest = await swarm.seed(data)
    seed.unshare(manifest.root)
    leecher, _ = await swarm.node()
    with pytest.raises(FetchFailed):
        await download(leecher, manifest, [address])


async def test_disk_full_still_delivers(swarm):
    data = content(12 * BLOCK)
    _, address, manifest = await swarm.seed(data)
    leecher, _ = await swarm.node()
    leecher.store.write_error = OSError(28, "No space left on device")
    assert await download(leecher, manifest, [address]) == data
    assert not leecher.store.complete(manifest.root)


def test_layer_mismatch_is_a_peer_error():
    data = content(3 * BLOCK)
    manifest, layer = build_manifest([data], len(data), block_size=BLOCK)
    with pytest.raises(HashMismatch):
        manifest.verify_layer([bytes(32)] + layer[1:])


async def test_into_store_hands_stored_blocks_over_empty(swarm):
    data = content(12 * BLOCK + 5)
    _, address, manifest = await swarm.seed(data)
    leecher, _ = await swarm.node()
    chunks = [chunk async for chunk in leecher.fetch(manifest, [address], into_store=True)]
    assert chunks == [b""] * manifest.num_blocks
    assert b"".join(leecher.store.read_block(manifest.root, i) for i in range(manifest.num_blocks)) == data


async def test_into_store_hands_refused_blocks_over_as_bytes(swarm):
    data = content(12 * BLOCK)
    _, address, manifest = await swarm.seed(data)
    leecher, _ = await swarm.node()
    leecher.store.write_error = OSError(28, "No space left on device")
    assert await download(leecher, manifest, [address], into_store=True) == data


class GatedStore(MemoryBlockStore):
    """A store whose block writes wait for `gate` (they run in the writer's thread): a slow disk."""

    def __init__(self) -> None:
        super().__init__()
        import threading
        self.gate = threading.Event()

    def write_block(self, root, index, data):
        self.gate.wait(10)
        return super().write_block(root, index, data)


@pytest.mark.parametrize("bounded", [True, False])
async def test_blocks_waiting_for_the_store_are_bounded(swarm, monkeypatch, bounded):
    data = content(64 * BLOCK, seed=5)
    seeds = [await swarm.seed(data) for _ in range(2)]
    manifest = seeds[0][2]
    limit = 4 * BLOCK if bounded else 1 << 40
    leecher, _ = await swarm.node(max_pending_writes=limit)
    store = GatedStore()
    leecher.store = store  # before the fetch: the run takes its store from the node
    store.add_listener(leecher._on_store_event)
    sent = []  # what the leecher's core asked to send: a CANCEL would mean a request timed out
    from swarm.service import node as node_module
    apply = node_module._FetchRun.apply
    monkeypatch.setattr(node_module._FetchRun, "apply", lambda run, actions: (
        sent.extend(getattr(a, "message", None) for a in actions), apply(run, actions))[1])
    fetch = asyncio.ensure_future(download(leecher, manifest, [address for _, address, _ in seeds],
                                           into_store=True))
    await asyncio.sleep(0)
    run = leecher._fetching[manifest.root]
    peak = 0
    # Longer than FAST's 1 s request timeout: the pause must not count against the peers.
    for _ in range(150):
        peak = max(peak, len(run.memory))
        await asyncio.sleep(0.01)
    if bounded:
        # Each peer's loop may take one more message after the last check: the bound plus a block per peer.
        assert 4 <= peak <= 4 + 2 and run.paused_since is not None
        assert not any(isinstance(m, wire.Cancel) for m in sent)
    else:
        assert peak == 64  # everything arrived and waits in memory
    store.gate.set()
    assert await fetch == b""  # into_store: blocks come from the store
    assert b"".join(store.read_block(manifest.root, i) for i in range(64)) == data
    assert run.pending == 0


async def test_the_largest_block_a_manifest_may_have_travels_between_peers(swarm):
    # A block size a manifest allows but the wire's limits refuse would make that content unfetchable from peers.
    data = content(MAX_BLOCK_SIZE + 1000)
    _, address, manifest = await swarm.seed(data, block_size=MAX_BLOCK_SIZE)
    leecher, _ = await swarm.node()
    assert await download(leecher, manifest, [address]) == data


@pytest.mark.parametrize("fetch", [SwarmNode.fetch, SwarmService.fetch], ids=["node", "service"])
def test_a_fetch_that_verifies_nothing_fails_after_the_one_default(fetch):
    """The node said 60 s, the service over it 30 s: one constant now, the 30 s every proxy download used."""
    assert inspect.signature(fetch).parameters["stall_timeout"].default == FETCH_STALL_TIMEOUT == 30.0


async def test_a_fetch_names_the_silent_peer_that_alone_holds_blocks_it_lacks(swarm):
    """The cluster's entry plan has one server show a member some blocks; when that server's requests time out
    the fetch names it (`SwarmNode.stranded`), and once another server shows those blocks the fetch ends."""
    data = content(24 * BLOCK, seed=3)
    shows: dict[str, frozenset[int] | None] = {"blocks": frozenset(range(12))}
    honest, honest_address, manifest = await swarm.seed(data, shown=lambda root, peer: shows["blocks"])
    silent, silent_address, _ = await swarm.seed(data, cls=SilentNode)
    leecher, _ = await swarm.node()
    assert leecher.stranded(manifest.root) == []  # no fetch
    chunks = leecher.fetch(manifest, [honest_address, silent_address], window=0)
    got = [await anext(chunks)]
    async with asyncio.timeout(10):  # FAST's 1 s request timeout, on the loop's clock
        while leecher.stranded(manifest.root) != [silent.node_id]:
            await asyncio.sleep(0.01)
    shows["blocks"] = None  # what the cluster's other servers do on reading the member's record
    assert honest.reveal() == 12
    got += [chunk async for chunk in chunks]
    assert b"".join(got) == data
    assert leecher.stranded(manifest.root) == []  # the fetch is over
