"""Talking to origins: the pooled aiohttp client session and the mapping of its failures to answers.

The session is set up to change nothing on the way: no automatic decompression, no added
User-Agent/Accept/Accept-Encoding/Content-Type, URLs sent exactly as received.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import ssl
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver

import addresses

from .errors import OriginError
from .origin_head import OriginHead, describe
from .origin_resolver import OriginResolver, RebindingRefused

# Headers aiohttp's client would otherwise invent. A proxy forwards what the client sent, no more.
SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")

# Bytes the client session buffers per origin response before it pauses reading that socket (aiohttp pauses at
# twice this), and the most one read takes from it (`READ_CHUNK`). What a response holds while its client is slower
# than its origin is mostly this buffer: 1,000 concurrent 2 MB downloads (`bench.proxy_compare`'s memory figure)
# peaked at 216-325 KiB each with 64 KiB, 110-140 with 32 KiB (16 KiB: no less); 1 MiB once held 1.5 MiB each.
# Reads stay at 64 KiB: each read of a shared download is a step of its core.
READ_BUFSIZE = 1 << 15
READ_CHUNK = 1 << 16


def make_session(*, connect_timeout: float, read_timeout: float, max_connections: int,
                 ca_file: os.PathLike | str | None = None, resolver: AbstractResolver | None = None,
                 local_address: str | None = None) -> aiohttp.ClientSession:
    """The one client session to origins. HTTPS origins are verified as a browser would: the system's trust
    store (OpenSSL's default paths, which SSL_CERT_FILE and SSL_CERT_DIR change) plus `ca_file`. Names are
    resolved by `resolver`, by default an `OriginResolver` over the system's with no local domain and no listed
    origin: the connector connects only to the addresses it returns (the DNS-rebinding rule). `local_address`:
    where connections leave from (the demo's and the lab's nodes, each on a loopback address of its own, as
    separate hosts would be: an origin lists a client to others by the address its request came from)."""
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    connector = aiohttp.TCPConnector(
        resolver=resolver if resolver is not None else OriginResolver(),
        ssl=context,
        limit=max_connections,
        limit_per_host=0,
        ttl_dns_cache=30,
        enable_cleanup_closed=False,
        force_close=False,
        local_addr=None if local_address is None else (local_address, 0),
    )
    timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect_timeout,
                                    sock_read=read_timeout)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        skip_auto_headers=SKIP_AUTO_HEADERS,
        read_bufsize=READ_BUFSIZE,
        max_line_size=65536,
        max_field_size=65536,
        cookie_jar=aiohttp.DummyCookieJar(),  # a proxy must not keep or replay cookies
        trust_env=False,  # never chain to another proxy from the environment by surprise
        requote_redirect_url=False,
        response_class=OriginResponse,  # knows where its connection went (`connected_address`)
    )


# OpenSSL's verify results that mean "signed by a CA you do not trust" (X509_V_ERR_*): a private CA, a corporate
# proxy's, a self-signed origin. The fix is to give that CA to the proxy, the TLS client here, not to `get` or the
# browser; an expired certificate or one for another name is not cured by any CA.
UNKNOWN_ISSUER = {
    2,   # UNABLE_TO_GET_ISSUER_CERT
    18,  # DEPTH_ZERO_SELF_SIGNED_CERT
    19,  # SELF_SIGNED_CERT_IN_CHAIN
    20,  # UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    21,  # UNABLE_TO_VERIFY_LEAF_SIGNATURE
}
CA_FILE_HINT = ("; if you trust the CA that signed it, give it to the proxy, which verifies origins: swarmproxy run "
                "--ca-file CA.pem (or SSL_CERT_FILE)")


def describe_failure(exc: BaseException, host: str, port: int | None, *, connect_timeout: float | None = None,
                     read_timeout: float | None = None) -> OriginError:
    """Turn a connection-phase exception into the answer the client should get (502 or 504; 403 for a name the
    rebinding rule refused). `connect_timeout` and `read_timeout`, the settings in force, are named in a 504."""
    where = f"{host}:{port}" if port else host
    refused = getattr(exc, "os_error", None) if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(refused, RebindingRefused):  # the connector wraps what its resolver raised as a DNS error
        return OriginError(403, refused.message)
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(exc, socket.gaierror):
        cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
        return OriginError(502, f"dns: cannot resolve host {host}: {_strerror(cause)}")
    if isinstance(exc, aiohttp.SocketTimeoutError):  # the session's sock_read: silence once connected
        return OriginError(504, f"timeout: origin {where} was silent for {_seconds(read_timeout)} (the proxy's "
                                "--read-timeout)")
    if isinstance(exc, (aiohttp.ConnectionTimeoutError, asyncio.TimeoutError, TimeoutError)):
        return OriginError(504, f"timeout: origin {where} could not be reached within {_seconds(connect_timeout)} "
                                "(the proxy's --connect-timeout)")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        error = exc.certificate_error
        hint = CA_FILE_HINT if getattr(error, "verify_code", None) in UNKNOWN_ISSUER else ""
        return OriginError(502, f"tls: certificate of {where} is not valid: {error}{hint}")
    if isinstance(exc, (aiohttp.ClientSSLError, ssl.SSLError)):
        return OriginError(502, f"tls: TLS handshake with {where} failed: {exc}")
    if isinstance(exc, aiohttp.ClientConnectorError):
        exc = exc.os_error
    if isinstance(exc, ConnectionRefusedError):
        return OriginError(502, f"connect: cannot connect to {where}: connection refused")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return OriginError(502, f"origin: {where} closed the connection without answering")
    if isinstance(exc, aiohttp.ClientResponseError):
        return OriginError(502, f"origin: {where} sent an invalid response: {exc.message}")
    if isinstance(exc, aiohttp.InvalidURL):
        return OriginError(400, f"url: invalid URL {exc}")
    if isinstance(exc, OSError):
        return OriginError(502, f"connect: cannot connect to {where}: {_strerror(exc)}")
    return OriginError(502, f"origin: request to {where} failed: {type(exc).__name__}: {exc}")


def _seconds(setting: float | None) -> str:
    return "the time allowed" if setting is None else f"{setting:g} s"


def _strerror(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text[0].lower() + text[1:] if text else text


def _peer_of(connection) -> str | None:
    """The IP address a held connection's socket is connected to, in `addresses.canonical_host` form (an IPv4
    peer of a dual-stack socket as plain IPv4); None when it has no transport. HTTPS too: the TLS transport
    answers for the socket under it (asyncio's and uvloop's alike)."""
    transport = connection.transport if connection is not None else None
    peer = transport.get_extra_info("peername") if transport is not None else None
    if not peer:
        return None
    return _canonical_host(str(peer[0] if isinstance(peer, tuple) else peer))


# Asked of every origin response's socket: a handful of origins at a time, each spelled anew by `ipaddress`.
_canonical_host = functools.lru_cache(maxsize=addresses.KIND_CACHE)(addresses.canonical_host)


class OriginResponse(aiohttp.ClientResponse):
    """A client response that remembers where its connection went, read from the socket as its head is read.

    Asking the response's `connection` later is not enough: a body that arrived whole with the head (any small
    one, or none) hands the connection back to the pool within `start`, and the response then knows no
    connection at all."""

    peer_address: str | None = None

    async def start(self, connection):
        self.peer_address = _peer_of(connection)
        return await super().start(connection)


def connected_address(response: aiohttp.ClientResponse) -> str | None:
    """The IP address `response`'s connection really went to: what was connected, not what its name resolves to
    now. Known for every response of `make_session`'s session (`OriginResponse`); for another, only while it
    holds its connection. None means unknown, which must count as not public."""
    if isinstance(response, OriginResponse):
        return response.peer_address
    return _peer_of(response.connection)


class OriginStream:
    """One origin request: its head, then its body; `next()` gives (event, value) and raises nothing but a
    cancellation, so that a download's shell turns each outcome into one event of its core.

    `connected_address`: where the connection went (`connected_address()`), recorded when the head arrives; None
    before, or when it cannot be known. Whether content may be shared depends on it (`proxy.exposure.may_share`).

    The request is made by the first `next()`, in the task that awaits it (the download's shell asks for it at
    once), not in a task of its own: that cost a task and a turn of the loop on every GET, between the origin's
    head and the client's. Cancelling that `next()` cancels the request."""

    def __init__(self, session: aiohttp.ClientSession, url, headers: list[tuple[str, str]]) -> None:
        self._ask: tuple[aiohttp.ClientSession, Any, list[tuple[str, str]]] | None = (session, url, headers)
        self._failure: Exception | None = None  # why the head never came, for a `next()` after "head_failed"
        self._closed = False
        self.upstream: aiohttp.ClientResponse | None = None
        self.connected_address: str | None = None

    async def next(self) -> tuple[str, object]:
        if self.upstream is None:
            if self._ask is None:  # it failed, was closed, or another `next()` still waits for it
                return "head_failed", self._failure or ConnectionError("the origin stream was closed or is busy")
            session, url, headers = self._ask
            self._ask = None
            try:
                self.upstream = await session.request("GET", url, headers=headers, allow_redirects=False,
                                                      compress=None)
            except Exception as exc:  # unreachable, refused, timed out: the core says what it means
                self._failure = exc
                return "head_failed", exc
            self.connected_address = connected_address(self.upstream)
            if self._closed:  # closed while it was asked, its `next()` not cancelled: the connection is not kept
                self.upstream.release()
            return "head", self.upstream
        try:
            chunk = await self.upstream.content.read(READ_CHUNK)
        except (TimeoutError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            return "failed", f"origin stopped mid-response: {type(exc).__name__}"
        return ("data", chunk) if chunk else ("end", None)

    def ready(self) -> tuple[str, object] | None:
        """What `next()` would give now, when the body's bytes (or its end) are already read: the download's shell
        then feeds them without a task and a turn of the loop each (a small body came with its head, and so goes
        out with the client's head in one write). None when `next()` would wait, or report a failure."""
        upstream = self.upstream
        if upstream is None:
            return None
        content = upstream.content
        if content.exception() is not None:
            return None
        chunk = content.read_nowait(READ_CHUNK)
        if chunk:
            return "data", chunk
        return ("end", None) if content.at_eof() else None

    def close(self) -> None:
        self._ask, self._closed = None, True  # never asked after this; one under way ends with its `next()`
        if self.upstream is not None:
            self.upstream.release()  # back to the pool if its body was read to the end, else closed


async def head(session: aiohttp.ClientSession, url, headers: list[tuple[str, str]],
               request_headers) -> OriginHead | None:
    """The origin's answer to a HEAD, to know which version it serves now; None if it did not answer."""
    try:
        answer = await session.head(url, headers=headers, allow_redirects=False)
    except Exception:
        return None
    try:
        return describe(str(url), request_headers, answer.status, answer.headers, answer.raw_headers)
    finally:
        answer.release()
