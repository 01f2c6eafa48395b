"""The origin as a Range source, against local origins on 127.0.0.1 (port 0, no internet, no sleeps).

Three kinds of origin: aiohttp's own static file handler (a real Range / If-Range implementation, with a
precompressed `.gz` sibling to tempt it), a scripted aiohttp handler for well-formed but wrong answers, and a raw
asyncio socket server for what aiohttp would refuse to send (cut, overlong or stalled bodies).
"""

from __future__ import annotations

import asyncio
import gzip
import os
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from swarm.content.manifest import build_manifest
from swarm.errors import OriginSourceError, PeerError, SwarmError
from swarm.service.origin_source import OriginRangeSource

BLOCK = 16 * 1024
DATA = random.Random(3).randbytes(3 * BLOCK + 1000)  # the last block is partial
ETAG = '"v1"'
SIZE = len(DATA)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Script = Callable[["RawOrigin", asyncio.StreamWriter], Awaitable[None]]


# -- origins ----------------------------------------------------------------------------------------------------


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    # The caller's duty (see the module docstring): never decompress, ranges are of the bytes as sent.
    async with aiohttp.ClientSession(auto_decompress=False) as client:
        yield client


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


class ScriptedOrigin:
    """One aiohttp route whose handler each test sets; records every request's headers."""

    def __init__(self) -> None:
        self.handler: Handler = range_response
        self.requests: list[dict[str, str]] = []
        self.url = ""

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(dict(request.headers))
        return await self.handler(request)


@pytest.fixture
async def origin() -> AsyncIterator[ScriptedOrigin]:
    scripted = ScriptedOrigin()
    app = web.Application()
    app.router.add_get("/file", scripted.dispatch)
    runner, base = await _serve(app)
    scripted.url = base + "/file"
    yield scripted
    await runner.cleanup()


def _asked_range(request: web.Request) -> tuple[int, int]:
    match = re.fullmatch(r"bytes=(\d+)-(\d+)", request.headers["Range"])
    assert match, request.headers["Range"]
    return int(match[1]), int(match[2])


async def range_response(request: web.Request) -> web.Response:
    """A correct single-range 206 of DATA."""
    first, last = _asked_range(request)
    return web.Response(
        status=206, body=DATA[first : last + 1], headers={"Content-Range": f"bytes {first}-{last}/{SIZE}", "ETag": ETAG}
    )


class FileOrigin:
    def __init__(self, path: Path, url: str) -> None:
        self.path, self.url = path, url


@pytest.fixture
async def file_origin(tmp_path: Path) -> AsyncIterator[FileOrigin]:
    """aiohttp's static file handler, with a `.gz` sibling it serves to clients that accept gzip."""
    path = tmp_path / "data.bin"
    path.write_bytes(DATA)
    (tmp_path / "data.bin.gz").write_bytes(gzip.compress(DATA))
    app = web.Application()

    async def serve_file(request: web.Request) -> web.FileResponse:
        return web.FileResponse(path)

    app.router.add_get("/data.bin", serve_file)
    runner, base = await _serve(app)
    yield FileOrigin(path, base + "/data.bin")
    await runner.cleanup()


