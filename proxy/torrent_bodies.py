"""The three ways a torrent's file reaches the client of `proxy.torrent_fetch`, each an async iterator of its bytes
in order, each leaving the content complete in the block store and shared (or saying why not):

* `from_store`: the store holds it complete already (seeded here, fetched before): no BitTorrent at all;
* `fetched`: our fetch of its root, our peers for what they hold and the BitTorrent swarm as its Range source
  (`bittorrent.download.TorrentSource`): the piece layer is known, and pieces are no larger than our blocks;
* `whole`: libtorrent fetches the one file's pieces (no layer to check blocks by, or pieces larger than our
  blocks, which a Range source would read whole for every block), sent in order as they come, and the finished
  file is hashed whole against the root as it enters the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from swarm.content.manifest import Manifest, build_manifest
from swarm.core.policy import PolicyConfig
from swarm.errors import FetchFailed, StoreError
from swarm.service.report import FetchReport
from swarm.service.store_work import fill_entry

if TYPE_CHECKING:
    from bittorrent.download import Download
    from bittorrent.target import TorrentTarget

    from .engine import SwarmEngine
    from .stats import RequestRecord

__all__ = ["from_store", "fetched", "whole", "STALL_TIMEOUT"]

log = logging.getLogger("swarmproxy")

STALL_TIMEOUT = 60.0  # seconds without a verified byte before a download fails
BT_OUTSTANDING_BYTES = 32 * 1024 * 1024  # asked of the BitTorrent swarm at once: many pieces over many peers
CHUNK = 1024 * 1024  # bytes read at a time from a file libtorrent finished


async def from_store(engine: SwarmEngine, manifest: Manifest) -> AsyncIterator[bytes]:
    store = engine.store
    with store.pinned(manifest.root):  # not evicted while it is read
        for block in range(manifest.num_blocks):
            yield await asyncio.to_thread(store.read_block, manifest.root, block)


def fetched(engine: SwarmEngine, download: Download, target: TorrentTarget, manifest: Manifest,
            layer: list[bytes] | None, providers: list, record: RequestRecord,
            event: Callable[[str], None]) -> AsyncIterator[bytes]:
    from bittorrent.download import TorrentSource

    service = engine.service
    offset = download.handle.torrent_file().layout().file_offset(target.file_index)
    source = TorrentSource(download, file_offset=offset, size=target.size, piece_length=target.piece_length)
    base = next(iter(service.nodes.values())).policy or PolicyConfig()
    # The swarm as the origin is in a proxied download: blocks no peer of ours holds or fetches, taken back when
    # one offers them; more of them in flight than an origin's two, over many BitTorrent peers; with no peer of
    # ours, in the window's order (the client reads in order, and nobody shares this origin with us).
    policy = replace(base, origin_max_outstanding=max(2, BT_OUTSTANDING_BYTES // manifest.block_size),
                     origin_yields=True, spread_origin=True, spread_origin_alone=False)
    report = FetchReport()
    event(f"fetching {manifest.num_blocks} blocks: {len(providers)} peer(s) of ours, the BitTorrent swarm for "
          "the rest")
    chunks = service.fetch(manifest, providers, layer=layer, origin=source, stall_timeout=STALL_TIMEOUT,
                           report=report, policy=policy)
    return _counted(engine, manifest, chunks, report, record, event)


async def _counted(engine: SwarmEngine, manifest: Manifest, chunks: AsyncIterator[bytes], report: FetchReport,
                   record: RequestRecord, event: Callable[[str], None]) -> AsyncIterator[bytes]:
    complete = False
    try:
        async for chunk in chunks:
            yield chunk
        complete = True
    finally:
        record.bytes_bittorrent += report.bytes_origin
        record.bytes_peers += report.bytes_peers
        if complete:
            engine.service.completed(manifest)
            event(f"complete: {report.bytes_origin:,} bytes from BitTorrent peers, {report.bytes_peers:,} from "
                  "ours; shared")
        else:
            engine.service.abandon(manifest.root)


async def whole(engine: SwarmEngine, download: Download, target: TorrentTarget, record: RequestRecord,
                event: Callable[[str], None]) -> AsyncIterator[bytes]:
    """libtorrent fetches the file's pieces; each is sent as soon as it and those before it are had (libtorrent
    checked it with BEP 52 proofs against the pieces root), and the finished file is hashed whole against the root
    as it enters the store."""
    files = download.handle.torrent_file().layout()
    path = download.staging / files.file_path(target.file_index)
    start = files.file_offset(target.file_index)
    end = start + target.size
    first, last = start // target.piece_length, (end - 1) // target.piece_length
    event(f"libtorrent fetches pieces {first}-{last} itself (no piece layer to check our blocks by)")
    download.fetch_range(first, last)
    moved, seen = time.monotonic(), 0
    for piece in range(first, last + 1):
        waiter = download.piece(piece)
        while not waiter.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await asyncio.shield(waiter)
            if (got := download.bytes_received) > seen:
                moved, seen = time.monotonic(), got
            elif not waiter.done() and time.monotonic() - moved > STALL_TIMEOUT:
                download.cancel(piece, waiter)
                raise FetchFailed(f"no BitTorrent peer sent a byte for {STALL_TIMEOUT:g} s")
        data = memoryview(waiter.result())
        base = piece * target.piece_length  # the file's bytes of it: a hybrid's last piece ends in padding
        part = data[max(start - base, 0):min(end - base, len(data))]
        for offset in range(0, len(part), CHUNK):
            yield bytes(part[offset:offset + CHUNK])
    record.bytes_bittorrent += download.bytes_received
    manifest = await engine.service.in_thread(target.root, lambda stop: _stored(engine, path, target, stop))
    engine.service.completed(manifest)  # shared if the store took it whole
    event(f"complete: {download.bytes_received:,} bytes from BitTorrent peers; checked whole; shared")


def _stored(engine: SwarmEngine, path: Path, target: TorrentTarget, stop: threading.Event) -> Manifest:
    """Hash the file libtorrent finished, check it against the root, and put it in the store (a worker thread)."""
    with open(path, "rb") as finished:
        manifest, layer = build_manifest(iter(lambda: finished.read(CHUNK), b""), target.size)
    if manifest.root != target.root:
        raise FetchFailed("the file libtorrent finished does not hash to the torrent's pieces root")
    try:
        with open(path, "rb") as finished:
            fill_entry(engine.store, manifest, layer, _FileBody(finished), stop)
    except StoreError as exc:
        log.warning("%s will not be shared: %s", target.root.hex()[:16], exc)
    return manifest


class _FileBody:
    """A `swarm.service.store_work.Body` over an open file that holds exactly the content."""

    def __init__(self, handle) -> None:
        self.handle = handle

    def read(self, offset: int, length: int) -> bytes:
        self.handle.seek(offset)
        return self.handle.read(length)

    def fileno(self) -> int | None:
        return self.handle.fileno()
