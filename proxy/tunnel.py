"""Byte-for-byte tunnels: CONNECT (TLS and anything else on an allowed port) and protocol upgrades
(WebSocket) through absolute-form requests.

aiohttp's router cannot route CONNECT, so the tunnel is handled in the server's one handler, below
any router. aiohttp's parser treats CONNECT like an accepted upgrade: it stops parsing and keeps the
bytes that follow for whoever plugs a parser into the connection, which is what `_client_stream`
does. Both directions apply backpressure: each read waits until the previous write was drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import aiohttp
from aiohttp import streams, web

from .errors import OriginError
from .origin import describe_failure
from .origin_resolver import OriginResolver
from .responses import OwnStreamResponse
from .stats import RequestRecord

log = logging.getLogger("swarmproxy.tunnel")

CHUNK = 256 * 1024


class Divert(Protocol):
    """Where some CONNECTs go instead of their target (`proxy.mitm.Interceptor`)."""

    def wants(self, host: str, port: int) -> bool: ...

    async def open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter,
                                                         Callable[[], object]]: ...


def parse_authority(target: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port); OriginError(400) otherwise."""
    host, sep, port = target.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise OriginError(400, f"url: CONNECT target {target[:200]!r} is not host:port")
    return host, int(port)


def port_refusal(port: int, allowed: frozenset[int] | None) -> str | None:
    """Why CONNECT to `port` is refused, or None when it is allowed."""
    if allowed is None or port in allowed:
        return None
    listed = ",".join(str(p) for p in sorted(allowed)) or "none"
    return (f"CONNECT to port {port} is refused by this proxy: the setting --connect-ports "
            f"(SWARMPROXY_CONNECT_PORTS, connect-ports in the config file) allows {listed}. "
            f"Add {port} to it, or use * to allow every port.\n")


