"""The live status page (`GET /_swarm/`, issue 41): a page of the proxy's own, with its script and style as files
of this package (`proxy/ui/`), and the two JSON documents it reads beside /_swarm/status and /_swarm/requests:

GET /_swarm/                 the page (also /_swarm)
GET /_swarm/ui/<file>        its script, style and icon: a fixed list, nothing else of the disk
GET /_swarm/timeline         the last hour in 10 s buckets: bytes by source, transitions by cause (`proxy.timeline`)
GET /_swarm/peers            the live peer connections: address, direction, content, bytes and rates each way

It is served by the admin API (`proxy.admin`), so its rules apply first: loopback clients only, a loopback Host,
no Via, never a browser's request on a web page's behalf. The page shows URLs, names and errors that strangers
chose, on the origin that may call /_swarm/fetch; so it has no script of its own inline (a strict
Content-Security-Policy: `script-src 'self'`, nothing from anywhere else), builds its DOM with textContent only,
shows URLs as text and never as links, and cannot be framed (`frame-ancestors 'none'`). It only reads: every path
here answers GET and HEAD, and none acts.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from .peer_rates import PeerRates, totals
from .responses import OwnResponse
from .stats import Stats

if TYPE_CHECKING:
    from .bridge import Bridge
    from .engine import SwarmEngine

PAGE_PATHS = ("/_swarm/", "/_swarm")
UI_PREFIX = "/_swarm/ui/"
TIMELINE_PATH = "/_swarm/timeline"
PEERS_PATH = "/_swarm/peers"

# Nothing but our own files, and no inline script or style (an attribute or element a stranger's string slipped
# in would not run); no frame may hold the page (clickjacking), no form posts anywhere, no <base> moves its URLs.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",  # a JSON answer holding a stranger's text is never read as a script
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",  # the page and its data are this moment's, and may show private URLs
    "Cross-Origin-Resource-Policy": "same-origin",
}
# The files of proxy/ui/ served, with their types; the name in the URL is looked up here, never joined to a path.
FILES = {
    "index.html": "text/html; charset=utf-8",
    "status.js": "text/javascript; charset=utf-8",
    "plots.js": "text/javascript; charset=utf-8",
    "status.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
MAX_PEERS_SHOWN = 500


@functools.cache
def ui_file(name: str) -> bytes:
    """One of FILES, read once from the installed package (a wheel carries them: pyproject's package-data)."""
    return importlib.resources.files("proxy").joinpath("ui", name).read_bytes()


def _answer(body: bytes, content_type: str, status: int = 200) -> web.Response:
    response = OwnResponse(status=status, body=body, headers=PAGE_HEADERS)
    response.headers["Content-Type"] = content_type
    return response


def _json(data: object, status: int = 200) -> web.Response:
    return _answer(json.dumps(data, separators=(",", ":")).encode() + b"\n", "application/json", status)


class StatusPage:
    def __init__(self, stats: Stats, engine: Callable[[], SwarmEngine | None],
                 bridge: Callable[[], Bridge | None], clock: Callable[[], float] = time.monotonic) -> None:
        self.stats = stats
        self.engine = engine
        self.bridge = bridge
        self.clock = clock  # for the rates: monotonic, never the wall clock the timeline's buckets are in
        self.rates = PeerRates()

    def routes(self) -> dict[str, Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]]:
        return {**dict.fromkeys(PAGE_PATHS, self.page), TIMELINE_PATH: self.timeline, PEERS_PATH: self.peers}

    async def page(self, _request: web.BaseRequest) -> web.StreamResponse:
        return _answer(ui_file("index.html"), FILES["index.html"])

    async def asset(self, request: web.BaseRequest) -> web.StreamResponse:
        name = request.path[len(UI_PREFIX):]
        if name not in FILES:
            return _json({"error": f"no such file {name[:80]!r} of the status page"}, 404)
        return _answer(ui_file(name), FILES[name])

    async def timeline(self, _request: web.BaseRequest) -> web.StreamResponse:
        self.stats.sample()
        shown = self.stats.timeline.shown(self.stats.now())
        shown["under_way"] = len(self.stats.under_way())
        return _json(shown)

    async def peers(self, _request: web.BaseRequest) -> web.StreamResponse:
        engine = self.engine()
        links = engine.links() if engine is not None else []
        keyed = {(name, link.address, link.root, link.serving): link for name, link in links}
        rates = self.rates.update({key: (link.counters.bytes_sent, link.counters.bytes_received)
                                   for key, link in keyed.items()}, self.clock())
        # The busiest first, so that a node with many connections shows those that matter within the bound.
        busiest = sorted(keyed.items(), key=lambda item: (-((rates[item[0]].up or 0.0) + (rates[item[0]].down or 0.0)),
                                                          str(item[1].address)))
        shown = []
        for key, link in busiest[:MAX_PEERS_SHOWN]:
            rate = rates[key]
            host, port = link.address[0], link.address[1]
            shown.append({
                "transport": key[0],
                "address": f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}",
                "direction": "serving" if link.serving else "fetching",
                "node": link.peer.hex()[:16] if link.peer is not None else None,
                "root": link.root.hex()[:16] if link.root is not None else None,
                "bytes_up": link.counters.bytes_sent,
                "bytes_down": link.counters.bytes_received,
                "rate_up": None if rate.up is None else round(rate.up),
                "rate_down": None if rate.down is None else round(rate.down),
            })
        total = totals(rates.values())
        bridge = self.bridge()
        return _json({
            "engine": engine is not None,
            "connections": len(keyed),
            "peers": shown,
            "rate_up": None if total.up is None else round(total.up),
            "rate_down": None if total.down is None else round(total.down),
            "bittorrent": bridge.status() if bridge is not None else None,
        })
