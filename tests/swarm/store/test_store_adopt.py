"""Adopting a complete file into the block store: by hard link, by rename, from a descriptor, by copy; the cap;
shared entries whose original changes; and `SwarmNode.seed_file`, which adopts."""

from __future__ import annotations

import errno
import os
import random
import tempfile
from pathlib import Path

import pytest

from swarm.content.manifest import build_manifest
from swarm.errors import NotInStore, StoreFull
from swarm.net.memory import MemoryNetwork, MemoryTransport
from swarm.service.node import SwarmNode
from swarm.store.disk import DiskBlockStore
from swarm.store.interface import Evicted, entry_cost
from swarm.store.memory import MemoryBlockStore

BS = 16 * 1024


def make_file(directory: Path, size: int, seed: int = 0, name: str | None = None):
    data = random.Random(seed).randbytes(size)
    path = directory / (name or f"file{seed}")
    path.write_bytes(data)
    manifest, layer = build_manifest([data], size, block_size=BS)
    return path, manifest, layer, data


def stored(store, manifest) -> bytes:
    return b"".join(store.read_block(manifest.root, i, verify=True) for i in range(manifest.num_blocks))


def store_files(store: DiskBlockStore, manifest) -> list[str]:
    return sorted(name for name in os.listdir(store.directory) if name.startswith(manifest.root.hex()))


@pytest.fixture(params=["memory", "disk"])
def make_store(request, tmp_path):
    def make(capacity=None):
        if request.param == "memory":
            return MemoryBlockStore(capacity=capacity)
        return DiskBlockStore(tmp_path / "store", capacity=capacity)

    return make


@pytest.mark.parametrize("size", [0, 1, BS, 5 * BS + 7])
def test_adopted_entry_is_complete_and_shareable(make_store, tmp_path, size):
    store = make_store()
    path, manifest, layer, data = make_file(tmp_path, size)
    assert store.adopt(manifest, layer, path, pin=True)
    assert store.complete(manifest.root) and store.shareable(manifest.root)
    assert store.info(manifest.root).pins == 1
    assert store.used == entry_cost(manifest)
    assert list(store.have(manifest.root).blocks()) == list(range(manifest.num_blocks))
    assert stored(store, manifest) == data
    assert path.read_bytes() == data  # not moved


def test_adopting_a_present_root_is_a_no_op(make_store, tmp_path):
    store = make_store()
    path, manifest, layer, data = make_file(tmp_path, 3 * BS)
    store.create(manifest, layer)
    assert not store.adopt(manifest, layer, path, pin=True, move=True)
    assert path.read_bytes() == data  # the caller keeps its file
    assert not store.complete(manifest.root)  # the existing entry is left as it was, only pinned
    assert store.info(manifest.root).pins == 1
    assert store.used == entry_cost(manifest)


def test_wrong_size_is_refused(make_store, tmp_path):
    store = make_store()
    path, manifest, layer, _ = make_file(tmp_path, 3 * BS)
    with path.open("ab") as handle:
        handle.write(b"x")
    with pytest.raises(ValueError, match="bytes"):
        store.adopt(manifest, layer, path)
    assert manifest.root not in store and store.used == 0


def test_move_takes_the_file(make_store, tmp_path):
    store = make_store()
    path, manifest, layer, data = make_file(tmp_path, 4 * BS + 1)
    assert store.adopt(manifest, layer, path, move=True)
    assert not path.exists()
    assert stored(store, manifest) == data


def test_cap_evicts_complete_unpinned_entries(make_store, tmp_path):
    first = make_file(tmp_path, 4 * BS, seed=1)
    second = make_file(tmp_path, 4 * BS, seed=2)
    store = make_store(capacity=entry_cost(first[1]) + entry_cost(second[1]) - 1)
    events: list = []
    store.add_listener(events.append)
    assert store.adopt(*first[1:3], first[0])
    assert store.adopt(*second[1:3], second[0])
    assert events == [Evicted(first[1].root, first[1])]
    assert store.roots() == [second[1].root]
    assert first[0].read_bytes() == first[3]  # evicting an adopted entry leaves the original alone
    assert store.used == entry_cost(second[1])


def test_a_full_store_refuses_cleanly(make_store, tmp_path):
    first = make_file(tmp_path, 4 * BS, seed=1)
    second = make_file(tmp_path, 4 * BS, seed=2)
    store = make_store(capacity=entry_cost(first[1]))
    assert store.adopt(*first[1:3], first[0], pin=True)
    with pytest.raises(StoreFull):
        store.adopt(*second[1:3], second[0], move=True)
    assert store.roots() == [first[1].root] and store.used == entry_cost(first[1])
    assert second[0].read_bytes() == second[3]  # not moved
    if isinstance(store, DiskBlockStore):
        assert store_files(store, second[1]) == []


# -- the disk store ----------------------------------------------------------------------------------------------


@pytest.fixture
def disk(tmp_path) -> DiskBlockStore:
    return DiskBlockStore(tmp_path / "store")


def data_path(store: DiskBlockStore, manifest) -> Path:
    return store.directory / f"{manifest.root.hex()}.data"


