"""The bookkeeping both block stores share (`BaseBlockStore`): entries, LRU order, pins, the cap, eviction, events.

The contract it implements — errors, eviction order, shared entries, threads — is `swarm.store.interface`'s
docstring. A back end (`swarm.store.memory`, `swarm.store.disk`) subclasses `BaseBlockStore` and `Entry` and adds
where the bytes go through the `_storage_*` hooks.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from swarm.content.manifest import Manifest
from swarm.errors import HashMismatch, NotInStore, StoreError, StoreFull, StoreIOError
from swarm.net.wire import Bitfield
from swarm.store.interface import (
    BlockData,
    BlockLocation,
    EntryInfo,
    Evicted,
    Listener,
    StoreEvent,
    StoreFailed,
    bitmap_length,
    entry_cost,
)

__all__ = ["BaseBlockStore", "Entry"]

# The name the store logged under before its split into modules, so that logging configuration keeps applying.
logger = logging.getLogger("swarm.store")  # the package's: the disk store logs under it too


def _mask(index: int) -> int:
    return 0x80 >> (index & 7)


def _describe_os_error(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    what = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else exc.strerror or str(exc)
    return f"{what} ({name})" if name else what


class Entry:
    """Bookkeeping of one content root; storage back ends subclass it to add where the bytes are."""

    def __init__(self, manifest: Manifest, layer: tuple[bytes, ...], bits: bytearray | None = None) -> None:
        self.manifest = manifest
        self.layer = layer
        self.bits = bits if bits is not None else bytearray(bitmap_length(manifest.num_blocks))
        self.verified = int.from_bytes(self.bits).bit_count()
        self.cost = entry_cost(manifest)
        self.pins = 0
        self.shareable = True
        # Set when the entry leaves the store; an I/O running outside the lock checks it before recording.
        self.removed = False
        # Its bytes are a file that also has a name outside the store (adopted by hard link): see the docstring.
        self.shared = False

    @property
    def root(self) -> bytes:
        return self.manifest.root

    @property
    def complete(self) -> bool:
        return self.verified == self.manifest.num_blocks

    def holds(self, index: int) -> bool:
        return bool(self.bits[index >> 3] & _mask(index))

    def marked_byte(self, index: int) -> int:
        """The bitmap byte holding `index`, with `index` set."""
        return self.bits[index >> 3] | _mask(index)

    def unmarked_byte(self, index: int) -> int:
        return self.bits[index >> 3] & ~_mask(index) & 0xFF

    def set(self, index: int, held: bool) -> None:
        if held != self.holds(index):
            self.bits[index >> 3] ^= _mask(index)
            self.verified += 1 if held else -1


class BaseBlockStore:
    """Bookkeeping shared by the storage back ends: entries, LRU order, pins, the cap, eviction, events.

    A back end implements the `_storage_*` hooks. Each may raise `OSError`, which becomes the disk-error
    contract described in the module docstring. `_storage_mark` runs under the bookkeeping lock (it must be
    short); the others run outside it.
    """

    def __init__(self, *, capacity: int | None = None) -> None:
        if capacity is not None and capacity < 0:
            raise ValueError("capacity must be >= 0 or None")
        self.capacity = capacity
        self._entries: OrderedDict[bytes, Entry] = OrderedDict()  # least recently used first
        self._used = 0
        self._listeners: list[Listener] = []
        self._eviction_hooks: list[Callable[[bytes], None]] = []
        self._lock = threading.Lock()  # bookkeeping; held briefly, never across block data I/O
        self._structure_lock = threading.RLock()  # create / remove / evict, including their file I/O

    # -- storage hooks ---------------------------------------------------------------------------------------

    def _storage_create(self, manifest: Manifest, layer: tuple[bytes, ...]) -> Entry:
        raise NotImplementedError

    def _storage_write(self, entry: Entry, offset: int, data: BlockData) -> None:
        raise NotImplementedError

    def _storage_mark(self, entry: Entry, index: int, held: bool) -> None:
        """Persist one bit of the verified-block record (the in-memory bit is set after this returns)."""
        raise NotImplementedError

    def _storage_read(self, entry: Entry, index: int, offset: int, length: int) -> bytes:
        raise NotImplementedError

    def _storage_location(self, entry: Entry, offset: int, length: int) -> BlockLocation | None:
        return None

    def _storage_delete(self, entry: Entry) -> None:
        raise NotImplementedError

    def _storage_adopt(self, manifest: Manifest, layer: tuple[bytes, ...], source: str | int, move: bool) -> Entry:
        raise NotImplementedError  # a complete entry holding the file `source` (a path or an open descriptor)

    def _storage_changed(self, entry: Entry) -> bool:
        return False  # whether a shared entry's file changed since it was adopted or loaded

    # -- listeners -------------------------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def add_eviction_hook(self, hook: Callable[[bytes], None]) -> None:
        """Call `hook(root)` for each entry about to be deleted (evicted, dropped, removed), before its files are
        (the `Evicted` event comes after): whoever reads the files by path (the BitTorrent bridge) stops first. It
        runs in whatever thread deletes, under the store's structure lock (not its entry lock): it must not call
        back into the store. An exception is logged and the deletion goes on."""
        self._eviction_hooks.append(hook)

    def _emit(self, events: list[StoreEvent]) -> None:
        for event in events:
            for listener in list(self._listeners):
                try:
                    listener(event)
                except Exception:  # an observer's bug must not corrupt the store's state or the caller's fetch
                    logger.exception("block store listener failed on %r", event)

    def _fail(
        self, events: list[StoreEvent], entry: Entry | None, root: bytes | None, operation: str, what: str,
        exc: OSError,
    ) -> StoreIOError:
        """Turn an OS error into `StoreIOError`; the entry becomes unshareable. Call under `_lock`.

        The event (and the warning) go out on an entry's first failure only: a full disk would otherwise
        report once per block in flight.
        """
        message = f"cannot {operation} {what}: {_describe_os_error(exc)}"
        error = StoreIOError(message, errno=exc.errno, operation=operation, root=root)
        error.__cause__ = exc
        if entry is None or entry.shareable:
            logger.warning("block store: %s", message)
            events.append(StoreFailed(root, error))
        if entry is not None:
            entry.shareable = False
        return error

    # -- queries ---------------------------------------------------------------------------------------------

    @property
    def used(self) -> int:
        """Bytes charged against the cap (`entry_cost` of every entry, including one being created)."""
        return self._used

    def __contains__(self, root: object) -> bool:
        return root in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def roots(self) -> list[bytes]:
        """Every content root held, least recently used first."""
        with self._lock:
            return list(self._entries)

    def _get(self, root: bytes) -> Entry:
        entry = self._entries.get(root)
        if entry is None:
            raise NotInStore(f"no entry for content root {root.hex()}")
        return entry

    def manifest(self, root: bytes) -> Manifest:
        with self._lock:
            return self._get(root).manifest

    def hash_layer(self, root: bytes) -> Sequence[bytes]:
        with self._lock:
            return self._get(root).layer

    def info(self, root: bytes) -> EntryInfo:
        with self._lock:
            entry = self._get(root)
            return EntryInfo(root, entry.manifest, entry.verified, entry.pins, entry.shareable, entry.cost)

    def have(self, root: bytes) -> Bitfield:
        with self._lock:
            entry = self._get(root)
            return Bitfield(entry.manifest.num_blocks, bytes(entry.bits))

    def has_block(self, root: bytes, index: int) -> bool:
        with self._lock:
            entry = self._entries.get(root)
            return entry is not None and 0 <= index < entry.manifest.num_blocks and entry.holds(index)

    def complete(self, root: bytes) -> bool:
        with self._lock:
            entry = self._entries.get(root)
            return entry is not None and entry.complete

    def shareable(self, root: bytes) -> bool:
        with self._lock:
            entry = self._entries.get(root)
            return entry is not None and entry.shareable

    # -- LRU and pins ----------------------------------------------------------------------------------------

    def touch(self, root: bytes) -> None:
        """Make `root` the most recently used; a missing root is ignored."""
        with self._lock:
            if root in self._entries:
                self._entries.move_to_end(root)

    def pin(self, root: bytes) -> None:
        """Protect `root` from eviction until a matching `unpin`; `NotInStore` if missing."""
        with self._lock:
            self._get(root).pins += 1
            self._entries.move_to_end(root)

    def unpin(self, root: bytes) -> None:
        """Undo one `pin`. A missing root (removed meanwhile) is ignored; unpinning an unpinned one is a bug."""
        with self._lock:
            entry = self._entries.get(root)
            if entry is None:
                return
            if entry.pins == 0:
                raise ValueError(f"content root {root.hex()} is not pinned")
            entry.pins -= 1

    @contextmanager
    def pinned(self, root: bytes) -> Iterator[None]:
        self.pin(root)
        try:
            yield
        finally:
            self.unpin(root)

    # -- create, remove, evict -------------------------------------------------------------------------------

    def create(self, manifest: Manifest, layer: Sequence[bytes], *, pin: bool = False) -> bool:
        """Open or create the entry of `manifest.root`; True if it was created (see the module docstring)."""
        layer = tuple(layer)
        manifest.verify_layer(layer)
        return self._make(manifest, pin, "create", lambda: self._storage_create(manifest, layer))

    def adopt(self, manifest: Manifest, layer: Sequence[bytes], path: str | os.PathLike[str], *, pin: bool = False,
              move: bool = False) -> bool:
        """Make the complete file `path` the entry of `manifest.root` unverified (the caller just hashed it).

        The disk store hard-links it (a shared entry), renames it in with `move=True`, or copies it; the memory
        store reads it in (and deletes it with `move=True`). False, the file untouched, if the entry exists.
        Cap, eviction and errors as `create`; `ValueError` if the file is not `manifest.size` bytes.
        """
        return self._adopt(manifest, layer, os.fspath(path), pin, move)

    def adopt_fd(self, manifest: Manifest, layer: Sequence[bytes], fd: int, *, pin: bool = False) -> bool:
        """`adopt` the file open as `fd` (a spool; its offset is ignored, the caller still closes it). Linked
        if it has a name or was opened `O_TMPFILE`; an unlinked file cannot get a name again: it is copied."""
        return self._adopt(manifest, layer, fd, pin, False)

    def _adopt(self, manifest: Manifest, layer: Sequence[bytes], source: str | int, pin: bool, move: bool) -> bool:
        layer = tuple(layer)
        manifest.verify_layer(layer)
        size = os.fstat(source).st_size if isinstance(source, int) else os.stat(source).st_size
        if size != manifest.size:
            raise ValueError(f"the file is {size} bytes, its manifest says {manifest.size}")
        return self._make(manifest, pin, "adopt", lambda: self._storage_adopt(manifest, layer, source, move))

    def _make(self, manifest: Manifest, pin: bool, operation: str, make: Callable[[], Entry]) -> bool:
        """`create` and `adopt`: touch an existing entry, or make room (evicting) and `make()` a new one."""
        root = manifest.root
        events: list[StoreEvent] = []
        try:
            with self._structure_lock:
                with self._lock:
                    existing = self._entries.get(root)
                    if existing is not None:
                        if existing.manifest.block_size != manifest.block_size:
                            raise StoreError(
                                f"content root {root.hex()} is stored with block size "
                                f"{existing.manifest.block_size}, not {manifest.block_size}"
                            )
                        existing.pins += int(pin)
                        self._entries.move_to_end(root)
                        return False
                    cost = entry_cost(manifest)
                    victims = self._plan_eviction(cost)
                    self._detach(victims)
                    self._used += cost  # reserved while the files are made, so a concurrent check sees it
                events += self._delete_evicted(victims)
                try:
                    entry = make()
                except OSError as exc:
                    with self._lock:
                        self._used -= cost
                        error = self._fail(events, None, root, operation, f"an entry for {root.hex()}", exc)
                    raise error from exc
                with self._lock:
                    entry.pins = int(pin)
                    self._entries[root] = entry
                return True
        finally:
            self._emit(events)

    def remove(self, root: bytes) -> bool:
        """Delete the entry of `root`, pinned or not (an explicit decision); False if it was missing."""
        with self._structure_lock:
            with self._lock:
                entry = self._entries.get(root)
                if entry is None:
                    return False
                self._detach([entry])
            self._delete_quietly(entry)
            return True

    def _plan_eviction(self, needed: int) -> list[Entry]:
        """Entries to evict so that `needed` more bytes fit; `StoreFull` (nothing evicted) if impossible."""
        if self.capacity is None:
            return []
        if needed > self.capacity:
            raise StoreFull(f"{needed} bytes exceed the store's capacity of {self.capacity}")
        excess = self._used + needed - self.capacity
        if excess <= 0:
            return []
        unpinned = [entry for entry in self._entries.values() if entry.pins == 0]
        candidates = [e for e in unpinned if e.complete] + [e for e in unpinned if not e.complete]
        victims = []
        for entry in candidates:
            if excess <= 0:
                break
            victims.append(entry)
            excess -= entry.cost
        if excess > 0:
            raise StoreFull(f"cannot free {excess} more bytes: the rest of the store is pinned")
        return victims

    def _detach(self, entries: list[Entry]) -> None:
        """Take entries out of the bookkeeping (under `_lock`); their files go afterwards, outside it."""
        for entry in entries:
            del self._entries[entry.root]
            self._used -= entry.cost
            entry.removed = True

    def _drop(self, entry: Entry, why: str) -> None:  # bytes no longer trusted; `Evicted`: stop announcing it
        with self._structure_lock:
            with self._lock:
                if entry.removed:
                    return
                self._detach([entry])
            logger.warning("block store: dropping %s: %s", entry.root.hex(), why)
            self._delete_quietly(entry)
        self._emit([Evicted(entry.root, entry.manifest)])

    def _check_shared(self, entry: Entry) -> None:  # outside the locks: a stat
        if entry.shared and self._storage_changed(entry):
            self._drop(entry, "its file was changed outside the store")
            raise NotInStore(f"content root {entry.root.hex()} was dropped: its file changed")

    def _delete_evicted(self, victims: list[Entry]) -> list[StoreEvent]:
        for entry in victims:
            logger.info("block store: evicting %s (%d bytes)", entry.root.hex(), entry.cost)
            self._delete_quietly(entry)
        return [Evicted(entry.root, entry.manifest) for entry in victims]

    def _delete_quietly(self, entry: Entry) -> None:
        for hook in list(self._eviction_hooks):  # evicted, dropped or removed: who reads its files stops first
            try:
                hook(entry.root)
            except Exception:  # an observer's bug must not keep the store full
                logger.exception("block store eviction hook failed on %s", entry.root.hex())
        try:
            self._storage_delete(entry)
        except OSError as exc:  # the entry is gone from the store either way; leftovers are cleaned at load
            logger.warning("block store: cannot delete files of %s: %s", entry.root.hex(), exc)

    # -- blocks ----------------------------------------------------------------------------------------------

    def _span(self, entry: Entry, index: int) -> tuple[int, int]:
        try:
            return entry.manifest.block_span(index)
        except IndexError as exc:
            raise ValueError(str(exc)) from None

    def write_block(self, root: bytes, index: int, data: BlockData) -> bool:
        """Store an already verified block; True once stored and recorded (see the module docstring)."""
        with self._lock:
            entry = self._entries.get(root)
            if entry is None:
                return False
            offset, length = self._span(entry, index)
            if memoryview(data).nbytes != length:
                raise ValueError(f"block {index} must be {length} bytes, got {memoryview(data).nbytes}")
            self._entries.move_to_end(root)
            if entry.holds(index):
                return True  # a duplicate (endgame): the bytes are identical, nothing to do
            if not entry.shareable:
                return False
        events: list[StoreEvent] = []
        try:
            try:
                # Outside the lock. If the entry is removed meanwhile, the write is wasted, never harmful: a
                # recreated entry of the same root expects these very bytes at this very offset.
                self._storage_write(entry, offset, data)
            except OSError as exc:
                with self._lock:
                    self._fail(events, entry, root, "write", f"block {index} of {root.hex()}", exc)
                return False
            with self._lock:
                if entry.removed or not entry.shareable:
                    return False
                if not entry.holds(index):
                    try:
                        self._storage_mark(entry, index, True)
                    except OSError as exc:
                        self._fail(events, entry, root, "write", f"the record of {root.hex()}", exc)
                        return False
                    entry.set(index, True)
                return True
        finally:
            self._emit(events)

    def read_block(self, root: bytes, index: int, *, verify: bool = False) -> bytes:
        """The bytes of a held block; `NotInStore` if missing or found corrupt, `StoreIOError` if unreadable."""
        with self._lock:
            entry = self._get(root)
            offset, length = self._span(entry, index)
            if not entry.holds(index):
                raise NotInStore(f"block {index} of {root.hex()} is not held")
            self._entries.move_to_end(root)
        self._check_shared(entry)
        try:
            data = self._storage_read(entry, index, offset, length)
        except OSError as exc:
            events: list[StoreEvent] = []
            with self._lock:
                error = self._fail(events, entry, root, "read", f"block {index} of {root.hex()}", exc)
            self._emit(events)
            raise error from exc
        problem = None
        if len(data) != length:
            problem = f"is {len(data)} bytes on disk, expected {length}"
        elif verify:
            try:
                entry.manifest.verify_block(entry.layer, index, data)
            except HashMismatch:
                problem = "fails its hash on disk"
        if problem is not None:
            if entry.shared:  # never rewrite a block in a file the store does not own: forget it all
                self._drop(entry, f"block {index} {problem}")
            else:
                logger.warning("block store: block %d of %s %s; dropped", index, root.hex(), problem)
                self._forget(entry, index)
            raise NotInStore(f"block {index} of {root.hex()} {problem}")
        return data

    def _forget(self, entry: Entry, index: int) -> None:
        with self._lock:
            if entry.removed or not entry.holds(index):
                return
            entry.set(index, False)
            try:
                self._storage_mark(entry, index, False)
            except OSError as exc:  # harmless: the next load re-verifies the block and drops it anyway
                logger.warning("block store: cannot clear block %d of %s: %s", index, entry.root.hex(), exc)

    def block_location(self, root: bytes, index: int) -> BlockLocation | None:
        """Where to `sendfile` a held block from, or None when the store keeps no file (use `read_block`)."""
        with self._lock:
            entry = self._get(root)
            offset, length = self._span(entry, index)
            if not entry.holds(index):
                raise NotInStore(f"block {index} of {root.hex()} is not held")
            self._entries.move_to_end(root)
        self._check_shared(entry)
        return self._storage_location(entry, offset, length)

    def close(self) -> None:
        """Release resources; the memory store has none. The store holds no open files between calls."""

    def __enter__(self) -> BaseBlockStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
