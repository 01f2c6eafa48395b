"""Downloading from stock libtorrent seeders in their own processes (`bittorrent.download`): byte-exact by the
.torrent and by a magnet (the info dict from the seeder), only the pieces asked for, and a seeder serving a
corrupted piece caught by the piece layer, banned, the piece fetched again from another."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import sys

import pytest

from addresses import LOOPBACK_NETWORKS
from bittorrent.download import TorrentSource
from bittorrent.session import BtSession
from bittorrent.target import parse_info, parse_torrent

SEEDER = pathlib.Path(__file__).with_name("stock_seeder.py")
PIECE = 64 * 1024
SIZE = 10 * PIECE + 4321  # eleven pieces, the last one short


@contextlib.asynccontextmanager
async def stock_seeder(path: pathlib.Path, torrent: pathlib.Path, listen: str, *extra: str):
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(SEEDER), "--file", str(path), "--torrent-out", str(torrent), "--listen", listen,
        "--piece-length", str(PIECE), *extra, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        report = json.loads(await process.stdout.readline())
        yield (listen, report["port"])
    finally:
        if process.stdin is not None:
            process.stdin.close()
        await process.wait()


@pytest.fixture
async def session():
    bt = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
    await bt.start()
    yield bt
    await bt.stop()


@pytest.fixture
def content(tmp_path):
    data = os.urandom(SIZE)
    (tmp_path / "seed").mkdir()
    path = tmp_path / "seed" / "file.bin"
    path.write_bytes(data)
    return data, path


async def read_all(source: TorrentSource, size: int, step: int) -> bytes:
    parts = await asyncio.gather(*[source.fetch(offset, min(step, size - offset)) for offset in range(0, size, step)])
    return b"".join(parts)


async def test_a_torrent_from_a_stock_seeder_byte_exact_and_only_what_is_asked(session, content, tmp_path):
    data, path = content
    async with stock_seeder(path, tmp_path / "f.torrent", "127.0.5.1") as peer:
        target = parse_torrent((tmp_path / "f.torrent").read_bytes())
        download = session.download(target.info_hash_v2, tmp_path / "staging", torrent=target.data, peers=[peer])
        source = TorrentSource(download, file_offset=0, size=target.size, piece_length=target.piece_length)
        assert await source.fetch(PIECE + 5, 100) == data[PIECE + 5:PIECE + 105]  # inside one piece
        assert await source.fetch(3 * PIECE - 10, 20) == data[3 * PIECE - 10:3 * PIECE + 10]  # across two
        had = [download.handle.have_piece(i) for i in range(11)]
        assert had == [i in (1, 2, 3) for i in range(11)]  # nothing else: libtorrent fetched only what was asked
        assert await read_all(source, SIZE, 100_000) == data
        assert download.hash_failures == 0
        await session.end_download(download)
    assert not (tmp_path / "staging").exists()  # libtorrent's copy is gone


async def test_a_magnet_gets_its_info_dict_from_the_seeder(session, content, tmp_path):
    data, path = content
    async with stock_seeder(path, tmp_path / "f.torrent", "127.0.5.1") as peer:
        reference = parse_torrent((tmp_path / "f.torrent").read_bytes())
        download = session.download(reference.info_hash_v2, tmp_path / "staging", peers=[peer])
        async with asyncio.timeout(30):
            info = await download.metadata
        target = parse_info(info, expected_v2=reference.info_hash_v2)
        assert (target.root, target.size) == (reference.root, reference.size)
        source = TorrentSource(download, file_offset=0, size=target.size, piece_length=target.piece_length)
        assert await read_all(source, SIZE, 3 * PIECE) == data
        await session.end_download(download)


async def test_a_seeder_of_a_corrupted_piece_is_banned_and_the_piece_comes_from_another(session, content, tmp_path):
    data, path = content
    async with stock_seeder(path, tmp_path / "bad.torrent", "127.0.5.2", "--corrupt-piece", "4") as liar:
        target = parse_torrent((tmp_path / "bad.torrent").read_bytes())
        download = session.download(target.info_hash_v2, tmp_path / "staging", torrent=target.data, peers=[liar])
        source = TorrentSource(download, file_offset=0, size=target.size, piece_length=target.piece_length)
        piece = asyncio.ensure_future(source.fetch(4 * PIECE, PIECE))
        async with asyncio.timeout(30):
            while download.hash_failures == 0:  # the liar's piece failed the piece layer's check...
                await asyncio.sleep(0.05)
        assert not piece.done()  # ... and nothing of it was handed over
        async with stock_seeder(path, tmp_path / "good.torrent", "127.0.5.3") as honest:
            download.connect([honest])
            assert await piece == data[4 * PIECE:5 * PIECE]
            assert await read_all(source, SIZE, 2 * PIECE) == data
        assert session.status([])["banned"] == ["127.0.5.2"]
        assert "127.0.5.2" not in {peer.ip[0] for peer in download.handle.get_peer_info()}
        await session.end_download(download)
