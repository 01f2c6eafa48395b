"""server_plugin as ASGI middleware: driven at the ASGI level by tiny applications (which responses get the fields,
the busy hint, the layer endpoint, bodies streamed untouched, other scopes passed through, a hinted body held for a
client that leaves), then end to end: uvicorn serving Starlette's StaticFiles through the middleware, a client
leaving at a held head, and a swarmproxy node trusting the origin's manifest."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket

import pytest
import pytest_asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.responses import FileResponse
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from proxy.demo.local_swarm import Cluster
from server_plugin.asgi_plugin import SwarmMiddleware, route_path, static_files
from server_plugin.fields import starlette_etag
from server_plugin.publisher import LAYER_PREFIX, Publisher, Representation
from swarm.content.manifest import HEADER, HINT_HEADER, build_manifest, parse_header

SMALL = os.urandom(100_000)  # 7 blocks: the layer inline
LARGE_BLOCKS = 81  # of 16 KiB: more than INLINE_HASHES, so the layer is served by the endpoint
LARGE = (hashlib.sha256(b"asgi origin").digest() * (LARGE_BLOCKS * 512))[:(LARGE_BLOCKS - 1) * 16384 + 777]
ETAG = '"v1"'


# -- an ASGI harness -------------------------------------------------------------------------------------------------

def http_scope(method: str = "GET", path: str = "/f", root_path: str = "") -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": root_path + path, "raw_path": (root_path + path).encode(),
            "root_path": root_path, "query_string": b"", "headers": [], "server": ("127.0.0.1", 80)}


async def call(app, scope: dict) -> list[dict]:
    """Run `app` on `scope` as a server would; the messages it sent, in order."""
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)
    await app(scope, receive, send)
    return sent


def fields(start: dict) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in start["headers"]:
        found.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return found


def answering(status: int, headers: list[tuple[str, str]], chunks=(SMALL,)):
    """An application that answers every request with `status`, `headers` and the body in `chunks`."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.lower().encode(), v.encode()) for k, v in headers]})
        for i, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})
    return app


def resolving(validator: str | None = ETAG, data: bytes = SMALL):
    def resolve(scope):
        return Representation(scope["path"], len(data), lambda: (data,), validator=validator)
    return resolve


CASES = [
    # (method, status, response headers, resolver's validator) -> fields added?
    ("GET", 200, [("ETag", ETAG)], ETAG, True),
    ("HEAD", 200, [("ETag", ETAG)], ETAG, True),
    ("GET", 200, [("ETag", ETAG), ("Content-Length", str(len(SMALL)))], ETAG, True),
    ("GET", 206, [("ETag", ETAG), ("Content-Range", f"bytes 0-9/{len(SMALL)}")], ETAG, True),
    ("GET", 206, [("ETag", ETAG)], ETAG, True),  # multipart: no Content-Range at the top, the ETag decides
    ("GET", 200, [("ETag", '"anything"')], None, True),  # no validator named: any strong ETag
    ("POST", 200, [("ETag", ETAG)], ETAG, False),
    ("PUT", 200, [("ETag", ETAG)], ETAG, False),
    ("GET", 304, [("ETag", ETAG)], ETAG, False),
    ("GET", 404, [("ETag", ETAG)], ETAG, False),
    ("GET", 200, [("ETag", ETAG), ("Content-Encoding", "gzip")], ETAG, False),
    ("GET", 200, [("ETag", "W/" + ETAG)], ETAG, False),
    ("GET", 200, [("ETag", "W/" + ETAG)], None, False),
    ("GET", 200, [("ETag", '"other"')], ETAG, False),
    ("GET", 200, [], ETAG, False),
    ("GET", 200, [], None, False),
    ("GET", 200, [("ETag", ETAG), ("ETag", ETAG)], ETAG, False),  # repeated: which one is meant?
    ("GET", 200, [("ETag", ETAG), ("Content-Length", "5")], ETAG, False),
    ("GET", 200, [("ETag", ETAG), ("Content-Length", "x")], ETAG, False),
    ("GET", 206, [("ETag", ETAG), ("Content-Range", "bytes 0-9/10")], ETAG, False),
    ("GET", 206, [("ETag", ETAG), ("Content-Range", "bytes 0-9/*")], ETAG, False),
]


