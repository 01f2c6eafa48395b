"""Moving a downloaded body, or a file to seed, into the block store, in a worker thread the event loop can wait for.

A body is any complete copy of some content outside the store (the proxy's spool of an origin response, a file
another client wrote): something with `read(offset, length)` and, when it is a file, `fileno()`. The store is
synchronous and thread-safe (see `swarm.store.interface`); filling an entry reads and hashes every block, so it runs off
the loop, in `in_thread`. A file to seed (`stored_file`, `SwarmNode.seed_file`) is hashed first, in a thread too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from swarm.content.manifest import READ_SIZE, Manifest, build_manifest
from swarm.errors import PeerError, StoreError
from swarm.store.interface import BlockStore

log = logging.getLogger("swarmproxy.swarm")  # as the node and the service: one name for the engine's notices

T = TypeVar("T")


class Body(Protocol):
    """A complete copy of the content outside the store."""

    def read(self, offset: int, length: int) -> bytes:
        """Bytes `offset..offset+length-1`; OSError if they cannot be read."""

    def fileno(self) -> int | None:
        """A descriptor of a file holding exactly these bytes (for `BlockStore.adopt_fd`), or None."""


class BytesBody:
    """A `Body` held in memory: no file, so the store is filled block by block."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, offset: int, length: int) -> bytes:
        return self.data[offset:offset + length]

    def fileno(self) -> None:
        return None


def in_block_size_stored(store: BlockStore, manifest: Manifest, layer: list[bytes]) -> tuple[Manifest, list[bytes]]:
    """`manifest` and `layer`, unless the store holds the same root in other blocks (a swarm download by a
    manifest of another block size): a root has one entry, so that one is filled, in its block size."""
    with contextlib.suppress(StoreError):
        stored = store.manifest(manifest.root) if manifest.root in store else None
        if stored is not None and stored.block_size != manifest.block_size:
            return dataclasses.replace(manifest, block_size=stored.block_size), list(store.hash_layer(manifest.root))
    return manifest, layer


def fill_entry(store: BlockStore, manifest: Manifest, layer: list[bytes], body: Body,
               stop: threading.Event) -> None:
    """Make the store's entry of `manifest` complete from `body` (in a worker thread; `stop` asks it to end)."""
    fd = body.fileno()
    if fd is not None and store.adopt_fd(manifest, layer, fd):
        # The file holds exactly the bytes the manifest was computed from: linked (O_TMPFILE) or copied in the
        # kernel, never read back through Python.
        return
    # The entry exists already, e.g. from a swarm download of the same content the origin finished first: fill
    # in the blocks it lacks, or it would be shared (and vouched for) incomplete.
    store.create(manifest, layer)
    for block in range(manifest.num_blocks):
        if stop.is_set():
            return
        offset, length = manifest.block_span(block)
        if not store.has_block(manifest.root, block):
            if not store.write_block(manifest.root, block, body.read(offset, length)):
                raise StoreError(f"the store refused block {block}")


def fill_prefix(store: BlockStore, manifest: Manifest, body: Body, upto: int, stop: threading.Event) -> bool:
    """Add the blocks before `upto` from `body` to the entry a swarm fetch from `upto` on left; False if one
    does not verify (the body is not this content) or `stop` is set. True when the entry is complete."""
    if manifest.root not in store:
        return False
    layer = store.hash_layer(manifest.root)
    for block in range(upto // manifest.block_size):
        if stop.is_set():
            return False
        if store.has_block(manifest.root, block):
            continue
        offset, length = manifest.block_span(block)
        data = body.read(offset, length)
        try:
            manifest.verify_block(layer, block, data)
        except PeerError:
            return False
        store.write_block(manifest.root, block, data)
    return store.complete(manifest.root)


def drop_partial(store: BlockStore, root: bytes) -> None:
    """Delete an incomplete entry that no download is filling: it is never shared, and would only take room
    (and be verified again at every start) until evicted."""
    with contextlib.suppress(StoreError):
        if root in store and not store.complete(root) and store.info(root).pins == 0:
            store.remove(root)


async def in_thread(store: BlockStore, root: bytes, work: Callable[[threading.Event], T]) -> T:
    """`work(stop)` in a worker thread, filling the store's entry of `root` from a body.

    Cancelling a thread's awaiter does not stop the thread, and our caller may close the body as soon as we
    return: closing it under the thread would make it read a closed (or reused!) descriptor. So when cancelled
    (the node stopping), ask the thread to stop between blocks, wait for it, and drop what it left incomplete."""
    stop = threading.Event()
    thread = asyncio.ensure_future(asyncio.to_thread(work, stop))
    try:
        return await asyncio.shield(thread)
    except asyncio.CancelledError:
        stop.set()
        log.info("stopping: waiting for the store to finish with %s", root.hex()[:16])
        await asyncio.wait({thread})
        drop_partial(store, root)
        raise


async def stored_file(store: BlockStore, path: str | os.PathLike, block_size: int | None = None) -> Manifest:
    """Hash the file at `path` and put it in `store`, pinned; its manifest.

    A store that can `adopt` takes the file as it is (the disk store hard-links it: no copy, which for several
    seeds of one file on one machine was most of the page cache in use); the file must not change while it is
    hashed. Otherwise, or to complete an incomplete entry already there, it is written in."""

    def build() -> tuple[Manifest, list[bytes]]:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            return build_manifest(iter(lambda: handle.read(READ_SIZE), b""), size, block_size=block_size)

    manifest, layer = await asyncio.to_thread(build)

    def fill() -> None:
        adopt = getattr(store, "adopt", None)
        if adopt is None:
            store.create(manifest, layer, pin=True)
        elif adopt(manifest, layer, path, pin=True) or store.complete(manifest.root):
            return
        with open(path, "rb") as handle:
            for block in range(manifest.num_blocks):
                offset, length = manifest.block_span(block)
                data = os.pread(handle.fileno(), length, offset)
                if not store.write_block(manifest.root, block, data):
                    raise StoreError(f"the store refused block {block} of {path}")

    await asyncio.to_thread(fill)
    return manifest
