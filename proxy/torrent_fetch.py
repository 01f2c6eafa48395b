"""A BitTorrent v2 file downloaded by the proxy: `swarmproxy get magnet:…` and `swarmproxy get FILE.torrent`.

At `fetch_endpoint.TORRENT_PATH`: `GET …?magnet=LINK[&file=PATH][&peer=HOST:PORT…]`, or `POST` the
.torrent file's bytes (`?file=PATH`: one file of a multi-file torrent; `peer=`: peers to dial, as a .torrent
names none and trackers are off). Loopback clients only, never a web page's request (the admin
API's rules). The magnet or torrent is a stranger's input: `bittorrent.target` reads it (v2 only, one file,
bounded), and a peer it names (`x.pe`) on a loopback or private address is dialled only when
`--share-private-origins` lists it, as an origin there would be. Web seeds (`ws=`) are not used yet: libtorrent
follows a web seed's redirects anywhere.

The file's v2 `pieces root` is our content root, so the download is our ordinary fetch of that root:

* with the piece layer known (a .torrent carries it; a file of one piece needs none), the fetch's picker owns
  every block; our peers that share the root (found through discovery) are asked for what they hold, and the
  BitTorrent swarm is the fetch's Range source for the rest (`bittorrent.download.TorrentSource`), with
  `BT_OUTSTANDING_BYTES` in flight. The bytes stream to the client in order as they verify;
* a magnet gives no layer: a peer of ours that holds the root gives its manifest and layer, else libtorrent
  fetches every piece itself (each verified by BEP 52 proofs against the root), and the whole file is checked
  against the root as it enters the store, then sent.

Either way the content ends in the block store and is shared like any other (a provider of its root). The
response is a 200 with the file's length; errors are this proxy's own (400: the magnet or torrent is refused,
and why; 503: no `--bt-listen`; 504: no peer gave the info dict; 502: the download failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from bittorrent.errors import BadTarget
from swarm.content.manifest import MAX_BLOCK_SIZE, Manifest, build_manifest
from swarm.core.policy import PolicyConfig
from swarm.errors import FetchFailed, ManifestError, StoreError, SwarmError
from swarm.service.report import FetchReport

from .exposure import may_share
from .fetch_endpoint import NAME_FIELD
from .responses import OwnResponse

if TYPE_CHECKING:
    from bittorrent.download import Download
    from bittorrent.target import TorrentTarget

    from .bridge import Bridge
    from .engine import SwarmEngine
    from .stats import RequestRecord, Stats

log = logging.getLogger("swarmproxy")

METADATA_TIMEOUT = 60.0  # seconds for a magnet's info dict to come from a peer
STALL_TIMEOUT = 60.0  # seconds without a verified byte before a download fails
BT_OUTSTANDING_BYTES = 32 * 1024 * 1024  # asked of the BitTorrent swarm at once: many pieces over many peers
CHUNK = 1024 * 1024  # bytes read at a time from a file libtorrent completed
QUEUED_CHUNKS = 8  # chunks the job may be ahead of the client (each a block: at most 8 blocks in memory)
MAX_PEERS_GIVEN = 50  # `peer` parameters read (a magnet's x.pe: as many)


def _text(status: int, message: str) -> web.Response:
    return OwnResponse(status=status, text=f"{status} {message}\n")


class TorrentFetch:
    """The handler of `PATH` for one proxy."""

    def __init__(self, engine: Callable[[], SwarmEngine | None], bridge: Callable[[], Bridge | None], stats: Stats,
                 *, private_origins: tuple[tuple[str, int | None], ...], staging: Path) -> None:
        self.engine, self.bridge, self.stats = engine, bridge, stats
        self.private_origins, self.staging = private_origins, staging

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        from bittorrent.target import parse_magnet, parse_peer, parse_torrent

        bridge, engine = self.bridge(), self.engine()
        if bridge is None or bridge.session is None or engine is None:
            return _text(503, "the BitTorrent bridge is off: start the proxy with --bt-listen HOST:PORT (and "
                              "--peer-listen) to download torrents")
        file = request.query.get("file")
        peers: list[tuple[str, int]] = []
        notes: list[str] = []
        torrent: TorrentTarget | None = None
        try:
            if request.method == "POST":
                from bittorrent.target import MAX_TORRENT

                data = await request.content.read(MAX_TORRENT + 1)
                if len(data) > MAX_TORRENT:
                    return _text(413, f"a .torrent file is at most {MAX_TORRENT:,} bytes")
                torrent = parse_torrent(data, file=file)
                info_hash, name = torrent.info_hash_v2, torrent.display_name
            else:
                magnet = parse_magnet(request.query.get("magnet", ""), allow_private=True)
                info_hash, name, notes = magnet.info_hash_v2, magnet.display_name, list(magnet.notes)
                for host, port in magnet.peers:
                    if may_share(host, port, self.private_origins):
                        peers.append((host, port))
                    else:
                        notes.append(f"x.pe {host}:{port} dropped: a private address not listed in "
                                     "--share-private-origins")
                if magnet.web_seeds:
                    notes.append("web seeds (ws=) are not used yet")
            for text in request.query.getall("peer", [])[:MAX_PEERS_GIVEN]:
                host, port = parse_peer(text, allow_private=True)
                if not may_share(host, port, self.private_origins):
                    raise BadTarget(f"peer {text}: a private address; list it with --share-private-origins to "
                                    "dial it")
                peers.append((host, port))
        except BadTarget as exc:
            return _text(400, str(exc))
        peer = request.transport.get_extra_info("peername") if request.transport else None
        record = self.stats.begin("GET", f"magnet:?xt=urn:btmh:1220{info_hash.hex()}", str(peer[0]) if peer else "-")
        for note in notes:
            record.event(0.0, note)
        run = _Run(self, engine, bridge, record, info_hash, name, file, torrent, peers)
        return await run.respond(request)


@dataclass(frozen=True)
class _Head:
    """What the response's head says: the file's size, root and name."""

    size: int
    root: bytes
    name: str


@dataclass(frozen=True)
class _Refusal:
    """The job ended before the body began: this status and text."""

    status: int
    text: str


class _Run:
    """One download as a job of the swarm service's (`SwarmService.spawn`), not of the request: a client that
    leaves after its last byte (its handler is cancelled) must not cut short the storing and sharing that
    follow. The job puts a `_Head` or a `_Refusal`, then the body's chunks, then None (or the error that cut
    it) on a bounded queue the handler relays; it ends the record and libtorrent's torrent however it ends."""

    def __init__(self, owner: TorrentFetch, engine: SwarmEngine, bridge: Bridge, record: RequestRecord,
                 info_hash: bytes, name: str | None, file: str | None, torrent: TorrentTarget | None,
                 peers: list[tuple[str, int]]) -> None:
        self.owner, self.engine, self.bridge, self.record = owner, engine, bridge, record
        self.info_hash, self.name, self.file, self.torrent, self.peers = info_hash, name, file, torrent, peers
        self.started = time.monotonic()
        self.sent = 0
        self.out: asyncio.Queue[_Head | _Refusal | bytes | bytearray | memoryview | BaseException | None] = \
            asyncio.Queue(QUEUED_CHUNKS)

    def event(self, text: str) -> None:
        self.record.event(time.monotonic() - self.started, text)

    async def respond(self, request: web.BaseRequest) -> web.StreamResponse:
        job = self.engine.service.spawn(self._job())
        head = await self.out.get()
        if isinstance(head, _Refusal):
            return _text(head.status, head.text)
        assert isinstance(head, _Head)
        response = web.StreamResponse(status=200, headers={
            "Content-Type": "application/octet-stream", "Content-Length": str(head.size),
            "Swarm-Root": head.root.hex(), "Swarm-Request": self.record.id,
            NAME_FIELD: urllib.parse.quote(head.name, safe="")})
        try:
            await response.prepare(request)
            while (chunk := await self.out.get()) is not None:
                if isinstance(chunk, BaseException):  # the body is under way: the client sees it cut short
                    response.force_close()
                    if request.transport is not None:
                        request.transport.close()
                    return response
                assert isinstance(chunk, (bytes, bytearray, memoryview))  # a peer's block may be a bytearray
                await response.write(chunk)
                self.sent += len(chunk)
            await response.write_eof()
            return response
        except BaseException:
            if self.sent < head.size:  # the client left before the end: the download is of no use to it
                job.cancel()
            raise

    async def _job(self) -> None:
        from bittorrent.target import parse_info

        session = self.bridge.session
        assert session is not None
        download = session.download(self.info_hash, self.owner.staging / self.info_hash.hex(),
                                    torrent=self.torrent.data if self.torrent else None, name=self.name or "",
                                    peers=self.peers)
        status, error, began, queued = 200, None, False, 0
        try:
            target = self.torrent
            if target is None:
                try:
                    async with asyncio.timeout(METADATA_TIMEOUT):
                        info = await download.metadata
                except TimeoutError:
                    status, error = 504, f"no peer gave the torrent's info dict in {METADATA_TIMEOUT:g} s"
                    await self.out.put(_Refusal(status, error))
                    return
                target = parse_info(info, expected_v2=self.info_hash, file=self.file)
                self.event(f"info dict from a peer: {target.size:,} bytes, pieces of {target.piece_length:,}")
            chunks = await self._chunks(download, target)
            await self.out.put(_Head(target.size, target.root, self.name or target.display_name or target.root.hex()))
            began = True
            async for chunk in chunks:
                await self.out.put(chunk)
                queued += len(chunk)
            await self.out.put(None)
            self.sent = queued  # all of it handed to the handler: the client has it unless it leaves now
        except BadTarget as exc:
            status, error = 400, str(exc)
            await self.out.put(_Refusal(status, error))
        except (FetchFailed, SwarmError, OSError) as exc:
            error = f"the download failed: {exc}"
            log.warning("torrent %s: %s", self.info_hash.hex()[:16], error)
            if not began:
                status = 502
            await self.out.put(exc if began else _Refusal(502, error))
        except asyncio.CancelledError:
            error = "client_gone: the client left before the end"
            raise
        finally:
            self.owner.stats.finish(self.record, status, self.sent, time.monotonic() - self.started, error)
            await session.end_download(download)

    async def _chunks(self, download: Download, target: TorrentTarget) -> AsyncIterator[bytes]:
        """The file's bytes in order: by our fetch when a layer is known, else from libtorrent's finished file."""
        from bittorrent.download import TorrentSource

        service = self.engine.service
        providers = await service.providers(target.root)
        manifest, layer = None, None
        if target.piece_layer is not None and target.piece_length <= MAX_BLOCK_SIZE:
            try:  # (more blocks than a manifest may have: pieces too small for the file)
                manifest = Manifest(size=target.size, block_size=target.piece_length, root=target.root)
                layer = list(target.piece_layer)
            except ManifestError:
                manifest = None
        if manifest is None and providers:
            manifest = await service.full_manifest(target.root, providers)
        files = download.handle.torrent_file().layout()
        offset = files.file_offset(target.file_index)
        if manifest is None:
            self.event("no piece layer and no peer of ours holds it: libtorrent fetches every piece")
            return self._whole(download, target, files.file_path(target.file_index))
        self.event(f"fetching {manifest.num_blocks} blocks: {len(providers)} peer(s) of ours, the BitTorrent "
                   f"swarm for the rest")
        source = TorrentSource(download, file_offset=offset, size=target.size, piece_length=target.piece_length)
        base = next(iter(service.nodes.values())).policy or PolicyConfig()
        policy = replace(base, origin_max_outstanding=max(2, BT_OUTSTANDING_BYTES // manifest.block_size),
                         origin_yields=True, spread_origin=True)
        report = FetchReport()
        return self._fetched(manifest, service.fetch(manifest, providers, layer=layer, origin=source,
                                                     stall_timeout=STALL_TIMEOUT, report=report, policy=policy),
                             report)

    async def _fetched(self, manifest: Manifest, chunks: AsyncIterator[bytes],
                       report: FetchReport) -> AsyncIterator[bytes]:
        service = self.engine.service
        complete = False
        try:
            async for chunk in chunks:
                yield chunk
            complete = True
        finally:
            self.record.bytes_bittorrent += report.bytes_origin
            self.record.bytes_peers += report.bytes_peers
            if complete:
                service.completed(manifest)
                self.event(f"complete: {report.bytes_origin:,} bytes from BitTorrent peers, {report.bytes_peers:,} "
                           "from ours; shared")
            else:
                service.abandon(manifest.root)

    async def _whole(self, download: Download, target: TorrentTarget, relative: str) -> AsyncIterator[bytes]:
        """libtorrent owns every piece; the finished file is hashed whole, checked against the root, stored,
        shared and sent."""
        download.fetch_all()
        last, seen = time.monotonic(), 0
        while not download.finished.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await asyncio.shield(download.finished)
            if (got := download.bytes_received) > seen:
                last, seen = time.monotonic(), got
            elif time.monotonic() - last > STALL_TIMEOUT:
                raise FetchFailed(f"no BitTorrent peer sent a byte for {STALL_TIMEOUT:g} s")
        download.finished.result()
        path = download.staging / relative
        self.record.bytes_bittorrent += download.bytes_received
        manifest = await asyncio.to_thread(_stored, self.engine, path, target)
        self.engine.service.completed(manifest)  # shared if the store took it whole
        self.event(f"complete: {download.bytes_received:,} bytes from BitTorrent peers; checked whole; shared")
        with open(path, "rb") as whole:
            while chunk := await asyncio.to_thread(whole.read, CHUNK):
                yield chunk


def _stored(engine: SwarmEngine, path: Path, target: TorrentTarget) -> Manifest:
    """Hash the file libtorrent finished, check it against the root, and put it in the store (a worker thread)."""
    from swarm.service.store_work import fill_entry

    with open(path, "rb") as whole:
        manifest, layer = build_manifest(iter(lambda: whole.read(CHUNK), b""), target.size)
    if manifest.root != target.root:
        raise FetchFailed("the file libtorrent finished does not hash to the torrent's pieces root")
    try:
        with open(path, "rb") as whole:
            fill_entry(engine.store, manifest, layer, _FileBody(whole), threading.Event())
    except StoreError as exc:
        log.warning("%s will not be shared: %s", target.root.hex()[:16], exc)
    return manifest


class _FileBody:
    def __init__(self, handle) -> None:
        self.handle = handle

    def read(self, offset: int, length: int) -> bytes:
        self.handle.seek(offset)
        return self.handle.read(length)

    def fileno(self) -> int | None:
        return self.handle.fileno()
