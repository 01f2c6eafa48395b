"""Disk-backed block store: one data file and two small records per content root, in one directory.

The contract (errors, eviction, threads) is `swarm.store.interface`'s; this module adds where the bytes go. Per content
root, named by its hex:

    <hex>.data   the content at its own offsets, created sparse at its full size (`ftruncate`): a block is one
                 `pwrite`, and unwritten holes cost no disk space.
    <hex>.meta   the record: magic, encoded manifest, hash layer, SHA-256 of all that. Written once, at
                 creation, atomically (temporary file, fsync, `os.replace`). It is the entry's commit point: no
                 valid record, no entry.
    <hex>.bits   the verified-block bitmap, packed like `wire.Bitfield`. Updated **in place**, one byte per new
                 block — a 100,000-block file never rewrites more than that byte.
    lru          content roots, least recently used first; written on `close()`, a hint only.

**Crash consistency.** A block's bit is written only after its bytes were written, but neither is fsynced: the
kernel may still persist the bit before the bytes. That is harmless because the bitmap is a *hint*: loading
re-verifies every marked block against the hash layer (and the layer against the root) and keeps only what
verifies, so the worst a crash can do is lose blocks, never serve a wrong one. An fsync per block would cost a
journal commit per block for nothing. The only fsyncs are at entry creation — the bitmap, the record, and the
directory — so that an entry whose blocks we may soon announce survives a power cut rather than being dropped
at the next load. `close()` writes the LRU file without fsync: losing it only loses the order.

**Loading** (in the constructor; it reads back every held block, so run it in a thread at startup): a missing,
truncated, garbage or inconsistent record or bitmap, or a missing data file, drops that entry with a logged
warning and deletes its files; an entry that cannot be read for an OS reason (EACCES, EIO…) is skipped but its
files are left alone, since a later run may read them. A data file of the wrong size is cut or extended back to
its size (re-verification then drops the blocks that were lost). Leftover temporary files and files without a
record are deleted; names that are not ours are never touched. Nothing raises out of loading but a data
directory that cannot be created or listed (`StoreIOError`).

**Adopting a file** (`adopt`, for a seeded file or a finished spool) makes `<hex>.data` a **hard link** to it:
the same inode, no byte copied and no second copy in the page cache (a node seeding a 200 MiB file otherwise
wrote 200 MiB into the store first). With `move=True` the file is renamed in; across filesystems, or where a
link is refused (EPERM under `fs.protected_hardlinks` for another user's file), it is copied in the kernel
(`copy_file_range`). A link keeps the user's name on the same bytes, so the user may later change them in place:
such an entry is *shared* (`swarm.store.interface`'s docstring) — never written into, never truncated, and
dropped whole
(only our names are deleted) when its size or mtime changes, when a read of it is short or fails its hash, or,
at loading, when any block fails re-verification. Loading marks an entry shared when its data file has more
than one link (and drops it if it is incomplete: the store would have to write into it).

No file stays open between calls: each operation opens, acts and closes. That costs microseconds per block,
keeps the store within any file-descriptor limit however many entries it holds, and means removing an entry
cannot pull a descriptor from under a write running in another thread.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import struct
from hashlib import sha256
from pathlib import Path

from swarm.content import merkle
from swarm.content.manifest import Manifest, decode
from swarm.errors import CorruptEntry, HashMismatch, ManifestError, StoreError, StoreIOError
from swarm.store.entries import BaseBlockStore, Entry
from swarm.store.interface import BlockData, BlockLocation, bitmap_length

__all__ = ["DiskBlockStore", "encode_record", "decode_record"]

logger = logging.getLogger(__name__)

RECORD_MAGIC = b"SWSTORE\x01"  # the last byte is the record format version
_RECORD_HEADER = struct.Struct(">8sI")  # magic, manifest length
_LAYER_COUNT = struct.Struct(">I")
LRU_FILE = "lru"
_ENTRY_FILE = re.compile(r"^([0-9a-f]{64})\.(data|bits|meta)(\.tmp)?$")


def encode_record(manifest: Manifest, layer: tuple[bytes, ...] | list[bytes]) -> bytes:
    encoded = manifest.encode()
    body = b"".join(
        [_RECORD_HEADER.pack(RECORD_MAGIC, len(encoded)), encoded, _LAYER_COUNT.pack(len(layer)), *layer]
    )
    return body + sha256(body).digest()


def decode_record(data: bytes) -> tuple[Manifest, tuple[bytes, ...]]:
    """Parse and check a record; `CorruptEntry` on anything wrong, the layer included."""
    digest_size = sha256().digest_size
    if len(data) < _RECORD_HEADER.size + _LAYER_COUNT.size + digest_size:
        raise CorruptEntry("record truncated")
    body, digest = data[:-digest_size], data[-digest_size:]
    if sha256(body).digest() != digest:
        raise CorruptEntry("record checksum mismatch")
    magic, manifest_length = _RECORD_HEADER.unpack_from(body)
    if magic != RECORD_MAGIC:
        raise CorruptEntry("not a block store record, or an unknown version")
    position = _RECORD_HEADER.size + manifest_length
    if position + _LAYER_COUNT.size > len(body):
        raise CorruptEntry("record truncated inside the manifest")
    try:
        manifest = decode(body[_RECORD_HEADER.size : position])
    except ManifestError as exc:
        raise CorruptEntry(f"bad manifest: {exc}") from None
    (count,) = _LAYER_COUNT.unpack_from(body, position)
    position += _LAYER_COUNT.size
    if len(body) - position != count * merkle.HASH_SIZE:
        raise CorruptEntry("hash layer length does not match its count")
    layer = tuple(body[i : i + merkle.HASH_SIZE] for i in range(position, len(body), merkle.HASH_SIZE))
    try:
        manifest.verify_layer(layer)
    except HashMismatch as exc:
        raise CorruptEntry(f"hash layer: {exc}") from None
    return manifest, layer


def _write_all(fd: int, data: BlockData, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _read_exactly(fd: int, length: int, offset: int) -> bytes:
    """Up to `length` bytes at `offset`; shorter only at the end of the file."""
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        part = os.pread(fd, length - got, offset + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def atomic_write(path: Path, data: bytes, *, fsync: bool) -> None:
    """Write a whole file via a temporary sibling and `os.replace`: readers see the old file or the new one."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data, 0)
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(temporary)
        raise
    os.close(fd)
    os.replace(temporary, path)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("block store: cannot delete %s: %s", path, exc)


