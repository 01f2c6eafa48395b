"""Block store: the contract on both implementations, eviction, disk errors, restart and corruption on disk,
and a random walk checking the disk store against the memory store (and against itself after a restart)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.content.manifest import Manifest, build_manifest
from swarm.content.merkle import ZERO_HASH
from swarm.errors import HashMismatch, NotInStore, StoreError, StoreFull, StoreIOError
from swarm.store.disk import DiskBlockStore, encode_record
from swarm.store.interface import BlockStore, Evicted, StoreFailed, entry_cost
from swarm.store.memory import MemoryBlockStore

KIB = 1024
BS = 16 * KIB


@dataclass
class Content:
    manifest: Manifest
    layer: list[bytes]
    data: bytes

    @property
    def root(self) -> bytes:
        return self.manifest.root

    def block(self, index: int) -> bytes:
        offset, length = self.manifest.block_span(index)
        return self.data[offset : offset + length]

    def fill(self, store: BlockStore, indices=None) -> None:
        for index in range(self.manifest.num_blocks) if indices is None else indices:
            assert store.write_block(self.root, index, self.block(index))


def make_content(size: int, seed: int = 0, block_size: int = BS) -> Content:
    data = random.Random(seed).randbytes(size)
    manifest, layer = build_manifest([data], size, block_size=block_size)
    return Content(manifest, layer, data)


@pytest.fixture(params=["memory", "disk"])
def kind(request):
    return request.param


@pytest.fixture
def make_store(kind, tmp_path):
    def make(capacity=None):
        if kind == "memory":
            return MemoryBlockStore(capacity=capacity)
        return DiskBlockStore(tmp_path / "store", capacity=capacity)

    return make


def record_events(store) -> list:
    events: list = []
    store.add_listener(events.append)
    return events


# -- the contract, on both stores ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size, block_size",
    [(0, BS), (1, BS), (BS, BS), (BS + 1, BS), (5 * BS + 7, BS), (5 * BS + 7, 2 * BS)],
)
def test_blocks_round_trip(make_store, size, block_size):
    store = make_store()
    content = make_content(size, seed=size, block_size=block_size)
    assert store.create(content.manifest, content.layer) is True
    assert content.root in store and store.roots() == [content.root]
    assert store.manifest(content.root) == content.manifest
    assert list(store.hash_layer(content.root)) == content.layer
    assert store.shareable(content.root)
    order = list(range(content.manifest.num_blocks))
    random.Random(1).shuffle(order)
    assert store.complete(content.root) == (not order)  # empty content is complete at once
    for done, index in enumerate(order, 1):
        assert not store.has_block(content.root, index)
        assert store.write_block(content.root, index, memoryview(content.block(index))) is True
        assert store.has_block(content.root, index)
        assert store.complete(content.root) == (done == len(order))
    assert list(store.have(content.root).blocks()) == sorted(order)
    for index in order:
        assert store.read_block(content.root, index) == content.block(index)
        assert store.read_block(content.root, index, verify=True) == content.block(index)
    info = store.info(content.root)
    assert (info.verified, info.complete, info.pins, info.cost) == (len(order), True, 0, entry_cost(content.manifest))
    assert store.used == entry_cost(content.manifest)


def test_create_is_idempotent_and_checks_its_input(make_store):
    store = make_store()
    content = make_content(3 * BS)
    with pytest.raises(HashMismatch):
        store.create(content.manifest, content.layer[::-1])
    assert content.root not in store and store.used == 0
    assert store.create(content.manifest, content.layer) is True
    content.fill(store, [0])
    assert store.create(content.manifest, content.layer, pin=True) is False
    assert store.info(content.root).pins == 1 and store.has_block(content.root, 0)
    other_size = Manifest(size=3 * BS, block_size=4 * BS, root=content.root)
    with pytest.raises(StoreError, match="block size"):
        store.create(other_size, [content.root])
    assert store.used == entry_cost(content.manifest)


@pytest.mark.parametrize(
    "root, index, length, outcome",
    [
        ("known", 0, BS, True),
        ("unknown", 0, BS, False),  # removed meanwhile, or never created: the caller just carries on
        ("known", 3, BS, ValueError),
        ("known", -1, BS, ValueError),
        ("known", 0, BS - 1, ValueError),
        ("known", 2, BS, ValueError),  # the last block is short
    ],
)
def test_write_block_contract(make_store, root, index, length, outcome):
    store = make_store()
    content = make_content(2 * BS + 5)
    store.create(content.manifest, content.layer)
    target = content.root if root == "known" else bytes(32)
    data = (content.data * 2)[max(index, 0) * BS :][:length]
    if isinstance(outcome, bool):
        assert store.write_block(target, index, data) is outcome
        assert store.write_block(target, index, data) is outcome  # a duplicate (endgame) is fine
    else:
        with pytest.raises(outcome):
            store.write_block(target, index, data)


def test_reading_what_is_not_held(make_store):
    store = make_store()
    content = make_content(2 * BS)
    for call in (store.read_block, store.block_location):
        with pytest.raises(NotInStore):
            call(content.root, 0)
    for call in (store.have, store.info, store.manifest, store.hash_layer, store.pin):
        with pytest.raises(NotInStore):
            call(content.root)
    assert not store.complete(content.root) and not store.has_block(content.root, 0)
    store.create(content.manifest, content.layer)
    for call in (store.read_block, store.block_location):
        with pytest.raises(NotInStore):
            call(content.root, 1)
        with pytest.raises(ValueError):
            call(content.root, 2)


def test_block_location(make_store, kind):
    store = make_store()
    content = make_content(3 * BS + 100)
    store.create(content.manifest, content.layer)
    content.fill(store)
    location = store.block_location(content.root, 3)
    if kind == "memory":
        assert location is None
        return
    assert (location.offset, location.length) == (3 * BS, 100)
    with open(location.path, "rb") as file:
        file.seek(location.offset)
        assert file.read(location.length) == content.block(3)


def test_pins_are_counted(make_store):
    store = make_store()
    content = make_content(BS)
    store.create(content.manifest, content.layer, pin=True)
    store.pin(content.root)
    with store.pinned(content.root):
        assert store.info(content.root).pins == 3
    store.unpin(content.root)
    store.unpin(content.root)
    with pytest.raises(ValueError):
        store.unpin(content.root)
    store.unpin(bytes(32))  # a missing root: nothing to undo


def test_remove(make_store):
    store = make_store()
    content, other = make_content(2 * BS, seed=1), make_content(BS, seed=2)
    store.create(content.manifest, content.layer, pin=True)
    store.create(other.manifest, other.layer)
    content.fill(store)
    assert store.remove(content.root) is True  # explicit removal ignores pins
    assert store.remove(content.root) is False
    assert store.roots() == [other.root] and store.used == entry_cost(other.manifest)
    assert store.write_block(content.root, 0, content.block(0)) is False
    store.unpin(content.root)  # the fetch that pinned it ends after the removal: no error
    assert store.create(content.manifest, content.layer) is True  # and it can come back, empty
    assert list(store.have(content.root).blocks()) == []


# Eviction. Notation: each entry is a letter, "+" complete or "-" incomplete, "*" pinned; created in order.
# `touch` lists entries used afterwards; `new` is the new entry's size in units (one unit = one entry's cost).
EVICTION_CASES = [
    ("LRU among complete entries", "A+ B+ C+", "", 1, "A"),
    ("a touch refreshes", "A+ B+ C+", "A", 1, "B"),
    ("complete before incomplete, even older ones", "A- B+ C+", "", 1, "B"),
    ("complete first even when most recent", "A- B- C+", "C", 1, "C"),
    ("pinned is never evicted", "A+* B- C+", "", 1, "C"),
    ("then incomplete in LRU order", "A+* B- C-", "B", 1, "C"),
    ("several victims for a large entry", "A+ B- C+", "", 2, "A C"),
    ("room already free", "A+ B+", "", 1, ""),
    ("all pinned: nothing evicted", "A+* B-* C+*", "", 1, StoreFull),
    ("not enough unpinned: nothing evicted", "A+ B-* C+*", "", 2, StoreFull),
    ("larger than the capacity", "", "", 4, StoreFull),
]


@pytest.mark.parametrize("name, entries, touch, new, evicted", EVICTION_CASES, ids=[c[0] for c in EVICTION_CASES])
def test_eviction(make_store, name, entries, touch, new, evicted):
    unit = make_content(2 * BS, seed=99)
    store = make_store(capacity=3 * entry_cost(unit.manifest))
    events = record_events(store)
    contents = {}
    for seed, spec in enumerate(entries.split()):
        letter = spec[0]
        content = contents[letter] = make_content(2 * BS, seed=seed)
        store.create(content.manifest, content.layer, pin="*" in spec)
        content.fill(store, range(2) if "+" in spec else [0])
    for letter in touch.split():
        store.touch(contents[letter].root)
    newcomer = make_content(2 * new * BS, seed=100)
    before = (store.roots(), store.used)
    if evicted is StoreFull:
        with pytest.raises(StoreFull):
            store.create(newcomer.manifest, newcomer.layer)
        assert (store.roots(), store.used) == before and events == []
        return
    store.create(newcomer.manifest, newcomer.layer)
    gone = [contents[letter] for letter in evicted.split()]
    assert events == [Evicted(content.root, content.manifest) for content in gone]
    kept = [root for root in before[0] if root not in {c.root for c in gone}]
    assert store.roots() == kept + [newcomer.root]
    assert store.used == sum(store.info(root).cost for root in store.roots()) <= store.capacity


def test_reads_and_pins_refresh_lru(make_store):
    contents = [make_content(BS, seed=seed) for seed in range(3)]
    store = make_store(capacity=3 * entry_cost(contents[0].manifest))
    for content in contents:
        store.create(content.manifest, content.layer)
        content.fill(store)
    store.read_block(contents[0].root, 0)
    store.block_location(contents[1].root, 0)
    assert store.roots() == [contents[2].root, contents[0].root, contents[1].root]
    store.pin(contents[2].root)
    store.unpin(contents[2].root)
    assert store.roots()[0] == contents[0].root
    newcomer = make_content(BS, seed=10)
    store.create(newcomer.manifest, newcomer.layer)
    assert contents[0].root not in store


def test_empty_content_costs_nothing(make_store):
    store = make_store(capacity=0)
    empty = make_content(0)
    assert empty.root == ZERO_HASH
    assert store.create(empty.manifest, empty.layer) and store.complete(empty.root) and store.used == 0
    with pytest.raises(StoreFull):
        store.create(make_content(1).manifest, make_content(1).layer)


# -- disk full / unwritable, on both stores ----------------------------------------------------------------------


@pytest.fixture
def break_writes(kind, monkeypatch):
    """Make every block write of `store` fail with `code`, as a full or read-only disk would."""

    def breaker(store, code):
        error = OSError(code, os.strerror(code))
        if kind == "memory":
            store.write_error = error
        else:

            def failing_pwrite(fd, data, offset):
                raise error

            monkeypatch.setattr(os, "pwrite", failing_pwrite)

    return breaker


@pytest.mark.parametrize(
    "code, disk_full",
    [(errno.ENOSPC, True), (errno.EDQUOT, True), (errno.EACCES, False), (errno.EROFS, False), (errno.EIO, False)],
)
def test_write_failure_makes_the_entry_unshareable(make_store, break_writes, code, disk_full):
    store = make_store()
    events = record_events(store)
    content = make_content(4 * BS)
    store.create(content.manifest, content.layer, pin=True)
    content.fill(store, [0])
    break_writes(store, code)
    assert store.write_block(content.root, 1, content.block(1)) is False
    assert store.write_block(content.root, 2, content.block(2)) is False  # no retry, no second event
    [event] = events
    assert isinstance(event, StoreFailed) and event.root == content.root
    assert isinstance(event.error, StoreIOError)
    assert (event.error.errno, event.error.operation, event.error.disk_full) == (code, "write", disk_full)
    assert not store.shareable(content.root) and not store.complete(content.root)
    assert list(store.have(content.root).blocks()) == [0]
    assert store.read_block(content.root, 0) == content.block(0)  # what is held stays readable
    assert store.write_block(content.root, 0, content.block(0)) is True  # already held


def test_a_failing_listener_changes_nothing(make_store, break_writes, caplog):
    store = make_store()
    calls = []

    def bad_listener(event):
        calls.append(event)
        raise RuntimeError("listener bug")

    store.add_listener(bad_listener)
    content = make_content(2 * BS)
    store.create(content.manifest, content.layer)
    break_writes(store, errno.ENOSPC)
    with caplog.at_level(logging.ERROR, logger="swarm.store"):
        assert store.write_block(content.root, 0, content.block(0)) is False
    assert len(calls) == 1 and "listener" in caplog.text
    store.remove_listener(bad_listener)
    assert store.used == entry_cost(content.manifest)


async def test_writes_from_worker_threads(make_store, kind, tmp_path):
    store = make_store()
    content = make_content(64 * BS + 3)
    store.create(content.manifest, content.layer, pin=True)
    indices = list(range(content.manifest.num_blocks)) * 2  # every block twice, as in endgame
    results = await asyncio.gather(
        *(asyncio.to_thread(store.write_block, content.root, i, content.block(i)) for i in indices)
    )
    assert all(results) and store.complete(content.root)
    assert store.info(content.root).verified == content.manifest.num_blocks
    if kind == "disk":  # bits of one bitmap byte were set from several threads: none was lost on disk either
        assert DiskBlockStore(tmp_path / "store").complete(content.root)


# -- disk store: persistence, crash consistency, corruption ------------------------------------------------------


@pytest.fixture
def directory(tmp_path) -> Path:
    return tmp_path / "store"


def held(store, content) -> list[int]:
    return list(store.have(content.root).blocks())


def test_restart_keeps_verified_blocks_and_lru_order(directory):
    contents = [make_content(5 * BS + 1, seed=seed) for seed in range(3)]
    empty = make_content(0)
    with DiskBlockStore(directory) as store:
        for content in [empty, *contents]:
            store.create(content.manifest, content.layer, pin=True)
        contents[0].fill(store)
        contents[1].fill(store, [0, 2, 5])
        store.touch(contents[0].root)
        order, used = store.roots(), store.used
    reopened = DiskBlockStore(directory)
    assert reopened.roots() == order == [empty.root, contents[2].root, contents[1].root, contents[0].root]
    assert reopened.complete(empty.root)
    assert reopened.used == used
    assert held(reopened, contents[0]) == list(range(6)) and reopened.complete(contents[0].root)
    assert held(reopened, contents[1]) == [0, 2, 5]
    assert held(reopened, contents[2]) == []
    assert all(reopened.info(c.root).pins == 0 and reopened.shareable(c.root) for c in contents)
    assert reopened.read_block(contents[1].root, 5) == contents[1].block(5)
    contents[1].fill(reopened, [1, 3, 4])  # the download resumes where it stopped
    assert reopened.complete(contents[1].root)


def test_restart_without_close_orders_by_modification(directory):
    first, second = make_content(BS, seed=1), make_content(BS, seed=2)
    store = DiskBlockStore(directory)
    for content in (first, second):
        store.create(content.manifest, content.layer)
    os.utime(directory / f"{first.root.hex()}.data", (2_000_000_000, 2_000_000_000))  # written last
    assert DiskBlockStore(directory).roots() == [second.root, first.root]


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0xFF]))


def test_corrupted_blocks_are_dropped_at_load(directory, caplog):
    content = make_content(6 * BS + 10, seed=3)
    with DiskBlockStore(directory) as store:
        store.create(content.manifest, content.layer)
        content.fill(store)
    data_path = directory / f"{content.root.hex()}.data"
    flip_byte(data_path, 1 * BS + 17)
    flip_byte(data_path, 6 * BS + 9)  # the short last block
    with caplog.at_level(logging.WARNING):
        reopened = DiskBlockStore(directory)
    assert "2 block(s)" in caplog.text
    assert held(reopened, content) == [0, 2, 3, 4, 5]
    assert held(DiskBlockStore(directory), content) == [0, 2, 3, 4, 5]  # the bitmap file was corrected


def test_truncated_data_file_loses_only_the_blocks_cut(directory):
    content = make_content(4 * BS, seed=4)
    with DiskBlockStore(directory) as store:
        store.create(content.manifest, content.layer)
        content.fill(store)
    data_path = directory / f"{content.root.hex()}.data"
    os.truncate(data_path, 2 * BS + 1)
    reopened = DiskBlockStore(directory)
    assert held(reopened, content) == [0, 1]
    assert data_path.stat().st_size == 4 * BS
    content.fill(reopened, [2, 3])
    assert reopened.complete(content.root)


def test_bit_written_before_its_bytes_is_not_trusted(directory):
    """A crash may persist a block's bit but not its bytes (nothing is fsynced per block)."""
    content = make_content(3 * BS, seed=5)
    with DiskBlockStore(directory) as store:
        store.create(content.manifest, content.layer)
        content.fill(store, [0])
    (directory / f"{content.root.hex()}.bits").write_bytes(b"\xff")  # every bit, spare ones included
    reopened = DiskBlockStore(directory)
    assert held(reopened, content) == [0] and reopened.info(content.root).verified == 1