@pytest.mark.parametrize("method, status, headers, validator, carried", CASES)
async def test_which_responses_carry_the_manifest(method, status, headers, validator, carried):
    publisher = Publisher(busy_at=5)
    sent = await call(SwarmMiddleware(answering(status, headers), resolving(validator), publisher),
                      http_scope(method))
    got = fields(sent[0])
    assert (HEADER.lower() in got) == carried
    if carried:
        assert len(got[HEADER.lower()]) == 1
        assert parse_header(got[HEADER.lower()][0]).root == build_manifest([SMALL], len(SMALL))[0].root
    assert HINT_HEADER.lower() not in got  # not busy
    assert b"".join(m.get("body", b"") for m in sent[1:]) == SMALL  # the application's body, whatever happened
    assert publisher.in_flight == 0


async def test_the_applications_own_fields_are_replaced_and_its_message_left_alone():
    headers = [(b"etag", ETAG.encode()), (b"Swarm-Manifest", b"root=forged"), (b"x-kept", b"1")]
    start = {"type": "http.response.start", "status": 200, "headers": headers}

    async def app(scope, receive, send):
        await send(start)
        await send({"type": "http.response.body", "body": SMALL})
    sent = await call(SwarmMiddleware(app, resolving()), http_scope())
    got = fields(sent[0])
    assert len(got["swarm-manifest"]) == 1 and got["swarm-manifest"][0] != "root=forged"
    assert got["x-kept"] == ["1"] and got["etag"] == [ETAG]
    assert start["headers"] is headers and len(headers) == 3  # a new message, the app's own unchanged


async def test_a_streamed_body_goes_out_as_sent_when_sent():
    release = asyncio.Event()
    chunks = [{"type": "http.response.body", "body": SMALL[:10], "more_body": True},
              {"type": "http.response.body", "body": SMALL[10:], "more_body": False}]

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"etag", ETAG.encode())]})
        await send(chunks[0])
        await release.wait()  # the rest comes later: the first part must already be out
        await send(chunks[1])
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.disconnect"}
    task = asyncio.ensure_future(SwarmMiddleware(app, resolving())(http_scope(), receive, send))
    while len(sent) < 2:
        await asyncio.sleep(0)
    assert HEADER.lower() in fields(sent[0]) and sent[1] is chunks[0]
    release.set()
    await task
    assert sent[1:] == chunks and all(a is b for a, b in zip(sent[1:], chunks))  # the same objects, untouched


async def test_while_busy_responses_ask_clients_to_swarm_and_gets_are_counted_until_done():
    publisher = Publisher(busy_at=2)
    gate, entered = asyncio.Event(), asyncio.Event()

    async def app(scope, receive, send):
        if scope["path"] == "/held":
            entered.set()
            await gate.wait()
        await answering(200, [("ETag", ETAG)])(scope, receive, send)
    middleware = SwarmMiddleware(app, resolving(), publisher)
    alone = await call(middleware, http_scope("GET", "/f"))
    assert HINT_HEADER.lower() not in fields(alone[0])  # itself only: 1 in flight, busy from 2
    held = asyncio.ensure_future(call(middleware, http_scope("GET", "/held")))
    await entered.wait()
    assert publisher.in_flight == 1
    head = await call(middleware, http_scope("HEAD", "/f"))
    assert publisher.in_flight == 1  # a HEAD sends no body: it does not count itself (1 in flight, busy from 2)
    assert HINT_HEADER.lower() not in fields(head[0]) and HEADER.lower() in fields(head[0])
    busy = await call(middleware, http_scope("GET", "/f"))
    assert fields(busy[0])[HINT_HEADER.lower()] == ["swarm"] and HEADER.lower() in fields(busy[0])
    gate.set()
    await held
    assert publisher.in_flight == 0