class _DiskEntry(Entry):
    def __init__(
        self, directory: Path, manifest: Manifest, layer: tuple[bytes, ...], bits: bytearray | None = None
    ) -> None:
        super().__init__(manifest, layer, bits)
        stem = manifest.root.hex()
        self.signature: tuple[int, int] | None = None  # (size, mtime_ns) of a shared entry's file
        self.data_path = directory / f"{stem}.data"
        self.bits_path = directory / f"{stem}.bits"
        self.meta_path = directory / f"{stem}.meta"


def _copy(source: str | int, destination: Path) -> None:
    """Copy the file `source` (a path or an open descriptor) to a new `destination`, in the kernel if it can."""
    src = source if isinstance(source, int) else os.open(source, os.O_RDONLY)
    try:
        dst = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            size, offset = os.fstat(src).st_size, 0
            while offset < size:
                try:
                    copied = os.copy_file_range(src, dst, size - offset, offset, offset)
                except OSError as exc:  # not supported between these two files: user space does it
                    if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                        raise
                    copied = len(data := os.pread(src, min(size - offset, 1 << 20), offset))
                    _write_all(dst, data, offset)
                if not copied:
                    raise OSError(errno.EIO, "the file shrank while it was copied")
                offset += copied
        finally:
            os.close(dst)
    finally:
        if src != source:
            os.close(src)


