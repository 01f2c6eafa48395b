"""The plugin for aiohttp servers: `install(app, resolver)` and every response the resolver knows carries the
`Swarm-Manifest` field (and `Swarm-Hint: swarm` while busy); the layer endpoint serves the longer hash layers.

    from server_plugin.aiohttp_plugin import install, static_files
    install(app, static_files("/srv/www"))          # paths under /srv/www, as web.static serves them

The fields are added in `on_response_prepare`, so they reach handlers that stream (`StreamResponse.prepare`)
as well as `FileResponse` and plain responses. They are added only to a 200 or 206 of a GET or HEAD whose
response has no `Content-Encoding` (the root covers the identity bytes) and whose strong ETag is the one the
manifest was computed for: a manifest never describes bytes other than those the response carries (the rules
are `fields.may_carry`, shared with the ASGI plugin).

A hinted response to a GET that says `Swarm-Accept: hint` (`Publisher.hold_for`, `fields.may_hold`) has its head
sent at once and its body held until the client leaves or the hold ends (`_hold_body`).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import weakref
from collections.abc import Callable

from aiohttp import web

from swarm.content.manifest import ACCEPT_HEADER, HINT_HEADER

from .fields import (
    METHODS,
    aiohttp_etag,
    file_representation,
    file_under,
    layer_answer,
    may_carry,
    may_hold,
    publish,
)
from .publisher import Publisher, Representation

Resolver = Callable[[web.Request], "Representation | None"]
_REP = web.RequestKey("swarm_representation", tuple)
_PUBLISHER = web.AppKey("swarm_publisher", Publisher)
# Seconds between looks at whether a held client left: aiohttp tells a handler so only by cancelling it, and only
# with `handler_cancellation`, which is off by default.
HOLD_POLL = 0.02


def install(app: web.Application, resolver: Resolver, publisher: Publisher | None = None) -> Publisher:
    """Publish manifests for what `resolver` recognises; returns the `Publisher` (its load, its cache)."""
    publisher = publisher or Publisher()
    app[_PUBLISHER] = publisher
    app.middlewares.append(_middleware(publisher, resolver))
    app.on_response_prepare.append(_add_fields)
    return publisher


def _middleware(publisher: Publisher, resolver: Resolver):
    @web.middleware
    async def swarm_manifests(request: web.Request, handler):
        answer = layer_answer(publisher, request.method, request.path)
        if answer is not None:
            return web.Response(status=answer.status, body=answer.body, headers=answer.headers)
        rep = resolver(request) if request.method in METHODS else None
        published = None if rep is None else await publish(publisher, rep)
        if rep is None or published is None:
            return await handler(request)
        request[_REP] = published, rep.validator
        if request.method == "HEAD":
            return await handler(request)
        publisher.enter()
        response = None
        try:
            response = await handler(request)
            return response
        finally:
            if response is not None and not response.prepared:
                _leave_once_sent(response, publisher)
            else:
                publisher.leave()
    return swarm_manifests


def _leave_once_sent(response: web.StreamResponse, publisher: Publisher) -> None:
    """Count `response` in flight until aiohttp, after the middleware, has prepared it: a `FileResponse` sends
    its whole file there, and the fields (`_add_fields`) are added there too, counting this request."""
    left = False

    def leave() -> None:
        nonlocal left
        if not left:
            left = True
            publisher.leave()
    prepare = response.prepare

    async def prepare_then_leave(request: web.BaseRequest):
        try:
            return await prepare(request)
        finally:
            leave()
    response.prepare = prepare_then_leave  # type: ignore[method-assign]
    weakref.finalize(response, leave)  # never prepared (the client left first): counted out all the same


async def _add_fields(request: web.Request, response: web.StreamResponse) -> None:
    entry = request.get(_REP)
    if entry is None:
        return
    published, validator = entry
    headers = response.headers
    if may_carry(method=request.method, status=response.status, content_encoding=headers.get("Content-Encoding"),
                 etag=headers.get("ETag"), validator=validator, size=published.manifest.size,
                 content_length=response.content_length, content_range=headers.get("Content-Range")):
        publisher = request.app[_PUBLISHER]
        accept = request.headers.get(ACCEPT_HEADER)
        fields = publisher.headers(published, method=request.method, remote=request.remote, accept=accept)
        headers.update(fields)
        hold = publisher.hold_for(request.method, HINT_HEADER in fields, accept)
        if hold and may_hold(accept_ranges=headers.get("Accept-Ranges"), cache_control=headers.get("Cache-Control"),
                             vary=headers.get("Vary"), set_cookie="Set-Cookie" in headers,
                             content_length=response.content_length):
            _hold_body(request, response, hold, publisher)


def _hold_body(request: web.Request, response: web.StreamResponse, seconds: float, publisher: Publisher) -> None:
    """Send `response`'s head now and its body only once `seconds` have passed with its client still there: a
    client that leaves in the meantime is sent nothing more (a write to its closed connection sends nothing and
    ends the handler as any departed client's does).

    aiohttp calls this hook just before `_write_headers`, which buffers the head for the body's first write; the
    hold wraps it (an aiohttp without those internals sends the body at once, as without the hold)."""
    write_headers = getattr(response, "_write_headers", None)
    if write_headers is None:
        return

    async def write_headers_then_hold() -> None:
        await write_headers()
        send_headers = getattr(getattr(response, "_payload_writer", None), "send_headers", None)
        if send_headers is not None:
            send_headers()
        publisher.held += 1
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        try:
            while _connected(request):
                if (left := until - loop.time()) <= 0:
                    return
                await asyncio.sleep(min(HOLD_POLL, left))  # polled: see HOLD_POLL
        except asyncio.CancelledError:  # `handler_cancellation`: the client left, or the server stops
            if not _connected(request):
                publisher.left_in_hold += 1
            raise
        publisher.left_in_hold += 1
    response._write_headers = write_headers_then_hold  # type: ignore[method-assign]


def _connected(request: web.Request) -> bool:
    return request.transport is not None and not request.transport.is_closing()


def static_files(root: str | os.PathLike, prefix: str = "/") -> Resolver:
    """A resolver for files under `root` served at `prefix` (as `web.static(prefix, root)` serves them).

    The validator is aiohttp's file ETag from the same `stat` (mtime and size, the cache key here too): a file
    replaced between this `stat` and the response's own gets an ETag the manifest does not match, and no field.
    Paths that leave `root` resolve to nothing."""
    base = pathlib.Path(root).resolve()

    def resolve(request: web.Request) -> Representation | None:
        found = file_under(base, request.path, prefix)
        return None if found is None else file_representation(*found, aiohttp_etag(found[1]))
    return resolve