async def test_a_get_that_fails_or_is_cancelled_is_counted_out():
    publisher = Publisher(busy_at=2)
    started = asyncio.Event()

    async def failing(scope, receive, send):
        raise RuntimeError("handler broke")

    async def hanging(scope, receive, send):
        started.set()
        await asyncio.Future()
    with pytest.raises(RuntimeError):
        await call(SwarmMiddleware(failing, resolving(), publisher), http_scope())
    assert publisher.in_flight == 0
    task = asyncio.ensure_future(call(SwarmMiddleware(hanging, resolving(), publisher), http_scope()))
    await started.wait()
    assert publisher.in_flight == 1
    task.cancel()  # the client left: the server cancels the application
    with pytest.raises(asyncio.CancelledError):
        await task
    assert publisher.in_flight == 0


LAYER_CASES = [
    # (method, which root) -> status, body sent, layer bytes counted
    ("GET", "known", 200, True, True),
    ("HEAD", "known", 200, False, False),
    ("GET", "unknown", 404, True, False),
    ("GET", "not-hex", 404, True, False),
]


@pytest.mark.parametrize("method, which, status, has_body, counted", LAYER_CASES)
async def test_the_layer_endpoint(method, which, status, has_body, counted):
    publisher = Publisher()
    app = SwarmMiddleware(answering(200, [("ETag", ETAG)], (LARGE,)), resolving(data=LARGE), publisher)
    head = await call(app, http_scope("HEAD", "/large.bin"))  # publishes the manifest
    claim = parse_header(fields(head[0])[HEADER.lower()][0])
    assert claim.layer_path == LAYER_PREFIX + claim.root.hex()
    path = {"known": claim.layer_path, "unknown": LAYER_PREFIX + "00" * 32, "not-hex": LAYER_PREFIX + "zz"}[which]
    sent = await call(app, http_scope(method, path))
    assert sent[0]["status"] == status
    body = b"".join(m.get("body", b"") for m in sent[1:])
    layer = b"".join(build_manifest([LARGE], len(LARGE))[1])
    if status == 200:
        assert fields(sent[0])["content-length"] == [str(len(layer))]
        assert body == (layer if has_body else b"")
        assert fields(sent[0])["content-type"] == ["application/octet-stream"]
    else:
        assert body
    assert publisher.layer_bytes == (len(layer) if counted else 0)


async def test_a_post_to_the_layer_path_is_the_applications():
    sent = await call(SwarmMiddleware(answering(405, []), resolving()), http_scope("POST", LAYER_PREFIX + "00"))
    assert sent[0]["status"] == 405


@pytest.mark.parametrize("scope_type", ["lifespan", "websocket"])
async def test_other_scopes_pass_through_untouched(scope_type):
    seen = []

    async def app(scope, receive, send):
        seen.append((scope, receive, send))

    def resolve(scope):
        raise AssertionError("resolved")
    scope = {"type": scope_type, "path": "/f"}

    async def receive():
        raise AssertionError

    async def send(message):
        raise AssertionError
    await SwarmMiddleware(app, resolve)(scope, receive, send)
    assert seen == [(scope, receive, send)]


async def test_an_unreadable_representation_is_served_without_a_manifest():
    def resolve(scope):
        def read():
            raise OSError("disk gone")
            yield b""  # a generator, as a file reader is
        return Representation("/x", 5, read, validator=ETAG)
    publisher = Publisher(busy_at=1)
    sent = await call(SwarmMiddleware(answering(200, [("ETag", ETAG)], (b"hello",)), resolve, publisher),
                      http_scope())
    assert HEADER.lower() not in fields(sent[0]) and sent[1]["body"] == b"hello"
    assert publisher.in_flight == 0


