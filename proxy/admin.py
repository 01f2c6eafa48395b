"""The admin API: origin-form requests to the proxy itself, answered to loopback clients only.

GET /_swarm/status    version, uptime, listen addresses, counters (JSON)
GET /_swarm/requests  the last N requests, newest last (JSON list)
GET /metrics          Prometheus text format
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aiohttp import web

from . import __version__
from .stats import Stats

PREFIX = "/_swarm/"


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(data, indent=1) + "\n", content_type="application/json")


class Admin:
    def __init__(self, stats: Stats, addresses: Callable[[], dict[str, str]]) -> None:
        self.stats = stats
        self.addresses = addresses
        self.routes: dict[str, Callable[[web.BaseRequest], web.StreamResponse]] = {
            "/_swarm/status": self.status,
            "/_swarm/requests": self.requests,
            "/metrics": self.metrics,
        }

    def handle(self, request: web.BaseRequest, *, loopback: bool) -> web.StreamResponse:
        if not loopback:
            return _json({"error": "the admin API answers only clients on this machine (loopback)"}, 403)
        route = self.routes.get(request.path)
        if route is None:
            return _json({
                "error": f"no such path {request.path!r}. This is swarmproxy, an HTTP forward proxy: "
                         "send absolute URLs (curl --proxy http://HOST:PORT URL). Admin paths: "
                         + ", ".join(sorted(self.routes)),
            }, 404)
        if request.method not in ("GET", "HEAD"):
            return _json({"error": f"{request.path} answers GET only"}, 405)
        return route(request)

    def status(self, _request: web.BaseRequest) -> web.StreamResponse:
        return _json({
            "version": __version__,
            "uptime_s": round(self.stats.uptime(), 3),
            "listen": self.addresses(),
            "counters": self.stats.snapshot(),
        })

    def requests(self, request: web.BaseRequest) -> web.StreamResponse:
        records = [r.as_json() for r in self.stats.history]
        limit = request.query.get("limit", "")
        if limit.isdigit():
            records = records[-int(limit):] if int(limit) else []
        return _json(records)

    def metrics(self, _request: web.BaseRequest) -> web.StreamResponse:
        response = web.Response(body=self.stats.prometheus_text())
        response.content_type = "text/plain"
        response.headers["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
        return response
