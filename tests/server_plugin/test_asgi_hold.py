"""server_plugin's ASGI middleware holding a hinted body for a client that said it leaves at the hint, at the ASGI
level: what is held and what is not, a client that leaves or stays, and the application still receiving what the
hold saw (the end-to-end case, with uvicorn, is in test_asgi_plugin.py)."""

from __future__ import annotations

import asyncio

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from server_plugin.asgi_plugin import SwarmMiddleware, static_files
from server_plugin.publisher import Publisher
from swarm.content.manifest import HINT_HEADER
from swarm.content.peer_field import PEERS_HEADER

from .test_asgi_plugin import ETAG, SMALL, answering, fields, http_scope, resolving, until, www  # noqa: F401

# -- the hold: a hinted body waits for a client that said it leaves at the hint ----------------------------------------

# What a static file's 200 says, as far as a hold cares.
HOLDABLE = [("ETag", ETAG), ("Accept-Ranges", "bytes"), ("Content-Length", str(len(SMALL)))]
TWO_CHUNKS = (SMALL[:10], SMALL[10:])


def accepting(method: str = "GET", accept: str | None = "hint", path: str = "/f", body: bool = False) -> dict:
    scope = http_scope(method, path)
    scope["headers"] = [] if accept is None else [(b"swarm-accept", accept.encode())]
    if body:
        scope["headers"].append((b"content-length", b"5"))
    return scope