@pytest.mark.parametrize("path, root_path, expected", [
    # scope["path"] with or without the root_path in front (servers differ) -> the path below the mount
    ("/f", "", "/f"), ("/app/f", "/app", "/f"), ("/app", "/app", "/"), ("/f", "/app", "/f"),
    ("/apple", "/app", "/apple"),
])
def test_the_route_path_drops_the_root_path(path, root_path, expected):
    assert route_path({"type": "http", "path": path, "root_path": root_path}) == expected


# -- Starlette's StaticFiles, still at the ASGI level ------------------------------------------------------------

@pytest.fixture
def www(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "small.bin").write_bytes(SMALL)
    (root / "sub").mkdir()
    (tmp_path / "secret").write_bytes(b"outside")
    (root / "link").symlink_to(tmp_path / "secret")
    return root


def static_app(root, **resolver) -> SwarmMiddleware:
    app = Starlette(routes=[Mount("/files", StaticFiles(directory=root))])
    return SwarmMiddleware(app, static_files(root, "/files/", **resolver), Publisher(busy_at=100))


def test_the_etag_is_starlettes(www):
    st = os.stat(www / "small.bin")
    assert starlette_etag(st) == FileResponse(www / "small.bin", stat_result=st).headers["etag"]


async def test_a_static_file_carries_its_manifest_and_a_304_nothing(www):
    app = static_app(www)
    sent = await call(app, http_scope("GET", "/files/small.bin"))
    got = fields(sent[0])
    assert sent[0]["status"] == 200 and b"".join(m.get("body", b"") for m in sent[1:]) == SMALL
    assert parse_header(got[HEADER.lower()][0]).root == build_manifest([SMALL], len(SMALL))[0].root
    scope = http_scope("GET", "/files/small.bin")
    scope["headers"] = [(b"if-none-match", got["etag"][0].encode())]
    sent = await call(app, scope)
    assert sent[0]["status"] == 304 and HEADER.lower() not in fields(sent[0])
    scope = http_scope("GET", "/files/small.bin")  # a new one: Starlette's routing rewrote the last one's paths
    scope["headers"] = [(b"range", b"bytes=10-19")]
    sent = await call(app, scope)
    assert sent[0]["status"] == 206 and HEADER.lower() in fields(sent[0])


async def test_a_changed_file_is_hashed_again_and_an_unknown_etag_gets_nothing(www):
    app = static_app(www)
    changed = SMALL[::-1]
    (www / "small.bin").write_bytes(changed)
    os.utime(www / "small.bin", ns=(1, 1))
    sent = await call(app, http_scope("GET", "/files/small.bin"))
    assert parse_header(fields(sent[0])[HEADER.lower()][0]).root == build_manifest([changed], len(changed))[0].root
    other = static_app(www, etag=lambda st: '"not what starlette sends"')
    sent = await call(other, http_scope("GET", "/files/small.bin"))
    assert sent[0]["status"] == 200 and HEADER.lower() not in fields(sent[0])
    anyone = static_app(www, etag=None)
    sent = await call(anyone, http_scope("GET", "/files/small.bin"))
    assert HEADER.lower() in fields(sent[0])


@pytest.mark.parametrize("path", ["/files/missing.bin", "/files/../secret", "/files/link", "/files/sub",
                                  "/files/sub/../../secret", "/filessmall.bin", "/files/a\x00b"])
async def test_nothing_outside_the_directory_or_not_a_file_is_resolved(www, path):
    assert static_files(www, "/files/")(http_scope("GET", path)) is None
    assert static_files(www, "/files")(http_scope("GET", path)) is None


def test_a_mounted_app_resolves_below_its_root_path(www):
    rep = static_files(www, "/files/")(http_scope("GET", "/files/small.bin", root_path="/site"))
    assert rep is not None and rep.size == len(SMALL) and rep.validator == starlette_etag(os.stat(www / "small.bin"))


