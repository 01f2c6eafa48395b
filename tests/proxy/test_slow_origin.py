"""SlowOrigin, the deliberately overloaded origin of the demo and the lab: validators and caching headers,
single ranges and If-Range, HEAD, 404, per-file headers, responses cut mid-body, the connection cap and the
bandwidth bucket. Concurrency is checked through the origin's own state and events, never through timing."""

from __future__ import annotations

import asyncio
import email.utils
import functools
import hashlib

import aiohttp
import pytest
import pytest_asyncio

from proxy.demo.slow_origin import CHUNK, SlowOrigin

DATA = hashlib.sha256(b"slow origin").digest() * 3200  # 102,400 bytes: six full 16 KiB pieces and a partial one
SIZE = len(DATA)


@pytest_asyncio.fixture
async def session():
    async with aiohttp.ClientSession(trust_env=False) as client:
        yield client


async def fetch(session: aiohttp.ClientSession, url: str, method: str = "GET", **headers: str):
    async with session.request(method, url, headers=headers) as response:
        return response.status, response.headers, await response.read()


def etag_of(data: bytes) -> str:
    return '"' + hashlib.sha256(data).hexdigest()[:32] + '"'


async def test_get_returns_the_bytes_with_validators_and_caching_headers(session):
    server = SlowOrigin(max_age=120)
    await server.start()
    try:
        url = server.add("/dir/file.txt", DATA, content_type="text/plain")
        assert url == server.url + "/dir/file.txt" and server.url.startswith("http://127.0.0.1:")
        status, headers, body = await fetch(session, url)
    finally:
        await server.stop()
    assert status == 200 and body == DATA
    assert headers["ETag"] == etag_of(DATA)
    assert headers["Cache-Control"] == "public, max-age=120"
    assert headers["Content-Type"] == "text/plain"
    assert headers["Accept-Ranges"] == "bytes"
    assert headers["Content-Length"] == str(SIZE)
    assert "Content-Range" not in headers
    assert headers["Last-Modified"] == server.last_modified
    modified = email.utils.parsedate_to_datetime(headers["Last-Modified"])
    served = email.utils.parsedate_to_datetime(headers["Date"])
    assert modified < served  # in the past, so a strong validator usable in If-Range


async def test_different_content_gets_a_different_etag(slow_origin, session):
    _, first, _ = await fetch(session, slow_origin.add("/a", b"one"))
    _, second, _ = await fetch(session, slow_origin.add("/b", b"two"))
    _, third, _ = await fetch(session, slow_origin.add("/c", b"one"))
    assert first["ETag"] != second["ETag"] and first["ETag"] == third["ETag"]


# (Range, (start, end exclusive) of a 206, or None for a full 200)
RANGES = [
    pytest.param("bytes=0-0", (0, 1), id="first-byte"),
    pytest.param("bytes=0-99", (0, 100), id="first-100"),
    pytest.param(f"bytes=0-{SIZE - 1}", (0, SIZE), id="everything"),
    pytest.param("bytes=16383-16384", (16383, 16385), id="across-pieces"),
    pytest.param("bytes=50000-", (50000, SIZE), id="open-ended"),
    pytest.param(f"bytes={SIZE - 1}-", (SIZE - 1, SIZE), id="last-byte"),
    pytest.param("bytes=-10", (SIZE - 10, SIZE), id="suffix"),
    pytest.param("bytes=-999999", (0, SIZE), id="suffix-larger-than-size"),
    pytest.param("bytes=100-999999", (100, SIZE), id="last-beyond-size"),
    pytest.param("bytes=0-1,3-4", None, id="two-ranges-ignored"),
    pytest.param("items=0-1", None, id="other-unit-ignored"),
    pytest.param("bytes=5-4", None, id="invalid-ignored"),
]


@pytest.mark.parametrize("value,span", RANGES)
async def test_range_requests(slow_origin, session, value, span):
    url = slow_origin.add("/f", DATA)
    status, headers, body = await fetch(session, url, Range=value)
    if span is None:
        assert status == 200 and body == DATA and "Content-Range" not in headers
        return
    start, end = span
    assert status == 206
    assert headers["Content-Range"] == f"bytes {start}-{end - 1}/{SIZE}"
    assert headers["Content-Length"] == str(end - start)
    assert body == DATA[start:end]
    assert headers["ETag"] == etag_of(DATA)


