"""A BitTorrent v2 file downloaded by the proxy: `swarmproxy get magnet:…` and `swarmproxy get FILE.torrent`.

At `fetch_endpoint.TORRENT_PATH`: `GET …?magnet=LINK[&file=PATH][&peer=HOST:PORT…]`, or `POST` the
.torrent file's bytes (`?file=PATH`: one file of a multi-file torrent; `peer=`: peers to dial, as a .torrent
names none and trackers are off; with the Internet mode's Mainline DHT on, libtorrent also finds the torrent's peers
there, so a magnet needs no `x.pe`). Loopback clients only, never a web page's request (the admin
API's rules). The magnet or torrent is a stranger's input: `bittorrent.target` reads it (v2 only, one file,
bounded), and a peer it names (`x.pe`) on a loopback or private address is dialled only when
`--share-private-origins` lists it, as an origin there would be. Web seeds (`ws=`) are not used yet: libtorrent
follows a web seed's redirects anywhere.

The file's v2 `pieces root` is our content root, so the download is our ordinary fetch of that root, one of
`proxy.torrent_bodies`' three: from the store when it holds the file (a torrent this node seeds: libtorrent
would hand back the seed's own torrent); our fetch with the BitTorrent swarm as its Range source when the piece
layer is known; libtorrent's own fetch of the file's pieces, checked whole, when it is not. The body streams
from a job of the swarm service's (`_Run`), so the storing and sharing that follow the last byte are never cut
short by a client that leaves then.

The content ends in the block store and is shared like any other (a provider of its root). The response is a
200 with the file's length; errors are this proxy's own (400: the magnet or torrent is refused, and why; 503: no
BitTorrent session, neither the Internet mode nor `--bt-listen`; 504: no peer gave the info dict; 502: the download
failed; 500: a bug, logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import shutil
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from bittorrent.errors import BadTarget
from swarm.content.manifest import MAX_BLOCK_SIZE, Manifest
from swarm.errors import FetchFailed, ManifestError, StoreError, SwarmError

from . import torrent_bodies as bodies
from .exposure import may_share
from .fetch_endpoint import NAME_FIELD
from .responses import OwnResponse

if TYPE_CHECKING:
    from bittorrent.download import Download
    from bittorrent.session import BtSession
    from bittorrent.target import TorrentTarget

    from .bridge import Bridge
    from .engine import SwarmEngine
    from .stats import RequestRecord, Stats

log = logging.getLogger("swarmproxy")

METADATA_TIMEOUT = 60.0  # seconds for a magnet's info dict to come from a peer
QUEUED_CHUNKS = 8  # chunks the job may be ahead of the client (each a block: at most 8 blocks in memory)
MAX_PEERS_GIVEN = 50  # `peer` parameters read (a magnet's x.pe: as many)


def _text(status: int, message: str) -> web.Response:
    return OwnResponse(status=status, text=f"{status} {message}\n")


class TorrentFetch:
    """The handler of `PATH` for one proxy."""

    def __init__(self, engine: Callable[[], SwarmEngine | None], session: Callable[[], BtSession | None],
                 bridge: Callable[[], Bridge | None], stats: Stats,
                 *, private_origins: tuple[tuple[str, int | None], ...], staging: Path) -> None:
        # The node's BitTorrent session (the Internet mode's or --bt-listen's), and the bridge when it seeds.
        self.engine, self.session, self.bridge, self.stats = engine, session, bridge, stats
        self.private_origins, self.staging = private_origins, staging
        self._runs = itertools.count()
        self._swept = False

    def staging_for(self, info_hash: bytes) -> Path:
        """A directory of its own for one download's libtorrent copy (two downloads of one torrent, or one that
        starts while the last one's copy is being deleted, never share one). What a crash left is swept on the
        first use."""
        if not self._swept:
            shutil.rmtree(self.staging, ignore_errors=True)
            self._swept = True
        return self.staging / f"{info_hash.hex()[:16]}-{next(self._runs)}"

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        from bittorrent.target import parse_magnet, parse_peer, parse_torrent

        session, engine = self.session(), self.engine()
        if session is None or engine is None:
            return _text(503, "no BitTorrent session runs: the Internet mode (on unless --private-network) or "
                              "--bt-listen HOST:PORT starts one (both need --peer-listen)")
        file = request.query.get("file")
        peers: list[tuple[str, int]] = []
        notes: list[str] = []
        torrent: TorrentTarget | None = None
        try:
            if request.method == "POST":
                from bittorrent.target import MAX_TORRENT

                parts, got = [], 0
                while part := await request.content.read(64 * 1024):  # (one read returns what has arrived)
                    parts.append(part)
                    got += len(part)
                    if got > MAX_TORRENT:
                        return _text(413, f"a .torrent file is at most {MAX_TORRENT:,} bytes")
                data = b"".join(parts)
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
        if not peers and not session.dht_status()["on"]:
            notes.append("no peer given (x.pe, --peer) and the Mainline DHT is off: only our own peers can answer")
        peer = request.transport.get_extra_info("peername") if request.transport else None
        record = self.stats.begin("GET", f"magnet:?xt=urn:btmh:1220{info_hash.hex()}", str(peer[0]) if peer else "-")
        for note in notes:
            record.event(0.0, note)
        run = _Run(self, engine, session, self.bridge(), record, info_hash, name, file, torrent, peers)
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

    def __init__(self, owner: TorrentFetch, engine: SwarmEngine, session: BtSession, bridge: Bridge | None,
                 record: RequestRecord,
                 info_hash: bytes, name: str | None, file: str | None, torrent: TorrentTarget | None,
                 peers: list[tuple[str, int]]) -> None:
        self.owner, self.engine, self.session, self.bridge, self.record = owner, engine, session, bridge, record
        self.info_hash, self.name, self.file, self.torrent, self.peers = info_hash, name, file, torrent, peers
        self.started = time.monotonic()
        self.sent = 0
        self.out: asyncio.Queue[_Head | _Refusal | bytes | bytearray | memoryview | BaseException | None] = \
            asyncio.Queue(QUEUED_CHUNKS)

    def event(self, text: str) -> None:
        self.record.event(time.monotonic() - self.started, text)

    async def respond(self, request: web.BaseRequest) -> web.StreamResponse:
        job = self.engine.service.spawn(self._job())
        size = None
        try:
            head = await self._next(job, head=True)
            if isinstance(head, _Refusal):
                return _text(head.status, head.text)
            assert isinstance(head, _Head)
            size = head.size
            response = web.StreamResponse(status=200, headers={
                "Content-Type": "application/octet-stream", "Content-Length": str(head.size),
                "Swarm-Root": head.root.hex(), "Swarm-Request": self.record.id,
                NAME_FIELD: urllib.parse.quote(head.name, safe="")})
            await response.prepare(request)
            while (chunk := await self._next(job)) is not None:
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
            if size is None or self.sent < size:  # the client left before the end: of no use to it any more
                job.cancel()
            raise

    async def _next(self, job: asyncio.Task, *, head: bool = False) -> _Head | _Refusal | bytes | bytearray \
            | memoryview | BaseException | None:
        """The job's next item; a job that ended without one (a bug: it always puts one last) is an error the
        client is told, never a wait for ever."""
        while True:
            if not self.out.empty() or not job.done():
                getter = asyncio.ensure_future(self.out.get())
                try:
                    await asyncio.wait({getter, job}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not getter.done():
                        getter.cancel()
                if getter.done() and not getter.cancelled():
                    return getter.result()
                continue
            why = "the download ended without an answer (a bug: see the log)"
            return _Refusal(500, why) if head else FetchFailed(why)

    async def _job(self) -> None:
        from bittorrent.errors import BridgeError

        status, error, began = 200, None, False
        download: Download | None = None
        session: BtSession | None = self.session if self.session.session is not None else None
        try:
            try:
                chunks, head, download = await self._body(session)
            except BadTarget as exc:
                status, error = 400, str(exc)
            except TimeoutError:
                status, error = 504, f"no peer gave the torrent's info dict in {METADATA_TIMEOUT:g} s"
            except (BridgeError, FetchFailed, SwarmError, OSError, RuntimeError) as exc:  # (RuntimeError: libtorrent)
                status, error = 502, f"the download failed: {exc}"
            if error is not None:
                await self.out.put(_Refusal(status, error))
                return
            await self.out.put(head)
            began = True
            queued = 0
            async for chunk in chunks:
                await self.out.put(chunk)
                queued += len(chunk)
            await self.out.put(None)
            self.sent = queued  # all of it handed to the handler: the client has it unless it leaves now
        except asyncio.CancelledError:
            error = "client_gone: the client left before the end"
            raise
        except Exception as exc:  # the body is under way: cut it, and say why in the record and the log
            error = f"the download failed: {exc}"
            log.warning("torrent %s: %s", self.info_hash.hex()[:16], error,
                        exc_info=not isinstance(exc, (FetchFailed, SwarmError, OSError)))
            if began:
                await self.out.put(exc)
            else:
                status = 500
                await self.out.put(_Refusal(status, error))
        finally:
            self.owner.stats.finish(self.record, status, self.sent, time.monotonic() - self.started, error)
            if download is not None and session is not None:
                await session.end_download(download)

    async def _body(self, session) -> tuple[AsyncIterator[bytes], _Head, Download | None]:
        """How the file's bytes come (`proxy.torrent_bodies`), the response's head, and the torrent downloading."""
        from bittorrent.errors import AlreadyAdded
        from bittorrent.target import parse_info

        target = self.torrent
        if target is None and (seeded := self._seeded()) is not None:  # a torrent this node seeds: its store file
            return bodies.from_store(self.engine, seeded), self._head(seeded.size, seeded.root, None), None
        if target is not None and (stored := self._stored(target.root, target.size)) is not None:
            return bodies.from_store(self.engine, stored), self._head(target.size, target.root, target), None
        if session is None:
            raise FetchFailed("the BitTorrent session stopped")
        staging = self.owner.staging_for(self.info_hash)
        try:
            download = session.download(self.info_hash, staging, torrent=target.data if target else None,
                                        name=self.name or "", peers=self.peers)
        except AlreadyAdded as exc:  # seeded here under this info-hash, but not as `_seeded` knows it (a hybrid)
            raise FetchFailed(str(exc)) from None
        try:
            if target is None:
                async with asyncio.timeout(METADATA_TIMEOUT):
                    info = await asyncio.shield(download.metadata)  # (shared with any other download of it)
                target = parse_info(info, expected_v2=self.info_hash, file=self.file)
                self.event(f"info dict from a peer: {target.size:,} bytes, pieces of {target.piece_length:,}")
                if (stored := self._stored(target.root, target.size)) is not None:
                    await session.end_download(download)
                    return bodies.from_store(self.engine, stored), self._head(target.size, target.root, target), None
            _room_for(download.staging, target.size)
            head = self._head(target.size, target.root, target)
            manifest, layer, providers = await self._plan(target)
            if manifest is None:
                return bodies.whole(self.engine, download, target, self.record, self.event), head, download
            return (bodies.fetched(self.engine, download, target, manifest, layer, providers, self.record,
                                   self.event), head, download)
        except BaseException:
            await session.end_download(download)
            raise

    async def _plan(self, target: TorrentTarget) -> tuple[Manifest | None, list[bytes] | None, list]:
        """Our fetch's manifest and layer, and our peers that hold the root; no manifest: libtorrent fetches the
        file whole (no layer to check blocks by, or pieces larger than our largest block)."""
        if target.piece_length > MAX_BLOCK_SIZE:
            return None, None, []
        service = self.engine.service
        providers = await service.providers(target.root)
        if target.piece_layer is not None:
            with contextlib.suppress(ManifestError):  # (more blocks than a manifest may have: pieces too small)
                manifest = Manifest(size=target.size, block_size=target.piece_length, root=target.root)
                return manifest, list(target.piece_layer), providers
        if providers and (known := await service.full_manifest(target.root, providers)) is not None:
            if known.size == target.size:  # (a provider's manifest of another size names other bytes)
                return known, None, providers
        return None, None, []

    def _head(self, size: int, root: bytes, target: TorrentTarget | None) -> _Head:
        name = self.name or (target.display_name if target is not None else None) or root.hex()
        return _Head(size, root, name)

    def _stored(self, root: bytes, size: int) -> Manifest | None:
        """The store's manifest of `root` when it holds it complete (and of this size)."""
        store = self.engine.store
        with contextlib.suppress(StoreError):
            if root in store and store.complete(root) and (manifest := store.manifest(root)).size == size:
                return manifest
        return None

    def _seeded(self) -> Manifest | None:
        """The content this node seeds under the magnet's info-hash, if it holds it complete."""
        seeder = self.bridge.seeder if self.bridge is not None else None
        for root, seeding in list(seeder.seeding.items()) if seeder is not None else []:
            if seeding.torrent.info_hash == self.info_hash:
                return self._stored(root, seeding.manifest.size)
        return None


def _room_for(staging: Path, size: int) -> None:
    """libtorrent's copy goes beside the store: refuse a file the disk cannot hold, before a byte is fetched."""
    free = shutil.disk_usage(staging).free  # (the download made its directory)
    if free < size:
        raise FetchFailed(f"the file is {size:,} bytes and the disk holding {staging} has {free:,} free")
