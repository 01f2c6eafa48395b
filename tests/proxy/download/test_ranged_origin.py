"""`RangedOrigin` against a real aiohttp origin on loopback: the rest of a file by several Range requests at once,
delivered in order and exact, within its memory bound, and an origin that refuses or misanswers pieces costs a
retry, never a wrong byte (`proxy.download.ranged_origin`)."""

from __future__ import annotations

import asyncio
import hashlib
import socket

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from proxy.download.origin_pieces import PIECE_MAX, Pieces
from proxy.download.ranged_origin import RangedOrigin
from proxy.origin import READ_CHUNK
from proxy.origin_head import describe, piece_refused
from proxy.ranges import content_range, parse_range

DATA = b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(40_000))[:1_200_000]
ETAG = '"v1"'


class Origin:
    """Serves DATA at /f with an ETag and single Ranges; its knobs misbehave on purpose."""

    def __init__(self) -> None:
        self.ranges: list[str | None] = []
        self.busy = 0
        self.max_busy = 0
        self.limit: int | None = None  # more requests at once than this: 503
        self.refuse = 0  # the next this many requests: 503
        self.ignore_range = False  # a 200 with the whole file
        self.etag = ETAG
        self.changed_from: int | None = None  # Ranges starting here or later see another version ('"v2"')
        self.short_once: set[int] = set()  # a Range starting here is cut short, once
        self.gate = asyncio.Event()  # bodies wait for it (a slow origin the test steps)
        self.gate.set()

    async def serve(self, request: web.Request) -> web.StreamResponse:
        self.ranges.append(request.headers.get("Range"))
        if (self.limit is not None and self.busy >= self.limit) or self.refuse > 0:
            self.refuse = max(0, self.refuse - 1)
            return web.Response(status=503, text="busy\n")
        self.busy += 1
        self.max_busy = max(self.max_busy, self.busy)
        try:
            spec = parse_range(request.headers.get("Range"))
            first = spec.resolve(len(DATA))[0] if spec is not None and spec.resolve(len(DATA)) else 0
            etag = '"v2"' if self.changed_from is not None and first >= self.changed_from else self.etag
            headers = {"ETag": etag, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
            start, end, status = 0, len(DATA), 200
            if spec is not None and not self.ignore_range and request.headers.get("If-Range") in (None, etag):
                start, end = spec.resolve(len(DATA))  # type: ignore[misc]
                status = 206
                headers["Content-Range"] = content_range(start, end, len(DATA))
            short = start in self.short_once and status == 206
            self.short_once.discard(start)
            response = web.StreamResponse(status=status, headers=headers)
            response.content_length = end - start
            await response.prepare(request)
            for at in range(start, (start + end) // 2 if short else end, 16_384):
                await self.gate.wait()
                await response.write(DATA[at:min(end, at + 16_384)])
            if short:
                request.transport.close()  # type: ignore[union-attr]
                return response
            await response.write_eof()
            return response
        finally:
            self.busy -= 1


@pytest_asyncio.fixture
async def origin():
    served = Origin()
    app = web.Application()
    app.router.add_get("/f", served.serve)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    served.url = str(server.make_url("/f"))  # type: ignore[attr-defined]
    yield served
    await server.close()


@pytest_asyncio.fixture
async def session():
    async with aiohttp.ClientSession(auto_decompress=False) as client:
        yield client


def check(response: aiohttp.ClientResponse, lo: int, hi: int) -> str | None:
    head = describe(str(response.url), CIMultiDict(), response.status, response.headers)
    return piece_refused(head, len(DATA), ETAG, None, lo, hi)


def ranged(origin: Origin, session: aiohttp.ClientSession, start: int, streams: int = 4,
           end: int = len(DATA)) -> RangedOrigin:
    return RangedOrigin(session, origin.url, [], start=start, end=end, streams=streams,  # type: ignore[attr-defined]
                        validator=ETAG, check=check)


async def drain(stream: RangedOrigin, eager: list[int] | None = None) -> tuple[str, bytes, list[tuple[str, object]]]:
    """The stream's events to its end: the last kind, the bytes in order, and the head events. With `eager`, what
    `ready()` hands over is taken before `next()` is awaited (as the download's shell does), and counted there."""
    body, heads = bytearray(), []
    try:
        while True:
            event = stream.ready() if eager is not None else None
            if event is not None and eager is not None:
                eager.append(1)
            kind, value = event if event is not None else await stream.next()
            if kind == "data":
                assert isinstance(value, bytes)
                body += value
            elif kind in ("head", "head_failed"):
                heads.append((kind, value))
                if kind == "head_failed":
                    return kind, bytes(body), heads
            else:
                return kind, bytes(body), heads
    finally:
        stream.close()


async def until(condition, what: str) -> None:
    """Poll `condition` (a state of the stream or the origin) with a deadline: loopback I/O takes no fixed time."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def starts(origin: Origin) -> list[int]:
    return [int(r.split("=")[1].split("-")[0]) for r in origin.ranges if r is not None]


@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize("start, streams", [(3000, 4), (0, 2), (len(DATA) - 40_000, 4), (500_000, 8)])
async def test_the_rest_comes_in_order_and_exact(origin, session, start, streams, eager):
    taken: list[int] | None = [] if eager else None
    kind, body, heads = await drain(ranged(origin, session, start, streams), taken)
    assert [k for k, _ in heads] == ["head"] and kind == "end"
    assert taken is None or taken  # bytes read ahead were handed over by `ready()`, in order like the others
    assert body == DATA[start:]
    plan = Pieces.cut(start, len(DATA), streams)
    assert sorted(starts(origin)) == [plan.bounds(i)[0] for i in range(plan.count)]  # each piece asked once
    assert f"bytes={start}-{plan.bounds(0)[1] - 1}" in origin.ranges and origin.max_busy <= streams


async def test_several_pieces_are_read_at_once(origin, session):
    origin.gate.clear()  # every body waits: the requests pile up
    stream = ranged(origin, session, 0, 4)
    first = asyncio.ensure_future(stream.next())
    await until(lambda: origin.busy == 4, "four requests at the origin at once")
    origin.gate.set()
    assert (await first)[0] == "head"
    kind, body, _ = await drain(stream)
    assert kind == "end" and body == DATA and origin.max_busy == 4


async def test_one_answer_read_ahead_of_a_slow_reader_is_bounded(origin, session):
    origin.ignore_range = True  # one answer of the whole 1.2 MB: read ahead only PIECE_MAX
    stream = ranged(origin, session, 0, 4)
    assert (await stream.next())[0] == "head"
    read = stream.reads[0]
    await until(lambda: not read.room.is_set(), "the read stops for room")
    assert PIECE_MAX <= read.buffered <= PIECE_MAX + READ_CHUNK and not read.done
    kind, body, _ = await drain(stream)
    assert kind == "end" and body == DATA


async def test_an_origin_that_refuses_more_connections_is_still_read_whole(origin, session):
    origin.limit, origin.gate = 1, asyncio.Event()  # 503 to a second request at once; the first one waits
    stream = ranged(origin, session, 1000, 4)
    head = asyncio.ensure_future(stream.next())
    await until(lambda: len(origin.ranges) == 4, "the window's four requests at the origin")
    origin.gate.set()
    assert (await head)[0] == "head"
    kind, body, _ = await drain(stream)
    assert kind == "end" and body == DATA[1000:] and not stream.split  # no new pieces after a refusal
    assert origin.max_busy == 1 and len(origin.ranges) == 4 + 1  # the window, then the rest as one request


async def test_a_piece_cut_short_is_asked_again_from_where_delivery_got(origin, session):
    plan = Pieces.cut(0, len(DATA), 4)
    lo, hi = plan.bounds(1)
    origin.short_once = {lo}
    kind, body, _ = await drain(ranged(origin, session, 0, 4))
    assert kind == "end" and body == DATA
    assert any(lo < at < hi for at in starts(origin))  # asked again from inside the piece, to the end


async def test_a_piece_of_another_version_fails_after_the_bytes_before_it(origin, session):
    origin.changed_from = 200_000  # pieces from here on see another ETag: If-Range gets the whole new file
    kind, body, _ = await drain(ranged(origin, session, 0, 2, end=400_000))
    assert kind == "failed" and body == DATA[:200_000]  # its retry refused too: the core's to judge


async def test_an_origin_that_ignores_ranges_is_read_as_one_answer_for_the_core(origin, session):
    origin.ignore_range = True
    kind, body, heads = await drain(ranged(origin, session, 5000, 4))
    (_, response), = heads
    assert response.status == 200  # the core judges it as any answer asked again (it reads from byte 0 on)
    assert kind == "end" and body == DATA  # the other pieces' answers were dropped unread


async def test_an_unreachable_origin_is_a_failed_head(session):
    with socket.socket() as probe:  # a port nothing listens on: bound, then closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stream = RangedOrigin(session, f"http://127.0.0.1:{port}/f", [], start=0, end=100_000, streams=4,
                          validator=ETAG, check=check)
    kind, body, _ = await drain(stream)
    assert kind == "head_failed" and body == b""


@pytest.mark.parametrize("refused, status", [(1, 206), (2, 503)])
async def test_a_first_answer_refused_is_asked_once_more_before_the_core_judges_it(origin, session, refused, status):
    origin.refuse = refused
    stream = ranged(origin, session, 7000, 4)
    kind, response = await stream.next()
    assert kind == "head" and response.status == status  # type: ignore[attr-defined]
    if status == 206:
        kind, body, _ = await drain(stream)
        assert kind == "end" and body == DATA[7000:]
    else:  # twice: the core's to judge (it refuses a 503 and closes the stream)
        stream.close()
        assert len(origin.ranges) == 2


async def test_a_piece_whose_check_raises_fails_it_and_never_hangs_the_stream(origin, session):
    def exploding(response: aiohttp.ClientResponse, lo: int, hi: int) -> str | None:
        if lo > 0:
            raise ValueError("a field nothing expected")
        return check(response, lo, hi)

    stream = RangedOrigin(session, origin.url, [], start=0, end=400_000, streams=2,  # type: ignore[attr-defined]
                          validator=ETAG, check=exploding)
    kind, body, _ = await asyncio.wait_for(drain(stream), 30)
    assert kind == "failed" and body == DATA[:200_000]  # the piece and its retry failed: the core's to judge