@pytest.mark.parametrize("size,value", [
    pytest.param(SIZE, f"bytes={SIZE}-", id="first-equals-size"),
    pytest.param(SIZE, "bytes=999999-1000000", id="first-beyond-size"),
    pytest.param(SIZE, "bytes=-0", id="zero-suffix"),
    pytest.param(0, "bytes=0-", id="empty-file"),
    pytest.param(0, "bytes=-5", id="suffix-of-empty-file"),
])
async def test_unsatisfiable_range_is_416(slow_origin, session, size, value):
    url = slow_origin.add("/f", DATA[:size])
    status, headers, body = await fetch(session, url, Range=value)
    assert status == 416
    assert headers["Content-Range"] == f"bytes */{size}"
    assert body == b""


@pytest.mark.parametrize("if_range,expected", [
    pytest.param("etag", 206, id="matching-etag"),
    pytest.param("last-modified", 206, id="matching-date"),
    pytest.param('"0123456789abcdef0123456789abcdef"', 200, id="other-etag"),
    pytest.param("weak", 200, id="weak-form-of-etag"),
    pytest.param("Mon, 01 Jan 2001 00:00:00 GMT", 200, id="other-date"),
])
async def test_if_range(slow_origin, session, if_range, expected):
    url = slow_origin.add("/f", DATA)
    value = {"etag": etag_of(DATA), "last-modified": slow_origin.last_modified, "weak": "W/" + etag_of(DATA)}.get(
        if_range, if_range)
    status, headers, body = await fetch(session, url, Range="bytes=10-19", **{"If-Range": value})
    assert status == expected
    if expected == 206:
        assert body == DATA[10:20] and headers["Content-Range"] == f"bytes 10-19/{SIZE}"
    else:
        assert body == DATA and "Content-Range" not in headers


@pytest.mark.parametrize("headers,status,length", [
    pytest.param({}, 200, SIZE, id="whole"),
    pytest.param({"Range": "bytes=10-19"}, 206, 10, id="range"),
])
async def test_head_has_no_body_but_a_content_length(slow_origin, session, headers, status, length):
    url = slow_origin.add("/f", DATA)
    got_status, got_headers, body = await fetch(session, url, "HEAD", **headers)
    assert got_status == status
    assert got_headers["Content-Length"] == str(length)
    assert got_headers["ETag"] == etag_of(DATA)
    assert body == b""
    assert slow_origin.bytes_sent == 0


@pytest.mark.parametrize("path", ["/", "/missing", "/f/", "/F"])
async def test_unknown_path_is_404(slow_origin, session, path):
    slow_origin.add("/f", DATA)
    status, _, body = await fetch(session, slow_origin.url + path)
    assert status == 404 and b"no such file" in body
    assert slow_origin.requests == [("GET", path, None)]


@pytest.mark.parametrize("extra,present,absent", [
    pytest.param({"X-Extra": "1"}, {"X-Extra": "1", "Cache-Control": "public, max-age=3600"}, [], id="added"),
    pytest.param({"Cache-Control": "no-store"}, {"Cache-Control": "no-store"}, [], id="replaces-default"),
    pytest.param({"ETag": ""}, {"Last-Modified": None}, ["ETag"], id="empty-removes-etag"),
    pytest.param({"ETag": "", "Last-Modified": "", "Cache-Control": ""}, {"Content-Type": None},
                 ["ETag", "Last-Modified", "Cache-Control"], id="empty-removes-several"),
    pytest.param({"Accept-Ranges": ""}, {}, ["Accept-Ranges"], id="empty-removes-accept-ranges"),
])
async def test_extra_headers_per_file(slow_origin, session, extra, present, absent):
    url = slow_origin.add("/f", DATA, headers=extra)
    slow_origin.add("/plain", DATA)
    status, headers, body = await fetch(session, url)
    assert status == 200 and body == DATA
    for name, value in present.items():
        assert name in headers and (value is None or headers[name] == value)
    for name in absent:
        assert name not in headers
    # the extra headers belong to that one file only
    _, plain, _ = await fetch(session, slow_origin.url + "/plain")
    assert "ETag" in plain and "X-Extra" not in plain and plain["Cache-Control"] == "public, max-age=3600"


