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
message goes to the server as the application sent it, when it sent it (nothing is buffered). A GET counts in
flight (`Publisher.enter`/`leave`) from before the application runs until it returns, which for ASGI is after
its last body byte was handed to the server. Lifespan and websocket scopes, and anything else, pass through.

Nothing here imports a framework: ASGI is dicts and awaitables.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from swarm.content.manifest import HEADER, HINT_HEADER

from .fields import (
    METHODS,
    LayerAnswer,
    file_representation,
    file_under,
    layer_answer,
    may_carry,
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
_OURS = (HEADER.lower().encode("latin-1"), HINT_HEADER.lower().encode("latin-1"))


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
        send = self._adding_fields(send, method, published, rep.validator)
        if method == "HEAD":  # no body goes out: not a load on the server, as in the aiohttp plugin
            await self.app(scope, receive, send)
            return
        self.publisher.enter()
        try:
            await self.app(scope, receive, send)
        finally:  # also when the application fails or the client leaves (the task is cancelled)
            self.publisher.leave()

    def _adding_fields(self, send: Send, method: str, published: Published, validator: str | None) -> Send:
        publisher = self.publisher

        async def send_with_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = _with_fields(message, method, published, validator, publisher)
            await send(message)
        return send_with_fields


def _with_fields(start: Message, method: str, published: Published, validator: str | None,
                 publisher: Publisher) -> Message:
    """`start` with our fields when the response may carry them (a new message: the application's own, and
    the header list it may reuse for the next response, are left as they were); else `start` itself."""
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
        return start
    kept = [(name, value) for name, value in headers if name.lower() not in _OURS]
    added = [(name.lower().encode("latin-1"), value.encode("latin-1"))
             for name, value in publisher.headers(published).items()]
    return {**start, "headers": kept + added}


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
