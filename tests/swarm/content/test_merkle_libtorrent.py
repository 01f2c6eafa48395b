"""Test vectors from an independent implementation: libtorrent's BEP 52 `pieces root` and `piece layers`.

libtorrent (C++) hashes the file itself; we only write the bytes and read the generated torrent back.
"""

import random

import libtorrent
import pytest

from swarm.content import merkle
from swarm.content.manifest import build_manifest, choose_block_size

KIB = 1024
MIB = 1024 * KIB

_random = random.Random(20240603)
SIZES = [1, 16 * KIB, 16 * KIB + 1, 1 * MIB, 10 * MIB + 3] + sorted(_random.randrange(1, 3 * MIB) for _ in range(4))


def libtorrent_hashes(tmp_path, data: bytes, piece_size: int, flags) -> tuple[bytes, list[bytes]]:
    """`(pieces root, piece layer)` that libtorrent computes for a single file holding `data`."""
    path = tmp_path / "content"
    path.write_bytes(data)
    creator = libtorrent.create_torrent(libtorrent.list_files(str(path)), piece_size, flags)
    libtorrent.set_piece_hashes(creator, str(tmp_path))
    torrent = libtorrent.bdecode(libtorrent.bencode(creator.generate()))
    root = torrent[b"info"][b"file tree"][b"content"][b""][b"pieces root"]
    # libtorrent omits the piece layer of a file that fits in one piece: the root verifies that piece.
    layer = torrent.get(b"piece layers", {}).get(root, b"")
    return root, [layer[i : i + merkle.HASH_SIZE] for i in range(0, len(layer), merkle.HASH_SIZE)]


def content(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def chunks(data: bytes, step: int):
    view = memoryview(data)
    return (view[i : i + step] for i in range(0, len(view), step))


@pytest.mark.parametrize("size", SIZES)
def test_root_equals_libtorrent_pieces_root(tmp_path, size):
    data = content(size)
    expected, _ = libtorrent_hashes(tmp_path, data, 16 * KIB, libtorrent.create_torrent.v2_only)
    manifest, _ = build_manifest(chunks(data, 100_003), size)
    assert merkle.merkle_root(data) == expected
    assert manifest.root == expected


@pytest.mark.parametrize("size", [1, 16 * KIB + 1, 64 * KIB, 64 * KIB + 1, 1 * MIB, 10 * MIB + 3])
@pytest.mark.parametrize("block_size", [16 * KIB, 64 * KIB, 1 * MIB])
def test_block_layer_equals_libtorrent_piece_layer(tmp_path, size, block_size):
    data = content(size)
    expected_root, expected_layer = libtorrent_hashes(tmp_path, data, block_size, libtorrent.create_torrent.v2_only)
    root, layer = merkle.block_layer(chunks(data, 65_537), size, block_size)
    assert root == expected_root
    assert layer == (expected_layer if size > block_size else [root])
    merkle.verify_layer(root, layer, size, block_size)


def test_hybrid_torrent_has_the_same_root(tmp_path):
    size = 3 * 16 * KIB + 5
    data = content(size)
    hybrid, _ = libtorrent_hashes(tmp_path, data, 16 * KIB, 0)
    assert merkle.merkle_root(data) == hybrid


def test_chosen_block_size_is_a_valid_libtorrent_piece_size(tmp_path):
    size = 33 * MIB  # the first sizes that get blocks larger than 16 KiB
    block_size = choose_block_size(size)
    assert block_size == 32 * KIB
    data = content(size)
    expected_root, expected_layer = libtorrent_hashes(tmp_path, data, block_size, libtorrent.create_torrent.v2_only)
    manifest, layer = build_manifest(chunks(data, MIB), size)
    assert (manifest.root, layer) == (expected_root, expected_layer)
