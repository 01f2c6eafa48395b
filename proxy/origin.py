"""Talking to origins: the pooled aiohttp client session and the mapping of its failures to answers.

The session is set up to change nothing on the way: no automatic decompression, no added
User-Agent/Accept/Accept-Encoding/Content-Type, URLs sent exactly as received.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

import aiohttp

from .errors import OriginError
from .origin_head import OriginHead, describe

# Headers aiohttp's client would otherwise invent. A proxy forwards what the client sent, no more.
SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")

# Bytes the client session buffers per origin response before it pauses reading that socket.
# Large enough for few, big reads (throughput), small enough that a stalled client costs ~2 MiB.
READ_BUFSIZE = 1 << 20


def make_session(*, connect_timeout: float, read_timeout: float, max_connections: int,
                 ca_file: os.PathLike | str | None = None) -> aiohttp.ClientSession:
    """The one client session to origins. HTTPS origins are verified as a browser would: the system's trust
    store (OpenSSL's default paths, which SSL_CERT_FILE and SSL_CERT_DIR change) plus `ca_file`."""
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    connector = aiohttp.TCPConnector(
        ssl=context,
        limit=max_connections,
        limit_per_host=0,
        ttl_dns_cache=30,
        enable_cleanup_closed=False,
        force_close=False,
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
    )


def describe_failure(exc: BaseException, host: str, port: int | None) -> OriginError:
    """Turn a connection-phase exception into the answer the client should get (502 or 504)."""
    where = f"{host}:{port}" if port else host
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(exc, socket.gaierror):
        cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
        return OriginError(502, f"dns: cannot resolve host {host}: {_strerror(cause)}")
    if isinstance(exc, (aiohttp.ConnectionTimeoutError, asyncio.TimeoutError, TimeoutError)):
        # SocketTimeoutError (silence while reading) is a TimeoutError too: both are 504.
        return OriginError(504, f"timeout: origin {where} did not answer in time")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return OriginError(502, f"tls: certificate of {where} is not valid: {exc.certificate_error}")
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


def _strerror(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text[0].lower() + text[1:] if text else text


class OriginStream:
    """One origin request: its head, then its body; `next()` gives (event, value) and raises nothing but a
    cancellation, so that a download's shell turns each outcome into one event of its core."""

    def __init__(self, session: aiohttp.ClientSession, url, headers: list[tuple[str, str]]) -> None:
        self.request = asyncio.ensure_future(
            session.request("GET", url, headers=headers, allow_redirects=False, compress=None))
        self.upstream: aiohttp.ClientResponse | None = None

    async def next(self) -> tuple[str, object]:
        if self.upstream is None:
            try:
                self.upstream = await self.request
            except Exception as exc:  # unreachable, refused, timed out: the core says what it means
                return "head_failed", exc
            return "head", self.upstream
        try:
            chunk = await self.upstream.content.readany()
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
            return "failed", f"origin stopped mid-response: {type(exc).__name__}"
        return ("data", chunk) if chunk else ("end", None)

    def close(self) -> None:
        if not self.request.done():
            self.request.cancel()
        elif not self.request.cancelled() and self.request.exception() is None and self.upstream is None:
            self.upstream = self.request.result()
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
