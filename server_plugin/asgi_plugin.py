"""The plugin as ASGI 3 middleware, for any ASGI server and framework (Starlette, FastAPI, Django's ASGI handler,
Quart, ... under uvicorn, Hypercorn, Daphne, Granian): the same fields and rules as the aiohttp plugin.

    from server_plugin.asgi_plugin import SwarmMiddleware, static_files
    app = Starlette(routes=[Mount("/files", StaticFiles(directory="/srv/www"))])
    app = SwarmMiddleware(app, static_files("/srv/www", "/files/"))

Wrap the application the server runs (the outermost one): the layer endpoint answers at `LAYER_PREFIX` from the
site's root, where the `Swarm-Manifest` field points clients. A `root_path` (an app mounted under a prefix by the
server) is taken off the path before the resolver and the layer endpoint see it, as Starlette's routing does.

Per HTTP request: a GET or HEAD to the layer endpoint is answered here; any other GET or HEAD the resolver names
gets its manifest computed (once per file version, in a worker thread) before the application runs, and the
fields are added to the application's `http.response.start` when `fields.may_carry` allows: a 200/206 without
`Content-Encoding` whose strong ETag is the manifest's. Only that message's headers are replaced; every body
message goes to the server as the application sent it, when it sent it (nothing is buffered), but for a hold. A
GET counts in flight (`Publisher.enter`/`leave`) from before the application runs until it returns, which for
ASGI is after its last body byte was handed to the server. Lifespan and websocket scopes, and anything else, pass
through.

Hold: a hinted response to a GET that says `Swarm-Accept: hint` (`Publisher.hold_for`, `fields.may_hold`) has its
`http.response.start` sent at once, and the hold starts; its first body message waits until the client leaves (an
`http.disconnect` from `receive`) or the hold ends, `Publisher.hold` s after the head. A client that left is sent
no body message: that one and all later ones are dropped, and the application's `send` returns as if they had gone
(a Starlette response that watches `receive` stops at the disconnect; one that does not reads its body through to
the end, sending nothing). A client still there gets its body as the application sends it. Watching for the
disconnect must not take from the application what it reads itself (its request body, the disconnect Starlette
waits for): such a GET's `receive` is shared (`_SharedReceive`), one server `receive()` running at a time for
whoever asked, the request's messages kept for the application, a disconnect given to both, and what is still
pending cancelled when the application returns.

Nothing here imports a framework: ASGI is dicts and awaitables.
"""

from __future__ import annotations

import asyncio
import collections
import os
import pathlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from swarm.content.manifest import ACCEPT_HEADER, HEADER, HINT_HEADER
from swarm.content.peer_field import PEERS_HEADER

from .fields import (
    METHODS,
    LayerAnswer,
    file_representation,
    file_under,
    layer_answer,
    may_carry,
    may_hold,
    publish,
    starlette_etag,
)
from .publisher import Published, Publisher, Representation

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Resolver = Callable[[Scope], "Representation | None"]
ETagOf = Callable[[os.stat_result], str]

# Ours replace any the application set itself, as `headers.update` does in the aiohttp plugin: one field each.
_OURS = tuple(name.lower().encode("latin-1") for name in (HEADER, HINT_HEADER, PEERS_HEADER))
_ACCEPT = ACCEPT_HEADER.lower().encode("latin-1")


class SwarmMiddleware:
    """`SwarmMiddleware(app, resolver, publisher=None)`: publish manifests for what `resolver` (an ASGI scope ->
    `Representation` or None) recognises. `publisher` (its load, its cache) is there as `.publisher`."""

    def __init__(self, app: ASGIApp, resolver: Resolver, publisher: Publisher | None = None) -> None:
        self.app = app
        self.resolver = resolver
        self.publisher = publisher or Publisher()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        answer = layer_answer(self.publisher, method, route_path(scope))
        if answer is not None:
            await _respond(answer, method, send)
            return
        rep = self.resolver(scope) if method in METHODS else None
        published = None if rep is None else await publish(self.publisher, rep)
        if rep is None or published is None:
            await self.app(scope, receive, send)
            return
        if method == "HEAD":  # no body goes out: not a load on the server, as in the aiohttp plugin
            await self.app(scope, receive, _Sending(send, method, published, rep.validator, self.publisher))
            return
        # A request with a body is never held: the hold would read what the application has not, into memory.
        bodiless = _field(scope, b"transfer-encoding") is None and _field(scope, b"content-length") in (None, "0")
        accept = _field(scope, _ACCEPT) if bodiless else None
        # Only a GET that may be held shares its `receive`: any other's goes to the application untouched.
        shared = _SharedReceive(receive) if self.publisher.hold_for(method, True, accept) else None
        client = scope.get("client")  # (host, port) as the server saw it; None when unknown
        sending = _Sending(send, method, published, rep.validator, self.publisher, accept, shared,
                           client[0] if client else None)
        self.publisher.enter()
        try:
            await self.app(scope, receive if shared is None else shared, sending)
        finally:  # also when the application fails or the client leaves (the task is cancelled)
            self.publisher.leave()
            sending.finish()
            if shared is not None:
                await shared.close()


