"""Block store: where the verified blocks of each content root live — on disk (`swarm.store.disk`) or in memory.

One **entry** per content root holds its `Manifest`, its verified block ("hash") layer and the set of blocks
written and verified so far. The block engine writes blocks it has already verified; peers and the proxy read
them back. The proxy and the engine depend on the `BlockStore` protocol only; `MemoryBlockStore`
(`swarm.store.memory`) and `DiskBlockStore` (`swarm.store.disk`) implement it with the same bookkeeping
(`swarm.store.entries.BaseBlockStore`), so the same tests run against both. This module is the contract: the
protocol, the values and events crossing it, and what an entry costs.

Contract, per operation (a *missing* root is one never created, removed, or evicted):

* `create(manifest, layer, pin=False) -> bool` — open or create the entry. The layer is checked against the
  root (`HashMismatch` if it does not reduce to it). Returns False when the entry already existed (then it is
  only touched, and pinned if asked); raises `StoreError` if it exists with another block size (use
  `manifest(root)` to adopt the stored one), `StoreFull` if the size cap cannot make room, `StoreIOError` if
  the disk refuses (a `StoreFailed` event is emitted too). Space is **reserved at creation** (`entry_cost`:
  content size plus its records), so later writes never push the store over its cap.
* `adopt(manifest, layer, path, pin=False, move=False)`, `adopt_fd(manifest, layer, fd, pin=False)` — a complete
  file becomes an entry, all blocks held, **unverified**: the caller guarantees `manifest` and `layer` were
  computed from exactly that file. Otherwise as `create` (an existing entry: touched, pinned, False).
* `write_block(root, index, data) -> bool` — the caller has verified `data` already. True once the bytes are
  stored and the block is recorded as verified (in that order: a block is never marked before its bytes are
  written). **False whenever the store did not keep the block and the caller should simply carry on**: the
  root is missing (removed meanwhile), the entry is unshareable, or the OS refused the write. Never raises for
  store-side conditions, only `ValueError` for a caller bug (index out of range, wrong length). So the engine
  delivers the bytes it holds in memory to its consumer whatever `write_block` returns; it announces HAVE only
  on True.
* **Disk full or unwritable** (ENOSPC, EDQUOT, EFBIG, EACCES, EPERM, EROFS, EIO — any `OSError` from the
  storage): the entry becomes **unshareable** — further writes return False at once without touching the
  disk, `complete()` stays False, so its owner must not announce it (and should withdraw an announcement) —
  and one `StoreFailed(root, StoreIOError)` event goes to the listeners. Blocks already held stay readable.
  The flag lives in memory only: after a restart the entry is an ordinary incomplete entry again.
* `read_block(root, index, verify=False) -> bytes`; `block_location(root, index) -> BlockLocation | None` —
  `NotInStore` if the root or the block is missing (or was dropped: *shared entries* below). `block_location`
  returns `(path, offset, length)` for the TCP transport to `sendfile`, or None when the store has no file
  (memory store: use `read_block`). With `verify=True` the bytes are hashed against the layer first (serve a
  client straight from disk with it: "no unverified byte ever reaches a client"); a block found corrupt or short
  on disk is forgotten and `NotInStore` raised. A read the OS refuses raises `StoreIOError` (and emits
  `StoreFailed`).
* `have(root) -> swarm.net.wire.Bitfield` (a snapshot, ready to send as BITFIELD), `has_block`, `complete`,
  `shareable`, `info`, `manifest`, `hash_layer`, `roots()` (least recently used first), `used`, `capacity`.
* `pin(root)` / `unpin(root)` — a count: content being fetched or served is pinned and never evicted.
  `pinned(root)` is the context-manager form. `remove(root)` deletes an entry even when pinned (explicit).
* Reads, writes, `block_location`, `pin`, `create` and `touch` make an entry the most recently used.

**Shared entries.** A hard-linked adopted file keeps its owner's name, and its owner may change it in place. Such
an entry (`Entry.shared`) is never written into and is **dropped whole** (the store's names deleted, the owner's
file untouched, `Evicted` emitted so its owner stops announcing it) when `read_block` or `block_location` sees
its size or mtime change, or a read is short or fails `verify=True`. A change that escapes those checks only
makes a peer get a block that fails its hash (peers verify every block); loading re-verifies all.

**Eviction** happens only in `create` and `adopt` (and when a disk store loads more than its cap): while the new
entry does not fit, evict unpinned entries, first the **complete** ones in LRU order, then the **incomplete**
ones in LRU order. Complete content first because that is what the issue asks and because an incomplete unpinned
entry is usually a download interrupted by a restart that the engine will resume; but incomplete entries are
still evictable, or aborted downloads would leak the cap forever. Pinned entries never are: if the room cannot be
made, nothing is evicted and `StoreFull` is raised. Every eviction emits `Evicted(root, manifest)` so the owner
withdraws its DHT announcements.

**Threads.** The store is synchronous and thread-safe. The engine runs `create` and `write_block` in a worker
thread (`asyncio.to_thread`): creation fsyncs, and a 4 MiB write can stall behind writeback on a busy disk.
Queries, `read_block` and `block_location` may be called inline on the event loop (a 4 MiB pread from the page
cache takes about a millisecond). Bookkeeping sits behind one short-held lock; block bytes move outside it;
`create`, `remove` and eviction are serialized by a second lock. Listeners run synchronously in the thread that
caused the event, after the locks are released: an asyncio owner hops back with `loop.call_soon_threadsafe`.
A listener that raises is logged and ignored.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from swarm.content import merkle
from swarm.content.manifest import Manifest
from swarm.errors import StoreIOError
from swarm.net.wire import Bitfield

__all__ = [
    "BlockStore",
    "BlockData",
    "BlockLocation",
    "EntryInfo",
    "Evicted",
    "StoreFailed",
    "StoreEvent",
    "Listener",
    "entry_cost",
    "bitmap_length",
]

BlockData = bytes | bytearray | memoryview


def bitmap_length(num_blocks: int) -> int:
    """Bytes of a packed bitmap of `num_blocks` bits (block 0 = high bit of byte 0, as `wire.Bitfield`)."""
    return -(-num_blocks // 8)


def entry_cost(manifest: Manifest) -> int:
    """Bytes an entry is charged against the cap: the content plus its hash layer and verified-block bitmap."""
    return manifest.size + merkle.HASH_SIZE * manifest.num_blocks + bitmap_length(manifest.num_blocks)


class BlockLocation(NamedTuple):
    """Where a verified block's bytes sit in a file, for `loop.sendfile` / `os.sendfile`."""

    path: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """A snapshot of one entry, for status pages and announcements."""

    root: bytes
    manifest: Manifest
    verified: int
    pins: int
    shareable: bool
    cost: int

    @property
    def num_blocks(self) -> int:
        return self.manifest.num_blocks

    @property
    def complete(self) -> bool:
        return self.verified == self.manifest.num_blocks