class RawOrigin:
    """A socket server speaking raw HTTP/1.1, for answers aiohttp's server would not produce."""

    def __init__(self) -> None:
        self.script: Script | None = None
        self.requests: list[bytes] = []
        self.release = asyncio.Event()  # set at teardown: scripts that hang wait on it
        self.url = ""
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        try:
            self.requests.append(await reader.readuntil(b"\r\n\r\n"))
            assert self.script is not None
            await self.script(self, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up, as it should after a bad answer
        finally:
            writer.close()

    async def close(self) -> None:
        self.release.set()
        for writer in self._writers:
            writer.close()
        # No cancel(): on 3.11 asyncio.streams logs a cancelled connection task as an error. Released scripts end.
        await asyncio.gather(*self._tasks, return_exceptions=True)


@pytest.fixture
async def raw_origin() -> AsyncIterator[RawOrigin]:
    raw = RawOrigin()
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    raw.url = f"http://{host}:{port}/file"
    yield raw
    server.close()
    await raw.close()
    await server.wait_closed()


def make_source(session: aiohttp.ClientSession, url: str, **kwargs: object) -> OriginRangeSource:
    options: dict[str, object] = {"size": SIZE, "validator": ETAG}
    options.update(kwargs)
    return OriginRangeSource(session, url, **options)  # type: ignore[arg-type]


# -- a real origin: aiohttp's static files ----------------------------------------------------------------------


@pytest.mark.parametrize("validator_header", ["ETag", "Last-Modified"])
async def test_file_origin_serves_every_block_unencoded(
    session: aiohttp.ClientSession, file_origin: FileOrigin, validator_header: str
) -> None:
    # The fixture is meaningful: this origin does serve gzip (another file, another ETag) to whoever accepts it.
    async with session.head(file_origin.url, headers={"Accept-Encoding": "gzip"}) as probe:
        assert probe.headers["Content-Encoding"] == "gzip"
        gzip_etag = probe.headers["ETag"]
    async with session.head(file_origin.url, headers={"Accept-Encoding": "identity"}) as probe:
        assert "Content-Encoding" not in probe.headers
        validator = probe.headers[validator_header]
    assert validator != gzip_etag
    manifest, _ = build_manifest([DATA], SIZE, block_size=BLOCK)
    source = make_source(session, file_origin.url, validator=validator)
    spans = [manifest.block_span(i) for i in range(manifest.num_blocks)]
    assert spans[-1] == (3 * BLOCK, 1000)
    blocks = await asyncio.gather(*(source.fetch(offset, length) for offset, length in spans))
    assert b"".join(blocks) == DATA
    assert all(type(block) is bytes for block in blocks)
    # An odd range inside a block, and the very last byte.
    assert await source.fetch(12345, 7) == DATA[12345:12352]
    assert await source.fetch(SIZE - 1, 1) == DATA[-1:]
    assert (source.requests, source.failures, source.in_flight) == (len(spans) + 2, 0, 0)
    assert source.bytes_received == SIZE + 8


@pytest.mark.parametrize(
    "validator_header, why",
    [
        # aiohttp ignores an ETag in If-Range and serves a range of the new file: only the 206's ETag tells.
        ("ETag", "ETag"),
        # A date in If-Range it honours: the changed file comes back whole, as a 200.
        ("Last-Modified", "200"),
    ],
)
async def test_file_origin_changed_representation_is_permanent(
    session: aiohttp.ClientSession, file_origin: FileOrigin, validator_header: str, why: str
) -> None:
    async with session.head(file_origin.url, headers={"Accept-Encoding": "identity"}) as probe:
        validator = probe.headers[validator_header]
    source = make_source(session, file_origin.url, validator=validator)
    assert await source.fetch(0, BLOCK) == DATA[:BLOCK]
    stat = file_origin.path.stat()
    file_origin.path.write_bytes(bytes(reversed(DATA)))  # same size, other bytes
    os.utime(file_origin.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10 * 10**9))
    with pytest.raises(OriginSourceError) as caught:
        await source.fetch(BLOCK, BLOCK)
    assert caught.value.permanent and why in str(caught.value)
    assert source.disabled is caught.value and source.bytes_received == BLOCK


# -- wrong answers, well-formed -----------------------------------------------------------------------------------


def answer(status: int, body: bytes = b"", **headers: str) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()})

    return handler