def _link_or_copy(source: str | int, destination: Path) -> None:
    """Give `destination` the bytes of `source`: a hard link when the kernel allows, a copy otherwise.

    Via a temporary name, because `link` never replaces a name and so that a crash leaves only a `.tmp` file,
    which loading deletes.
    """
    temporary = destination.with_name(destination.name + ".tmp")
    _unlink_quietly(temporary)
    try:
        if isinstance(source, int):
            # linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N names the open file. Linux refuses (ENOENT) for a file
            # whose last name was unlinked, unless it was opened O_TMPFILE: then it is copied.
            proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.link(str(source), temporary, src_dir_fd=proc, follow_symlinks=True)
            finally:
                os.close(proc)
        else:
            os.link(os.path.realpath(source), temporary)  # link(2) would link a symlink itself, not its target
    except OSError as exc:
        logger.debug("block store: cannot link %s (%s), copying it", source, exc)
        try:
            _copy(source, temporary)
        except BaseException:
            _unlink_quietly(temporary)
            raise
    try:
        os.replace(temporary, destination)
    except BaseException:
        _unlink_quietly(temporary)
        raise


def _paths(directory: Path, root: bytes) -> list[Path]:
    # The record first: deleting in this order, an interruption leaves files without a record, which the next
    # load deletes, rather than a record whose data is gone.
    return [directory / f"{root.hex()}.{suffix}" for suffix in ("meta", "data", "bits")]