# (die_after, Range, bytes the origin gets out before cutting, or None when the response is complete)
CUTS = [
    pytest.param(0, None, 0, id="before-the-first-byte"),
    pytest.param(CHUNK - 1, None, 0, id="inside-the-first-piece"),
    pytest.param(CHUNK, None, CHUNK, id="after-the-first-piece"),
    pytest.param(20_000, None, CHUNK, id="inside-the-second-piece"),
    pytest.param(5 * CHUNK + 1, None, 5 * CHUNK, id="near-the-end"),
    pytest.param(20_000, "bytes=1000-", CHUNK, id="counts-from-the-range-start"),
    pytest.param(SIZE, None, None, id="exactly-the-size-is-not-cut"),
    pytest.param(CHUNK, "bytes=0-99", None, id="range-shorter-than-the-cut"),
]


@pytest.mark.parametrize("die_after,range_value,sent", CUTS)
async def test_die_after_cuts_the_body(slow_origin, session, die_after, range_value, sent):
    url = slow_origin.add("/f", DATA)
    slow_origin.die_after["/f"] = die_after
    headers = {"Range": range_value} if range_value else {}
    start = 1000 if range_value == "bytes=1000-" else 0
    expected = DATA[start:100] if range_value == "bytes=0-99" else DATA[start:]
    received = bytearray()
    error = None
    try:
        async with session.get(url, headers=headers) as response:
            assert response.headers["Content-Length"] == str(len(expected))  # announced in full, then cut
            async for piece in response.content.iter_any():
                received += piece
    except aiohttp.ClientPayloadError as exc:
        error = exc
    if sent is None:
        assert error is None and bytes(received) == expected
        assert slow_origin.bytes_sent == len(expected)
    else:
        assert error is not None, "a cut response must not look complete to the client"
        assert slow_origin.bytes_sent == sent
        assert len(received) <= sent and bytes(received) == expected[:len(received)]
    assert slow_origin.requests == [("GET", "/f", range_value)]


async def test_requests_are_recorded_with_method_path_and_range(slow_origin, session):
    url = slow_origin.add("/f", DATA)
    await fetch(session, url)
    await fetch(session, url, "HEAD")
    await fetch(session, url, Range="bytes=1-2")
    await fetch(session, url + "?query=1", Range="bytes=-5")
    await fetch(session, slow_origin.url + "/nope", Range="bytes=0-")
    assert slow_origin.requests == [("GET", "/f", None), ("HEAD", "/f", None), ("GET", "/f", "bytes=1-2"),
                               ("GET", "/f", "bytes=-5"), ("GET", "/nope", "bytes=0-")]
    assert slow_origin.bytes_sent == SIZE + 2 + 5


class Tracker:
    """Watches an origin's handlers: which request arrived, and every body piece it hands to the bucket, in order.

    Body pieces of a path with a gate wait for it before going out, which holds that response (and its connection
    slot) open for as long as the test wants — a deterministic stand-in for a slow client or link.
    """

    def __init__(self, server: SlowOrigin) -> None:
        self.paths: dict[asyncio.Task, str] = {}
        self.arrived: dict[str, asyncio.Event] = {}
        self.first_piece: dict[str, asyncio.Event] = {}
        self.gates: dict[str, asyncio.Event] = {}
        self.pieces: list[str] = []
        tracker = self

        class Requests(list):
            def append(self, item) -> None:
                super().append(item)
                tracker.paths[asyncio.current_task()] = item[1]
                tracker.event(tracker.arrived, item[1]).set()

        server.requests = Requests()
        take = server.bucket.take

        async def traced_take(amount: int, *wanted) -> bool:
            path = self.paths[asyncio.current_task()]
            self.pieces.append(path)
            self.event(self.first_piece, path).set()
            if path in self.gates:
                await self.gates[path].wait()
            return await take(amount, *wanted)

        server.bucket.take = traced_take

    @staticmethod
    def event(events: dict[str, asyncio.Event], path: str) -> asyncio.Event:
        return events.setdefault(path, asyncio.Event())