# fetch(10, 100) of a SIZE-byte representation with validator ETAG: (name, handler, permanent, text in the message)
GOOD_RANGE = f"bytes 10-109/{SIZE}"
WRONG_ANSWERS = [
    ("200: Range ignored or If-Range mismatch", answer(200, DATA), True, "full representation"),
    ("416", answer(416, Content_Range=f"bytes */{SIZE + 5}"), True, "not satisfiable"),
    ("404", answer(404), True, "404"),
    ("403", answer(403), True, "403"),
    ("302 is not followed", answer(302, Location="/elsewhere"), True, "redirect"),
    ("204", answer(204), True, "204"),
    ("500", answer(500), False, "500"),
    ("503", answer(503, Retry_After="1"), False, "temporary"),
    ("429", answer(429), False, "429"),
    ("408", answer(408), False, "408"),
    ("multipart/byteranges", answer(206, b"--x\r\n", Content_Type="multipart/byteranges; boundary=x"), True,
     "multipart"),
    ("no Content-Range", answer(206, DATA[10:110]), True, "0 Content-Range"),
    ("wrong start", answer(206, DATA[11:111], Content_Range=f"bytes 11-110/{SIZE}"), True, "not the range asked"),
    ("wrong end", answer(206, DATA[10:109], Content_Range=f"bytes 10-108/{SIZE}"), True, "not the range asked"),
    ("wrong total: the size changed", answer(206, DATA[10:110], Content_Range=f"bytes 10-109/{SIZE + 1}"), True,
     "changed"),
    ("unknown total *", answer(206, DATA[10:110], Content_Range="bytes 10-109/*"), True, "'*'"),
    ("unsatisfied form in a 206", answer(206, DATA[10:110], Content_Range=f"bytes */{SIZE}"), True, "malformed"),
    ("other unit", answer(206, DATA[10:110], Content_Range=f"items 10-109/{SIZE}"), True, "malformed"),
    ("request syntax", answer(206, DATA[10:110], Content_Range=f"bytes=10-109/{SIZE}"), True, "malformed"),
    ("huge number", answer(206, DATA[10:110], Content_Range=f"bytes 10-109/{'9' * 5000}"), True, "malformed"),
    ("gzip-encoded range", answer(206, DATA[10:110], Content_Range=GOOD_RANGE, Content_Encoding="gzip"), True,
     "Content-Encoding gzip"),
    ("other ETag", answer(206, DATA[10:110], Content_Range=GOOD_RANGE, ETag='"v2"'), True, "ETag"),
    ("weakened ETag", answer(206, DATA[10:110], Content_Range=GOOD_RANGE, ETag='W/"v1"'), True, "ETag"),
    ("body longer than the range", answer(206, DATA[10:111], Content_Range=GOOD_RANGE), True, "Content-Length 101"),
    ("body shorter than the range", answer(206, DATA[10:109], Content_Range=GOOD_RANGE), True, "Content-Length 99"),
]  # fmt: skip


@pytest.mark.parametrize("name, handler, permanent, text", WRONG_ANSWERS, ids=[case[0] for case in WRONG_ANSWERS])
async def test_wrong_answers_are_source_failures(
    session: aiohttp.ClientSession, origin: ScriptedOrigin, name: str, handler: Handler, permanent: bool, text: str
) -> None:
    origin.handler = handler
    source = make_source(session, origin.url)
    with pytest.raises(OriginSourceError) as caught:
        await source.fetch(10, 100)
    error = caught.value
    assert isinstance(error, SwarmError) and not isinstance(error, PeerError)
    assert error.permanent is permanent, str(error)
    assert text in str(error)
    assert error.status == int(name[:3]) if name[:3].isdigit() else error.status == 206
    assert len(origin.requests) == 1  # no redirect followed, no retry here
    assert (source.failures, source.in_flight) == (1, 0)
    assert source.bytes_received == 0  # the headers were enough to refuse: no body read
    assert (source.disabled is error) is permanent


async def test_matching_validator_and_identity_encoding_pass(session: aiohttp.ClientSession,
                                                              origin: ScriptedOrigin) -> None:
    origin.handler = answer(206, DATA[10:110], Content_Range=GOOD_RANGE.upper().replace("BYTES", "bytes"),
                            ETag=ETAG, Content_Encoding="identity")
    assert await make_source(session, origin.url).fetch(10, 100) == DATA[10:110]


async def test_transient_failure_keeps_the_source_usable(session: aiohttp.ClientSession,
                                                          origin: ScriptedOrigin) -> None:
    origin.handler = answer(503)
    source = make_source(session, origin.url)
    with pytest.raises(OriginSourceError):
        await source.fetch(0, 10)
    origin.handler = range_response
    assert await source.fetch(0, 10) == DATA[:10]
    assert (source.requests, source.failures, source.disabled) == (2, 1, None)


async def test_after_a_permanent_failure_nothing_more_is_sent(session: aiohttp.ClientSession,
                                                               origin: ScriptedOrigin) -> None:
    arrived, gate = asyncio.Event(), asyncio.Event()

    async def gated_full_body(request: web.Request) -> web.Response:
        arrived.set()
        await gate.wait()
        return web.Response(status=200, body=DATA)

    origin.handler = gated_full_body
    source = make_source(session, origin.url, max_concurrent=1)
    tasks = [asyncio.create_task(source.fetch(i * BLOCK, BLOCK)) for i in range(3)]
    await arrived.wait()  # the first request reached the origin; the other two wait for its slot
    assert (source.in_flight, source.queued) == (1, 2)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, OriginSourceError) and r.permanent for r in results)
    assert "no longer used" in str(results[1]) and "no longer used" in str(results[2])
    with pytest.raises(OriginSourceError, match="no longer used"):
        await source.fetch(0, 1)
    assert len(origin.requests) == 1 and source.requests == 1