async def open_tunnel(host: str, port: int, *, timeout: float, local_client: bool,
                      resolver: OriginResolver | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to host:port, to the addresses `resolver` returned (so no second resolution can differ). A
    non-local client may not reach loopback or private addresses through us.

    The DNS-rebinding rule applies to tunnels as to the relay. A page could read little through one (to speak
    TLS to a local service it would need that service's certificate for its own name), but a browser tunnels a
    plain `ws://` WebSocket through CONNECT too, so a page re-pointed at 127.0.0.1 could talk to a local
    WebSocket server on an allowed port. Legitimate tunnels lose nothing: local names, IP literals,
    --local-domains and --share-private-origins are allowed exactly as for the relay."""
    try:
        async with asyncio.timeout(timeout):
            found = await (resolver or OriginResolver()).addresses_for(host, port, local_client=local_client)
            last: BaseException | None = None
            for result in found:
                try:
                    return await asyncio.open_connection(result["host"], result["port"], family=result["family"],
                                                         proto=result["proto"], limit=CHUNK)
                except OSError as exc:
                    last = exc
            assert last is not None
            raise last
    except OriginError:
        raise
    except Exception as exc:
        raise describe_failure(exc, host, port, connect_timeout=timeout) from None


async def connect(request: web.BaseRequest, record: RequestRecord, *, allowed: frozenset[int] | None,
                  timeout: float, local_client: bool, divert: Divert | None = None,
                  idle: float | None = None, resolver: OriginResolver | None = None) -> web.StreamResponse:
    """Answer a CONNECT: a byte tunnel to its target, or to `divert`'s connection when it wants the target (the
    `--mitm-hosts` listener, `proxy.mitm`); closed once no byte moved either way for `idle` s."""
    host, port = parse_authority(request.raw_path)
    refusal = port_refusal(port, allowed)
    if refusal:
        raise OriginError(403, refusal)
    release: Callable[[], object] = _nothing_to_release
    if divert is not None and divert.wants(host, port):
        reader, writer, release = await divert.open(host, port)
    else:
        reader, writer = await open_tunnel(host, port, timeout=timeout, local_client=local_client,
                                           resolver=resolver)
    try:
        return await _tunnel(request, record, reader, writer, idle)
    finally:
        release()


def _nothing_to_release() -> None:
    """A plain tunnel holds nothing beyond its sockets."""


async def _tunnel(request: web.BaseRequest, record: RequestRecord, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter, idle: float | None) -> web.StreamResponse:
    response = OwnStreamResponse(status=200, reason="Connection Established")
    from_client, to_client = await _take_over(request, response, record)

    async def to_origin(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    try:
        await _pump_both(
            client_read=from_client.readany,
            origin_read=lambda: reader.read(CHUNK),
            to_origin=to_origin,
            to_client=to_client,
            origin_half_close=functools.partial(_half_close, writer),
            idle=idle,
        )
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return response


class _RawFeed:
    """Parser stand-in that hands every byte after an upgrade to a StreamReader untouched.

    aiohttp's protocols (server and client side alike) accept a 'parser' via set_parser(); its
    WebSocket support plugs in a frame decoder there. We plug in nothing but a pass-through.
    """

    def __init__(self, stream: streams.StreamReader) -> None:
        self.stream = stream

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.stream.feed_data(data)
        return False, b""

    def feed_eof(self) -> None:
        self.stream.feed_eof()

    def set_exception(self, exc: BaseException, exc_cause: BaseException | None = None) -> None:
        self.stream.feed_eof()


async def pipe_upgraded(request: web.BaseRequest, response: web.StreamResponse,
                        upstream: aiohttp.ClientResponse, record: RequestRecord,
                        idle: float | None = None) -> web.StreamResponse:
    """After the origin said 101 Switching Protocols: pass the 101 on, then copy bytes both ways, until no byte
    moved either way for `idle` s."""
    loop = asyncio.get_running_loop()
    connection = upstream.connection
    assert connection is not None and connection.transport is not None
    origin_protocol, origin_transport = connection.protocol, connection.transport
    assert origin_protocol is not None  # a connection with a transport has its protocol
    from_origin = streams.StreamReader(origin_protocol, CHUNK, loop=loop)
    # aiohttp's parser slot takes any object with feed_data/feed_eof: a raw feed makes the connection a pipe.
    origin_protocol.set_parser(_RawFeed(from_origin), from_origin)
    from_client, to_client = await _take_over(request, response, record)

    async def to_origin(data: bytes) -> None:
        origin_transport.write(data)
        # The client protocol has no public drain; this is the helper aiohttp's own WebSocket
        # writer awaits for the same purpose.
        await origin_protocol._drain_helper()

    try:
        await _pump_both(
            client_read=from_client.readany,
            origin_read=from_origin.readany,
            to_origin=to_origin,
            to_client=to_client,
            origin_half_close=functools.partial(_half_close, origin_transport),
            idle=idle,
        )
    finally:
        upstream.close()
    return response


async def _take_over(request: web.BaseRequest, response: web.StreamResponse, record: RequestRecord) -> tuple[
        streams.StreamReader, Callable[[bytes], Awaitable[None]]]:
    """Send `response` (200 to CONNECT, 101 to an upgrade) now, and make the client connection a raw pipe.

    Returns the stream of bytes the client sends from here on, and a writer of bytes to the client.
    """
    from_client = streams.StreamReader(request.protocol, CHUNK, loop=asyncio.get_running_loop())
    request.protocol.set_parser(_RawFeed(from_client))  # type: ignore[arg-type]  # (any feed, as above)
    response.force_close()  # after a tunnel, the connection is the tunnel's; never reuse it for HTTP
    await response.prepare(request)
    _send_now(response)

    async def to_client(data: bytes) -> None:
        await response.write(data)
        record.bytes_origin += len(data)

    return from_client, to_client


def _send_now(response: web.StreamResponse) -> None:
    # aiohttp may hold headers back to send them with the first body chunk; a tunnel's client waits
    # for the status line before it says anything, so it must go out now.
    writer = response._payload_writer
    if writer is not None:
        writer.send_headers()


def _half_close(writer: asyncio.StreamWriter | asyncio.WriteTransport) -> None:
    """Pass a client's EOF on to the origin, where its transport can say so."""
    if writer.can_write_eof():
        writer.write_eof()


async def _pump_both(*, client_read: Callable[[], Awaitable[bytes]], origin_read: Callable[[], Awaitable[bytes]],
                     to_origin: Callable[[bytes], Awaitable[None]], to_client: Callable[[bytes], Awaitable[None]],
                     origin_half_close: Callable[[], object], idle: float | None = None) -> None:
    """Copy until either side is done, or no byte moved either way for `idle` s, then end the tunnel.

    A client's EOF is passed on as a half-close, but it ends the tunnel too: aiohttp's server closes
    a client transport on EOF, so nothing the origin said afterwards could reach the client anyway.
    """
    loop = asyncio.get_running_loop()
    moved = loop.time()  # when a byte last went either way

    async def upstream() -> None:
        nonlocal moved
        while data := await client_read():
            moved = loop.time()
            await to_origin(data)
        with contextlib.suppress(OSError, RuntimeError):
            origin_half_close()

    async def downstream() -> None:
        nonlocal moved
        while data := await origin_read():
            moved = loop.time()
            await to_client(data)

    async def quiet(idle: float) -> None:
        # A tunnel holds a --max-connections slot and two sockets: one nobody uses must not hold them forever.
        while (left := moved + idle - loop.time()) > 0:
            await asyncio.sleep(left)  # a timer: then see whether a byte moved meanwhile
        log.info("tunnel closed: no byte either way for %g s (--tunnel-idle-timeout)", idle)

    tasks = {asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())}
    if idle is not None:
        tasks.add(asyncio.ensure_future(quiet(idle)))
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, (ConnectionError, OSError, aiohttp.ClientError)):
            log.debug("tunnel ended: %s", result)
