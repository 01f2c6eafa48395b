"""Segments cut a file the same way on every node, and their roots give the file's root (BEP 52's tree)."""

from __future__ import annotations

import hashlib

import pytest

from swarm.content import segments as seg
from swarm.content.merkle import merkle_root
from swarm.content.segments import Segments

KIB, MIB = 1024, 1024 * 1024


def body(size: int) -> bytes:
    seed = hashlib.sha256(str(size).encode()).digest()
    return (seed * (size // 32 + 1))[:size]


@pytest.mark.parametrize("size, block, per, count", [
    (0, 16 * KIB, 256, 1),
    (1, 16 * KIB, 256, 1),
    (4 * MIB, 16 * KIB, 256, 1),
    (4 * MIB + 1, 16 * KIB, 256, 2),
    (30_000_000, 16 * KIB, 256, 8),
    (30_000_000, 4 * MIB, 1, 8),
    (2 * 1024 * MIB, 1 * MIB, 8, 256),  # 512 segments of 4 MiB would be too many: 256 of 8 MiB
    (2 * 1024 * MIB + 1, 1 * MIB, 16, 129),
])
def test_geometry(size, block, per, count):
    cut = Segments(size, block)
    assert (cut.blocks_per_segment, cut.count) == (per, count)
    assert cut.span(0)[0] == 0 and cut.span(count - 1)[1] == size
    assert all(cut.span(i)[1] == cut.span(i + 1)[0] for i in range(count - 1))
    assert cut.index_of(max(size - 1, 0)) == count - 1


@pytest.mark.parametrize("size", [1, 16 * KIB, 64 * KIB, 64 * KIB + 1, 100_000, 5 * 64 * KIB, 5 * 64 * KIB - 7,
                                  9 * 64 * KIB + 16 * KIB, 8 * 64 * KIB])
def test_the_segments_roots_give_the_files_root(size, monkeypatch):
    monkeypatch.setattr(seg, "SEGMENT_TARGET", 64 * KIB)  # small segments: many cases in little data
    data = body(size)
    cut = Segments(size, 16 * KIB)
    roots = [merkle_root(data[slice(*cut.span(i))]) for i in range(cut.count)]
    assert cut.file_root(roots) == merkle_root(data)


def test_a_wrong_segment_root_gives_another_root(monkeypatch):
    monkeypatch.setattr(seg, "SEGMENT_TARGET", 64 * KIB)
    data = body(200_000)
    cut = Segments(len(data), 16 * KIB)
    roots = [merkle_root(data[slice(*cut.span(i))]) for i in range(cut.count)]
    roots[1] = hashlib.sha256(b"lie").digest()
    assert cut.file_root(roots) != merkle_root(data)
    with pytest.raises(ValueError):
        cut.file_root(roots[:-1])


@pytest.mark.parametrize("size, block", [(-1, 16 * KIB), (10, 1000), (10, 8 * KIB)])
def test_bad_geometry_is_refused(size, block):
    with pytest.raises(ValueError):
        Segments(size, block)