async def until(condition, seconds: float = 10.0) -> None:
    """Lets the event loop (the application's, uvicorn's) go round until `condition` holds, `seconds` at most."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("never got there")
        await asyncio.sleep(0)



# -- end to end: uvicorn + Starlette's StaticFiles + the middleware, and a swarmproxy node ----------------------------

class Recorded:
    """Outside the middleware, where the server sees the answers: records each as (method, path, Range, status,
    whether it carried the manifest), to tell blocks taken by Range from the plain stream."""

    def __init__(self, app) -> None:
        self.app = app
        self.answers: list[tuple[str, str, str | None, int, bool]] = []
        self.messages: list[tuple[str, str, int]] = []  # (path, type, body bytes) of every message sent

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        asked = scope["method"], scope["path"], dict(scope["headers"]).get(b"range")

        async def recording_send(message):
            self.messages.append((asked[1], message["type"], len(message.get("body", b""))))
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message["headers"]}
                self.answers.append((*asked, message["status"], HEADER.lower().encode() in names))
            await send(message)
        await self.app(scope, receive, recording_send)


@pytest_asyncio.fixture
async def uvicorn_origin(tmp_path):
    """uvicorn on 127.0.0.1, a port the kernel chose, serving tmp_path/www under /files/ through the middleware
    (busy from the first GET, which counts itself: every GET is hinted)."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "big.bin").write_bytes(LARGE)
    publisher = Publisher(busy_at=1)
    app = SwarmMiddleware(Starlette(routes=[Mount("/files", StaticFiles(directory=root))]),
                          static_files(root, "/files/"), publisher)
    app = Recorded(app)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # listening before uvicorn runs: the kernel queues clients until it accepts, no wait needed
    server = uvicorn.Server(uvicorn.Config(app, http="h11", lifespan="off", log_level="warning", access_log=False))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", publisher, root, app
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path / "nodes", discover_size="0")
    yield group
    await group.close()


async def test_a_node_trusts_the_manifest_of_an_asgi_origin_and_swarms(cluster, uvicorn_origin):
    base, publisher, root, recorded = uvicorn_origin
    node = await cluster.add()
    status, headers, body = await cluster.get(node, base + "/files/big.bin")
    assert status == 200 and body == LARGE
    assert headers["ETag"] == starlette_etag(os.stat(root / "big.bin"))
    record = cluster.last_record(node)
    assert record["manifest_source"] == "origin" and record["transition"] == "hint"
    assert record["bytes_origin"] == len(LARGE) and record["error"] is None  # nobody else had it
    assert publisher.layer_bytes == LARGE_BLOCKS * 32  # the layer came from the endpoint
    # It swarmed: after the hinted 200 it took the layer, then blocks by Range, each a 206 carrying the manifest.
    assert ("GET", "/files/big.bin", None, 200, True) in recorded.answers
    ranges = [answer for answer in recorded.answers if answer[2] is not None]
    assert ranges and all(answer[3] == 206 and answer[4] for answer in ranges)


async def test_uvicorn_sends_no_held_body_to_a_client_that_left_at_the_head(uvicorn_origin):
    base, publisher, _, recorded = uvicorn_origin
    publisher.hold = 30  # far beyond the waits below: only the client leaving ends this hold
    reader, writer = await asyncio.open_connection("127.0.0.1", int(base.rsplit(":", 1)[1]))
    try:
        writer.write(b"GET /files/big.bin HTTP/1.1\r\nHost: origin\r\nSwarm-Accept: hint\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)  # at once, not after the hold
    finally:
        writer.close()
        await writer.wait_closed()
    assert head.startswith(b"HTTP/1.1 200") and b"\r\nswarm-hint: swarm\r\n" in head.lower()
    # Starlette's FileResponse ends at the disconnect it sees too, in the hold or before its first chunk: counted.
    await until(lambda: publisher.left_in_hold == 1 and publisher.in_flight == 0)
    assert publisher.held == 1
    assert recorded.messages == [("/files/big.bin", "http.response.start", 0)]  # not one body message
