"""A response body kept while it streams from the origin, hashed as it goes.

Why keep it: a node that downloaded a file from the origin becomes a provider of it (and may vouch for its
manifest), which needs the whole content hashed and in the block store. The block store can only take blocks
once the hash layer is known, i.e. after the last byte, so until then the bytes wait in a temporary file under
the data dir (page cache, then disk — never the heap) while a `MerkleHasher` consumes them on the fly.

A spool that cannot be written (disk full, no permission) turns itself off with a logged reason: the download
to the client is never affected, the content just is not shared.
"""

from __future__ import annotations

import logging
import os
import pathlib
import tempfile

from swarm.content.manifest import Manifest, choose_block_size
from swarm.content.merkle import MerkleHasher

log = logging.getLogger("swarmproxy.spool")


def _anonymous_file(directory: pathlib.Path) -> int:
    """A file with no name: nothing to clean up after a crash. O_TMPFILE where the filesystem has it, since
    such a file can later be linked into the block store without a copy; else a named file unlinked at once."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            return os.open(directory, flag | os.O_RDWR, 0o600)
        except OSError:
            pass  # e.g. EOPNOTSUPP on filesystems without it
    fd, path = tempfile.mkstemp(prefix="spool-", dir=directory)
    os.unlink(path)
    return fd


class Spool:
    """Bytes `0..size-1` of one representation, written in order by `feed`."""

    def __init__(self, directory: pathlib.Path, size: int, *, block_size: int | None = None) -> None:
        self.size = size
        self.block_size = block_size or choose_block_size(size)
        self.received = 0
        self.failed: str | None = None
        self._hasher: MerkleHasher | None = MerkleHasher(size, self.block_size)
        self._fd: int | None = None
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._fd = _anonymous_file(directory)
        except OSError as exc:
            self._fail(f"cannot create a spool file in {directory}: {exc.strerror or exc}")

    @property
    def usable(self) -> bool:
        return self.failed is None

    def _fail(self, reason: str) -> None:
        if self.failed is None:
            self.failed = reason
            log.warning("content will not be shared: %s", reason)
        self._hasher = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self.failed is not None or not data:
            return
        if self.received + len(data) > self.size:
            self._fail(f"the origin sent more than its Content-Length of {self.size} bytes")
            return
        assert self._fd is not None and self._hasher is not None
        try:
            view = memoryview(data)
            offset = self.received
            while view:
                written = os.pwrite(self._fd, view, offset)
                view, offset = view[written:], offset + written
        except OSError as exc:
            self._fail(f"writing the spool failed: {exc.strerror or exc}")
            return
        self._hasher.update(data)
        self.received += len(data)

    @property
    def complete(self) -> bool:
        return self.failed is None and self.received == self.size

    def manifest(self, *, url: str | None, validator: str | None, content_type: str | None,
                 content_encoding: str | None) -> tuple[Manifest, list[bytes]]:
        """The manifest and hash layer of the complete content."""
        assert self.complete and self._hasher is not None
        root, layer = self._hasher.finish()
        return Manifest(size=self.size, block_size=self.block_size, root=root, url=url, validator=validator,
                        content_type=content_type, content_encoding=content_encoding), layer

    def read(self, offset: int, length: int) -> bytes:
        """Bytes already received; raises OSError if the spool file cannot be read."""
        if self._fd is None or offset + length > self.received:
            raise ValueError(f"bytes {offset}+{length} are not in the spool ({self.received} received)")
        return os.pread(self._fd, length, offset)

    def fileno(self) -> int | None:
        """The spool's file descriptor (for `BlockStore.adopt_fd`), or None once closed."""
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._hasher = None
