"""`MemoryBlockStore`: the block store in memory, for tests and for nodes that must not write to disk.

Same contract (`swarm.store.interface`) and bookkeeping (`swarm.store.entries`) as the disk store; only where
the bytes live differs.
"""

from __future__ import annotations

import os

from swarm.content.manifest import Manifest
from swarm.store.entries import BaseBlockStore, Entry
from swarm.store.interface import BlockData

__all__ = ["MemoryBlockStore"]


class _MemoryEntry(Entry):
    def __init__(self, manifest: Manifest, layer: tuple[bytes, ...]) -> None:
        super().__init__(manifest, layer)
        self.blocks: dict[int, bytes] = {}


class MemoryBlockStore(BaseBlockStore):
    """The same store, in memory: for tests and for nodes that must not write to disk.

    `write_error`, when set to an `OSError`, makes every block write fail with it — a simulated full or
    read-only disk for engine tests, taking exactly the disk store's error path.
    """

    def __init__(self, *, capacity: int | None = None) -> None:
        super().__init__(capacity=capacity)
        self.write_error: OSError | None = None

    def _storage_create(self, manifest: Manifest, layer: tuple[bytes, ...]) -> Entry:
        return _MemoryEntry(manifest, layer)

    def _storage_write(self, entry: Entry, offset: int, data: BlockData) -> None:
        if self.write_error is not None:
            raise self.write_error
        assert isinstance(entry, _MemoryEntry)
        # Keyed by offset, the only thing the hook is given; a copy, since `data` may be a reused buffer.
        entry.blocks[offset] = bytes(data)

    def _storage_mark(self, entry: Entry, index: int, held: bool) -> None:
        if not held:
            assert isinstance(entry, _MemoryEntry)
            entry.blocks.pop(index * entry.manifest.block_size, None)

    def _storage_read(self, entry: Entry, index: int, offset: int, length: int) -> bytes:
        assert isinstance(entry, _MemoryEntry)
        return entry.blocks.get(offset, b"")

    def _storage_delete(self, entry: Entry) -> None:
        assert isinstance(entry, _MemoryEntry)
        entry.blocks.clear()

    def _storage_adopt(self, manifest: Manifest, layer: tuple[bytes, ...], source: str | int, move: bool) -> Entry:
        entry = _MemoryEntry(manifest, layer)
        with open(source, "rb", closefd=not isinstance(source, int)) as handle:  # a descriptor stays the caller's
            for index in range(manifest.num_blocks):
                offset, length = manifest.block_span(index)
                entry.blocks[offset] = os.pread(handle.fileno(), length, offset)
                entry.set(index, True)
        if move:
            assert not isinstance(source, int), "a descriptor is adopted, never moved"
            os.unlink(source)
        return entry