def _record_path(directory, content):
    return directory / f"{content.root.hex()}.meta"


def _break_record(kind):
    def apply(directory, content, other):
        meta = _record_path(directory, content)
        record = meta.read_bytes()
        stem = content.root.hex()
        if kind == "empty":
            meta.write_bytes(b"")
        elif kind == "truncated":
            meta.write_bytes(record[: len(record) // 2])
        elif kind == "garbage":
            meta.write_bytes(random.Random(0).randbytes(len(record)))
        elif kind == "flipped byte":
            flip_byte(meta, 20)
        elif kind == "unknown version":
            meta.write_bytes(encode_record(content.manifest, content.layer).replace(b"SWSTORE\x01", b"SWSTORE\x02"))
        elif kind == "wrong layer":
            meta.write_bytes(encode_record(content.manifest, [bytes(32)] * len(content.layer)))
        elif kind == "another root's record":
            meta.write_bytes(_record_path(directory, other).read_bytes())
        elif kind == "missing record":
            meta.unlink()
        elif kind == "missing bitmap":
            (directory / f"{stem}.bits").unlink()
        elif kind == "bitmap of the wrong size":
            (directory / f"{stem}.bits").write_bytes(b"\xff\xff")
        elif kind == "missing data":
            (directory / f"{stem}.data").unlink()

    return apply


RECORD_DAMAGE = [
    "empty",
    "truncated",
    "garbage",
    "flipped byte",
    "unknown version",
    "wrong layer",
    "another root's record",
    "missing record",
    "missing bitmap",
    "bitmap of the wrong size",
    "missing data",
]


@pytest.mark.parametrize("damage", RECORD_DAMAGE)
def test_damaged_entries_are_dropped_with_a_warning(directory, caplog, damage):
    victim, survivor = make_content(3 * BS, seed=6), make_content(2 * BS, seed=7)
    with DiskBlockStore(directory) as store:
        for content in (victim, survivor):
            store.create(content.manifest, content.layer)
            content.fill(store)
    _break_record(damage)(directory, victim, survivor)
    (directory / "README.txt").write_text("not ours")
    with caplog.at_level(logging.WARNING, logger="swarm.store.disk"):
        reopened = DiskBlockStore(directory)
    assert reopened.roots() == [survivor.root] and reopened.complete(survivor.root)
    assert reopened.used == entry_cost(survivor.manifest)
    assert victim.root.hex()[:16] in caplog.text
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        ["README.txt", "lru"] + [f"{survivor.root.hex()}.{suffix}" for suffix in ("bits", "data", "meta")]
    )
    assert reopened.create(victim.manifest, victim.layer) is True  # it can be fetched again from scratch


def test_unreadable_entry_is_skipped_but_kept(directory, monkeypatch, caplog):
    content = make_content(BS, seed=8)
    with DiskBlockStore(directory) as store:
        store.create(content.manifest, content.layer)
        content.fill(store)
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if str(path).endswith(".data"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    with caplog.at_level(logging.WARNING):
        assert DiskBlockStore(directory).roots() == []
    assert "cannot be read" in caplog.text
    monkeypatch.setattr(os, "open", real_open)
    assert held(DiskBlockStore(directory), content) == [0]


def test_leftovers_are_cleaned_at_load(directory):
    content = make_content(BS, seed=9)
    with DiskBlockStore(directory) as store:
        store.create(content.manifest, content.layer)
    orphan = "ab" * 32
    for name in (f"{orphan}.data", f"{orphan}.bits", f"{content.root.hex()}.meta.tmp", "lru.tmp", "notes.tmp"):
        (directory / name).write_bytes(b"x")
    DiskBlockStore(directory)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        ["lru", "notes.tmp"] + [f"{content.root.hex()}.{suffix}" for suffix in ("bits", "data", "meta")]
    )


def test_over_capacity_at_load_evicts(directory):
    complete, partial = make_content(2 * BS, seed=10), make_content(2 * BS, seed=11)
    with DiskBlockStore(directory) as store:
        store.create(partial.manifest, partial.layer)
        partial.fill(store, [0])
        store.create(complete.manifest, complete.layer)
        complete.fill(store)
    reopened = DiskBlockStore(directory, capacity=entry_cost(partial.manifest))
    assert reopened.roots() == [partial.root]  # the complete one went first, though more recent
    assert not (directory / f"{complete.root.hex()}.data").exists()


def test_block_writes_update_the_bitmap_in_place_without_fsync(directory, monkeypatch):
    content = make_content(40 * BS, seed=12)
    store = DiskBlockStore(directory)
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    store.create(content.manifest, content.layer)
    assert fsyncs, "creation makes the entry durable"
    fsyncs.clear()
    meta, bits = _record_path(directory, content), directory / f"{content.root.hex()}.bits"
    before = (meta.stat().st_ino, meta.stat().st_mtime_ns, bits.stat().st_ino)

    def no_replace(*args):
        raise AssertionError("a block write must not rewrite a whole file")

    monkeypatch.setattr(os, "replace", no_replace)
    content.fill(store)
    assert fsyncs == []
    assert (meta.stat().st_ino, meta.stat().st_mtime_ns, bits.stat().st_ino) == before
    assert bits.read_bytes() == b"\xff" * 5


def test_bitmap_write_failure(directory, monkeypatch):
    content = make_content(2 * BS, seed=13)
    store = DiskBlockStore(directory)
    events = record_events(store)
    store.create(content.manifest, content.layer)
    real_pwrite = os.pwrite

    def pwrite(fd, data, offset):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".bits"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    assert store.write_block(content.root, 0, content.block(0)) is False
    assert held(store, content) == [] and not store.shareable(content.root)
    assert [event.error.disk_full for event in events] == [True]


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.ENOSPC])
def test_create_in_an_unwritable_directory(directory, monkeypatch, code):
    store = DiskBlockStore(directory)
    events = record_events(store)
    content = make_content(BS, seed=14)
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if flags & os.O_CREAT:
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    with pytest.raises(StoreIOError) as caught:
        store.create(content.manifest, content.layer)
    assert (caught.value.errno, caught.value.operation, caught.value.root) == (code, "create", content.root)
    assert events == [StoreFailed(content.root, caught.value)]
    assert content.root not in store and store.used == 0
    monkeypatch.setattr(os, "open", real_open)
    assert list(directory.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions; simulated above instead")
def test_create_in_a_read_only_directory(directory):
    store = DiskBlockStore(directory)
    directory.chmod(0o500)
    try:
        content = make_content(BS, seed=15)
        with pytest.raises(StoreIOError):
            store.create(content.manifest, content.layer)
    finally:
        directory.chmod(0o700)


def test_unusable_directory_fails_at_construction(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreIOError):
        DiskBlockStore(tmp_path / "file" / "store")


def test_read_failures(directory, monkeypatch):
    content = make_content(3 * BS, seed=16)
    store = DiskBlockStore(directory)
    events = record_events(store)
    store.create(content.manifest, content.layer)
    content.fill(store)
    data_path = directory / f"{content.root.hex()}.data"
    flip_byte(data_path, BS + 1)
    assert store.read_block(content.root, 1) != content.block(1)  # unchecked reads trust the bitmap
    with pytest.raises(NotInStore, match="hash"):
        store.read_block(content.root, 1, verify=True)
    os.truncate(data_path, 2 * BS + 100)
    with pytest.raises(NotInStore, match="bytes on disk"):
        store.read_block(content.root, 2)  # a short read is caught even without verify
    assert held(store, content) == [0]
    assert held(DiskBlockStore(directory), content) == [0]  # forgotten on disk too
    assert events == [] and store.shareable(content.root)

    def failing_pread(fd, length, offset):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pread", failing_pread)
    with pytest.raises(StoreIOError):
        store.read_block(content.root, 0)
    assert [event.error.operation for event in events] == ["read"] and not store.shareable(content.root)


# -- the disk store behaves like the memory store, and like itself after a restart ---------------------------

OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["create", "create_pinned", "write", "read", "pin", "unpin", "touch", "remove"]),
        st.integers(0, 4),  # which content
        st.integers(0, 3),  # which block
    ),
    max_size=30,
)
PARITY_CONTENTS = [make_content(size, seed=20 + size) for size in (1, BS, 2 * BS + 1, 3 * BS, 4 * BS)]


