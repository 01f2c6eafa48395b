"""Terminating CONNECTs to the hosts of `--mitm-hosts`, so that curl, wget, apt or pip through the proxy swarm HTTPS.

Every other CONNECT stays a blind byte tunnel. For a listed host (on a port `--connect-ports` allows: 443 by
default, so other protocols to a listed host are never touched unless allowed) the tunnel (`proxy.tunnel.connect`)
does not go to the origin but to this module's TLS listener on 127.0.0.1, which presents a leaf of the local CA
(`proxy.local_ca`) for the name the client asked for (SNI), reads the client's requests over that TLS, and serves
each as if it had come through the proxy for `https://HOST/...`: the same relay and fallback download, the
upstream side verifying the real origin (an invalid origin certificate is a 502 page naming the problem, never a
leaf that says it is valid). The client's own fields go to the origin (they were meant for it), minus Host.

The listener is reachable by anything on this machine, so it serves only connections the proxy itself opened for
a CONNECT it accepted: each is known by its source port, and the host it may ask for is the CONNECT's host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web
from yarl import URL

from . import headers as hdr
from .local_ca import LocalCA, matches
from .responses import OwnResponse

log = logging.getLogger("swarmproxy.mitm")

CHUNK = 256 * 1024

Serve = Callable[[web.BaseRequest, URL, list[tuple[str, str]]], Awaitable[web.StreamResponse]]


class Interceptor:
    def __init__(self, ca: LocalCA, serve: Serve, *, max_field_size: int = 65536) -> None:
        self.ca, self.serve = ca, serve
        self.tunnels: dict[int, tuple[str, int]] = {}  # source port of a connection we opened -> CONNECT target
        self.port = 0
        self._web = web.Server(self._handle, access_log=None, max_line_size=max_field_size,
                               max_field_size=max_field_size)
        self._server: asyncio.AbstractServer | None = None

    def wants(self, host: str, port: int) -> bool:
        return matches(self.ca.patterns, host)

    async def start(self) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.sni_callback = self._sni
        self._server = await asyncio.get_running_loop().create_server(self._web, "127.0.0.1", 0, ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._web.shutdown(1.0)
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def _sni(self, sslobj: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> int | None:
        """Present the leaf for the name the client asked for, if it is listed; else refuse the handshake."""
        if name is None or not matches(self.ca.patterns, name):
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        try:
            sslobj.context = self.ca.context_for(name)
        except Exception as exc:  # noqa: BLE001 - a leaf we cannot make is a failed handshake, never a crash
            log.warning("no leaf certificate for %s: %s", name, exc)
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        return None

    async def open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter,
                                                         Callable[[], object]]:
        """A connection to the TLS listener for a CONNECT to host:port, and what to call once it is over."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, limit=CHUNK)
        source = writer.get_extra_info("sockname")[1]
        self.tunnels[source] = (host.lower().rstrip("."), port)
        return reader, writer, lambda: self.tunnels.pop(source, None)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        target = self.tunnels.get(peer[1]) if peer else None
        if target is None:
            return _text(403, "this listener serves only the proxy's own CONNECT tunnels")
        host, port = target
        asked = _host_of(request.headers.get("Host") or host)
        if asked.lower().rstrip(".") != host:
            return _text(421, f"this connection was opened for {host}, not {asked}")
        path = request.raw_path
        if not path.startswith("/"):
            return _text(400, "send an origin-form request target (/path) over this connection")
        url = URL(f"https://{host}{'' if port == 443 else f':{port}'}{path}", encoded=True)
        fields = [(name, value) for name, value in hdr.end_to_end(request.headers.items())
                  if name.lower() != "host"]
        return await self.serve(request, url, hdr.add_via(fields, request.version))


def _host_of(field: str) -> str:
    name, _, port = field.rpartition(":")
    return name if name and port.isdigit() else field


def _text(status: int, text: str) -> web.Response:
    response = OwnResponse(status=status, text=text + "\n")
    response.force_close()
    return response
