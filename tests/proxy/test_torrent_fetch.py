"""`swarmproxy get FILE.torrent` and `get magnet:` (a real CLI process) through a proxy with the BitTorrent bridge,
from a stock libtorrent seeder in its own process: byte-exact, into the store and shared; what is refused, and
why."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import sys

from proxy.server import ProxyServer

from ..bittorrent.stock_dht import stock_dht
from .conftest import proxy_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEEDER = ROOT / "tests" / "bittorrent" / "stock_seeder.py"
PIECE = 64 * 1024


@contextlib.asynccontextmanager
async def stock_seeder(path: pathlib.Path, torrent: pathlib.Path, listen: str = "127.0.0.1",
                       dht: tuple[str, ...] = ()):
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(SEEDER), "--file", str(path), "--torrent-out", str(torrent), "--listen", listen,
        "--piece-length", str(PIECE), *(f"--dht-node={node}" for node in dht),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        report = json.loads(await process.stdout.readline())
        yield f"{listen}:{report['port']}", report["info_hash"]
    finally:
        if process.stdin is not None:
            process.stdin.close()
        await process.wait()


@contextlib.asynccontextmanager
async def bridged(tmp_path: pathlib.Path):
    server = ProxyServer(proxy_config(tmp_path, peer_listen="127.0.0.1:0", bt_listen="127.0.0.1:0"))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def get(server: ProxyServer, *args: str, cwd: pathlib.Path) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", "get", "--proxy", server.addresses["proxy"], *args, cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=asyncio.subprocess.PIPE)
    _, err = await process.communicate()
    return process.returncode or 0, err.decode()


def content(tmp_path: pathlib.Path, size: int) -> tuple[bytes, pathlib.Path]:
    data = os.urandom(size)
    (tmp_path / "seed").mkdir(exist_ok=True)
    path = tmp_path / "seed" / "movie.mkv"
    path.write_bytes(data)
    return data, path


async def test_a_torrent_file_is_fetched_by_our_fetch_stored_and_shared(tmp_path):
    data, path = content(tmp_path, 12 * PIECE + 999)
    async with bridged(tmp_path) as server, stock_seeder(path, tmp_path / "movie.torrent") as (peer, _):
        (tmp_path / "out").mkdir()
        code, err = await get(server, str(tmp_path / "movie.torrent"), "--peer", peer, cwd=tmp_path / "out")
        assert code == 0, err
        assert (tmp_path / "out" / "movie.mkv").read_bytes() == data  # named as the torrent names it
        await server.stats.wait_for_requests(1)  # the client has every byte before the proxy closes its record
        engine = server.engine
        roots = [root for root in engine.store.roots() if engine.store.complete(root)]
        assert len(roots) == 1 and engine.store.manifest(roots[0]).size == len(data)
        assert roots[0] in engine.service.shares.complete  # shared complete, like any other content
        assert server.stats.counters["bytes_bittorrent"] == len(data)


async def test_a_magnet_gets_the_info_dict_from_its_peer_and_the_file_whole(tmp_path):
    data, path = content(tmp_path, 9 * PIECE + 7)
    async with bridged(tmp_path) as server, stock_seeder(path, tmp_path / "m.torrent") as (peer, info_hash):
        magnet = f"magnet:?xt=urn:btmh:1220{info_hash}&dn=film.mkv&x.pe={peer}&tr=http://tracker.example/announce"
        code, err = await get(server, magnet, "-o", str(tmp_path / "got.bin"), cwd=tmp_path)
        assert code == 0, err
        assert (tmp_path / "got.bin").read_bytes() == data
        await server.stats.wait_for_requests(1)
        engine = server.engine
        assert any(engine.store.complete(root) for root in engine.store.roots())


async def test_what_is_refused_says_why(tmp_path):
    data, path = content(tmp_path, 3 * PIECE)
    async with bridged(tmp_path) as server, stock_seeder(path, tmp_path / "r.torrent", "127.0.5.9") as (peer, ih):
        cases = [
            (f"magnet:?xt=urn:btih:{'ab' * 20}", "v1-only"),
            ("not-a-file-or-url", "not an http"),
        ]
        for what, said in cases:
            code, err = await get(server, what, cwd=tmp_path)
            assert code in (2, 4) and said in err, err
        # A private peer not listed in --share-private-origins (the tests list 127.0.0.1 only) is not dialled.
        code, err = await get(server, str(tmp_path / "r.torrent"), "--peer", peer, cwd=tmp_path)
        assert code == 4 and "--share-private-origins" in err, err


async def test_without_a_session_get_says_how_to_start_one(tmp_path):
    server = ProxyServer(proxy_config(tmp_path, peer_listen="127.0.0.1:0"))  # the suite's guard: no Internet mode
    await server.start()
    try:
        code, err = await get(server, f"magnet:?xt=urn:btmh:1220{'ab' * 32}", cwd=tmp_path)
        assert code == 4 and "--bt-listen" in err and "Internet mode" in err, err
    finally:
        await server.stop()


async def test_a_magnet_without_peers_finds_them_on_the_mainline_dht(tmp_path):
    """The Internet mode's session, no --bt-listen: the magnet names no peer; libtorrent finds the stock seeder,
    which announced the torrent on the DHT, by its info-hash."""
    data, path = content(tmp_path, 5 * PIECE + 3)
    with stock_dht() as nodes:
        server = ProxyServer(proxy_config(tmp_path, peer_listen="127.0.0.1:0", mainline_bootstrap=",".join(nodes)))
        await server.start()
        try:
            assert server.bridge is None and "bittorrent" in server.addresses
            async with stock_seeder(path, tmp_path / "d.torrent", dht=nodes) as (_peer, info_hash):
                code, err = await get(server, f"magnet:?xt=urn:btmh:1220{info_hash}&dn=film.mkv",
                                      "-o", str(tmp_path / "got.bin"), cwd=tmp_path)
                assert code == 0, err
                assert (tmp_path / "got.bin").read_bytes() == data
        finally:
            await server.stop()


async def test_our_peers_and_the_bittorrent_swarm_together_nothing_twice(tmp_path):
    """Node B holds the file's first half and is found in our swarm (as a node still fetching it is); A downloads
    the torrent: our fetch's picker asks B for the blocks it holds and the stock seeder (the fetch's Range source)
    for the rest; every byte comes once, from one or the other."""
    from swarm.content.manifest import build_manifest

    data, path = content(tmp_path, 40 * PIECE + 5)
    holder = ProxyServer(proxy_config(tmp_path / "b", peer_listen="127.0.0.1:0", dht_listen="127.0.0.1:0"))
    await holder.start()
    server = ProxyServer(proxy_config(tmp_path / "a", peer_listen="127.0.0.1:0", bt_listen="127.0.0.1:0",
                                      dht_listen="127.0.0.1:0", bootstrap=[holder.addresses["dht"]]))
    await server.start()
    try:
        await server._bootstrap_task
        engine = holder.engine
        manifest, layer = build_manifest([data], len(data), block_size=PIECE)
        engine.store.create(manifest, layer)
        for block in range(manifest.num_blocks // 2):
            offset, length = manifest.block_span(block)
            assert engine.store.write_block(manifest.root, block, data[offset:offset + length])
        engine.service.shares.fetching(manifest)
        await engine.service.settled()  # announced
        async with stock_seeder(path, tmp_path / "t.torrent") as (peer, _):
            code, err = await get(server, str(tmp_path / "t.torrent"), "--peer", peer, "-o",
                                  str(tmp_path / "got.bin"), cwd=tmp_path)
            assert code == 0, err
            assert (tmp_path / "got.bin").read_bytes() == data
            await server.stats.wait_for_requests(1)
        counters = server.stats.counters
        half = manifest.block_span(manifest.num_blocks // 2)[0]
        assert 0 < counters["bytes_peers"] <= half  # B gave blocks, only of those it holds...
        assert counters["bytes_peers"] + counters["bytes_bittorrent"] == len(data)  # ... the swarm the rest, once
    finally:
        await server.stop()
        await holder.stop()


async def test_a_torrent_this_node_seeds_comes_from_its_store_which_stays(tmp_path):
    """`get` of the magnet `torrent export` printed: the same info-hash as the seed's. libtorrent hands back the
    seed's handle for a duplicate, and removing the download's torrent with its files deleted the store's file;
    now the file comes from the store, and the seed goes on. A name the torrent gives never overwrites a file."""
    from swarm.content.manifest import build_manifest
    from swarm.service.store_work import BytesBody, fill_entry

    async with bridged(tmp_path) as server:
        engine = server.engine
        data = os.urandom(3 * 1024 * 1024 + 11)
        manifest, layer = build_manifest([data], len(data), url="http://192.31.196.1/pub/x.iso", validator='"1"')
        await engine.service.in_thread(manifest.root, lambda stop: fill_entry(engine.store, manifest, layer,
                                                                               BytesBody(data), stop))
        engine.service.share(manifest)
        export = await server.bridge.export(manifest.root)
        assert export is not None
        (tmp_path / "out").mkdir()
        code, err = await get(server, export.magnet, cwd=tmp_path / "out")
        assert code == 0, err
        assert (tmp_path / "out" / "x.iso").read_bytes() == data
        await server.stats.wait_for_requests(1)
        assert engine.store.complete(manifest.root)
        location = engine.store.block_location(manifest.root, 0)
        assert location is not None and pathlib.Path(location.path).stat().st_size == len(data)
        assert server.bridge.seeder.seeded(manifest.root) is not None  # still seeded
        code, err = await get(server, export.magnet, cwd=tmp_path / "out")  # x.iso exists now
        assert code == 6 and "exists already" in err and "-o" in err, err
        assert (tmp_path / "out" / "x.iso").read_bytes() == data


async def test_a_download_that_breaks_answers_and_never_hangs(tmp_path, monkeypatch):
    """Whatever the job raises before the head (here libtorrent refusing a torrent our parser took, and a bug),
    the client gets an answer saying so; before, the handler waited for ever on a queue nobody would fill."""
    from bittorrent.session import BtSession

    data, path = content(tmp_path, 2 * PIECE)
    async with bridged(tmp_path) as server, stock_seeder(path, tmp_path / "b.torrent") as (peer, _):
        for raised, code, said in ((RuntimeError("invalid length of torrent"), 5, "invalid length"),
                                   (ValueError("a bug"), 4, "500 the download failed: a bug")):
            def refuse(*_args, _raised=raised, **_kwargs):
                raise _raised
            monkeypatch.setattr(BtSession, "download", refuse)
            got, err = await get(server, str(tmp_path / "b.torrent"), "--peer", peer, "-o", "-", cwd=tmp_path)
            assert got == code and said in err, err
