"""The rest of an origin's answer read as several Range requests at once, delivered in order (the asyncio shell of
`proxy.download.origin_pieces`).

`RangedOrigin.next()` answers as `proxy.origin.OriginStream.next()` does, so the download's shell feeds its core the
same events whether one stream or several read the origin (`ReopenOrigin` with more than one stream): ("head",
response) first, the first piece's answer, which stands for the rest's and which the core judges as any reopened
answer, then ("data", bytes) in order, ("end", None) or ("failed", why).

Only an answer asked for again is read so, never a running one cut short: each piece's request waits for its own
first byte, and an origin slow to answer (a second per request in `tests/proxy/test_poisoning.py`) made a running
answer cut at its first piece wait that long for the second, a stall that looked like a slow origin (`R`).

The first piece is asked for alone, and the others once its answer is that piece, so that they cannot take the one
connection an origin may allow. Every other piece's answer must be exactly the bytes asked, of the same version
(`check`, which the download's shell makes from `proxy.origin_head.piece_refused` and where the connection went), or
the piece fails. A piece that failed (refused, misanswered, cut short) is asked once more when its turn comes, from
where delivery got to, as one request for all the rest, the reads after it closed: an origin that refused a piece
gets no more requests at once. A second failure is the core's to judge, as any origin failure. An answer to the
first piece that is not exactly it (a 200, another range) is read to its end as one stream, for the core to judge
and use as it would one request's; a 503 or any other status is asked once more first.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

import aiohttp

from ..origin import READ_CHUNK, connected_address
from ..origin_head import range_request
from .origin_pieces import PIECE_MAX, Pieces

# Why a piece's answer cannot be used (None: it can): the piece's bytes `lo..hi`.
Check = Callable[[aiohttp.ClientResponse, int, int], "str | None"]


class _Read:
    """One request for bytes `lo..hi` (`hi` None: to the answer's end) and what it read ahead of delivery."""

    def __init__(self, lo: int, hi: int | None, *, retry: bool) -> None:
        self.lo, self.hi, self.retry = lo, hi, retry  # `retry`: it may be asked once more if it fails
        self.response: aiohttp.ClientResponse | None = None
        self.failure: BaseException | None = None  # before its head
        self.error: str | None = None  # after its head, or the head refused
        self.done = False
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.changed = asyncio.Event()  # a chunk, the end or an error
        self.room = asyncio.Event()  # under PIECE_MAX bytes buffered: read on
        self.room.set()
        self.task: asyncio.Task | None = None

    @property
    def headed(self) -> bool:
        """Its answer's head came (or it failed before)."""
        return self.response is not None or self.failure is not None or self.error is not None

    def close(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self.response is not None:
            self.response.release()  # back to the pool if its body was read to the end, else closed


class RangedOrigin:
    """Bytes `start..end` of one representation (`validator`) from `streams` Range requests at once (module doc)."""

    def __init__(self, session: aiohttp.ClientSession, url, headers: list[tuple[str, str]], *, start: int, end: int,
                 streams: int, validator: str, check: Check) -> None:
        self.session, self.url, self.headers, self.validator, self.check = session, url, headers, validator, check
        self.plan = Pieces.cut(start, end, streams)
        self.position = start  # the next byte `next` gives
        self.split = True  # new pieces may be asked for
        self.connected_address: str | None = None  # where the first piece's connection went, once it answered
        self.head_given = False  # the first piece's head went to the core
        self.first_ok = False  # the first piece's answer is the piece asked: the others may be asked for
        self.reads: list[_Read] = []
        self.current = 0  # the read being delivered
        self._fill()

    # -- what the download's shell asks ------------------------------------------------------------------------
    def ready(self) -> tuple[str, object] | None:
        """Bytes already read, handed over at once (`OriginStream.ready`); None when `next()` would do more."""
        read = self.reads[self.current]
        return self._take(read) if read.chunks and self.head_given else None

    async def next(self) -> tuple[str, object]:
        while True:
            read = self.reads[self.current]
            if read.chunks and self.head_given:
                return self._take(read)
            failed = read.error is not None or read.failure is not None
            if failed and read.retry:  # once more, from where delivery got to, as one request for all the rest
                self.split = False
                for dropped in self.reads[self.current:]:
                    dropped.close()  # (their connections too: an origin that refused one more may have a cap)
                del self.reads[self.current + 1:]
                self._start(_Read(self.position, self.plan.end, retry=False), at=self.current)
                continue
            if not self.head_given and read.headed:
                return self._head(read)
            if failed and self.head_given:
                return "failed", read.error or f"origin request failed: {read.failure}"
            if read.done and self.head_given:
                if read.hi is None or read.hi >= self.plan.end:
                    return "end", None
                self.current += 1
                if self.current < len(self.reads) or self.split:
                    self._fill()
                else:  # no longer splitting, nothing asked after it: one request for the rest
                    self._start(_Read(read.hi, self.plan.end, retry=False))
                continue
            await self._changed(read)

    def close(self) -> None:
        for read in self.reads:
            read.close()

    def _take(self, read: _Read) -> tuple[str, object]:
        chunk = read.chunks.popleft()
        read.buffered -= len(chunk)
        read.room.set()
        self.position += len(chunk)
        return "data", chunk

    # -- the reads -----------------------------------------------------------------------------------------------
    def _fill(self) -> None:
        """Ask for the pieces of the window not asked for yet (while splitting, the reads are the plan's pieces);
        the first alone until its answer is the piece asked (`first_ok`), so that a piece after it cannot take the
        one connection an origin allows."""
        while self.split and (self.first_ok or not self.reads) and len(self.reads) in self.plan.window(self.current):
            lo, hi = self.plan.bounds(len(self.reads))
            self._start(_Read(lo, hi, retry=True))

    def _start(self, read: _Read, at: int | None = None) -> None:
        """Run `read`, after the others or in place of the one `at`."""
        if at is None:
            self.reads.append(read)
        else:
            self.reads[at] = read
        own_head = not self.head_given and read is self.reads[0]  # the first answer: the core's to judge
        read.task = asyncio.ensure_future(self._run(read, own_head=own_head))

    async def _run(self, read: _Read, *, own_head: bool) -> None:
        try:
            assert read.hi is not None  # (only an answer the core judges reads to its end)
            request = range_request(self.headers, read.lo, read.hi, self.validator)
            try:
                read.response = await self.session.request("GET", self.url, headers=request, allow_redirects=False,
                                                           compress=None)
            except Exception as exc:  # unreachable, refused, timed out
                read.failure = exc
                return
            why = self.check(read.response, read.lo, read.hi)
            if own_head and why is not None and (read.response.status in (200, 206) or not read.retry):
                read.hi, self.split = None, False  # the core's to judge: read as one stream, to its end
            elif why is not None:
                read.error = why
                return
            elif own_head:
                self.first_ok = True
                self._fill()
            await self._body(read)
        except Exception as exc:  # (TimeoutError, ClientPayloadError, ...: any, or `next` would wait for ever)
            read.error = f"origin stopped mid-response: {type(exc).__name__}"
        finally:
            read.changed.set()

    async def _body(self, read: _Read) -> None:
        assert read.response is not None
        left = None if read.hi is None else read.hi - read.lo
        while left is None or left > 0:
            await read.room.wait()
            chunk = await read.response.content.read(READ_CHUNK if left is None else min(READ_CHUNK, left))
            if not chunk:
                if left is not None:
                    read.error = f"origin ended a piece {left} bytes short"
                    return
                break
            read.chunks.append(chunk)
            read.buffered += len(chunk)
            if left is not None:
                left -= len(chunk)
            if read.buffered >= PIECE_MAX:
                read.room.clear()
            read.changed.set()
        read.done = True

    def _head(self, read: _Read) -> tuple[str, object]:
        """The first piece's head, for the core (module doc)."""
        self.head_given = True
        if read.response is not None:
            self.connected_address = connected_address(read.response)
        if read.response is None or read.hi is None:  # failed, or not the piece asked: the others are not needed
            self.split = False
            for other in self.reads[self.current + 1:]:
                other.close()
            del self.reads[self.current + 1:]
        if read.response is None:
            return "head_failed", read.failure or OSError(read.error)
        return "head", read.response

    @staticmethod
    async def _changed(read: _Read) -> None:
        read.changed.clear()
        await read.changed.wait()