def test_link_shares_the_inode_and_survives_reopen(disk, tmp_path):
    path, manifest, layer, data = make_file(tmp_path, 6 * BS + 5)
    assert disk.adopt(manifest, layer, path)
    assert data_path(disk, manifest).stat().st_ino == path.stat().st_ino  # no copy
    assert store_files(disk, manifest) == [f"{manifest.root.hex()}.{s}" for s in ("bits", "data", "meta")]
    location = disk.block_location(manifest.root, 1)
    assert location is not None and location.path == str(data_path(disk, manifest))
    disk.close()
    again = DiskBlockStore(disk.directory)  # re-verified at load, still complete
    assert again.complete(manifest.root) and stored(again, manifest) == data
    again.remove(manifest.root)
    assert path.read_bytes() == data and path.stat().st_nlink == 1


def test_link_of_a_symlink_links_its_target(disk, tmp_path):
    path, manifest, layer, _ = make_file(tmp_path, 2 * BS)
    symlink = tmp_path / "symlink"
    symlink.symlink_to(path)
    assert disk.adopt(manifest, layer, symlink)
    assert data_path(disk, manifest).stat().st_ino == path.stat().st_ino
    assert not data_path(disk, manifest).is_symlink()


@pytest.mark.parametrize("move", [False, True])
def test_falls_back_to_a_copy(disk, tmp_path, monkeypatch, move):
    """Another filesystem (EXDEV), or a link the kernel refuses (EPERM: protected_hardlinks)."""
    path, manifest, layer, data = make_file(tmp_path, 5 * BS + 3)

    def refuse(*args, **kwargs):
        raise OSError(errno.EXDEV if move else errno.EPERM, "refused")

    monkeypatch.setattr(os, "link", refuse)
    if move:
        monkeypatch.setattr(os, "replace", lambda src, dst, _replace=os.replace: (
            refuse() if str(src) == str(path) else _replace(src, dst)))
    assert disk.adopt(manifest, layer, path, move=move)
    assert data_path(disk, manifest).stat().st_ino != path.stat().st_ino if not move else not path.exists()
    assert data_path(disk, manifest).read_bytes() == data
    assert stored(disk, manifest) == data
    assert not any(name.endswith(".tmp") for name in os.listdir(disk.directory))


def test_copy_without_copy_file_range(disk, tmp_path, monkeypatch):
    path, manifest, layer, data = make_file(tmp_path, 3 * BS + 3)
    monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EXDEV, "no")))
    monkeypatch.setattr(os, "copy_file_range", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENOSYS, "no")))
    assert disk.adopt(manifest, layer, path)
    assert data_path(disk, manifest).read_bytes() == data


def test_a_failed_move_gives_the_file_back(disk, tmp_path, monkeypatch):
    path, manifest, layer, data = make_file(tmp_path, 3 * BS)
    import swarm.store.disk as store_disk

    def broken(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_disk, "atomic_write", broken)
    with pytest.raises(Exception, match="disk full"):
        disk.adopt(manifest, layer, path, move=True)
    assert path.read_bytes() == data
    assert manifest.root not in disk and disk.used == 0 and store_files(disk, manifest) == []


def test_adopt_fd_of_a_named_file_links_it(disk, tmp_path):
    path, manifest, layer, data = make_file(tmp_path, 4 * BS)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 123, os.SEEK_SET)  # the offset does not matter
        assert disk.adopt_fd(manifest, layer, fd)
    finally:
        os.close(fd)
    assert data_path(disk, manifest).stat().st_ino == path.stat().st_ino
    assert stored(disk, manifest) == data


def test_adopt_fd_of_an_unlinked_file_copies_it(disk, tmp_path):
    """A spool: opened, then unlinked. Linux will not give such a file a name again (ENOENT)."""
    data = random.Random(7).randbytes(4 * BS + 9)
    manifest, layer = build_manifest([data], len(data), block_size=BS)
    fd, name = tempfile.mkstemp(dir=tmp_path)
    try:
        os.write(fd, data)
        os.unlink(name)
        assert disk.adopt_fd(manifest, layer, fd)
        assert data_path(disk, manifest).stat().st_ino != os.fstat(fd).st_ino
    finally:
        os.close(fd)
    assert stored(disk, manifest) == data
    assert not any(name.endswith(".tmp") for name in os.listdir(disk.directory))


def test_adopt_fd_of_an_o_tmpfile_links_it(disk, tmp_path):
    data = random.Random(8).randbytes(3 * BS)
    manifest, layer = build_manifest([data], len(data), block_size=BS)
    try:
        fd = os.open(disk.directory, os.O_TMPFILE | os.O_RDWR, 0o600)
    except OSError:
        pytest.skip("no O_TMPFILE here")
    try:
        os.write(fd, data)
        assert disk.adopt_fd(manifest, layer, fd)
        assert data_path(disk, manifest).stat().st_ino == os.fstat(fd).st_ino
    finally:
        os.close(fd)
    assert data_path(disk, manifest).stat().st_nlink == 1  # the store's own file, not shared
    assert stored(disk, manifest) == data


