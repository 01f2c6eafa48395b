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

Both names a client gives, the CONNECT target and the TLS SNI, are checked by `LocalCA.listed_name` (a valid
host name the list covers, no wildcard, no IP literal) before anything is made or written for them: a CONNECT
to a name under a listed domain that is not a valid host name is a 400, never a blind tunnel, and a handshake
asking for one is refused (one log line each). A leaf is made only for a name some CONNECT in progress was accepted
for, so a local process that reaches the listener directly cannot have leaves minted for names of its choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import sys
from collections.abc import Awaitable, Callable

from aiohttp import web
from yarl import URL

from swarm.content.manifest import ACCEPT_HEADER

from . import headers as hdr
from .errors import OriginError
from .local_ca import LocalCA, RefusedName, matches
from .responses import OwnResponse

log = logging.getLogger("swarmproxy.mitm")

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
        """Every target under a listed domain, valid or not: `open` refuses the invalid ones (a blind tunnel to
        `../x.listed` or `*.listed` would only hand the name to the resolver)."""
        return matches(self.ca.patterns, host)

    async def start(self) -> None:
        _quiet_undecodable_sni()
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
        """Present the leaf for the name the client asked for, if it is a listed host name that a CONNECT in
        progress was accepted for; else refuse the handshake (one log line, nothing made or written)."""
        if name is None:
            log.warning("refused a TLS handshake without a server name (SNI): a leaf is made for a name only")
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        try:
            host = self.ca.listed_name(name)
        except RefusedName as exc:
            log.warning("refused a TLS handshake: %s", exc)
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        # The SNI callback does not say which connection it is on, so the test is "some accepted CONNECT asked
        # for this host" rather than "this connection's CONNECT did"; the Host check in _handle does the latter.
        if not any(host == target for target, _ in self.tunnels.values()):
            log.warning("refused a TLS handshake for %r: no CONNECT in progress was accepted for it", host)
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        try:
            sslobj.context = self.ca.context_for(host)
        except Exception as exc:  # noqa: BLE001 - a leaf we cannot make is a failed handshake, never a crash
            log.warning("no leaf certificate for %s: %s", host, exc)
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        return None

    async def open(self, host: str, port: int, protocol_factory: Callable[[], asyncio.BaseProtocol]) -> tuple[
            asyncio.BaseTransport, Callable[[], object]]:
        """A connection to the TLS listener for a CONNECT to host:port, with a protocol of `protocol_factory`, and
        what to call once it is over; OriginError(400) for a target the CA must not sign (checked before any
        connection or file is made)."""
        try:
            name = self.ca.listed_name(host)
        except RefusedName as exc:
            log.warning("refused CONNECT to a listed domain: %s", exc)
            raise OriginError(400, f"url: CONNECT target refused: {exc}") from None
        transport, _ = await asyncio.get_running_loop().create_connection(protocol_factory, "127.0.0.1", self.port)
        source = transport.get_extra_info("sockname")[1]
        self.tunnels[source] = (name, port)
        return transport, lambda: self.tunnels.pop(source, None)

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
        # Host is rebuilt from the URL; Swarm-Accept is the proxy's to say, not a client's (as `relay` drops them).
        fields = hdr.end_to_end(request.headers.items(), drop=("host", ACCEPT_HEADER))
        return await self.serve(request, url, hdr.add_via(fields, request.version))


def _quiet_undecodable_sni() -> None:
    """Make a non-ASCII SNI one log line, not a traceback on stderr. CPython decodes the SNI as ASCII before it
    calls `_sni` and, when that fails, refuses the handshake (right) and hands the UnicodeDecodeError to
    sys.unraisablehook (noise any local process could cause at will). Only that error is taken; every other one
    goes to the hook that was there. Installed again if someone replaced it (pytest does, around each test)."""
    previous = sys.unraisablehook
    if getattr(previous, "swarmproxy_sni", False):
        return

    def hook(unraisable) -> None:  # sys.UnraisableHookArgs
        if isinstance(unraisable.exc_value, UnicodeDecodeError) and isinstance(unraisable.object, bytes) \
                and _in_handshake(unraisable.exc_traceback):
            log.warning("refused a TLS handshake: its server name (SNI) %r is not ASCII", unraisable.object[:100])
            return
        previous(unraisable)

    hook.swarmproxy_sni = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def _in_handshake(tb) -> bool:
    """Whether the traceback passes through ssl's do_handshake (where the SNI callback runs)."""
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "do_handshake" and code.co_filename.endswith(("/ssl.py", "\\ssl.py")):
            return True
        tb = tb.tb_next
    return False


def _host_of(field: str) -> str:
    name, _, port = field.rpartition(":")
    return name if name and port.isdigit() else field


def _text(status: int, text: str) -> web.Response:
    response = OwnResponse(status=status, text=text + "\n")
    response.force_close()
    return response