def waiting_for(semaphore: asyncio.Semaphore) -> int:
    """Tasks queued on an asyncio.Semaphore (it has no public accessor for this)."""
    return sum(not waiter.done() for waiter in (semaphore._waiters or ()))


async def settle(*tasks: asyncio.Future) -> None:
    """Cancel what a failed test left running, so that no request outlives its test."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def bounded(test):
    """Fail after 30 s instead of hanging until the suite's timeout when a gated response never moves on.
    A bound on failure only: nothing in these tests waits for time to pass."""
    @functools.wraps(test)
    async def wrapper(*args, **kwargs):
        async with asyncio.timeout(30):
            return await test(*args, **kwargs)
    return wrapper


A_DATA, B_DATA = DATA[:3 * CHUNK + 100], DATA[:2 * CHUNK + 7]  # 4 and 3 body pieces


@bounded
async def test_max_connections_one_serialises_two_requests(session):
    server = SlowOrigin(max_connections=1)
    await server.start()
    tasks: list[asyncio.Future] = []
    try:
        tracker = Tracker(server)
        gate = tracker.gates["/a"] = asyncio.Event()
        first = asyncio.ensure_future(fetch(session, server.add("/a", A_DATA)))
        tasks.append(first)
        await tracker.event(tracker.first_piece, "/a").wait()  # A has the only slot and is held mid-body
        second = asyncio.ensure_future(fetch(session, server.add("/b", B_DATA)))
        tasks.append(second)
        await tracker.event(tracker.arrived, "/b").wait()
        # B's handler went from recording the request straight to the slot: it is queued there, not sending
        assert server.slots.locked() and waiting_for(server.slots) == 1
        assert tracker.pieces == ["/a"] and not second.done()
        gate.set()
        (status_a, _, body_a), (status_b, _, body_b) = await asyncio.gather(first, second)
        assert (status_a, body_a, status_b, body_b) == (200, A_DATA, 200, B_DATA)
        assert tracker.pieces == ["/a"] * 4 + ["/b"] * 3  # all of A before any of B
        assert not server.slots.locked() and waiting_for(server.slots) == 0
    finally:
        await settle(*tasks)
        await server.stop()


@bounded
async def test_max_connections_two_lets_the_second_request_through(session):
    """The contrast: with a second slot, B is served completely while A is still held."""
    server = SlowOrigin(max_connections=2)
    await server.start()
    tasks: list[asyncio.Future] = []
    try:
        tracker = Tracker(server)
        gate = tracker.gates["/a"] = asyncio.Event()
        first = asyncio.ensure_future(fetch(session, server.add("/a", A_DATA)))
        tasks.append(first)
        await tracker.event(tracker.first_piece, "/a").wait()
        status_b, _, body_b = await fetch(session, server.add("/b", B_DATA))
        assert (status_b, body_b) == (200, B_DATA)
        assert tracker.pieces == ["/a"] + ["/b"] * 3 and not first.done()
        gate.set()
        status_a, _, body_a = await first
        assert (status_a, body_a) == (200, A_DATA)
        assert tracker.pieces == ["/a"] + ["/b"] * 3 + ["/a"] * 3
    finally:
        await settle(*tasks)
        await server.stop()


@bounded
async def test_a_client_that_leaves_frees_its_slot(session):
    """handler_cancellation: a client gone mid-body gives its slot back, so the next request is served."""
    server = SlowOrigin(max_connections=1)
    await server.start()
    tasks: list[asyncio.Future] = []
    try:
        tracker = Tracker(server)
        tracker.gates["/a"] = asyncio.Event()  # never set: A would hold its slot forever
        async with aiohttp.ClientSession(trust_env=False) as leaving:
            held = asyncio.ensure_future(fetch(leaving, server.add("/a", A_DATA)))
            tasks.append(held)
            await tracker.event(tracker.first_piece, "/a").wait()
            assert server.slots.locked()
            held.cancel()
        # the leaving session is closed, its connection with it; B must get the slot
        status_b, _, body_b = await fetch(session, server.add("/b", B_DATA))
        assert (status_b, body_b) == (200, B_DATA)
    finally:
        await settle(*tasks)
        await server.stop()


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_a_client_gone_before_the_head_is_written_is_no_error(slow_origin, session, caplog, monkeypatch,
                                                                     method):
    """In a flash crowd a proxy may close a request before the head goes out (its lookup found the swarm): the
    write of the head fails, and that is the end of the response, not an error with a traceback in the log."""
    from aiohttp import web
    from aiohttp.client_exceptions import ClientConnectionResetError

    async def closed(self, request):
        raise ClientConnectionResetError("Cannot write to closing transport")
    monkeypatch.setattr(web.StreamResponse, "prepare", closed)
    with caplog.at_level("ERROR"):
        with pytest.raises(aiohttp.ClientError):  # the server dropped the connection: nothing came back
            await fetch(session, slow_origin.add("/f", DATA), method)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert slow_origin.bytes_sent == 0


def completes_without_waiting(coro) -> bool:
    """Drive a coroutine one step: True if it finished without suspending (e.g. on a sleep)."""
    try:
        coro.send(None)
    except StopIteration:
        return True
    coro.close()
    return False


@pytest.mark.parametrize("rate,drain,amount,immediate", [
    pytest.param(None, False, 10**9, True, id="unlimited"),
    pytest.param(1000, False, CHUNK, True, id="within-burst"),
    pytest.param(1000, False, CHUNK + 1, False, id="beyond-burst-waits"),
    pytest.param(1000, True, 1, False, id="drained-waits"),
    pytest.param(10**7, False, 10**6, True, id="burst-is-a-tenth-of-the-rate"),
])
async def test_bucket_waits_only_beyond_its_budget(rate, drain, amount, immediate):
    bucket = SlowOrigin(rate=rate).bucket
    if drain:
        assert not completes_without_waiting(bucket.take(10**6))
    assert completes_without_waiting(bucket.take(amount)) is immediate


async def test_set_rate_none_makes_take_return_without_waiting():
    server = SlowOrigin(rate=1000)
    assert not completes_without_waiting(server.bucket.take(10**6))  # drained far below zero
    assert not completes_without_waiting(server.bucket.take(1))
    server.set_rate(None)
    assert completes_without_waiting(server.bucket.take(10**9))
    server.set_rate(1000)  # and limiting again re-arms the budget
    assert not completes_without_waiting(server.bucket.take(10**6))


@pytest.mark.parametrize("rate", [None, 1000])
async def test_a_response_whose_client_left_takes_nothing_from_the_budget(rate):
    bucket = SlowOrigin(rate=rate).bucket
    before = bucket.tokens
    assert await bucket.take(CHUNK, lambda: False) is False
    assert bucket.tokens == before
    assert await bucket.take(CHUNK, lambda: True) is True
    assert bucket.tokens == (before if rate is None else pytest.approx(before - CHUNK, abs=rate * 0.5))


async def test_a_take_cancelled_while_it_sleeps_gives_its_tokens_back():
    """A client that leaves while its chunk waits for its tokens (`handler_cancellation`) sends nothing, and the
    next response does not wait for that chunk's time. On the tree before, the tokens stayed spent: in a crowd of
    1,000 arrivals a second, newcomers leaving mid-sleep piled up a debt no later newcomer stayed long enough to see
    paid, and the simulated origin sent nothing for 28 s (bench/crowd_sim)."""
    bucket = SlowOrigin(rate=1000).bucket
    leaving = bucket.take(10**6)
    leaving.send(None)  # it took the lock and sleeps for its tokens (1,000 s of them)
    with pytest.raises(asyncio.CancelledError):
        leaving.throw(asyncio.CancelledError())
    assert not bucket.lock.locked()
    assert completes_without_waiting(bucket.take(CHUNK))  # within the burst, as if the leaver had never come