# -- the original changes after a link ---------------------------------------------------------------------------


def dropped(store, manifest, events) -> bool:
    return (manifest.root not in store and Evicted(manifest.root, manifest) in events
            and store_files(store, manifest) == [])


def test_appending_to_the_original_drops_the_entry(disk, tmp_path):
    path, manifest, layer, data = make_file(tmp_path, 3 * BS)
    disk.adopt(manifest, layer, path, pin=True)
    events: list = []
    disk.add_listener(events.append)
    with path.open("ab") as handle:
        handle.write(b"more")
    with pytest.raises(NotInStore):
        disk.block_location(manifest.root, 0)
    assert dropped(disk, manifest, events)
    assert path.read_bytes() == data + b"more"  # the user's file is the user's


def test_rewriting_the_original_drops_the_entry(disk, tmp_path):
    path, manifest, layer, data = make_file(tmp_path, 3 * BS)
    disk.adopt(manifest, layer, path)
    events: list = []
    disk.add_listener(events.append)
    status = path.stat()
    with path.open("r+b") as handle:
        handle.write(b"\0" * 10)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))  # a write a tick later
    with pytest.raises(NotInStore):
        disk.read_block(manifest.root, 2)
    assert dropped(disk, manifest, events)


def test_a_change_that_keeps_the_mtime_is_caught_by_verification(disk, tmp_path):
    path, manifest, layer, data = make_file(tmp_path, 3 * BS)
    disk.adopt(manifest, layer, path)
    events: list = []
    disk.add_listener(events.append)
    status = path.stat()
    with path.open("r+b") as handle:
        handle.seek(BS)
        handle.write(b"\0" * 10)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert disk.read_block(manifest.root, 0, verify=True) == data[:BS]
    with pytest.raises(NotInStore):
        disk.read_block(manifest.root, 1, verify=True)
    # The whole entry goes, not just the block: a re-fetch would write into the user's file.
    assert dropped(disk, manifest, events)
    assert path.read_bytes()[BS:BS + 10] == b"\0" * 10


@pytest.mark.parametrize("change", ["rewrite", "append"])
def test_a_change_while_closed_drops_the_entry_at_load(disk, tmp_path, change):
    path, manifest, layer, data = make_file(tmp_path, 3 * BS)
    disk.adopt(manifest, layer, path)
    disk.close()
    with path.open("r+b" if change == "rewrite" else "ab") as handle:
        handle.write(b"\0" * 10)
    again = DiskBlockStore(disk.directory)
    assert manifest.root not in again and store_files(again, manifest) == []
    expected = b"\0" * 10 + data[10:] if change == "rewrite" else data + b"\0" * 10
    assert path.read_bytes() == expected  # neither truncated nor mended


def test_deleting_the_original_keeps_the_entry(disk, tmp_path):
    path, manifest, layer, data = make_file(tmp_path, 3 * BS)
    disk.adopt(manifest, layer, path)
    path.unlink()
    assert stored(disk, manifest) == data
    disk.close()
    again = DiskBlockStore(disk.directory)
    assert again.complete(manifest.root) and stored(again, manifest) == data


# -- seed_file -----------------------------------------------------------------------------------------------------


async def test_seed_file_adopts_by_link(tmp_path):
    network = MemoryNetwork()
    path, _, _, data = make_file(tmp_path, 7 * BS + 11)
    seed = SwarmNode(DiskBlockStore(tmp_path / "seed"), MemoryTransport(network))
    leecher = SwarmNode(MemoryBlockStore(), MemoryTransport(network))
    try:
        address = await seed.start("10.0.0.1", 0)
        manifest = await seed.seed_file(path, block_size=BS)
        assert data_path(seed.store, manifest).stat().st_ino == path.stat().st_ino
        assert seed.store.info(manifest.root).pins == 1
        got = b"".join([chunk async for chunk in leecher.fetch(manifest, [address])])
        assert got == data
    finally:
        await seed.close()
        await leecher.close()


async def test_seed_file_completes_an_incomplete_entry(tmp_path):
    path, manifest, layer, data = make_file(tmp_path, 4 * BS)
    store = DiskBlockStore(tmp_path / "seed")
    store.create(manifest, layer)
    store.write_block(manifest.root, 1, data[BS:2 * BS])
    node = SwarmNode(store, MemoryTransport(MemoryNetwork()))
    assert await node.seed_file(path, block_size=BS) == manifest
    assert store.complete(manifest.root) and stored(store, manifest) == data
    assert data_path(store, manifest).stat().st_ino != path.stat().st_ino  # written in, as before


def test_adopt_fd_on_both_stores_leaves_the_descriptor_open(make_store, tmp_path):
    store = make_store()
    path, manifest, layer, data = make_file(tmp_path, 3 * BS + 1)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert store.adopt_fd(manifest, layer, fd)
        assert os.fstat(fd).st_size == len(data)  # still the caller's
    finally:
        os.close(fd)
    assert stored(store, manifest) == data
