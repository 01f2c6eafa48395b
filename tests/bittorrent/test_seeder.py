"""What this node shares is seeded from the block store's own file, and a stock libtorrent client in its own
process fetches it byte-exact: by our magnet with only `x.pe`, by the .torrent, and by the web seed alone."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import socket
import sys
import threading

import pytest
from aiohttp import web

from addresses import LOOPBACK_NETWORKS
from bittorrent.seeder import Seeder
from bittorrent.session import BtSession
from swarm.content.manifest import build_manifest
from swarm.content.torrent import PIECE_LENGTH, magnet_link, torrent_of
from swarm.service.shares import ContentShared, ContentWithdrawn
from swarm.service.store_work import BytesBody, fill_entry
from swarm.store.disk import DiskBlockStore
from swarm.store.memory import MemoryBlockStore

CLIENT = pathlib.Path(__file__).with_name("stock_client.py")
ODD = 2 * PIECE_LENGTH + 12_345  # a last piece cut short


def stored(store, data: bytes, url: str | None = None):
    manifest, layer = build_manifest([data], len(data), url=url, validator='"v1"')
    fill_entry(store, manifest, layer, BytesBody(data), threading.Event())
    return manifest


async def stock_client(tmp_path: pathlib.Path, *args: str) -> tuple[dict, pathlib.Path]:
    """Run the stock client to the end: its JSON report and the directory it saved into."""
    save = tmp_path / f"client-{len(list(tmp_path.iterdir()))}"
    process = await asyncio.create_subprocess_exec(sys.executable, str(CLIENT), *args, "--save", str(save),
                                                   "--timeout", "60", stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    return json.loads(out), save


@pytest.fixture
async def seeding(tmp_path):
    store = DiskBlockStore(tmp_path / "blocks")
    session = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
    await session.start()
    seeder = Seeder(session, store)
    yield store, session, seeder
    seeder.close()
    await session.stop()
    store.close()


async def test_a_stock_client_fetches_by_our_magnet_with_only_our_address(seeding, tmp_path):
    store, session, seeder = seeding
    data = os.urandom(ODD)
    manifest = stored(store, data)
    seeder.on_share(ContentShared(manifest))
    torrent = seeder.seeded(manifest.root).torrent
    report, save = await stock_client(tmp_path, "--magnet", magnet_link(torrent, peers=[session.address]))
    assert report["complete"], report
    assert (save / manifest.root.hex()).read_bytes() == data
    assert sorted(p.name for p in (tmp_path / "blocks").iterdir() if p.suffix == ".data") == \
        [f"{manifest.root.hex()}.data"]  # seeded from the store's file: no second copy
    assert session.status(list(seeder.seeding.values()))["uploaded_bytes"] >= len(data)


async def test_a_stock_client_fetches_by_the_torrent_file(seeding, tmp_path):
    store, session, seeder = seeding
    data = os.urandom(PIECE_LENGTH // 3)  # one piece: no piece layers
    manifest = stored(store, data)
    seeder.seed(manifest)
    path = tmp_path / "content.torrent"
    path.write_bytes(seeder.seeded(manifest.root).torrent.data)
    host, port = session.address
    report, save = await stock_client(tmp_path, "--torrent", str(path), "--peer", f"{host}:{port}")
    assert report["complete"], report
    assert (save / manifest.root.hex()).read_bytes() == data


async def test_a_stock_client_fetches_from_the_web_seed_alone(tmp_path):
    """No peer at all: the origin's URL in the torrent is enough. (libtorrent 2.1.1 pads a v2-only torrent's one
    file to a whole piece and then asks a web seed for URL/NAME, so the file here is a whole number of pieces;
    see docs/bittorrent.md.)"""
    data = os.urandom(2 * PIECE_LENGTH)
    (tmp_path / "file.iso").write_bytes(data)
    app = web.Application()

    async def file(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(tmp_path / "file.iso")

    app.router.add_get("/file.iso", file)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        manifest, layer = build_manifest([data], len(data))
        path = tmp_path / "content.torrent"
        path.write_bytes(torrent_of(manifest, layer, web_seeds=[f"http://127.0.0.1:{port}/file.iso"]).data)
        report, save = await stock_client(tmp_path, "--torrent", str(path))
        assert report["complete"] and report["peers"] == 0, report
        assert (save / manifest.root.hex()).read_bytes() == data
    finally:
        await runner.cleanup()


async def test_a_withdrawn_content_stops_its_torrent(seeding):
    store, session, seeder = seeding
    manifest = stored(store, os.urandom(100_000))
    seeder.on_share(ContentShared(manifest))
    seeding_entry = seeder.seeding[manifest.root]
    assert store.info(manifest.root).pins == 0  # seeding pins nothing: the store may still evict it
    assert seeding_entry.handle in session.session.get_torrents()
    removed = seeder.stop(manifest.root, "linger time over")
    assert manifest.root not in seeder.seeding and seeder.seeded(manifest.root) is None  # nor exported
    await removed
    # Out of the session's torrents (libtorrent posts the alert after that; the handle itself may stay valid a
    # moment longer, while its last disk jobs and connections let go of the torrent)
    assert seeding_entry.handle not in session.session.get_torrents()
    seeder.on_share(ContentWithdrawn(manifest.root, "linger time over"))  # the event for what is gone already
    assert seeder.seeding == {}


async def test_evicting_seeded_content_stops_its_torrent_before_the_file_goes(tmp_path):
    store = DiskBlockStore(tmp_path / "blocks", capacity=300_000)  # room for one of the two
    session = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
    await session.start()
    seeder = Seeder(session, store)
    file_there_when_stopped = []
    stop_reading = session.stop_reading
    session.stop_reading = lambda one: (file_there_when_stopped.append(path.exists()), stop_reading(one))
    try:
        first = stored(store, os.urandom(200_000))
        seeder.on_share(ContentShared(first))
        path = tmp_path / "blocks" / f"{first.root.hex()}.data"
        handle = seeder.seeding[first.root].handle
        stored(store, os.urandom(200_000))  # evicts the first
        assert file_there_when_stopped == [True] and not path.exists()
        assert first.root not in store
        seeder.on_share(ContentWithdrawn(first.root, "evicted"))  # the store's event, as the service forwards it
        assert seeder.seeding == {} and not handle.is_valid()
    finally:
        seeder.close()
        await session.stop()
        store.close()


async def test_a_hybrid_is_seeded_beside_the_v2_torrent_and_both_stop_together(seeding):
    store, session, seeder = seeding
    manifest = stored(store, os.urandom(PIECE_LENGTH + 7))
    seeder.seed(manifest)
    hybrid = await seeder.hybrid(manifest.root)
    assert hybrid is not None and hybrid.info_hash_v1 is not None
    assert hybrid.info_hash != seeder.seeded(manifest.root).torrent.info_hash  # another info dict and info-hash
    assert await seeder.hybrid(manifest.root) is hybrid  # made once
    assert seeder.status()["torrents"] == 1 and store.info(manifest.root).pins == 0
    await seeder.stop(manifest.root, "linger time over")
    # Let go of by the session: neither is among its torrents. (A handle itself may stay valid a moment after the
    # removal's alert, while libtorrent's threads drop their last references to the torrent: under load, it did.)
    assert session.session.get_torrents() == []
    assert await seeder.hybrid(manifest.root) is None  # not seeded: nothing exported


async def test_what_the_rule_refuses_is_never_seeded(tmp_path):
    store = DiskBlockStore(tmp_path / "blocks")
    session = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
    await session.start()
    seeder = Seeder(session, store, refusal=lambda manifest: "its origin is on a private network")
    try:
        manifest = stored(store, os.urandom(50_000), url="http://10.0.0.7/secret.bin")
        seeder.on_share(ContentShared(manifest))
        assert seeder.seeding == {}
    finally:
        await session.stop()
        store.close()


async def test_a_store_that_keeps_no_file_seeds_nothing():
    store = MemoryBlockStore()
    session = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
    await session.start()
    try:
        seeder = Seeder(session, store)
        seeder.on_share(ContentShared(stored(store, os.urandom(50_000))))
        assert seeder.seeding == {}
    finally:
        await session.stop()


async def test_a_port_in_use_is_a_clear_error():
    first = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
    host, port = await first.start()
    try:
        from bittorrent.errors import ListenFailed

        with pytest.raises(ListenFailed, match=f"127.0.0.1:{port}"):
            await BtSession("127.0.0.1", port, reachable=LOOPBACK_NETWORKS).start()
    finally:
        await first.stop()


async def test_any_port_is_another_port_when_the_picked_ones_udp_twin_is_taken(monkeypatch):
    """Port 0: libtorrent binds TCP where the kernel says, then UDP to the same number, which another process's
    UDP socket may hold. Before, that start failed ("Address already in use"; two test workers met it); now a
    fresh session is started on another port."""
    import bittorrent.session as session_module

    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a UDP port whose TCP twin is free
    taken.bind(("127.0.0.1", 0))
    busy_port = taken.getsockname()[1]
    real, asked = session_module.session_settings, []

    def settings(host, port, **kwargs):  # the first session is given the taken pair, as the kernel might
        asked.append(port)
        return real(host, busy_port if len(asked) == 1 else port, **kwargs)

    monkeypatch.setattr(session_module, "session_settings", settings)
    session = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
    try:
        host, port = await session.start()
        assert len(asked) == 2 and port not in (0, busy_port)
    finally:
        await session.stop()
        taken.close()


async def test_a_torrent_libtorrent_cannot_read_is_no_longer_seeded_nor_exported(seeding):
    """libtorrent's file or torrent error (a file changed or gone behind the store's back) ends that torrent."""
    store, session, seeder = seeding
    manifest = stored(store, os.urandom(100_000))
    seeder.seed(manifest)
    session.on_failure(seeder.seeded(manifest.root).torrent.info_hash, "No such file or directory")
    assert seeder.seeded(manifest.root) is None