class _Sending:
    """One response's `send`: our fields added to its start message (`_with_fields`), and when that says so, its
    body held. The hold starts once the head went out; the first message after it (whatever its type) waits for
    its end. A client that left before it did is sent no more: the application's later messages are dropped."""

    def __init__(self, send: Send, method: str, published: Published, validator: str | None, publisher: Publisher,
                 accept: str | None = None, shared: _SharedReceive | None = None, remote: str | None = None) -> None:
        self._send, self._method, self._published, self._validator = send, method, published, validator
        self._publisher, self._accept, self._shared, self._remote = publisher, accept, shared, remote
        self._until: float | None = None  # the loop time a hold under way ends at
        self._left = False

    async def __call__(self, message: Message) -> None:
        if self._left:
            return
        if message["type"] == "http.response.start":
            message, hold = _with_fields(message, self._method, self._published, self._validator, self._publisher,
                                         self._accept, self._remote)
            await self._send(message)
            if hold and self._shared is not None:
                self._publisher.held += 1
                self._until = asyncio.get_running_loop().time() + hold
            return
        if self._until is not None and self._shared is not None:
            until, self._until = self._until, None
            try:
                await self._shared.disconnect(until)
            finally:  # also cancelled: Starlette stops sending at the disconnect it saw as well
                self._left = self._shared.left_by(until)
                if self._left:
                    self._publisher.left_in_hold += 1
            if self._left:
                return
        await self._send(message)

    def finish(self) -> None:
        """The application returned. A hold no message came to ends here, counted if the client left during it
        (Starlette, which watches `receive`, stops at the disconnect even before its first body message)."""
        if self._until is not None and self._shared is not None and self._shared.left_by(self._until):
            self._publisher.left_in_hold += 1
        self._until = None


def _with_fields(start: Message, method: str, published: Published, validator: str | None,
                 publisher: Publisher, accept: str | None, remote: str | None = None) -> tuple[Message, float]:
    """`start` with our fields when the response may carry them (a new message: the application's own, and
    the header list it may reuse for the next response, are left as they were); else `start` itself. With it, the
    seconds its body is held (`Publisher.hold_for` for a request whose `Swarm-Accept` is `accept`; 0: none).
    `remote`: the client's address, listed to later clients when it names its peer port (`Publisher.headers`)."""
    headers = [(bytes(name), bytes(value)) for name, value in start.get("headers", ())]
    seen: dict[bytes, list[str]] = {}
    for name, value in headers:
        seen.setdefault(name.lower(), []).append(value.decode("latin-1"))

    def one(name: bytes) -> str | None:
        values = seen.get(name)
        return None if values is None else ", ".join(values)  # repeated: "a, b" matches nothing of ours
    if not may_carry(method=method, status=int(start["status"]), content_encoding=one(b"content-encoding"),
                     etag=one(b"etag"), validator=validator, size=published.manifest.size,
                     content_length=one(b"content-length"), content_range=one(b"content-range")):
        return start, 0.0
    kept = [(name, value) for name, value in headers if name.lower() not in _OURS]
    ours = publisher.headers(published, method=method, remote=remote, accept=accept)
    added = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in ours.items()]
    hold = publisher.hold_for(method, HINT_HEADER in ours, accept)
    if hold and not may_hold(accept_ranges=one(b"accept-ranges"), cache_control=one(b"cache-control"),
                             vary=one(b"vary"), set_cookie=b"set-cookie" in seen,
                             content_length=one(b"content-length")):
        hold = 0.0
    return {**start, "headers": kept + added}, hold