class DiskBlockStore(BaseBlockStore):
    """`BlockStore` under `directory` (created if needed), loading and re-verifying what is already there."""

    def __init__(self, directory: str | os.PathLike[str], *, capacity: int | None = None) -> None:
        super().__init__(capacity=capacity)
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            names = os.listdir(self.directory)
        except OSError as exc:
            raise StoreIOError(
                f"cannot use block store directory {self.directory}: {exc.strerror}", errno=exc.errno,
                operation="open",
            ) from exc
        self._load(names)

    # -- storage hooks ---------------------------------------------------------------------------------------

    def _storage_create(self, manifest: Manifest, layer: tuple[bytes, ...]) -> Entry:
        entry = _DiskEntry(self.directory, manifest, layer)
        try:
            fd = os.open(entry.data_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, manifest.size)
            finally:
                os.close(fd)
            atomic_write(entry.bits_path, bytes(len(entry.bits)), fsync=True)
            atomic_write(entry.meta_path, encode_record(manifest, layer), fsync=True)  # the commit point
            self._fsync_directory()
        except OSError:
            for path in _paths(self.directory, manifest.root):
                _unlink_quietly(path)
            raise
        return entry

    def _storage_adopt(self, manifest: Manifest, layer: tuple[bytes, ...], source: str | int, move: bool) -> Entry:
        bits = bytearray(b"\xff" * bitmap_length(manifest.num_blocks))
        if manifest.num_blocks % 8:
            bits[-1] &= (0xFF << (8 - manifest.num_blocks % 8)) & 0xFF
        entry = _DiskEntry(self.directory, manifest, layer, bits)
        moved = False
        assert not (move and isinstance(source, int)), "a descriptor is adopted, never moved"
        path = source if isinstance(source, str) else ""
        try:
            if move:
                try:
                    os.replace(path, entry.data_path)
                    moved = True
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
            if not moved:
                _link_or_copy(source, entry.data_path)
            self._seal(entry, os.stat(entry.data_path))
            atomic_write(entry.bits_path, bytes(bits), fsync=True)
            atomic_write(entry.meta_path, encode_record(manifest, layer), fsync=True)  # the commit point
            self._fsync_directory()
        except OSError:
            if moved:  # give the caller its file back
                try:
                    os.replace(entry.data_path, path)
                except OSError as exc:
                    logger.warning("block store: cannot move %s back to %s: %s", entry.data_path, source, exc)
            for leftover in _paths(self.directory, manifest.root):
                _unlink_quietly(leftover)  # a link's other name, the caller's file, is untouched
            raise
        if move and not moved:  # copied from another filesystem
            _unlink_quietly(Path(path))
        return entry

    @staticmethod
    def _seal(entry: _DiskEntry, status: os.stat_result) -> None:
        """Mark an entry shared when its data file has another name, remembering what it looks like now."""
        entry.shared = status.st_nlink > 1
        entry.signature = (status.st_size, status.st_mtime_ns) if entry.shared else None

    def _storage_changed(self, entry: Entry) -> bool:
        assert isinstance(entry, _DiskEntry)
        try:
            status = os.stat(entry.data_path)
        except OSError:
            return True
        return (status.st_size, status.st_mtime_ns) != entry.signature

    def _storage_write(self, entry: Entry, offset: int, data: BlockData) -> None:
        assert isinstance(entry, _DiskEntry)
        fd = os.open(entry.data_path, os.O_WRONLY)
        try:
            _write_all(fd, data, offset)
        finally:
            os.close(fd)

    def _storage_mark(self, entry: Entry, index: int, held: bool) -> None:
        assert isinstance(entry, _DiskEntry)
        value = entry.marked_byte(index) if held else entry.unmarked_byte(index)
        fd = os.open(entry.bits_path, os.O_WRONLY)
        try:
            _write_all(fd, bytes([value]), index >> 3)
        finally:
            os.close(fd)

    def _storage_read(self, entry: Entry, index: int, offset: int, length: int) -> bytes:
        assert isinstance(entry, _DiskEntry)
        fd = os.open(entry.data_path, os.O_RDONLY)
        try:
            return _read_exactly(fd, length, offset)
        finally:
            os.close(fd)

    def _storage_location(self, entry: Entry, offset: int, length: int) -> BlockLocation | None:
        assert isinstance(entry, _DiskEntry)
        return BlockLocation(str(entry.data_path), offset, length)

    def _storage_delete(self, entry: Entry) -> None:
        for path in _paths(self.directory, entry.root):
            _unlink_quietly(path)

    def move_out(self, root: bytes, path: str | os.PathLike[str]) -> None:
        """Make the complete entry of `root` the file `path` and remove it from the store.

        For a download that is wanted as a file (`swarm get`): the blocks were written here once, and the data
        file becomes the output — a rename on the same filesystem, a kernel-side copy otherwise — instead of
        every byte being written a second time. Refused (`StoreError`) while the entry is incomplete,
        unshareable or pinned; an `OSError` leaves the entry as it was.
        """
        with self._structure_lock:
            with self._lock:
                entry = self._get(root)
                if not entry.complete or not entry.shareable or entry.pins:
                    raise StoreError(f"content root {root.hex()} is incomplete, unshareable or pinned")
            assert isinstance(entry, _DiskEntry)
            try:
                os.rename(entry.data_path, path)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                shutil.copyfile(entry.data_path, path)  # sendfile(2) underneath
            self.remove(root)

    def _fsync_directory(self) -> None:
        """Make the new names durable. Best effort: some filesystems cannot fsync a directory."""
        try:
            fd = os.open(self.directory, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def close(self) -> None:
        """Save the LRU order (the only state not already on disk)."""
        lines = "".join(f"{root.hex()}\n" for root in self.roots())
        try:
            atomic_write(self.directory / LRU_FILE, lines.encode("ascii"), fsync=False)
        except OSError as exc:
            logger.warning("block store: cannot save the LRU order: %s", exc)

    # -- loading ---------------------------------------------------------------------------------------------

    def _load(self, names: list[str]) -> None:
        by_root: dict[str, set[str]] = {}
        for name in names:
            match = _ENTRY_FILE.match(name)
            if match is None:
                if name == LRU_FILE + ".tmp":
                    _unlink_quietly(self.directory / name)
                continue
            if match.group(3):  # an atomic write interrupted before its rename
                _unlink_quietly(self.directory / name)
                continue
            by_root.setdefault(match.group(1), set()).add(match.group(2))
        loaded: dict[bytes, Entry] = {}
        for stem, kinds in sorted(by_root.items()):
            root = bytes.fromhex(stem)
            if "meta" not in kinds:
                logger.warning("block store: deleting files of %s, which has no record", stem)
                self._delete_files(root)
                continue
            entry = self._load_entry(root)
            if entry is not None:
                loaded[root] = entry
        for root in self._lru_order(loaded):
            entry = loaded[root]
            self._entries[root] = entry
            self._used += entry.cost
        if self.capacity is not None and self._used > self.capacity:
            victims = self._plan_eviction(0)  # nothing is pinned yet, so this always succeeds
            self._detach(victims)
            self._delete_evicted(victims)  # no listener can be registered yet: the events go nowhere

    def _delete_files(self, root: bytes) -> None:
        for path in _paths(self.directory, root):
            _unlink_quietly(path)

    def _load_entry(self, root: bytes) -> Entry | None:
        try:
            return self._read_entry(root)
        except CorruptEntry as exc:
            logger.warning("block store: dropping %s: %s", root.hex(), exc)
            self._delete_files(root)
        except OSError as exc:
            logger.warning("block store: skipping %s, its files cannot be read: %s", root.hex(), exc)
        except Exception:  # a bug must not stop the node from starting; keep the files for a later run
            logger.exception("block store: skipping %s after an unexpected error", root.hex())
        return None

    def _read_entry(self, root: bytes) -> Entry:
        stem = root.hex()
        try:
            record = (self.directory / f"{stem}.meta").read_bytes()
            bits = bytearray((self.directory / f"{stem}.bits").read_bytes())
        except FileNotFoundError as exc:
            raise CorruptEntry(f"missing {Path(exc.filename).name}") from None
        manifest, layer = decode_record(record)
        if manifest.root != root:
            raise CorruptEntry("record is for another content root")
        if len(bits) != bitmap_length(manifest.num_blocks):
            raise CorruptEntry(f"bitmap is {len(bits)} bytes, expected {bitmap_length(manifest.num_blocks)}")
        if manifest.num_blocks % 8:
            bits[-1] &= (0xFF << (8 - manifest.num_blocks % 8)) & 0xFF  # bits past the last block mean nothing
        entry = _DiskEntry(self.directory, manifest, layer, bits)
        self._reverify(entry)
        return entry

    def _reverify(self, entry: _DiskEntry) -> None:
        """Keep only the marked blocks whose bytes on disk match the layer; fix the bitmap file if needed."""
        manifest = entry.manifest
        try:
            fd = os.open(entry.data_path, os.O_RDONLY)  # read-only, so a read-only mount can still serve
        except FileNotFoundError:
            raise CorruptEntry("missing data file") from None
        try:
            status = os.fstat(fd)
            linked = status.st_nlink > 1  # another name outside the store (adopted): never cut it, never mend it
            size = status.st_size
            if size != manifest.size and linked:
                raise CorruptEntry(f"its linked data file is {size} bytes, expected {manifest.size}")
            if size != manifest.size:
                logger.warning("block store: data of %s is %d bytes, expected %d; resized",
                               manifest.root.hex(), size, manifest.size)
                os.truncate(entry.data_path, manifest.size)
            before = bytes(entry.bits)
            for index in range(manifest.num_blocks):
                if not entry.holds(index):
                    continue
                offset, length = manifest.block_span(index)
                try:
                    manifest.verify_block(entry.layer, index, _read_exactly(fd, length, offset))
                except HashMismatch:
                    if linked:
                        raise CorruptEntry(f"block {index} of its linked data file changed") from None
                    entry.set(index, False)
            if linked and not entry.complete:  # it would be written into: it was not adopted by this store
                raise CorruptEntry("its data file is incomplete and linked elsewhere")
            if linked:
                self._seal(entry, status)
        finally:
            os.close(fd)
        if bytes(entry.bits) != before:
            dropped = sum(b.bit_count() for b in before) - entry.verified
            logger.warning("block store: %d block(s) of %s failed re-verification", dropped, manifest.root.hex())
            atomic_write(entry.bits_path, bytes(entry.bits), fsync=False)

    def _lru_order(self, loaded: dict[bytes, Entry]) -> list[bytes]:
        """The saved LRU order; entries it does not list (made after it was saved) come last, newest last."""
        order: list[bytes] = []
        try:
            lines = (self.directory / LRU_FILE).read_text("ascii").split()
        except (OSError, UnicodeDecodeError):
            lines = []
        for line in lines:
            try:
                root = bytes.fromhex(line)
            except ValueError:
                continue
            if root in loaded and root not in order:
                order.append(root)
        listed = set(order)
        rest = [root for root in loaded if root not in listed]
        rest.sort(key=lambda root: self._mtime(loaded[root]))
        return order + rest

    @staticmethod
    def _mtime(entry: Entry) -> float:
        assert isinstance(entry, _DiskEntry)
        try:
            return entry.data_path.stat().st_mtime
        except OSError:
            return 0.0
