"""A torrent the embedded session downloads for `swarmproxy get magnet:` / `get FILE.torrent`, and BitTorrent peers
as a Range source of our own fetch.

**Who picks which blocks.** Our fetch (`swarm.core.fetch`) owns every block: its picker asks our peers for what
they hold and the BitTorrent swarm, as its capped Range source (the role the origin plays in a proxied download,
`PolicyConfig.spread_origin`/`origin_yields`), for blocks no peer of ours holds or fetches; a block the swarm is
fetching is taken back when a peer of ours offers it. libtorrent's own picker only works inside what it is given:
every piece starts at priority 0 (nothing is fetched on libtorrent's own initiative), and `TorrentSource.fetch`
asks for the pieces covering one range with a deadline, which libtorrent spreads over its peers 16 KiB at a
time, and a piece nobody waits for any more goes back to priority 0. So no byte is fetched twice. Only when the
piece layer is unknown (a magnet for a file of several pieces, and no peer of ours to give a layer) does
libtorrent own the file's pieces (`Download.fetch_range`), verifying each with BEP 52's hash requests; the file
is then checked whole against the root as it enters the store.

**What it may reach.** No tracker (the torrent's are dropped), no peer exchange (`disable_pex`: a stranger's PEX
naming an intranet address would make the session dial it), no DHT or LSD; peers are those given (`connect_peer`,
the magnet's `x.pe` after `bittorrent.target`'s rules), those who connect to us, and those a peer's BEP 55
holepunch names, which no setting turns off: the session's IP filter keeps all but public addresses (and those
the user lists) out, in and out (`bittorrent.watcher`). A torrent's
web seeds are not given to libtorrent (it follows a web seed's redirects, to any address). libtorrent writes the
pieces into a staging directory of its own, deleted with the torrent; the verified bytes enter the block store
through our fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import libtorrent as lt

from swarm.errors import OriginSourceError

__all__ = ["Download", "TorrentSource", "PIECE_TIMEOUT"]

log = logging.getLogger("swarmproxy.bittorrent")

PIECE_TIMEOUT = 120.0  # seconds one piece may take (the origin's Range request timeout: `PolicyConfig`)
PIECE_DEADLINE_MS = 0  # libtorrent's deadline for a piece we wait for: as soon as it can (time-critical mode)


class Download:
    """One torrent being downloaded: its handle, its staging directory, and the pieces someone waits for."""

    def __init__(self, info_hash: bytes, handle: Any, staging: Path) -> None:
        self.info_hash, self.handle, self.staging = info_hash, handle, staging
        loop = asyncio.get_running_loop()
        self.metadata: asyncio.Future[bytes] = loop.create_future()  # the raw info dict, once known
        self.finished: asyncio.Future[None] = loop.create_future()  # every piece of `fetch_range`'s had
        self.fetching: range | None = None  # the pieces libtorrent owns (`fetch_range`)
        for future in (self.metadata, self.finished):  # a failure nobody awaited is no error to log at exit
            future.add_done_callback(_retrieved)
        self.failed: str | None = None
        self._pieces: dict[int, list[asyncio.Future[bytes]]] = {}
        self.hash_failures = 0
        self.users = 1  # downloads of the same torrent asked at once share it (`BtSession.end_download`)

    # -- what the session's alerts say (on the loop) -----------------------------------------------------------

    def on_metadata(self) -> None:
        """The info dict arrived (a magnet's, from a peer): nothing is fetched on libtorrent's own initiative."""
        info = self.handle.torrent_file()
        with contextlib.suppress(RuntimeError):
            self.handle.prioritize_pieces([0] * info.num_pieces())
        if not self.metadata.done():
            self.metadata.set_result(bytes(info.info_section()))

    def on_piece(self, piece: int, data: bytes | None, error: str | None) -> None:
        for waiter in self._pieces.pop(piece, []):
            if waiter.done():
                continue
            if data is None:
                waiter.set_exception(OriginSourceError(f"BitTorrent piece {piece}: {error}", permanent=False))
            else:
                waiter.set_result(data)

    def on_hash_failed(self, piece: int) -> None:
        """A piece failed its hash: libtorrent fetches it again, and its smart-ban finds and bans the peer."""
        self.hash_failures += 1
        log.info("BitTorrent: piece %d of %s failed its hash check; fetching it again", piece,
                 self.info_hash.hex()[:16])

    def on_finished(self) -> None:
        """libtorrent has every piece it wants: before `fetch_range` it wants none (every priority 0), so this
        says nothing then; after it, that the range is had only if every piece of it is."""
        with contextlib.suppress(RuntimeError):
            if self.fetching is not None and not self.finished.done() \
                    and all(self.handle.have_piece(piece) for piece in self.fetching):
                self.finished.set_result(None)

    def on_failure(self, why: str) -> None:
        self.failed = why
        error = OriginSourceError(f"BitTorrent: {why}", permanent=True)
        for waiters in self._pieces.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(error)
        self._pieces.clear()
        for future in (self.metadata, self.finished):
            if not future.done():
                future.set_exception(error)

    # -- what a fetch asks -----------------------------------------------------------------------------------------

    def piece(self, piece: int) -> asyncio.Future[bytes]:
        """Piece `piece`'s bytes, once libtorrent has it verified (at once if it has)."""
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        if self.failed is not None:
            waiter.set_exception(OriginSourceError(f"BitTorrent: {self.failed}", permanent=True))
            return waiter
        first = piece not in self._pieces
        self._pieces.setdefault(piece, []).append(waiter)
        if first:
            try:
                if self.handle.have_piece(piece):
                    self.handle.read_piece(piece)
                else:
                    self.handle.piece_priority(piece, 7)
                    self.handle.set_piece_deadline(piece, PIECE_DEADLINE_MS, lt.deadline_flags_t.alert_when_available)
            except RuntimeError as exc:  # the torrent is gone
                self.on_failure(str(exc))
        return waiter

    def cancel(self, piece: int, waiter: asyncio.Future[bytes]) -> None:
        """`waiter` no longer waits for `piece`; when nobody does, libtorrent stops fetching it."""
        waiting = self._pieces.get(piece)
        if waiting is not None and waiter in waiting:
            waiting.remove(waiter)
            if not waiting:
                del self._pieces[piece]
                with contextlib.suppress(RuntimeError):
                    self.handle.reset_piece_deadline(piece)
                    if not self.handle.have_piece(piece) and (self.fetching is None or piece not in self.fetching):
                        self.handle.piece_priority(piece, 0)

    def fetch_range(self, first: int, last: int) -> None:
        """libtorrent owns pieces `first..last` (one file's; no piece layer to verify blocks by, module
        docstring); `finished` says when it has them all."""
        self.fetching = range(first, last + 1)
        self.handle.prioritize_pieces([(piece, 4) for piece in self.fetching])  # 4: libtorrent's default
        self.on_finished()  # had already (the finished alert came while it wanted nothing)

    def connect(self, peers: Iterable[tuple[str, int]]) -> None:
        for peer in peers:
            with contextlib.suppress(RuntimeError):
                self.handle.connect_peer(peer)

    @property
    def bytes_received(self) -> int:
        try:
            return int(self.handle.status().total_payload_download)
        except RuntimeError:
            return 0

    def discard_staging(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def _retrieved(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


class TorrentSource:
    """BitTorrent peers as our fetch's Range source (`swarm.service.origin_source.OriginRangeSource`'s shape):
    `fetch(offset, length)` returns those bytes of the file, from the pieces that cover them. libtorrent verified
    each piece against the torrent's piece layer (or BEP 52 proofs); our fetch checks them again against our
    block layer, as it checks the origin's."""

    def __init__(self, download: Download, *, file_offset: int, size: int, piece_length: int) -> None:
        self.download, self.file_offset, self.size, self.piece_length = download, file_offset, size, piece_length

    @property
    def bytes_received(self) -> int:  # the fetch's watchdog counts bytes still arriving as progress
        return self.download.bytes_received

    async def fetch(self, offset: int, length: int) -> bytes:
        if offset < 0 or length <= 0 or offset + length > self.size:
            raise OriginSourceError(f"range {offset}+{length} outside the file", permanent=True)
        start, end = self.file_offset + offset, self.file_offset + offset + length
        pieces = range(start // self.piece_length, (end - 1) // self.piece_length + 1)
        waiters = [(piece, self.download.piece(piece)) for piece in pieces]
        try:
            async with asyncio.timeout(PIECE_TIMEOUT):
                datas = [await waiter for _, waiter in waiters]
        except TimeoutError:
            raise OriginSourceError(f"BitTorrent peers did not deliver {offset}+{length} in {PIECE_TIMEOUT:g} s",
                                    permanent=False) from None
        finally:  # (a waiter cancelled with this task is done too, and still registered)
            for piece, waiter in waiters:
                if not waiter.done() or waiter.cancelled():
                    self.download.cancel(piece, waiter)
        joined = b"".join(datas)
        first = pieces[0] * self.piece_length
        return joined[start - first:end - first]
