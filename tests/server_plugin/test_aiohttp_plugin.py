"""server_plugin on a real aiohttp server (port 0): the fields it adds, the layer endpoint, the busy hint, and
the responses it must leave alone."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from yarl import URL

from server_plugin.aiohttp_plugin import install, static_files
from server_plugin.publisher import LAYER_PREFIX, Publisher, Representation
from swarm.content.manifest import (
    ACCEPT_HEADER,
    HEADER,
    HINT_HEADER,
    accepts_hint,
    build_manifest,
    parse_header,
)
from swarm.content.peer_field import PEERS_HEADER

SMALL = os.urandom(100_000)
LARGE = os.urandom(3_000_000)


class Server:
    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self.url


async def yield_until(condition, turns: int = 10_000) -> None:
    """Lets the event loop (which runs the server too) go round until `condition` holds; no clock involved."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the server never got there")


@pytest_asyncio.fixture
async def served(tmp_path):
    (tmp_path / "small.bin").write_bytes(SMALL)
    (tmp_path / "large.bin").write_bytes(LARGE)
    (tmp_path / "sub").mkdir()
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def held(request):  # a GET that stays in flight until the test lets it go
        entered.set()
        await gate.wait()
        return web.Response(body=SMALL, headers={"ETag": '"held"'})

    async def encoded(request):
        return web.Response(body=gzip.compress(SMALL), headers={"ETag": '"gz"', "Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/held", held)
    app.router.add_get("/encoded", encoded)
    app.router.add_static("/files/", tmp_path)
    resolve_files = static_files(tmp_path, "/files/")

    def resolve(request):
        if request.path in ("/held", "/encoded"):
            validator = '"held"' if request.path == "/held" else '"gz"'
            return Representation(request.path, len(SMALL), lambda: (SMALL,), validator=validator)
        return resolve_files(request)
    publisher = install(app, resolve, Publisher(busy_at=2))
    server = Server(app)
    await server.start()
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield server.url, session, publisher, gate, entered
    gate.set()
    await server.runner.cleanup()


async def test_a_static_file_carries_its_manifest_with_the_layer_inline(served):
    url, session, _, _, _ = served
    async with session.get(url + "/files/small.bin") as response:
        assert response.status == 200 and await response.read() == SMALL
        published = parse_header(response.headers[HEADER])
    manifest, layer = build_manifest([SMALL], len(SMALL))
    assert published.root == manifest.root and list(published.hashes) == layer


async def test_a_large_file_points_to_its_layer_which_the_endpoint_serves(served):
    url, session, publisher, _, _ = served
    async with session.head(url + "/files/large.bin") as response:
        published = parse_header(response.headers[HEADER])
    assert published.layer_path == LAYER_PREFIX + published.root.hex()
    async with session.get(url + published.layer_path) as response:
        raw = await response.read()
    manifest, layer = build_manifest([LARGE], len(LARGE))
    assert raw == b"".join(layer) and publisher.layer_bytes == len(raw)
    async with session.head(url + published.layer_path) as response:
        assert response.status == 200 and response.content_length == len(raw)
    assert publisher.layer_bytes == len(raw)  # a HEAD sends no layer bytes: none counted
    async with session.get(url + LAYER_PREFIX + "00" * 32) as response:
        assert response.status == 404
    async with session.get(url + LAYER_PREFIX + "not-hex") as response:
        assert response.status == 404


async def test_a_range_response_carries_the_whole_representations_manifest(served):
    url, session, _, _, _ = served
    async with session.get(url + "/files/large.bin", headers={"Range": "bytes=100-199"}) as response:
        assert response.status == 206
        assert parse_header(response.headers[HEADER]).size == len(LARGE)


async def test_while_busy_responses_ask_clients_to_swarm(served):
    url, session, publisher, gate, entered = served
    async with session.get(url + "/files/small.bin") as response:
        assert HINT_HEADER not in response.headers  # alone: 1 GET in flight, busy from 2
        await response.read()
    # The file counts itself out after its last write, which the client may see first: let the server get there.
    await yield_until(lambda: publisher.in_flight == 0)
    first = asyncio.ensure_future(session.get(url + "/held"))
    await entered.wait()
    assert publisher.in_flight == 1
    # A static file is sent after the middleware returned (FileResponse.prepare): it still counts itself.
    async with session.get(url + "/files/small.bin") as response:
        assert response.headers[HINT_HEADER] == "swarm"
        assert await response.read() == SMALL
    gate.set()
    async with await first as response:
        assert HEADER in response.headers
    assert publisher.in_flight == 0


async def test_a_static_file_counts_itself_in_flight_while_it_is_sent(tmp_path):
    (tmp_path / "f.bin").write_bytes(SMALL)
    app = web.Application()
    app.router.add_static("/", tmp_path)
    publisher = install(app, static_files(tmp_path), Publisher(busy_at=1))  # busy from the first GET
    server = Server(app)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + "/f.bin") as response:
                assert await response.read() == SMALL
                assert response.headers[HINT_HEADER] == "swarm" and HEADER in response.headers
        assert publisher.in_flight == 0  # and counted out once sent
    finally:
        await server.runner.cleanup()


