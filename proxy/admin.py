"""The admin API: origin-form requests to the proxy itself, answered to loopback clients only.

GET /_swarm/status                 version, uptime, listen addresses, counters since start and today (JSON)
GET /_swarm/requests               the last N requests, newest last (JSON list; ?limit=N the last N only,
                                   ?order=newest newest first, ?under_way=1 only those not finished)
GET /_swarm/requests/<id>          one of them, by the id a relayed response named in its Swarm-Request field
GET /_swarm/discovery              every discovery backend's status, by name ("dht": the DHT node)
GET /_swarm/discovery/providers/<root>  runs a lookup for a content root (64 hex digits) through every
                                   backend, lists its providers
GET /_swarm/dht                    the DHT node: id, routing table size, stored records, dropped datagrams
GET /_swarm/dht/providers/<root>   the same lookup as /_swarm/discovery/providers/<root>
GET /_swarm/torrent?root=ROOT|url=URL  a seeded content's BitTorrent v2 torrent: its info-hash and magnet (JSON),
                                   or with &format=torrent the .torrent file; &hybrid=1 the hybrid one, with a v1
                                   part for v1-only clients (--bt-listen)
GET /_swarm/fetch?url=URL          the explicit fetch: swarmproxy downloads URL (https too) itself
GET /_swarm/fetch/torrent?magnet=LINK[&file=PATH]  a BitTorrent v2 file, from BitTorrent peers and ours
POST /_swarm/fetch/torrent[?file=PATH]  the same for the .torrent file sent as the body (--bt-listen)
GET /metrics                       Prometheus text format
GET /_swarm/                       the live status page, with /_swarm/ui/<file>, /_swarm/timeline and
                                   /_swarm/peers (proxy.status_page: its headers and why)

Only to loopback clients that asked for this machine by name (Host: localhost, 127.x.x.x or [::1], with or
without the proxy's port), directly, not through a proxy (no Via), and never to a browser's request on behalf
of a web page (its Origin, Sec-Fetch-Site: 403); see proxy.edge for why. URLs in /_swarm/requests have their
credentials redacted (`publish_gate.redact_url`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from swarm.discovery.composite import backend_status

from . import __version__
from .edge import CLIENT_FIELD, admin_refusal, cross_site_refusal, cross_site_text
from .fetch_endpoint import PATH as FETCH_PATH
from .fetch_endpoint import TORRENT_PATH as TORRENT_FETCH_PATH
from .responses import OwnResponse
from .stats import Stats
from .status_page import UI_PREFIX, StatusPage

if TYPE_CHECKING:
    from swarm.discovery import Discovery

    from .bridge import Bridge
    from .engine import SwarmEngine

log = logging.getLogger("swarmproxy")

PREFIX = "/_swarm/"


def _json(data: object, status: int = 200) -> web.Response:
    return OwnResponse(status=status, text=json.dumps(data, indent=1) + "\n", content_type="application/json")


PROVIDERS = ("/_swarm/discovery/providers/", "/_swarm/dht/providers/")
OFF = "discovery is off (--dht-listen off)"
MAX_PROVIDERS = 50
RECORD = "/_swarm/requests/"
ROOT_HEX = re.compile(r"[0-9a-fA-F]{64}")


class Admin:
    def __init__(self, stats: Stats, addresses: Callable[[], dict[str, str]],
                 discovery: Callable[[], Discovery | None] = lambda: None,
                 engine: Callable[[], SwarmEngine | None] = lambda: None,
                 bridge: Callable[[], Bridge | None] = lambda: None,
                 network: Callable[[], dict[str, object] | None] = lambda: None,
                 listen_port: Callable[[], int | None] = lambda: None,
                 fetch: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]] | None = None,
                 fetch_torrent: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]] | None = None) -> None:
        self.stats = stats
        self.listen_port = listen_port
        self.engine = engine
        self.bridge = bridge
        self.network = network  # which networks the node is on, and the router's word (`proxy.internet`)
        self.addresses = addresses
        self.discovery = discovery
        self.page = StatusPage(stats, engine, bridge)
        self.routes: dict[str, Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]] = {
            **self.page.routes(),
            "/_swarm/status": self.status,
            "/_swarm/requests": self.requests,
            "/_swarm/discovery": self.discovery_status,
            "/_swarm/dht": self.dht_status,
            "/_swarm/torrent": self.torrent,
            "/metrics": self.metrics,
        }
        if fetch is not None:
            self.routes[FETCH_PATH] = fetch
        if fetch_torrent is not None:
            self.routes[TORRENT_FETCH_PATH] = fetch_torrent

    async def handle(self, request: web.BaseRequest, *, loopback: bool) -> web.StreamResponse:
        if not loopback:
            return _json({"error": "the admin API answers only clients on this machine (loopback)"}, 403)
        refusal = admin_refusal(request.headers.get("Host"), request.headers.get("Via"), self.listen_port())
        if refusal is not None:
            status, reason = refusal
            return _json({"error": reason}, status)
        # Before any route (the explicit fetch and /_swarm/requests/<id> included), and for every method: a
        # page's CORS preflight (OPTIONS) is refused here too, so it can never send CLIENT_FIELD.
        who = cross_site_refusal(request.headers.get("Host"), request.headers.getall("Origin", []),
                                 request.headers.getall("Sec-Fetch-Site", []), CLIENT_FIELD in request.headers)
        if who is not None:
            # Logged: a page that tries is worth knowing about, and a tool of the user's refused says why. The
            # path without its query (a URL the page chose) and as sent (percent-encoded: one line).
            log.warning("refused %s %s: a browser's request for a web page, made by %s", request.method,
                        request.raw_path.partition("?")[0][:100], who)
            return OwnResponse(status=403, text=cross_site_text(who) + "\n")
        route = self.routes.get(request.path)
        for prefix in PROVIDERS:
            if route is None and request.path.startswith(prefix):
                route = functools.partial(self.providers, prefix=prefix)
        if route is None and request.path.startswith(RECORD):
            route = self.request_record
        if route is None and request.path.startswith(UI_PREFIX):
            route = self.page.asset
        if route is None:
            return _json({
                "error": f"no such path {request.path!r}. This is swarmproxy, an HTTP forward proxy: "
                         "send absolute URLs (curl --proxy http://HOST:PORT URL). Admin paths: "
                         + ", ".join(sorted(self.routes)),
            }, 404)
        if request.method not in ("GET", "HEAD") and not (request.method == "POST"
                                                          and request.path == TORRENT_FETCH_PATH):
            return _json({"error": f"{request.path} answers GET only"}, 405)
        return await route(request)

    async def status(self, _request: web.BaseRequest) -> web.StreamResponse:
        return _json({
            "version": __version__,
            "uptime_s": round(self.stats.uptime(), 3),
            "listen": self.addresses(),
            "counters": self.stats.snapshot(),
            "today": dict(self.stats.today()),
            "swarm": engine.status() if (engine := self.engine()) is not None else None,
            "bittorrent": bridge.status() if (bridge := self.bridge()) is not None else None,
            "network": self.network(),
        })

    async def torrent(self, request: web.BaseRequest) -> web.StreamResponse:
        bridge = self.bridge()
        if bridge is None:
            return _json({"error": "the BitTorrent bridge is off (--bt-listen)"}, 404)
        root_text, url = request.query.get("root"), request.query.get("url")
        if root_text is not None:
            if not ROOT_HEX.fullmatch(root_text):
                return _json({"error": f"{root_text[:80]!r} is not a content root (64 hex digits)"}, 400)
            root: bytes | None = bytes.fromhex(root_text)
        elif url is not None:
            root = bridge.find(url)
        else:
            return _json({"error": "say which content: ?root=ROOT (64 hex digits) or ?url=URL"}, 400)
        hybrid = request.query.get("hybrid") in ("1", "true", "yes")
        export = await bridge.export(root, hybrid=hybrid) if root is not None else None
        if export is None:
            return _json({"error": "not seeded here: only what this node shares from a public origin is a torrent "
                                   "(see /_swarm/requests for why a download was not shared)"}, 404)
        if request.query.get("format") == "torrent":
            return OwnResponse(body=export.torrent.data, content_type="application/x-bittorrent",
                               headers={"Content-Disposition": f'attachment; filename="{export.torrent.name}.torrent"'})
        return _json(export.shown())

    async def requests(self, request: web.BaseRequest) -> web.StreamResponse:
        history = self.stats.under_way() if request.query.get("under_way") in ("1", "true", "yes") \
            else self.stats.history
        chosen = list(history)
        limit = request.query.get("limit", "")
        if limit.isdigit():
            chosen = chosen[-int(limit):] if int(limit) else []
        records = [r.shown() for r in chosen]  # (only those asked for: redacting a URL is not free)
        if request.query.get("order") == "newest":
            records.reverse()  # the status page's order: the newest first
        return _json(records)

    async def request_record(self, request: web.BaseRequest) -> web.StreamResponse:
        record_id = request.path[len(RECORD):]
        record = self.stats.find(record_id)
        if record is None:
            return _json({"error": f"no request {record_id[:80]!r} among the last {self.stats.history.maxlen} "
                                   "(--request-history) since swarmproxy started"}, 404)
        return _json(record.shown())

    async def discovery_status(self, _request: web.BaseRequest) -> web.StreamResponse:
        discovery = self.discovery()
        if discovery is None:
            return _json({"error": OFF}, 404)
        return _json(backend_status(discovery))

    async def dht_status(self, _request: web.BaseRequest) -> web.StreamResponse:
        discovery = self.discovery()
        status = backend_status(discovery).get("dht") if discovery is not None else None
        if status is None:
            return _json({"error": "the DHT is off (--dht-listen off)"}, 404)
        return _json(status)

    async def providers(self, request: web.BaseRequest, prefix: str) -> web.StreamResponse:
        discovery = self.discovery()
        if discovery is None:
            return _json({"error": OFF}, 404)
        text = request.path[len(prefix):]
        try:
            root = bytes.fromhex(text)
            if len(root) != 32:
                raise ValueError
        except ValueError:
            return _json({"error": f"{text[:80]!r} is not a content root (64 hex digits)"}, 400)
        started = time.monotonic()
        found = []
        try:
            async with contextlib.aclosing(discovery.find_providers(root)) as providers:
                async for record in providers:
                    found.append({"host": record.host, "port": record.port, "node_id": record.node_id.hex(),
                                  "transports": record.transports})
                    if len(found) >= MAX_PROVIDERS:
                        break
        except discovery.errors as exc:
            return _json({"error": f"the lookup failed: {exc}", "root": root.hex(), "providers": found}, 502)
        return _json({"root": root.hex(), "providers": found, "lookup_s": round(time.monotonic() - started, 3)})

    async def metrics(self, _request: web.BaseRequest) -> web.StreamResponse:
        response = OwnResponse(body=self.stats.prometheus_text())
        response.content_type = "text/plain"
        response.headers["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
        return response