def _apply(store, operation, which, block):
    content = PARITY_CONTENTS[which]
    root = content.root
    try:
        if operation.startswith("create"):
            return store.create(content.manifest, content.layer, pin=operation == "create_pinned")
        data = content.block(block) if block < content.manifest.num_blocks else b"?"
        if operation == "write":
            return store.write_block(root, block, data)
        if operation == "read":
            return store.read_block(root, block) == data
        return getattr(store, operation)(root)
    except (StoreError, ValueError) as exc:
        return type(exc)


def _state(store):
    return store.roots(), store.used, [(store.have(root), store.info(root).pins) for root in store.roots()]


@settings(max_examples=40, deadline=None)
@given(operations=OPERATIONS, capacity_units=st.integers(1, 8))
def test_disk_store_matches_memory_store(operations, capacity_units):
    capacity = capacity_units * 2 * BS
    memory = MemoryBlockStore(capacity=capacity)
    events = record_events(memory)
    with tempfile.TemporaryDirectory() as directory, mock.patch.object(os, "fsync", lambda fd: None):
        disk = DiskBlockStore(directory, capacity=capacity)
        disk_events = record_events(disk)
        for operation, which, block in operations:
            assert _apply(memory, operation, which, block) == _apply(disk, operation, which, block)
            assert _state(memory) == _state(disk)
        assert events == disk_events
        disk.close()
        reopened = DiskBlockStore(directory, capacity=capacity)
        roots, used, states = _state(memory)
        assert _state(reopened) == (roots, used, [(have, 0) for have, _ in states])  # pins do not persist