@pytest.mark.parametrize("path", ["/encoded", "/files/missing.bin", "/files/../secret", "/files/sub"])
async def test_no_manifest_for_encoded_missing_or_escaping_paths(served, path):
    url, session, _, _, _ = served
    async with session.get(url + path) as response:
        await response.read()
        assert HEADER not in response.headers


async def test_a_changed_file_gets_a_new_manifest(served, tmp_path):
    url, session, _, _, _ = served
    async with session.get(url + "/files/small.bin") as response:
        before = parse_header(response.headers[HEADER]).root
    changed = SMALL[::-1]
    (tmp_path / "small.bin").write_bytes(changed)
    os.utime(tmp_path / "small.bin", ns=(1, 1))  # a different mtime whatever the clock's resolution
    async with session.get(url + "/files/small.bin") as response:
        assert await response.read() == changed
        after = parse_header(response.headers[HEADER]).root
    assert after != before and after == build_manifest([changed], len(changed))[0].root


async def test_a_not_modified_answer_carries_nothing(served):
    url, session, _, _, _ = served
    async with session.get(url + "/files/small.bin") as response:
        etag = response.headers["ETag"]
    async with session.get(url + "/files/small.bin", headers={"If-None-Match": etag}) as response:
        assert response.status == 304 and HEADER not in response.headers


async def test_an_unreadable_file_is_served_without_a_manifest(tmp_path):
    def resolve(request):
        def read():
            raise OSError("disk gone")
            yield b""  # a generator, as a file reader is
        return Representation("/x", 5, read, validator='"x"')

    async def handler(request):
        return web.Response(body=b"hello", headers={"ETag": '"x"'})
    app = web.Application()
    app.router.add_get("/x", handler)
    install(app, resolve)
    server = Server(app)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session, session.get(server.url + "/x") as response:
            assert await response.read() == b"hello" and HEADER not in response.headers
    finally:
        await server.runner.cleanup()


# -- the hold: a hinted body waits for a client that said it leaves at the hint --------------------------------------

