"""Byte-for-byte tunnels: CONNECT (TLS and anything else on an allowed port) and protocol upgrades
(WebSocket) through absolute-form requests.

aiohttp's router cannot route CONNECT, so the tunnel is handled in the server's one handler, below
any router. aiohttp's parser treats CONNECT like an accepted upgrade: it stops parsing and keeps the
bytes that follow for whoever plugs a parser into the connection. From the 200 (or 101) on, the bytes are
copied by `proxy.pipe`, which adopts the client's connection (and an upgraded origin's) and applies
backpressure both ways.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import aiohttp
from aiohttp import web

from .errors import ClientGone, OriginError
from .origin import describe_failure
from .origin_resolver import OriginResolver
from .pipe import Pipe
from .responses import OwnStreamResponse
from .stats import RequestRecord


class Divert(Protocol):
    """Where some CONNECTs go instead of their target (`proxy.mitm.Interceptor`)."""

    def wants(self, host: str, port: int) -> bool: ...

    async def open(self, host: str, port: int, protocol_factory: Callable[[], asyncio.BaseProtocol]) -> tuple[
            asyncio.BaseTransport, Callable[[], object]]: ...


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


async def open_tunnel(host: str, port: int, protocol_factory: Callable[[], asyncio.BaseProtocol], *, timeout: float,
                      local_client: bool, resolver: OriginResolver | None = None) -> asyncio.BaseTransport:
    """Connect to host:port, to the addresses `resolver` returned (so no second resolution can differ), with a
    protocol of `protocol_factory`. A non-local client may not reach loopback or private addresses through us.

    The DNS-rebinding rule applies to tunnels as to the relay. A page could read little through one (to speak
    TLS to a local service it would need that service's certificate for its own name), but a browser tunnels a
    plain `ws://` WebSocket through CONNECT too, so a page re-pointed at 127.0.0.1 could talk to a local
    WebSocket server on an allowed port. Legitimate tunnels lose nothing: local names, IP literals,
    --local-domains and --share-private-origins are allowed exactly as for the relay."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            found = await (resolver or OriginResolver()).addresses_for(host, port, local_client=local_client)
            last: BaseException | None = None
            for result in found:
                try:
                    transport, _ = await loop.create_connection(protocol_factory, result["host"], result["port"],
                                                                family=result["family"], proto=result["proto"])
                    return transport
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
    pipe = Pipe(record, idle)
    release: Callable[[], object] = _nothing_to_release
    try:
        if divert is not None and divert.wants(host, port):
            _, release = await divert.open(host, port, pipe.origin_protocol)
        else:
            await open_tunnel(host, port, pipe.origin_protocol, timeout=timeout, local_client=local_client,
                              resolver=resolver)
        response = OwnStreamResponse(status=200, reason="Connection Established")
        await _take_over(request, response, pipe)
        await pipe.run()
        return response
    finally:
        pipe.close()
        release()


def _nothing_to_release() -> None:
    """A plain tunnel holds nothing beyond its sockets."""


async def pipe_upgraded(request: web.BaseRequest, response: web.StreamResponse,
                        upstream: aiohttp.ClientResponse, record: RequestRecord,
                        idle: float | None = None) -> web.StreamResponse:
    """After the origin said 101 Switching Protocols: pass the 101 on, then copy bytes both ways, until no byte
    moved either way for `idle` s."""
    connection = upstream.connection
    assert connection is not None and connection.transport is not None
    origin_protocol = connection.protocol
    assert origin_protocol is not None  # a connection with a transport has its protocol
    pipe = Pipe(record, idle)
    try:
        # aiohttp's client protocol hands the bytes after the 101's head to whatever parser is plugged in.
        pipe.origin.adopt(origin_protocol, connection.transport, lambda tail: origin_protocol.set_parser(tail, None))
        await _take_over(request, response, pipe)
        await pipe.run()
    finally:
        pipe.close()
        upstream.close()
    return response


async def _take_over(request: web.BaseRequest, response: web.StreamResponse, pipe: Pipe) -> None:
    """Make the client connection the pipe's client side, and send `response` (200 to CONNECT, 101 to an upgrade)
    now."""
    protocol, transport = request.protocol, request.transport
    if transport is None or transport.is_closing():
        raise ClientGone("client closed the connection")
    pipe.client.adopt(protocol, transport, protocol.set_parser)  # (any feed, as aiohttp's WebSocket reader)
    response.force_close()  # after a tunnel, the connection is the tunnel's; never reuse it for HTTP
    await response.prepare(request)
    _send_now(response)


def _send_now(response: web.StreamResponse) -> None:
    # aiohttp may hold headers back to send them with the first body chunk; a tunnel's client waits
    # for the status line before it says anything, so it must go out now.
    writer = response._payload_writer
    if writer is not None:
        writer.send_headers()
