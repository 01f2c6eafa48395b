"""The plugin for aiohttp servers: `install(app, resolver)` and every response the resolver knows carries the
`Swarm-Manifest` field (and `Swarm-Hint: swarm` while busy); the layer endpoint serves the longer hash layers.

    from server_plugin.aiohttp_plugin import install, static_files
    install(app, static_files("/srv/www"))          # paths under /srv/www, as web.static serves them

The fields are added in `on_response_prepare`, so they reach handlers that stream (`StreamResponse.prepare`)
as well as `FileResponse` and plain responses. They are added only to a 200 or 206 of a GET or HEAD whose
response has no `Content-Encoding` (the root covers the identity bytes) and whose strong ETag is the one the
manifest was computed for: a manifest never describes bytes other than those the response carries.
"""

from __future__ import annotations

import logging
import os
import pathlib
import weakref
from collections.abc import Callable

from aiohttp import web

from .errors import NotPublishable
from .publisher import LAYER_PREFIX, Publisher, Representation

log = logging.getLogger("swarmproxy.server_plugin")

Resolver = Callable[[web.Request], "Representation | None"]
_REP = web.RequestKey("swarm_representation", tuple)
_PUBLISHER = web.AppKey("swarm_publisher", Publisher)
CHUNK = 1 << 20


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
        if request.method in ("GET", "HEAD") and request.path.startswith(LAYER_PREFIX):
            layer = publisher.layer(request.path[len(LAYER_PREFIX):])
            if layer is None:
                return web.Response(status=404, text="no such hash layer\n")
            publisher.layer_bytes += len(layer)
            return web.Response(body=layer, content_type="application/octet-stream",
                                headers={"Cache-Control": "public, max-age=86400"})
        rep = resolver(request) if request.method in ("GET", "HEAD") else None
        if rep is None:
            return await handler(request)
        try:
            request[_REP] = await publisher.manifest(rep), rep.validator
        except NotPublishable as exc:
            log.warning("no manifest published: %s", exc)
            return await handler(request)
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
    if entry is None or response.status not in (200, 206) or response.headers.get("Content-Encoding"):
        return
    published, validator = entry
    etag = response.headers.get("ETag", "")
    if not etag.startswith('"') or (validator is not None and etag != validator):
        return
    if response.status == 200 and response.content_length not in (None, published.manifest.size):
        return
    response.headers.update(request.app[_PUBLISHER].headers(published))


def static_files(root: str | os.PathLike, prefix: str = "/") -> Resolver:
    """A resolver for files under `root` served at `prefix` (as `web.static(prefix, root)` serves them).

    The validator is aiohttp's file ETag from the same `stat` (mtime and size, the cache key here too): a file
    replaced between this `stat` and the response's own gets an ETag the manifest does not match, and no field.
    Paths that leave `root` resolve to nothing."""
    base = pathlib.Path(root).resolve()

    def resolve(request: web.Request) -> Representation | None:
        if not request.path.startswith(prefix):
            return None
        try:
            path = (base / request.path[len(prefix):].lstrip("/")).resolve()
            path.relative_to(base)
            st = path.stat()
        except (OSError, ValueError):
            return None
        if not path.is_file():
            return None

        def read():
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    yield chunk
        return Representation(str(path), st.st_size, read, validator=f'"{st.st_mtime_ns:x}-{st.st_size:x}"',
                              version=(st.st_mtime_ns, st.st_size))
    return resolve
