"""The proxy server: aiohttp's low-level server with one handler for every request.

There is no router: the handler sorts requests by form (RFC 9112 §3.2) — CONNECT's authority-form
goes to the tunnel, absolute-form to the relay, origin-form to the admin API — which is how CONNECT,
which aiohttp's router cannot express, is served at all.

Each client connection has two clocks (Go's http.Server has the same pair): a request head must be
complete within --header-timeout of the connection's accept, or, on a kept-alive connection, of the head's
first byte (else 408 and close); between requests a connection may idle for --idle-timeout (aiohttp's
keep-alive timer). Neither runs while a request is being answered, so a long download or a CONNECT tunnel
is never cut by them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import logging
import os
import resource
import time
from typing import TYPE_CHECKING, Any, cast

from aiohttp import HttpVersion11, http_exceptions, web, web_protocol
from aiohttp.abc import AbstractResolver
from aiohttp.http_parser import RawRequestMessage
from yarl import URL

from dht.discovery import DhtDiscovery
from dht.errors import LocalError as DhtLocalError
from dht.node import DhtConfig, DhtNode
from swarm.discovery import Discovery
from swarm.discovery.composite import backend_status, compose

from . import edge
from .admin import Admin
from .config import Config
from .download.fallback import Fallback
from .errors import ClientGone, ListenError, OriginError
from .fetch_endpoint import fetch_target, forwarded_fields
from .idle_trim import IdleTrim
from .internet import Internet
from .origin import make_session
from .origin_resolver import OriginResolver
from .relay import RECORD_ID, SANDBOXED, origin_url, relay
from .responses import OwnResponse
from .startup_log import log_startup
from .stats import Stats
from .torrent_fetch import TorrentFetch
from .tunnel import connect, parse_authority

if TYPE_CHECKING:
    import aiohttp

    from .bridge import Bridge
    from .engine import SwarmEngine
    from .mitm import Interceptor

log = logging.getLogger("swarmproxy")

# How long a connection refused over --max-connections may linger after its 503: closing at once, while the
# client's request is unread or still arriving, makes the kernel answer with a reset, which can destroy the
# 503 in the client's receive buffer before it reads it. Long enough for a request to arrive, short enough
# that refused connections do not pile up.
REFUSED_LINGER_S = 2.0

# The HTTP version a request had when it was not 1.0 or 1.1 (its message is rewritten to 1.1 so that the
# answer says HTTP/1.1; see _LimitedServer._request_for).
UNSUPPORTED_VERSION = web.RequestKey("swarmproxy.unsupported_version", tuple)


def is_loopback_peer(peername: Any) -> bool:
    """True when a transport's peer address is on this machine's loopback (v4, v6 or v4-mapped)."""
    if not peername:
        return False
    return _is_loopback_host(str(peername[0] if isinstance(peername, tuple) else peername))


@functools.lru_cache(maxsize=1024)  # asked of every request's client: a handful of addresses
def _is_loopback_host(host: str) -> bool:
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _text(status: int, message: str) -> web.Response:
    return OwnResponse(status=status, text=message if message.endswith("\n") else message + "\n")


class _ProxyProtocol(web_protocol.RequestHandler):
    """aiohttp's per-connection protocol, with answers instead of tracebacks for malformed input, and the
    request-head clock (the idle clock is aiohttp's keep-alive timer, `keepalive_timeout`).

    The head clock relies on three details of aiohttp's RequestHandler (3.14): `start()` awaits `_waiter`
    exactly while it waits for the next request, every parsed head (or parse error) is appended to
    `_messages` by `data_received`, and `start()` re-arms the keep-alive timer `_keepalive_handle` after each
    response when it is None. tests/proxy/test_edge.py fails if any of them changes.
    """

    def __init__(self, manager: web.Server, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_begun = False  # a byte of the awaited head has arrived: a late head gets 408, not silence

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._manager.stats.connection_opened()  # type: ignore[union-attr]
        # The first head is timed from the accept: a connection that says nothing must not hold a
        # --max-connections slot for the whole --idle-timeout.
        self._start_head_clock(begun=False)

    def connection_lost(self, exc: BaseException | None) -> None:
        manager = self._manager
        self._stop_head_clock()
        super().connection_lost(exc)
        if manager is not None:
            manager.stats.connection_closed()  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        waiting = self._head_timer is None and self._waiter is not None and not self._waiter.done()
        queued = len(self._messages)
        super().data_received(data)
        if len(self._messages) > queued:  # a head is complete (or refused): the handler answers from here
            self._stop_head_clock()
        elif data and self._head_timer is not None:
            self._head_begun = True
        elif data and waiting:  # the first byte of a kept-alive connection's next head
            self._start_head_clock(begun=True)

    def _start_head_clock(self, *, begun: bool) -> None:
        loop = self._loop
        deadline = loop.time() + self._header_timeout
        self._head_begun = begun
        self._head_timer = loop.call_at(deadline, self._head_too_late)
        # aiohttp's keep-alive timer would close the connection silently at its own deadline, whatever has
        # arrived; while a head is awaited, this clock alone judges it (start() re-arms that timer after the
        # response).
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
            self._keepalive_handle = None

    def _stop_head_clock(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_late(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        # A connection that sent nothing is closed without a word (it asked nothing; a browser's unused
        # pre-connection sees an ordinary close). One that began a head is told why.
        if self._head_begun:
            self._manager.stats.header_timeout()  # type: ignore[union-attr]
            peer = transport.get_extra_info("peername")
            log.warning("closed the connection from %s: its request head was not complete within %gs "
                        "(--header-timeout)", peer and peer[0], self._header_timeout)
            cast(asyncio.WriteTransport, transport).write(edge.closing_response(
                408, f"408 Request Timeout: the request head (request line and header fields) must arrive "
                     f"within {self._header_timeout:g} seconds (--header-timeout)"))
        self.force_close()

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if isinstance(exc, ConnectionError):
            raise exc  # aiohttp ends the connection quietly on ConnectionError
        stats: Stats = self._manager.stats  # type: ignore[union-attr]
        peer = self.transport.get_extra_info("peername") if self.transport else None
        if isinstance(exc, http_exceptions.LineTooLong) or (
            isinstance(exc, http_exceptions.BadHttpMessage) and "Too many headers" in str(exc)
        ):
            status = 431
            text = "431 Request Header Fields Too Large: a request line or header line is longer than " \
                   "--max-header-size allows, or there are too many header lines"
            summary = text
        elif status == 500:
            log.exception("internal error answering %s", peer, exc_info=exc)
            text = summary = "500 Internal Server Error: swarmproxy failed on this request; see its log"
        else:
            detail = message or str(exc)
            if isinstance(exc, http_exceptions.BadHttpMessage) and edge.UNKNOWN_VERSION_MESSAGE in str(exc):
                status, detail = 505, edge.version_refusal(None) or detail
            ours = edge.parse_error_text(type(exc).__name__, detail) if status == 400 else None
            text = ours or f"{status} {edge.phrase(status)}: {detail}"
            summary = ours or f"{status} {edge.phrase(status)}: {edge.parse_error_summary(detail)}"
        if status != 500:
            stats.counters["bad_requests"] += 1
            log.warning("rejected request from %s: %s", peer and peer[0], summary)
        # A relayed head held back for its body (`relay.response_for`) counts as sent: the answer has begun.
        if request.writer.output_size > 0 or getattr(request.writer, "_headers_buf", None):
            raise ConnectionError("response already started")
        response = _text(status, text)
        response.force_close()
        return response


class _Refuse503(asyncio.Protocol):
    """Stands in for a connection over --max-connections: one 503, then a lingering close."""

    ANSWER = edge.closing_response(
        503, "503 Service Unavailable: swarmproxy is serving as many connections as --max-connections allows",
        extra=(("Retry-After", "1"),))

    def __init__(self) -> None:
        self._closer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport instances, but they write, half-close and close alike.
        writer = cast(asyncio.WriteTransport, transport)
        writer.write(self.ANSWER)
        if writer.can_write_eof():
            writer.write_eof()  # the answer is whole; what the client still sends is read and dropped
        self._closer = asyncio.get_running_loop().call_later(REFUSED_LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the client is done too: close

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._closer is not None:
            self._closer.cancel()


class _LimitedServer(web.Server):
    def __init__(self, *args: Any, stats: Stats, max_connections: int, header_timeout: float,
                 **kwargs: Any) -> None:
        super().__init__(*args, request_factory=self._request_for, **kwargs)
        self.stats = stats
        self.max_connections = max_connections
        self.header_timeout = header_timeout

    def __call__(self) -> asyncio.Protocol:  # type: ignore[override]
        if self.stats.connections_open >= self.max_connections:
            self.stats.connection_refused()
            return _Refuse503()
        return _ProxyProtocol(self, loop=self._loop, header_timeout=self.header_timeout, **self._kwargs)

    def _request_for(self, message: RawRequestMessage, payload: Any, protocol: web_protocol.RequestHandler,
                     writer: Any, task: asyncio.Task) -> web.BaseRequest:
        """aiohttp's request, except that every answer's status line says HTTP/1.1 (or 1.0 to 1.0).

        aiohttp writes the request's own version into the status line: `HTTP/0.9 200` to a request line
        without a version, `HTTP/2.0 200` to one saying 2.0, and `HTTP/1.0 400` for a request it could not
        parse (its stand-in message, web_protocol.ERROR, says 1.0). Those are rewritten to 1.1 and closed after
        the answer; an unsupported version is remembered for `ProxyServer._answer` to refuse with 505.
        """
        unsupported = message.version not in edge.SUPPORTED_VERSIONS
        if unsupported or message is web_protocol.ERROR:
            original = message.version
            message = message._replace(version=HttpVersion11, should_close=True)
        request = web.BaseRequest(message, payload, protocol, writer, task, self._loop)
        if unsupported:
            request[UNSUPPORTED_VERSION] = tuple(original)
        return request


class ProxyServer:
    """One running proxy. `await start()`, read `addresses`, `await stop()`."""

    origin_source: str | None = None  # the address origin connections leave from (a lab's host of its own; None: any)

    def __init__(self, config: Config, *, resolver: AbstractResolver | None = None) -> None:
        """`resolver`: the DNS resolver under the rebinding rule (`proxy.origin_resolver`); the system's by
        default, a `StaticResolver` in tests and the bench, which must not ask real DNS."""
        self.config = config
        self.resolver = OriginResolver(resolver, local_domains=config.local_domains,
                                       origins=config.share_private_origins)
        self.stats = Stats(config.request_history)
        self.dht: DhtNode | None = None  # our DHT's node, which this server starts and stops (--dht-listen)
        self.discovery: Discovery | None = None  # every discovery backend, as the engine and the admin API use them
        self.engine: SwarmEngine | None = None  # once started, unless --peer-listen off
        self.bridge: Bridge | None = None  # the BitTorrent bridge, with --bt-listen
        self.internet: Internet | None = None  # the node's BitTorrent session and the Internet mode on it
        self.fallback: Fallback | None = None
        self.interceptor: Interceptor | None = None
        self.addresses: dict[str, str] = {}
        self._listen: tuple[str, int] | None = None  # the proxy listener's bound host and port
        torrents = TorrentFetch(lambda: self.engine, lambda: self.internet.session if self.internet else None,
                                lambda: self.bridge, self.stats,
                                private_origins=config.share_private_origins, staging=config.data_dir / "bittorrent")
        self.admin = Admin(self.stats, lambda: self.addresses, lambda: self.discovery, lambda: self.engine,
                           lambda: self.bridge, lambda: self.internet.status() if self.internet else None,
                           listen_port=lambda: self._listen[1] if self._listen else None,
                           fetch=self._fetch, fetch_torrent=torrents.handle)
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.BaseRunner | None = None
        self._bootstrap_task: asyncio.Task | None = None
        self._handling: set[asyncio.Task] = set()  # requests being answered; `stop` cancels them first
        self._stopping = False  # set by `stop`: a request cancelled then was cut by us, not by its client

    async def start(self) -> dict[str, str]:
        _raise_fd_limit()
        cfg = self.config
        self.stats.on_connections = IdleTrim(asyncio.get_running_loop()).connections  # memory back when idle
        self._session = make_session(connect_timeout=cfg.connect_timeout, read_timeout=cfg.read_timeout,
                                     max_connections=cfg.max_connections, ca_file=cfg.ca_file,
                                     resolver=self.resolver, local_address=self.origin_source)
        server = _LimitedServer(
            self._handle,
            stats=self.stats,
            max_connections=cfg.max_connections,
            header_timeout=cfg.header_timeout,
            keepalive_timeout=cfg.idle_timeout,  # the idle clock: from accept or a response's end to a head
            access_log=None,  # one line per request comes from Stats.finish instead
            max_line_size=cfg.max_header_size,
            max_field_size=cfg.max_header_size,
            max_headers=256,
            handler_cancellation=True,  # a client that goes away cancels its origin request
        )
        self._runner = web.ServerRunner(server, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, cfg.listen.host, cfg.listen.port, backlog=1024, reuse_address=True)
        await site.start()
        host, port = _bound(site)
        self._listen = (host, port)
        self.addresses["proxy"] = _join(host, port)
        if cfg.dht_listen is not None:
            await self._start_dht()
        if cfg.bt_listen is not None and cfg.peer_listen is None:
            raise ListenError("--bt-listen seeds what the block engine shares: it needs --peer-listen")
        self.internet = Internet(cfg)  # before the discovery: the Mainline DHT is one of its backends
        if (address := await self.internet.start()) is not None:
            self.addresses["bittorrent"] = _join(*address)
        self.discovery = self._discovery()
        if cfg.peer_listen is not None:
            await self._start_engine()
        if cfg.mitm_hosts:
            await self._start_interceptor()
        log_startup(log, cfg, self.addresses, backend_status(self.discovery) if self.discovery is not None else {},
                    self.internet.consent_lines() if self.internet is not None else [])
        if cfg.ready_file:
            _write_atomically(cfg.ready_file, json.dumps(self.addresses) + "\n")
        return self.addresses

    async def _start_interceptor(self) -> None:
        """--mitm-hosts: the local CA (made on first use) and the TLS listener CONNECTs to listed hosts reach."""
        from .local_ca import LocalCA  # cryptography's import is slow: only when hosts are listed
        from .mitm import Interceptor

        cfg = self.config
        ca = LocalCA(cfg.data_dir / "ca", cfg.mitm_hosts)

        async def serve(request: web.BaseRequest, url: URL, forward: list[tuple[str, str]]) -> web.StreamResponse:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            return await self._served(request, str(url), peer, True, target=url, forward=forward)

        self.interceptor = Interceptor(ca, serve, max_field_size=cfg.max_header_size)
        await self.interceptor.start()
        self.addresses["mitm"] = f"127.0.0.1:{self.interceptor.port}"

    async def _start_dht(self) -> None:
        cfg = self.config
        assert cfg.dht_listen is not None
        try:
            self.dht = DhtNode.from_data_dir(cfg.data_dir / "dht", DhtConfig(lan_discovery=not cfg.no_lan_discovery))
            host, port = await self.dht.start(cfg.dht_listen.host, cfg.dht_listen.port)
        except OSError as exc:
            self.dht = None
            raise ListenError(f"cannot open the DHT socket on {cfg.dht_listen} (--dht-listen): "
                              f"{exc.strerror or exc}") from None
        except DhtLocalError as exc:
            self.dht = None
            raise ListenError(f"cannot start the DHT node: {exc}") from None
        self.addresses["dht"] = _join(host, port)
        if cfg.bootstrap:
            self._bootstrap_task = asyncio.create_task(self._bootstrap())

    def _discovery(self) -> Discovery | None:
        """The discovery backends started, as one `Discovery` (`swarm.discovery.compose`): our DHT, both roles (a
        provider directory and a claim store), and in the Internet mode the Mainline DHT's directory and claim store
        (`bittorrent.mainline_claims`: claims asked of their publishers); None when neither runs."""
        dht = DhtDiscovery(self.dht) if self.dht is not None else None
        mainline = self.internet.directory if self.internet is not None else None
        claims = self.internet.claims if self.internet is not None else None
        if dht is None and mainline is None:
            return None
        return compose([d for d in (dht, mainline) if d is not None], [s for s in (dht, claims) if s is not None])

    async def _start_engine(self) -> None:
        """The block engine, its peer listener(s) and the fallback hook (`--peer-listen`)."""
        from swarm.errors import StoreError
        from swarm.service.swarm_service import make_transports
        from swarm.store.disk import DiskBlockStore

        from .engine import SwarmEngine

        cfg = self.config
        assert cfg.peer_listen is not None
        try:
            # Loading re-verifies every stored block: a thread, so a big store does not stall the loop.
            store = await asyncio.to_thread(DiskBlockStore, cfg.data_dir / "blocks", capacity=cfg.store_size)
        except StoreError as exc:
            raise ListenError(f"cannot open the block store in {cfg.data_dir / 'blocks'}: {exc}") from None
        assert self._session is not None  # (made first, in start)
        self.engine = SwarmEngine(store, make_transports(cfg.transport), self.discovery, self._session,
                                  trust=cfg.trust, spool_dir=cfg.data_dir / "spool",
                                  linger=cfg.linger, share=not cfg.no_share, fetch_peers=cfg.fetch_peers,
                                  own_claims=self.internet.own_claims if self.internet is not None else None)
        if cfg.bt_listen is not None:
            self._start_bridge()  # before the engine starts: it shares what the store kept from the last run
        try:
            host, port = await self.engine.start(cfg.peer_listen.host, cfg.peer_listen.port)
        except OSError as exc:
            raise ListenError(f"cannot listen for peers on {cfg.peer_listen} (--peer-listen): "
                              f"{exc.strerror or exc}") from None
        self.addresses["peer"] = _join(host, port)
        if self.internet is not None:
            self.internet.peer_port(port, self.engine)
        self.fallback = Fallback(self.engine, self._session, self.stats,
                                 first_byte_timeout=cfg.first_byte_timeout, min_rate=cfg.min_rate,
                                 rate_window=cfg.rate_window, early_lookup=cfg.early_lookup,
                                 max_spool=cfg.store_size, block_size=cfg.block_size,
                                 adaptive=not cfg.no_adaptive, discover_size=cfg.discover_size,
                                 share_private_origins=cfg.share_private_origins,
                                 local_domains=cfg.local_domains, resolver=self.resolver)
        self.stats.watch_discovery(lambda: self.engine.counters if self.engine is not None else None)

    def _start_bridge(self) -> None:
        """--bt-listen: the BitTorrent bridge, seeding what the engine shares on the node's session."""
        from .bridge import Bridge

        assert self.internet is not None and self.internet.session is not None and self.engine is not None
        self.bridge = Bridge(self.engine, self.resolver, self.internet.session, local_domains=self.config.local_domains)
        self.bridge.start()
        self.stats.watch_bittorrent(lambda: self.bridge.status() if self.bridge is not None else {})

    async def _bootstrap(self) -> None:
        assert self.dht is not None
        nodes = [(node.host, node.port) for node in self.config.bootstrap]
        size = await self.dht.bootstrap(nodes)
        if size:
            log.info("DHT joined through %d bootstrap node(s): %d contacts", len(nodes), size)
        else:
            log.warning("DHT: no bootstrap node answered (%s); relying on LAN discovery and the saved table, "
                        "and asking them again while no node is known", ", ".join(f"{h}:{p}" for h, p in nodes))

    async def stop(self) -> None:
        # Requests first, while what they use still runs: a download cut off here hands its content to the
        # fallback and the engine (a partial swarm download is dropped, a finished one stored), and must not
        # run on against a closed engine, store or DHT.
        self._stopping = True
        if self._runner is not None and self._runner.server is not None:
            for site in list(self._runner.sites):
                await site.stop()  # no new connections
            self._runner.server.pre_shutdown()  # no new requests on open ones
        handling = list(self._handling)
        for task in handling:
            task.cancel()
        await asyncio.gather(*handling, return_exceptions=True)
        if self.interceptor is not None:
            await self.interceptor.stop()
        if self.fallback is not None:
            await self.fallback.close()
        if self.bridge is not None:  # its torrents stop before the store they read from closes
            self.bridge.stop()
        if self.engine is not None:  # its last withdrawals and lookups still have the Mainline DHT
            await self.engine.stop()
        if self.internet is not None:
            await self.internet.stop()
        if self.engine is not None:
            self.engine.store.close()
        if self._bootstrap_task is not None:
            self._bootstrap_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._bootstrap_task
        if self.dht is not None:
            await self.dht.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._handling.add(task)
        try:
            return await self._answer(request)
        finally:
            self._handling.discard(task)

    async def _answer(self, request: web.BaseRequest) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        loopback = is_loopback_peer(peer)
        target = request.raw_path
        unsupported = request.get(UNSUPPORTED_VERSION)
        if unsupported is not None:
            return self._refuse_version(unsupported, peer)
        if request.method != "CONNECT" and target.startswith("/"):
            return await self.admin.handle(request, loopback=loopback)
        return await self._served(request, target, peer, loopback)

    async def _fetch(self, request: web.BaseRequest) -> web.StreamResponse:
        """`/_swarm/fetch?url=URL` (the admin API checked that the client is local, and not a web page): the URL
        fetched as if the client had sent it through the proxy, https too (proxy.fetch_endpoint)."""
        peer = request.transport.get_extra_info("peername") if request.transport else None
        try:
            url = fetch_target(request.query.getall("url", []))
        except OriginError as exc:
            return _text(exc.status, f"{exc.status} {edge.phrase(exc.status)}: {exc.message}")
        # A link opened from outside the browser is a top-level navigation (Sec-Fetch-Site: none): an HTML answer
        # would run at the proxy's origin, same-origin with the admin API, unless sandboxed.
        request[SANDBOXED] = True
        return await self._served(request, str(url), peer, True, target=url,
                                  forward=forwarded_fields(request.headers))

    async def _served(self, request: web.BaseRequest, shown: str, peer: Any, loopback: bool, *,
                      target: URL | None = None, forward: list[tuple[str, str]] | None = None) -> web.StreamResponse:
        """Relay (or tunnel) one request, with its record from start to finish however it ends."""
        started = time.monotonic()
        client = str(peer[0]) if peer else "-"
        record = self.stats.begin(request.method, shown, client)
        response: web.StreamResponse | None = None
        try:
            target = self._refuse_self(request, target)
            if request.method == "CONNECT":
                self.stats.counters["tunnels"] += 1
                response = await connect(request, record, allowed=self.config.connect_ports,
                                         timeout=self.config.connect_timeout, local_client=loopback,
                                         divert=self.interceptor, idle=self.config.tunnel_idle_timeout,
                                         resolver=self.resolver)
            else:
                request[RECORD_ID] = record.id  # named in the response's Swarm-Request field (proxy.relay)
                response = await relay(request, self._session, record,  # type: ignore[arg-type]
                                       local_client=loopback, connect_timeout=self.config.connect_timeout,
                                       swarm=self.fallback, target=target, forward=forward,
                                       tunnel_idle=self.config.tunnel_idle_timeout, resolver=self.resolver)
            self.stats.finish(record, response.status, record.bytes_origin + record.bytes_peers,
                              time.monotonic() - started, record.error)
            return response
        except OriginError as exc:
            self.stats.finish(record, exc.status, 0, time.monotonic() - started, exc.message)
            return _text(exc.status, f"{exc.status} {edge.phrase(exc.status)}: {exc.message}")
        except ClientGone as exc:
            status = response.status if response else None
            self.stats.finish(record, status, record.bytes_origin + record.bytes_peers, time.monotonic() - started,
                              record.error or f"client_gone: {exc}")
            raise
        except asyncio.CancelledError:
            self.stats.finish(record, None, record.bytes_origin + record.bytes_peers, time.monotonic() - started,
                              "stopped: swarmproxy shut down" if self._stopping
                              else "client_gone: client closed the connection")
            raise

    def _refuse_version(self, version: tuple[int, int], peer: Any) -> web.StreamResponse:
        reason = edge.version_refusal(version)
        self.stats.counters["bad_requests"] += 1
        log.warning("rejected request from %s: %s", peer and peer[0], reason)
        response = _text(505, f"505 {edge.phrase(505)}: {reason}")
        response.force_close()
        return response

    def _refuse_self(self, request: web.BaseRequest, target: URL | None = None) -> URL | None:
        """OriginError(403) when the request's target is this proxy's own listener (see proxy.edge); else the URL
        a request other than CONNECT targets, read once here for the relay too."""
        if self._listen is None:
            return target
        url = None if request.method == "CONNECT" else origin_url(request.raw_path) if target is None else target
        host, port = parse_authority(request.raw_path) if url is None else (url.raw_host or "", url.port or 0)
        if edge.reaches_listener(host, port, *self._listen):
            raise OriginError(403, edge.self_refusal(host, port, self.addresses["proxy"]))
        return url


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bound(site: web.TCPSite) -> tuple[str, int]:
    server = cast(asyncio.Server | None, site._server)  # aiohttp exposes no public accessor for bound sockets
    assert server is not None and server.sockets
    host, port = server.sockets[0].getsockname()[:2]
    return host, port


def _write_atomically(path: os.PathLike | str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _raise_fd_limit() -> None:
    # Each proxied connection holds two sockets; the default soft limit (often 1024) would cap us
    # near 500 concurrent clients. Raising the soft limit to the hard one needs no privilege.
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