class Connection:
    """The server's side of one request: `receive` gives the request, then waits for the client to leave (then,
    as servers do, `http.disconnect` for good). `events`: each message sent, call to `receive`, the leaving."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.sent: list[dict] = []
        self.waiting = self.most_waiting = 0  # calls to `receive` waiting now, and at most at any one time
        self._gone = asyncio.Event()

    async def receive(self) -> dict:
        self.events.append("receive")
        if self.events.count("receive") == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            await self._gone.wait()
        finally:
            self.waiting -= 1
        return {"type": "http.disconnect"}

    async def send(self, message) -> None:
        self.events.append(message["type"])
        self.sent.append(message)

    async def leaving_in_hold(self, app: SwarmMiddleware, scope: dict) -> None:
        """Runs `app` on `scope`; the client leaves once the hold is under way and someone waits on `receive`."""
        task = asyncio.ensure_future(app(scope, self.receive, self.send))
        await until(lambda: app.publisher.held == 1 and self.waiting >= 1)
        self.events.append("left")
        self._gone.set()
        await task  # the application's later sends returned as usual


async def exchange(*, method: str = "GET", accept: str | None = "hint", busy_at: int = 1, hold: float = 0.05,
                   headers=HOLDABLE, body: bool = False) -> tuple[Publisher, Connection]:
    """One request through the middleware by a client that stays: the publisher, what happened."""
    publisher, connection = Publisher(busy_at=busy_at, hold=hold), Connection()
    app = SwarmMiddleware(answering(200, headers, TWO_CHUNKS), resolving(), publisher)
    await app(accepting(method, accept, body=body), connection.receive, connection.send)
    return publisher, connection


async def test_a_held_body_is_never_sent_to_a_client_that_left():
    publisher, connection = Publisher(busy_at=1, hold=60), Connection()  # long: the leaving ends it, not a clock
    app = SwarmMiddleware(answering(200, HOLDABLE, TWO_CHUNKS), resolving(), publisher)
    await connection.leaving_in_hold(app, accepting())
    # The head at once; its request kept for the application, one receive waiting for the client; no body message.
    assert connection.events == ["http.response.start", "receive", "receive", "left"]
    assert fields(connection.sent[0])[HINT_HEADER.lower()] == ["swarm"]
    assert (publisher.held, publisher.left_in_hold, publisher.in_flight, connection.waiting) == (1, 1, 0, 0)


async def test_a_client_that_stays_gets_its_body_after_the_hold():
    publisher, connection = await exchange(hold=0.05)
    # The same, then the hold's end, then the body as sent.
    assert connection.events == ["http.response.start", "receive", "receive", *["http.response.body"] * 2]
    assert fields(connection.sent[0])[HINT_HEADER.lower()] == ["swarm"]
    assert b"".join(m["body"] for m in connection.sent[1:]) == SMALL
    assert (publisher.held, publisher.left_in_hold, publisher.in_flight) == (1, 0, 0)
    assert connection.waiting == 0  # the receive still waiting when the application returned was cancelled


NOT_HELD = [
    # one change from a response that is held -> its body goes out at once
    ("no Swarm-Accept", {"accept": None}),
    ("Swarm-Accept without hint", {"accept": "range, other"}),
    ("not busy", {"busy_at": 2}),
    ("HEAD", {"method": "HEAD"}),
    ("hold 0", {"hold": 0}),
    ("Set-Cookie", {"headers": [*HOLDABLE, ("Set-Cookie", "a=b")]}),
    ("Cache-Control: private", {"headers": [*HOLDABLE, ("Cache-Control", "max-age=60, private")]}),
    ("Cache-Control: no-store", {"headers": [*HOLDABLE, ("Cache-Control", "no-store")]}),
    ("no Accept-Ranges", {"headers": [("ETag", ETAG), ("Content-Length", str(len(SMALL)))]}),
    ("Accept-Ranges: none", {"headers": [("ETag", ETAG), ("Accept-Ranges", "none"), ("Content-Length", "100000")]}),
    ("no Content-Length", {"headers": [("ETag", ETAG), ("Accept-Ranges", "bytes")]}),  # chunked: relayed as it comes
    ("Vary: Cookie", {"headers": [*HOLDABLE, ("Vary", "Accept-Encoding, Cookie")]}),
    ("no manifest", {"headers": [("ETag", '"other"'), ("Accept-Ranges", "bytes"), ("Content-Length", "100000")]}),
    ("a request body", {"body": True}),  # the hold would read it, unbounded, before the application does
]


@pytest.mark.parametrize("change", [change for _, change in NOT_HELD], ids=[name for name, _ in NOT_HELD])
async def test_what_is_not_held(change):
    held, _ = await exchange()
    assert held.held == 1  # the response changed is one that is held
    publisher, connection = await exchange(**change)
    assert connection.events == ["http.response.start", "http.response.body", "http.response.body"]
    assert (publisher.held, publisher.left_in_hold, publisher.in_flight) == (0, 0, 0)


async def watch(receive, got):
    while got[-1:] != ["http.disconnect"]:
        got.append((await receive())["type"])


async def reads_first(receive, send, got):
    got.append((await receive())["type"])
    await answering(200, HOLDABLE, TWO_CHUNKS)({}, receive, send)
    await watch(receive, got)


async def watches_while_sending(receive, send, got):  # as Starlette's responses do under ASGI 2.3
    watcher = asyncio.ensure_future(watch(receive, got))
    await until(lambda: got)  # the watcher has its request and waits on `receive` before the hold does
    await answering(200, HOLDABLE, TWO_CHUNKS)({}, receive, send)
    await watcher


async def reads_after_sending(receive, send, got):
    await answering(200, HOLDABLE, TWO_CHUNKS)({}, receive, send)
    await watch(receive, got)


async def stops_before_its_body(receive, send, got):  # Starlette, cancelled while it reads its first chunk
    await answering(200, HOLDABLE, ())({}, receive, send)  # its head only
    await watch(receive, got)


@pytest.mark.parametrize("reader", [reads_first, watches_while_sending, reads_after_sending, stops_before_its_body])
async def test_the_application_still_receives_what_the_hold_saw(reader):
    publisher, connection, got = Publisher(busy_at=1, hold=60), Connection(), []

    async def app(scope, receive, send):
        await reader(receive, send, got)
    await connection.leaving_in_hold(SwarmMiddleware(app, resolving(), publisher), accepting())
    assert got == ["http.request", "http.disconnect"]  # its request, then the disconnect: nothing taken from it
    assert "http.response.body" not in connection.events
    # One call to the server's `receive` a message, never two at once: the hold and the application shared it.
    assert connection.events.count("receive") == 2 and connection.most_waiting == 1
    assert (publisher.held, publisher.left_in_hold, publisher.in_flight, connection.waiting) == (1, 1, 0, 0)


async def test_starlette_stops_at_the_disconnect_the_hold_saw(www):  # noqa: F811 - the fixture
    publisher, connection = Publisher(busy_at=1, hold=60), Connection()
    app = SwarmMiddleware(Starlette(routes=[Mount("/files", StaticFiles(directory=www))]),
                          static_files(www, "/files/"), publisher)
    scope = accepting(path="/files/small.bin")
    scope["asgi"]["spec_version"] = "2.3"  # uvicorn's: Starlette's FileResponse watches `receive` as it sends
    await connection.leaving_in_hold(app, scope)
    assert connection.events[0] == "http.response.start" and "http.response.body" not in connection.events
    assert (publisher.held, publisher.left_in_hold, publisher.in_flight, connection.waiting) == (1, 1, 0, 0)


async def test_a_hinted_head_lists_the_clients_hinted_before():
    publisher = Publisher(busy_at=1, hold=0)
    app = SwarmMiddleware(answering(200, HOLDABLE, TWO_CHUNKS), resolving(), publisher)

    async def get(client: tuple[str, int] | None, accept: str | None, *, body: bool = False) -> str | None:
        scope = accepting("GET", accept, body=body)
        if client is not None:
            scope["client"] = client
        connection = Connection()
        await app(scope, connection.receive, connection.send)
        listed = fields(connection.sent[0]).get(PEERS_HEADER.lower())
        return None if listed is None else ", ".join(listed)
    assert await get(("11.0.0.2", 50000), "hint, peer=7002") is None
    assert await get(("11.0.0.3", 50001), "hint, peer=7003") == "11.0.0.2:7002"
    assert await get(None, "hint, peer=7004") in ("11.0.0.2:7002, 11.0.0.3:7003",
                                                  "11.0.0.3:7003, 11.0.0.2:7002")  # unknown: not listed
    assert await get(("11.0.0.4", 50002), "hint, peer=7005", body=True) is None  # a request with a body
    assert len(publisher.peers) == 2