async def until(condition, timeout: float = 10.0) -> None:
    """Polls `condition` while the loop (which runs the server) goes on: the hold looks every HOLD_POLL s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "the server never got there"
        await asyncio.sleep(0.005)


def held_app(tmp_path, publisher: Publisher, headers: dict[str, str] | None = None) -> tuple[web.Application, list]:
    """`/files/` as aiohttp serves a directory (a FileResponse: head and body in one `prepare`), and `/stream`, a
    handler writing its body in chunks after `prepare`, counting what it wrote (with `headers`, on both)."""
    (tmp_path / "small.bin").write_bytes(SMALL)
    written: list[int] = []

    async def stream(request):
        response = web.StreamResponse(headers={"ETag": '"s"', "Accept-Ranges": "bytes", **(headers or {})})
        if "chunked" not in request.query:
            response.content_length = len(SMALL)
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        for offset in range(0, len(SMALL), 16384):
            await response.write(SMALL[offset:offset + 16384])
            written.append(16384)
        return response

    @web.middleware
    async def add(request, handler):  # the extra fields on the directory's files too, before the plugin's hook
        response = await handler(request)
        response.headers.update(headers or {})
        return response

    app = web.Application(middlewares=[add])
    app.router.add_get("/stream", stream)
    app.router.add_static("/files/", tmp_path)
    files = static_files(tmp_path, "/files/")

    def resolve(request):
        if request.path == "/stream":
            return Representation("/stream", len(SMALL), lambda: (SMALL,), validator='"s"')
        return files(request)
    install(app, resolve, publisher)
    return app, written


@contextlib.asynccontextmanager
async def held_server(tmp_path, publisher: Publisher, headers: dict[str, str] | None = None):
    """`held_app` served on a free port: its URL and what `/stream` wrote."""
    app, written = held_app(tmp_path, publisher, headers)
    server = Server(app)
    await server.start()
    try:
        yield server.url, written
    finally:
        await server.runner.cleanup()


async def head_then_leave(url: str, path: str, fields: str) -> bytes:
    """Send a GET, read its head, close the connection; the head."""
    parsed = URL(url)
    reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n{fields}\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    await writer.wait_closed()
    return head


@pytest.mark.parametrize("path", ["/files/small.bin", "/stream"])
async def test_a_held_body_is_never_sent_to_a_client_that_left(tmp_path, path):
    publisher = Publisher(busy_at=1, hold=30.0)  # held that long, the test would time out
    async with held_server(tmp_path, publisher) as (url, written):
        head = await head_then_leave(url, path, "Swarm-Accept: hint\r\n")
        assert b"Swarm-Hint: swarm" in head and b"Swarm-Manifest: " in head
        await until(lambda: publisher.in_flight == 0)
        assert (publisher.held, publisher.left_in_hold, written) == (1, 1, [])


@pytest.mark.parametrize("path", ["/files/small.bin", "/stream"])
async def test_a_client_that_stays_gets_its_body_after_the_hold(tmp_path, path):
    publisher = Publisher(busy_at=1, hold=0.05)
    async with held_server(tmp_path, publisher) as (url, _):
        async with aiohttp.ClientSession() as session, \
                session.get(url + path, headers={"Swarm-Accept": "other, HINT"}) as response:
            assert response.headers[HINT_HEADER] == "swarm" and await response.read() == SMALL
        await until(lambda: publisher.in_flight == 0)
        assert (publisher.held, publisher.left_in_hold) == (1, 0)


@pytest.mark.parametrize("busy_at,method,accept,headers", [
    (1, "GET", None, {}),  # the client did not say it leaves
    (1, "GET", "other", {}),
    (2, "GET", "hint", {}),  # not busy: no hint, nothing to leave at
    (1, "HEAD", "hint", {}),  # no body
    (1, "GET", "hint", {"Set-Cookie": "a=b"}),  # the proxy relays these as they come, reading every byte
    (1, "GET", "hint", {"Cache-Control": "private, max-age=60"}),
    (1, "GET", "hint", {"Cache-Control": "no-store"}),
    (1, "GET", "hint", {"Vary": "Cookie"}),
    (1, "GET", "hint", {"Accept-Ranges": "none"}),  # it could not come back for the rest (a FileResponse sets it)
], ids=["no-field", "other-token", "not-busy", "head", "set-cookie", "private", "no-store", "vary", "no-ranges"])
async def test_what_is_not_held(tmp_path, busy_at, method, accept, headers):
    publisher = Publisher(busy_at=busy_at, hold=30.0)
    async with held_server(tmp_path, publisher, headers) as (url, _):
        async with aiohttp.ClientSession() as session:
            for path in ("/stream",) if "Accept-Ranges" in headers else ("/files/small.bin", "/stream"):
                async with session.request(method, url + path,
                                           headers={"Swarm-Accept": accept} if accept else {}) as response:
                    await response.read()
                    assert response.status == 200
        assert publisher.held == 0


async def test_a_body_without_a_length_is_not_held(tmp_path):
    # Chunked: the proxy relays it as it comes (publish_gate's no-length), reading every byte; held, it would wait.
    publisher = Publisher(busy_at=1, hold=30.0)
    async with held_server(tmp_path, publisher) as (url, _):
        async with aiohttp.ClientSession() as session, \
                session.get(url + "/stream?chunked", headers={"Swarm-Accept": "hint"}) as response:
            assert response.headers[HINT_HEADER] == "swarm" and await response.read() == SMALL
        assert publisher.held == 0


@pytest.mark.parametrize("value,accepted", [
    (None, False), ("", False), ("hint", True), ("HINT", True), (" other , hint ", True), ("hints", False),
    ("other", False), ("x," * 16 + "hint", False),  # only the first 16 tokens are read
])
def test_the_accept_field(value, accepted):
    assert accepts_hint(value) is accepted


# -- the peer list: a hinted head lists the clients hinted before (`Swarm-Peers`) --------------------------------------

async def test_a_hinted_head_lists_the_clients_hinted_before(tmp_path):
    (tmp_path / "f.bin").write_bytes(SMALL)
    app = web.Application()
    app.router.add_static("/", tmp_path)
    publisher = install(app, static_files(tmp_path), Publisher(busy_at=1, hold=0))  # every GET busy: itself
    server = Server(app)
    await server.start()

    async def get(source: str, accept: str | None, method: str = "GET") -> str | None:
        # each client from an address of its own, as the origin tells them apart
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source, 0))) as session, \
                session.request(method, server.url + "/f.bin",
                                headers={} if accept is None else {ACCEPT_HEADER: accept}) as response:
            await response.read()
            assert method == "HEAD" or response.headers[HINT_HEADER] == "swarm"
            return response.headers.get(PEERS_HEADER)
    try:
        assert await get("127.0.0.2", "hint, peer=7002") is None  # the first: nobody before it
        assert await get("127.0.0.3", "hint, peer=7003") == "127.0.0.2:7002"
        assert await get("127.0.0.4", "hint") in ("127.0.0.2:7002, 127.0.0.3:7003", "127.0.0.3:7003, 127.0.0.2:7002")
        assert await get("127.0.0.2", "hint, peer=7012") == "127.0.0.3:7003"  # never its own entry
        # Only a GET that leaves at the hint is told (it fetches from them), and only one naming a port is listed.
        assert await get("127.0.0.5", None) is None
        assert await get("127.0.0.5", "hint", method="HEAD") is None
        assert len(publisher.peers) == 2  # 127.0.0.2 (its newest port) and 127.0.0.3
        publisher.list_peers = False  # behind a reverse proxy that does not hand the client's address on
        assert await get("127.0.0.6", "hint, peer=7006") is None
        assert len(publisher.peers) == 2  # nor kept
    finally:
        await server.runner.cleanup()