# -- what goes out ----------------------------------------------------------------------------------------------

REQUEST_HEADER_CASES = [
    ("strong ETag", ETAG, None, {"If-Range": ETAG, "Accept-Encoding": "identity"}),
    ("Last-Modified date", "Wed, 21 Oct 2015 07:28:00 GMT", None,
     {"If-Range": "Wed, 21 Oct 2015 07:28:00 GMT", "Accept-Encoding": "identity"}),
    ("no validator", None, None, {"If-Range": None, "Accept-Encoding": "identity"}),
    ("an encoded representation", ETAG, "gzip", {"If-Range": ETAG, "Accept-Encoding": "gzip"}),
]  # fmt: skip


@pytest.mark.parametrize("name, validator, encoding, expected", REQUEST_HEADER_CASES,
                         ids=[case[0] for case in REQUEST_HEADER_CASES])
async def test_request_headers(session: aiohttp.ClientSession, origin: ScriptedOrigin, name: str,
                               validator: str | None, encoding: str | None, expected: dict[str, str | None]) -> None:
    async def respond(request: web.Request) -> web.StreamResponse:
        response = await range_response(request)
        if encoding:
            response.headers["Content-Encoding"] = encoding
        del response.headers["ETag"]
        return response

    origin.handler = respond
    source = make_source(session, origin.url, validator=validator, content_encoding=encoding)
    assert await source.fetch(SIZE - 1000, 1000) == DATA[-1000:]
    sent = origin.requests[0]
    assert sent["Range"] == f"bytes={SIZE - 1000}-{SIZE - 1}"
    for header, value in expected.items():
        assert sent.get(header) == value, header


# -- broken connections and bodies (raw socket origin) ----------------------------------------------------------


def raw(head: str, body: bytes = b"", *, then: str = "close") -> Script:
    """Send `head` (lines joined by CRLF, then the blank line) and `body`; then close, or hang until teardown."""

    async def script(origin: RawOrigin, writer: asyncio.StreamWriter) -> None:
        writer.write(head.replace("\n", "\r\n").encode() + b"\r\n" + body if head else b"")
        await writer.drain()
        if then == "hang":
            await origin.release.wait()

    return script


def chunked(*pieces: bytes, end: bool = True) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + (b"0\r\n\r\n" if end else b"")


H206 = f"HTTP/1.1 206 Partial Content\nContent-Range: bytes 10-109/{SIZE}\n"
RAW_CASES = [
    ("connection cut mid-body", raw(H206 + "Content-Length: 100\n", DATA[10:50]), False, "failed"),
    ("closed before any answer", raw("", b""), False, "failed"),
    ("chunked, ends short", raw(H206 + "Transfer-Encoding: chunked\n", chunked(DATA[10:50])), False,
     "after 40 of 100"),
    ("chunked, too long", raw(H206 + "Transfer-Encoding: chunked\n", chunked(DATA[10:60], DATA[60:111])), True,
     "longer"),
    ("close-delimited, endless", raw(H206 + "Connection: close\n", DATA * 20, then="hang"), True, "longer"),
    ("200 with a huge body", raw(f"HTTP/1.1 200 OK\nContent-Length: {10**12}\n", DATA * 20, then="hang"), True,
     "full representation"),
    ("garbage status line", raw("SMTP ready\n"), False, "failed"),
    ("headers, then silence", raw(H206 + "Content-Length: 100\n", DATA[10:20], then="hang"), False, "stalled"),
    ("never answers", raw("", then="hang"), False, "stalled"),
]  # fmt: skip


@pytest.mark.parametrize("name, script, permanent, text", RAW_CASES, ids=[case[0] for case in RAW_CASES])
async def test_broken_answers(session: aiohttp.ClientSession, raw_origin: RawOrigin, name: str, script: Script,
                              permanent: bool, text: str) -> None:
    raw_origin.script = script
    # A short stall timeout only where the stall is the case: elsewhere, on a loaded machine, 0.05 s once fired
    # before the origin's close was read ("chunked, ends short" said "stalled").
    source = make_source(session, raw_origin.url, timeout=0.05 if text == "stalled" else 5.0)
    with pytest.raises(OriginSourceError) as caught:
        await source.fetch(10, 100)
    assert caught.value.permanent is permanent, str(caught.value)
    assert text in str(caught.value)
    # Whatever the origin pushes, no more than the range plus one byte is ever read.
    assert source.bytes_received <= 101
    assert (source.failures, source.in_flight) == (1, 0)