def _field(scope: Scope, name: bytes) -> str | None:
    """The request's field `name` (lowercase), repeated ones joined by commas as a list; None when absent."""
    values = [bytes(value).decode("latin-1") for key, value in scope.get("headers", ()) if bytes(key).lower() == name]
    return ", ".join(values) if values else None


class _SharedReceive:
    """One request's `receive`, shared by the application (which calls this) and a hold (`disconnect`), which
    may both wait at once: the server's `receive()` runs in one task at a time, started by whoever asks first and
    awaited by both. A message it returns goes to the application, kept until it asks if the hold got it first; a
    disconnect goes to both, and is what every later call returns (as servers do). A failed `receive()` ends the
    hold and raises in the application, on each call. `close()` cancels what is still pending."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._pending: asyncio.Future[Message] | None = None
        self._kept: collections.deque[Message] = collections.deque()
        self._disconnect: Message | None = None
        self._left_at = 0.0  # the loop time the disconnect came

    def left_by(self, until: float) -> bool:
        """Had the client left at loop time `until`?"""
        return self._disconnect is not None and self._left_at <= until

    def _next(self) -> asyncio.Future[Message]:
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._receive())
            self._pending.add_done_callback(self._arrived)  # first: before any waiter wakes
        return self._pending

    def _arrived(self, pending: asyncio.Future[Message]) -> None:
        if pending.cancelled() or pending.exception() is not None:
            return  # left pending: the application's next call raises it
        self._pending = None
        message = pending.result()
        if message["type"] == "http.disconnect":
            self._disconnect, self._left_at = message, asyncio.get_running_loop().time()
        else:
            self._kept.append(message)

    async def __call__(self) -> Message:
        while True:
            if self._kept:
                return self._kept.popleft()
            if self._disconnect is not None:
                return {**self._disconnect}
            await asyncio.shield(self._next())  # the application cancelled: the message is kept for its next call

    async def disconnect(self, until: float) -> None:
        """Returns once the client left, or at loop time `until`, or when the server's `receive()` failed."""
        loop = asyncio.get_running_loop()
        while self._disconnect is None and (left := until - loop.time()) > 0:
            pending = self._next()
            await asyncio.wait((pending,), timeout=left)
            if pending.done() and (pending.cancelled() or pending.exception() is not None):
                return

    async def close(self) -> None:
        pending = self._pending
        if pending is not None and not pending.done():
            pending.cancel()
            await asyncio.wait((pending,))


async def _respond(answer: LayerAnswer, method: str, send: Send) -> None:
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers.items()]
    headers.append((b"content-length", str(len(answer.body)).encode("ascii")))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body if method == "GET" else b""})


def route_path(scope: Scope) -> str:
    """The path below the application's mount point: `path` less `root_path` when the server put it in front
    (ASGI servers differ on that; Starlette's routing takes it off the same way)."""
    path, root = scope["path"], scope.get("root_path") or ""
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root):] or "/"
    return path


def static_files(root: str | os.PathLike, prefix: str = "/", etag: ETagOf | None = starlette_etag) -> Resolver:
    """A resolver for the files under `root` served at `prefix` (e.g. `Mount(prefix, StaticFiles(directory=root))`).

    `etag` computes, from the file's `stat`, the ETag the server in front sends, and the manifest is published only
    on responses carrying exactly that one, so a file replaced between this `stat` and the response's own never
    gets the manifest of its old bytes:

    - `fields.starlette_etag` (the default): Starlette's `StaticFiles` and `FileResponse`, hence FastAPI's, and
      any ASGI app serving files through them (Starlette's MD5 of "mtime-size");
    - `fields.aiohttp_etag`: aiohttp's file responses (hex mtime_ns-size), e.g. behind an ASGI bridge;
    - any function of an `os.stat_result` for another server;
    - None: any strong ETag is accepted. Only for a server whose ETag cannot be computed from a `stat` (WhiteNoise
      without autorefresh keeps the one of start-up, and derives it through the local time zone): the manifest
      is then trusted to match whatever the response carries, with a 200's Content-Length as the only check.

    Paths that leave `root` (`..`, symlinks pointing out) resolve to nothing, as do directories."""
    base = pathlib.Path(root).resolve()

    def resolve(scope: Scope) -> Representation | None:
        found = file_under(base, route_path(scope), prefix)
        if found is None:
            return None
        return file_representation(*found, None if etag is None else etag(found[1]))
    return resolve
