"""What the status page's browser tests share: a proxy run in a thread of this process (so a test can put request
records straight into its history: URLs and names no HTTP request line could carry), a local origin whose body
streams for as long as a test wants, the page's rule for showing a stranger's text, and hostile strings."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from aiohttp import web

from proxy.config import Config
from proxy.server import ProxyServer
from proxy.stats import RequestRecord

T = TypeVar("T")

# proxy/ui/status.js's HIDDEN and MAX_TEXT: what a cell of a stranger's text shows.
HIDDEN = re.compile("[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
MAX_TEXT = 600


def shown(text: str, limit: int = MAX_TEXT) -> str:
    """`text` as a cell shows it (a title holds up to 4,000 characters)."""
    text = HIDDEN.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", text)
    return text if len(text) <= limit else text[:limit] + "…"


# URLs and names that strangers choose: markup, script URLs, template syntax, direction overrides, control
# characters, right-to-left text, and lengths no cell holds.
HOSTILE_URLS = [
    "http://x/<img src=x onerror=alert(1)>",
    'http://x/"><script>alert(document.domain)</script>',
    "javascript:alert(1)",
    "http://x/</td></tr></table><iframe src=javascript:alert(2)></iframe>",
    "http://x/\u202egnp.exe",
    "http://x/" + "\u05e9\u05dc\u05d5\u05dd" * 20 + "/\u202b\u0645\u0631\u062d\u0628\u0627",
    "http://x/" + "a" * 5000,
    "http://x/{{constructor.constructor('alert(3)')()}}",
    "http://x/\u0000\u001b[31mred\u2028line",
]
HOSTILE_NAMES = [
    "<img src=x onerror=alert(4)>",
    '"><svg onload=alert(5)>',
    "<b onmouseover=alert(6)>bold</b>",
    "javascript:alert(7)//\u202e",
]


def free_port() -> int:
    """A port the kernel had free a moment ago: for the proxy that must come back on the same port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedProxy:
    """A `ProxyServer` on its own event loop in a thread: peers and the DHT off, loopback only."""

    def __init__(self, tmp: Path, **flags: str) -> None:
        config = Config.load({"listen": "127.0.0.1:0", "data_dir": str(tmp / "data"), "dht_listen": "off",
                              "peer_listen": "off", "no_lan_discovery": True, **flags}, environ={})
        self.server = ProxyServer(config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="status-proxy", daemon=True)
        self.thread.start()
        self.call(self.server.start)
        self.address = self.server.addresses["proxy"]

    def call(self, function: Callable[[], object]) -> object:
        """`function()` run in the proxy's loop (awaited when it is a coroutine function), its result here."""
        async def run():
            result = function()
            return await result if asyncio.iscoroutine(result) else result
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def record(self, **fields: object) -> RequestRecord:
        """A finished request record with these fields, as if the proxy had answered it."""
        def put() -> RequestRecord:
            stats = self.server.stats
            record = stats.begin(str(fields.pop("method", "GET")), str(fields.pop("url")), "127.0.0.1")
            for name, value in fields.items():
                setattr(record, name, value)
            stats.finish(record, 200, record.bytes_origin + record.bytes_peers, 0.25, record.error)
            return record
        return self.call(put)  # type: ignore[return-value]

    def stop(self) -> None:
        self.call(self.server.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class DrippingOrigin:
    """An origin on 127.0.0.1 whose /drip/ bodies send 16 KiB every 0.2 s until `release` is set: a download that
    stays under way while a test watches the page, and ends when the test says."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.port = 0

        async def drip(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
            await response.prepare(request)
            while not self.release.is_set():
                await response.write(b"d" * 16384)
                await asyncio.sleep(0.2)  # the origin's pace (it is slow on purpose), not a wait for anything
            await response.write_eof()
            return response

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            app = web.Application()
            app.router.add_get("/drip/{name}", drip)
            self.runner = web.AppRunner(app, access_log=None)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            started.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self.runner.cleanup())

        self.thread = threading.Thread(target=serve, name="drip-origin", daemon=True)
        self.thread.start()
        assert started.wait(10), "the origin did not start"

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/drip/{name}"

    def stop(self) -> None:
        self.release.set()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
