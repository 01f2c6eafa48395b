"""The spool: a response body kept in a temporary file and hashed while it streams. Its manifest must be the one
`swarm.content.manifest.build_manifest` computes for the same bytes, however they were chunked; a spool that cannot be
written or is overfed turns itself off without raising."""

from __future__ import annotations

import random

import pytest

from proxy.spool import Spool
from swarm.content.manifest import build_manifest, choose_block_size
from swarm.content.merkle import ZERO_HASH

KIB = 1024
MIB = 1024 * KIB


def content(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def chunkings(data: bytes, how: str) -> list[bytes]:
    """Cut `data` into pieces: whole, leaf-straddling, byte by byte (small sizes only) or at random points
    (empty pieces included)."""
    if how == "whole":
        return [data]
    if how == "odd-16383":
        return [data[i:i + 16383] for i in range(0, len(data), 16383)]
    if how == "bytewise":
        return [data[i:i + 1] for i in range(len(data))]
    rng = random.Random(how)
    pieces, position = [], 0
    while position < len(data):
        length = rng.choice([0, 1, 7, 4095, 16384, 16385, rng.randrange(1, 70_000)])
        pieces.append(data[position:position + length])
        position += length
    return pieces


SIZES = [
    pytest.param(0, id="0"),
    pytest.param(1, id="1"),
    pytest.param(16 * KIB, id="16KiB"),
    pytest.param(16 * KIB + 1, id="16KiB+1"),
    pytest.param(MIB + 3, id="1MiB+3"),
]
CHUNKINGS = ["whole", "odd-16383", "random-a", "random-b", "random-c"]


def fed_spool(directory, data: bytes, how: str, **kwargs) -> Spool:
    spool = Spool(directory, len(data), **kwargs)
    assert spool.usable, spool.failed
    for piece in chunkings(data, how):
        spool.feed(piece)
    return spool


@pytest.mark.parametrize("how", CHUNKINGS)
@pytest.mark.parametrize("size", SIZES)
def test_manifest_matches_build_manifest(tmp_path, size, how):
    data = content(size)
    spool = fed_spool(tmp_path / "spool", data, how)
    try:
        assert spool.complete and spool.received == size
        assert spool.block_size == choose_block_size(size)
        meta = {"url": "http://o.test/f", "validator": '"v1"', "content_type": "application/x-test",
                "content_encoding": None}
        got, layer = spool.manifest(**meta)
        want, want_layer = build_manifest([data], size, **meta)
        assert got == want
        assert layer == want_layer
        assert len(layer) == got.num_blocks
        if size == 0:
            assert got.root == ZERO_HASH and layer == []
        assert spool.read(0, size) == data
    finally:
        spool.close()


@pytest.mark.parametrize("block_size", [pytest.param(32 * KIB, id="32KiB"), pytest.param(256 * KIB, id="256KiB")])
@pytest.mark.parametrize("how", ["whole", "random-a"])
def test_explicit_block_size_matches_build_manifest(tmp_path, block_size, how):
    data = content(MIB + 3)
    spool = fed_spool(tmp_path, data, how, block_size=block_size)
    try:
        got, layer = spool.manifest(url=None, validator=None, content_type=None, content_encoding=None)
        assert (got, layer) == build_manifest([data], len(data), block_size=block_size)
        assert got.block_size == block_size
    finally:
        spool.close()


def test_size_zero_is_complete_at_once_and_ignores_empty_feeds(tmp_path):
    spool = Spool(tmp_path, 0)
    try:
        assert spool.usable and spool.complete
        spool.feed(b"")
        assert spool.complete and spool.received == 0
        assert spool.read(0, 0) == b""
    finally:
        spool.close()


@pytest.mark.parametrize("offset,length", [
    pytest.param(0, 0, id="empty-at-start"),
    pytest.param(0, 1, id="first-byte"),
    pytest.param(16383, 2, id="across-leaf"),
    pytest.param(16 * KIB, 16 * KIB, id="second-leaf"),
    pytest.param(100_000, 5, id="middle"),
    pytest.param(MIB, 3, id="tail"),
    pytest.param(0, MIB + 3, id="everything"),
])
def test_read_returns_the_bytes(tmp_path, offset, length):
    data = content(MIB + 3)
    spool = fed_spool(tmp_path, data, "random-b")
    try:
        assert spool.read(offset, length) == data[offset:offset + length]
    finally:
        spool.close()


@pytest.mark.parametrize("offset,length", [
    pytest.param(0, 40_001, id="one-past-received"),
    pytest.param(40_000, 1, id="first-missing-byte"),
    pytest.param(39_999, 2, id="straddles-the-end"),
])
def test_read_refuses_bytes_not_received_yet(tmp_path, offset, length):
    data = content(100_000)
    spool = Spool(tmp_path, len(data))
    try:
        spool.feed(data[:40_000])
        assert spool.read(0, 40_000) == data[:40_000]  # what is there can be read while the rest streams
        with pytest.raises(ValueError):
            spool.read(offset, length)
    finally:
        spool.close()


@pytest.mark.parametrize("pieces", [
    pytest.param([11], id="one-piece-too-many"),
    pytest.param([10, 1], id="one-byte-after-complete"),
    pytest.param([4, 7], id="second-piece-overflows"),
    pytest.param([9, 1, 1], id="complete-then-more"),
])
def test_overfeeding_disables_the_spool_without_raising(tmp_path, pieces):
    data = content(sum(pieces))
    spool = Spool(tmp_path, 10)
    try:
        position = 0
        for length in pieces:
            spool.feed(data[position:position + length])  # must not raise
            position += length
        assert spool.failed and "10" in spool.failed
        assert not spool.usable and not spool.complete
        assert spool.received <= 10
        before = spool.received
        spool.feed(b"x")  # a disabled spool ignores further bytes
        assert spool.received == before and not spool.complete
    finally:
        spool.close()


def test_unwritable_directory_makes_the_spool_unusable(tmp_path, caplog):
    (tmp_path / "file").write_bytes(b"not a directory")
    directory = tmp_path / "file" / "x"
    spool = Spool(directory, 5)
    assert not spool.usable
    assert spool.failed and str(directory) in spool.failed
    assert "content will not be shared" in caplog.text
    spool.feed(b"hello")  # a no-op, not an error
    assert spool.received == 0 and not spool.complete
    with pytest.raises(ValueError):
        spool.read(0, 1)
    spool.close()
    spool.close()
    assert (tmp_path / "file").read_bytes() == b"not a directory"


@pytest.mark.parametrize("size,pieces", [
    pytest.param(1, [1], id="1-in-one"),
    pytest.param(10, [3, 3, 3, 1], id="10-in-four"),
    pytest.param(10, [0, 10, 0], id="empty-pieces-around"),
    pytest.param(16 * KIB + 1, [16 * KIB, 1], id="leaf-then-byte"),
])
def test_complete_only_after_exactly_size_bytes(tmp_path, size, pieces):
    data = content(size)
    spool = Spool(tmp_path, size)
    try:
        position = 0
        for length in pieces:
            assert spool.complete == (position == size)
            spool.feed(data[position:position + length])
            position += length
            assert spool.received == position
            assert spool.complete == (position == size)
        assert spool.complete and spool.usable
    finally:
        spool.close()


def test_feed_accepts_bytearray_and_memoryview(tmp_path):
    data = content(50_000)
    spool = Spool(tmp_path, len(data))
    try:
        spool.feed(bytearray(data[:20_000]))
        spool.feed(memoryview(data)[20_000:])
        assert spool.manifest(url=None, validator=None, content_type=None, content_encoding=None) == \
            build_manifest([data], len(data))
    finally:
        spool.close()


def test_spool_file_is_anonymous_and_close_twice_is_fine(tmp_path):
    directory = tmp_path / "spool"
    spool = Spool(directory, 3)
    assert directory.is_dir() and list(directory.iterdir()) == []  # unlinked at once: nothing left on a crash
    spool.feed(b"abc")
    assert spool.complete
    spool.close()
    spool.close()
    with pytest.raises(ValueError):
        spool.read(0, 1)  # closed: nothing can be read any more