# -- the concurrency cap ----------------------------------------------------------------------------------------


async def test_concurrency_cap_is_respected(session: aiohttp.ClientSession, origin: ScriptedOrigin) -> None:
    cap, count = 2, 7
    gate, full = asyncio.Event(), asyncio.Event()
    current = peak = 0

    async def counting(request: web.Request) -> web.Response:
        nonlocal current, peak
        current += 1
        peak = max(peak, current)
        if current == cap:
            full.set()
        try:
            await gate.wait()
            return await range_response(request)
        finally:
            current -= 1

    origin.handler = counting
    source = make_source(session, origin.url, max_concurrent=cap)
    spans = [(i * 1000, 1000) for i in range(count)]
    tasks = [asyncio.create_task(source.fetch(offset, length)) for offset, length in spans]
    await full.wait()
    assert (source.in_flight, source.queued, source.max_concurrent) == (cap, count - cap, cap)
    gate.set()
    blocks = await asyncio.gather(*tasks)
    assert blocks == [DATA[o : o + n] for o, n in spans]
    assert peak == cap  # the cap was reached and never exceeded
    assert (source.requests, source.in_flight, source.queued, source.bytes_received) == (count, 0, 0, 1000 * count)


async def test_cancelling_a_fetch_frees_its_slot(session: aiohttp.ClientSession, origin: ScriptedOrigin) -> None:
    arrived, gate = asyncio.Event(), asyncio.Event()

    async def first_hangs(request: web.Request) -> web.Response:
        if len(origin.requests) == 1:
            arrived.set()
            await gate.wait()
        return await range_response(request)

    origin.handler = first_hangs
    source = make_source(session, origin.url, max_concurrent=1)
    stuck = asyncio.create_task(source.fetch(0, 100))
    await arrived.wait()
    waiting = asyncio.create_task(source.fetch(100, 100))
    stuck.cancel()  # what the request policy does on its own per-request deadline (OriginCancel)
    assert await waiting == DATA[100:200]
    with pytest.raises(asyncio.CancelledError):
        await stuck
    assert (source.in_flight, source.failures, source.requests) == (0, 0, 2)
    gate.set()


# -- misuse -----------------------------------------------------------------------------------------------------

BAD_ARGUMENTS = [
    ("weak ETag", {"validator": 'W/"v1"'}, "weak"),
    ("not a validator", {"validator": "v1"}, "neither"),
    ("relative URL", {"url": "/file"}, "absolute"),
    ("ftp URL", {"url": "ftp://127.0.0.1/file"}, "absolute"),
    ("no concurrency", {"max_concurrent": 0}, "max_concurrent"),
    ("negative size", {"size": -1}, "size"),
    ("zero timeout", {"timeout": 0}, "timeout"),
]  # fmt: skip


@pytest.mark.parametrize("name, kwargs, text", BAD_ARGUMENTS, ids=[case[0] for case in BAD_ARGUMENTS])
async def test_bad_arguments(session: aiohttp.ClientSession, name: str, kwargs: dict[str, object], text: str) -> None:
    url = str(kwargs.pop("url", "http://127.0.0.1:1/file"))
    with pytest.raises(ValueError, match=text):
        make_source(session, url, **kwargs)


async def test_a_decompressing_session_is_refused() -> None:
    async with aiohttp.ClientSession() as decompressing:
        with pytest.raises(ValueError, match="auto_decompress"):
            make_source(decompressing, "http://127.0.0.1:1/file")


@pytest.mark.parametrize("offset, length", [(-1, 10), (0, 0), (SIZE - 10, 11), (SIZE, 1)])
async def test_ranges_outside_the_representation_are_refused(session: aiohttp.ClientSession, offset: int,
                                                              length: int) -> None:
    source = make_source(session, "http://127.0.0.1:1/file")
    with pytest.raises(ValueError):
        await source.fetch(offset, length)
    assert source.requests == 0
