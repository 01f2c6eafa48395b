"""A deliberately overloaded origin for `swarmproxy demo`, the tests and the lab (Pack's setup).

Serves named in-memory files with a strong ETag, Last-Modified and `Cache-Control: public, max-age=...`, honours
single `Range` requests, and throttles like a busy server: a delay before the first byte, one bandwidth budget
shared by every connection (a token bucket), and a cap on concurrent responses (the rest wait in line, as
behind a full accept queue). Knobs can be changed while it runs; `die_after` breaks responses off mid-body.

    origin = SlowOrigin(rate=256_000, first_byte_delay=0.0, max_connections=256)
    origin.add("/file.bin", data)
    url = await origin.start()           # http://127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import ssl
import time
from collections.abc import Callable

from aiohttp import web

from ..ranges import content_range, parse_range

CHUNK = 16 * 1024


class _Bucket:
    """One shared bandwidth budget; `take` waits until the bytes may go (rate None = unlimited)."""

    def __init__(self, rate: float | None, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, amount: int, wanted: Callable[[], bool] = lambda: True) -> bool:
        """Wait until `amount` bytes may go, and count them as sent; False (nothing counted) if `wanted()` says,
        once this waiter's turn came, that they are no longer wanted."""
        async with self.lock:  # first come, first served: one waiter at a time keeps it fair
            if not wanted():
                # The client left while this response waited in line. A server learns that from the FIN and
                # sends nothing more: in a flash crowd every newcomer that leaves for the swarm would otherwise
                # still cost the others a chunk's worth of this budget (16 KiB at 256 KB/s: 64 ms).
                return False
            if not self.rate:  # read under the lock: the rate may change while others wait
                return True
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            self.tokens -= amount
            if self.tokens < 0:
                try:
                    await asyncio.sleep(-self.tokens / self.rate)  # throttling is this server's job, not a sync
                except asyncio.CancelledError:
                    # The client left (`handler_cancellation`) before its chunk's time came: the chunk is never
                    # sent, so its bytes go back to the budget. Kept spent, every newcomer that left mid-sleep
                    # pushed the next one's wait further out, and in a crowd of 1,000 arrivals a second the debt
                    # outgrew how long any newcomer stays: the origin sent nothing for 28 s (bench/crowd_sim).
                    self.tokens += amount
                    raise
            return True


class SlowOrigin:
    def __init__(self, *, rate: float | None = None, first_byte_delay: float = 0.0, max_connections: int = 256,
                 max_age: int = 3600, host: str = "127.0.0.1") -> None:
        self.first_byte_delay = first_byte_delay
        self.head_delay: float | None = None  # a different first-byte delay for HEAD (None: the same)
        self.bucket = _Bucket(rate, burst=max(CHUNK, (rate or 0) / 10))
        self.slots = asyncio.Semaphore(max_connections)
        self.max_age = max_age
        self.host = host
        self.files: dict[str, tuple[bytes, str, str]] = {}  # path -> (data, etag, content type)
        self.extra_headers: dict[str, dict[str, str]] = {}
        self.die_after: dict[str, int] = {}  # path -> body bytes after which responses are cut
        self.down_after_cut = False  # True: once a response was cut, every request gets 503 (an outage)
        self.down = False
        self.bytes_sent = 0
        self.flowing = asyncio.Event()  # cleared by `pause`: bodies stop between chunks until `resume`
        self.flowing.set()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        self.last_modified = email.utils.formatdate(time.time() - 86400, usegmt=True)
        self._runner: web.AppRunner | None = None
        self.url = ""
        # Called with the application before it starts: e.g. server_plugin's install, which proxy/ must not
        # import (imports point one way) but the lab and the tests may add.
        self.setup: list[Callable[[web.Application], object]] = []

    def add(self, path: str, data: bytes, *, content_type: str = "application/octet-stream",
            headers: dict[str, str] | None = None) -> str:
        etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
        self.files[path] = (data, etag, content_type)
        if headers is not None:
            self.extra_headers[path] = headers
        return self.url + path

    def set_rate(self, rate: float | None) -> None:
        self.bucket.rate = rate
        self.bucket.burst = max(CHUNK, (rate or 0) / 10)
        self.bucket.tokens = min(self.bucket.tokens, self.bucket.burst)

    def pause(self) -> None:
        """Hold every body where it is (heads still go out): a test's way to freeze the crowd mid-file."""
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    async def start(self, port: int = 0, *, ssl_context: ssl.SSLContext | None = None) -> str:
        """Serve on `port` (0: any free one); over TLS with `ssl_context` (the tests' HTTPS origin)."""
        app = web.Application()
        app.router.add_route("GET", "/{path:.*}", self._serve)
        app.router.add_route("HEAD", "/{path:.*}", self._serve)
        for hook in self.setup:
            hook(app)
        # handler_cancellation: a client that leaves (a proxy that got the rest from peers) frees its slot
        # at once instead of holding it through the first-byte delay.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, port, ssl_context=ssl_context)
        await site.start()
        bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
        self.url = f"{'https' if ssl_context else 'http'}://{self.host}:{bound[1]}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        self.requests.append((request.method, path, request.headers.get("Range")))
        entry = self.files.get(path)
        if entry is None:
            return web.Response(status=404, text="no such file\n")
        data, etag, content_type = entry
        if self.down:
            return web.Response(status=503, text="origin down\n")
        async with self.slots:
            delay = self.head_delay if request.method == "HEAD" and self.head_delay is not None \
                else self.first_byte_delay
            if delay:
                await asyncio.sleep(delay)  # the overloaded server's queueing delay
            headers = {"ETag": etag, "Last-Modified": self.last_modified, "Accept-Ranges": "bytes",
                       "Cache-Control": f"public, max-age={self.max_age}", "Content-Type": content_type}
            headers.update(self.extra_headers.get(path, {}))
            headers = {name: value for name, value in headers.items() if value != ""}  # "" removes a field
            start, end, status = 0, len(data), 200
            spec = parse_range(request.headers.get("Range"))
            if_range = request.headers.get("If-Range")
            if spec is not None and (if_range is None or if_range in (etag, self.last_modified)):
                resolved = spec.resolve(len(data))
                if resolved is None:
                    return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
                start, end = resolved
                status = 206
                headers["Content-Range"] = content_range(start, end, len(data))
            response = web.StreamResponse(status=status, headers=headers)
            response.content_length = end - start
            cut = self.die_after.get(path)
            position = start
            try:
                await response.prepare(request)  # the client may have left already (a proxy that swarms)
                if request.method == "HEAD":
                    return response
                while position < end:
                    piece = data[position:min(end, position + CHUNK)]
                    if cut is not None and position - start + len(piece) > cut:
                        self.down = self.down_after_cut
                        if request.transport is not None:
                            request.transport.close()  # break off mid-body: the client sees a cut response
                        return response
                    await self.flowing.wait()
                    if not await self.bucket.take(len(piece), lambda: _connected(request)):
                        return response
                    await response.write(piece)
                    self.bytes_sent += len(piece)
                    position += len(piece)
                await response.write_eof()
            except ConnectionError:
                pass  # the client left (e.g. a proxy that got the rest from peers): nothing more to do
            return response


def _connected(request: web.Request) -> bool:
    """Is the client of `request` still there (as far as this server has heard)?"""
    return request.transport is not None and not request.transport.is_closing()