@dataclass(frozen=True, slots=True)
class Evicted:
    """An entry was evicted to make room: withdraw its announcements."""

    root: bytes
    manifest: Manifest


@dataclass(frozen=True, slots=True)
class StoreFailed:
    """The OS refused a store operation; the entry (if any) is now unshareable."""

    root: bytes | None
    error: StoreIOError


StoreEvent = Evicted | StoreFailed
Listener = Callable[[StoreEvent], None]


class BlockStore(Protocol):
    """What the block engine, the transports and the proxy use (see the module docstring for the contract)."""

    capacity: int | None

    @property
    def used(self) -> int: ...
    def create(self, manifest: Manifest, layer: Sequence[bytes], *, pin: bool = False) -> bool: ...
    def adopt(self, manifest: Manifest, layer: Sequence[bytes], path: str | os.PathLike[str], *,
              pin: bool = False, move: bool = False) -> bool: ...
    def adopt_fd(self, manifest: Manifest, layer: Sequence[bytes], fd: int, *, pin: bool = False) -> bool: ...
    def __contains__(self, root: object) -> bool: ...
    def roots(self) -> list[bytes]: ...
    def manifest(self, root: bytes) -> Manifest: ...
    def hash_layer(self, root: bytes) -> Sequence[bytes]: ...
    def info(self, root: bytes) -> EntryInfo: ...
    def have(self, root: bytes) -> Bitfield: ...
    def has_block(self, root: bytes, index: int) -> bool: ...
    def complete(self, root: bytes) -> bool: ...
    def shareable(self, root: bytes) -> bool: ...
    def write_block(self, root: bytes, index: int, data: BlockData) -> bool: ...
    def read_block(self, root: bytes, index: int, *, verify: bool = False) -> bytes: ...
    def block_location(self, root: bytes, index: int) -> BlockLocation | None: ...
    def pin(self, root: bytes) -> None: ...
    def unpin(self, root: bytes) -> None: ...
    def pinned(self, root: bytes) -> AbstractContextManager[None]: ...
    def touch(self, root: bytes) -> None: ...
    def remove(self, root: bytes) -> bool: ...
    def add_listener(self, listener: Listener) -> None: ...
    def add_eviction_hook(self, hook: Callable[[bytes], None]) -> None: ...
    def remove_listener(self, listener: Listener) -> None: ...
    def close(self) -> None: ...
