"""Forwarding absolute-form requests (`GET http://host/path HTTP/1.1`) to their origin.

Bodies stream both ways with backpressure: a chunk is read from one side only after the previous one
was accepted by the other, so a client that stops reading stops the origin download (bounded memory),
and an upload is never buffered whole. Content bytes are passed on untouched.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from yarl import URL

from swarm.content.manifest import ACCEPT_HEADER

from . import headers as hdr
from .errors import ClientGone, OriginError
from .origin import READ_CHUNK, describe_failure
from .origin_resolver import OriginResolver
from .pipe import Body
from .stats import RequestRecord
from .tunnel import pipe_upgraded

log = logging.getLogger("swarmproxy.relay")

# Request fields never forwarded besides the hop-by-hop ones: Host is rebuilt from the absolute URL
# (RFC 9112 §3.2.2), Expect is answered here (we send 100 Continue ourselves and stream the body), and Swarm-Accept
# is the proxy's to say, not a client's (the fallback's first GET: `DownloadSettings.leaves_at_hint`).
DROP_FROM_REQUEST = ("host", "expect", ACCEPT_HEADER.lower())

SCHEMES = {"http": "http", "https": "https", "ws": "http", "wss": "https"}

# A body with at least this much still to come (its length known) goes from the origin's connection to the client's
# at the protocol level (`proxy.pipe.Body`): no copy of ours and no await per chunk, and about one socket read held a
# download instead of aiohttp's reader's buffer. That connection cannot go back to the pool afterwards (its parser is
# left mid-body): below this, keeping it for the next request is worth more than the copies.
BODY_PIPE_MIN = 1 << 20

# The id of the request's record (`Stats.begin`), put on the request by the server before relaying it: response
# heads are made in more than one place (here, and in the fallback download), each given the request, not always
# the record.
RECORD_ID = web.RequestKey("swarmproxy.record_id", str)
# Set on an explicit fetch (`/_swarm/fetch`): its answer is served at the proxy's own origin, where the admin API
# is same-origin, so it carries `Content-Security-Policy: sandbox` (an opaque origin: its scripts reach nothing).
SANDBOXED = web.RequestKey("swarmproxy.sandboxed", bool)


class RelayedResponse(web.StreamResponse):
    """A StreamResponse that adds no Content-Type or Server field the origin did not send, and names the request's
    record in `Swarm-Request` (`headers.REQUEST_ID`).

    aiohttp's server fills both in by default; for a proxy that would change what the client
    sniffs and who it thinks answered.
    """

    async def prepare(self, request: web.BaseRequest):
        if not self.prepared:
            # Ours replaces any the origin sent: that one would name a record of some other proxy, or be forged.
            record_id = request.get(RECORD_ID)
            if record_id:
                self.headers[hdr.REQUEST_ID] = record_id
            else:
                self.headers.popall(hdr.REQUEST_ID, None)
            if request.get(SANDBOXED):  # added, so that the origin's own policies still apply too
                self.headers.add("Content-Security-Policy", "sandbox")
            writer = await super().prepare(request)
            if not self._send_headers_immediately and writer is not None:  # held back for its body (`response_for`)
                asyncio.get_running_loop().call_soon(_send_held_head, writer)
            return writer
        return await super().prepare(request)

    async def _prepare_headers(self) -> None:
        had = {name for name in ("Content-Type", "Server") if name in self.headers}
        await super()._prepare_headers()
        for name in ("Content-Type", "Server"):
            if name not in had:
                self.headers.popall(name, None)


def _send_held_head(writer: AbstractStreamWriter) -> None:
    """A held head whose body was not written in the same turn of the loop goes out alone now: the fallback download
    reads the body in later turns, and the head must not wait on them (nor be lost if that read fails)."""
    transport = writer.transport
    if transport is not None and not transport.is_closing():
        writer.send_headers()  # nothing when it went out with the body


def origin_url(raw_target: str) -> URL:
    """The origin URL of an absolute-form target; OriginError(400) when it is not one we can fetch."""
    try:
        url = URL(raw_target, encoded=True)
    except (ValueError, TypeError) as exc:
        raise OriginError(400, f"url: cannot parse request target {raw_target[:200]!r}: {exc}") from None
    scheme = SCHEMES.get(url.scheme.lower())
    if scheme is None:
        raise OriginError(400, f"url: unsupported scheme {url.scheme!r} in {raw_target[:200]!r} "
                               "(this proxy fetches http, https, ws and wss URLs)")
    if not url.raw_host:
        raise OriginError(400, f"url: request target {raw_target[:200]!r} has no host")
    if scheme != url.scheme:
        url = url.with_scheme(scheme)
    return url.with_fragment(None)


def _sanitize(value: str) -> str:
    # Field values arrive decoded as UTF-8 with surrogate escapes; aiohttp's writer encodes strictly.
    # Re-decoding as latin-1 keeps odd bytes from raising (they are rare and obsolete, RFC 9110 §5.5).
    if value.isascii():  # nearly every value: no encoding made to find out
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("latin-1")


class SwarmHook(Protocol):
    async def get(self, request: web.BaseRequest, url: URL, headers: list[tuple[str, str]],
                  record: RequestRecord) -> web.StreamResponse | None:
        """Answer a GET that may switch to the swarm, or None to leave it to the plain relay."""


async def relay(request: web.BaseRequest, session: aiohttp.ClientSession, record: RequestRecord, *,
                local_client: bool, connect_timeout: float, swarm: SwarmHook | None = None,
                target: URL | None = None, forward: list[tuple[str, str]] | None = None,
                tunnel_idle: float | None = None, resolver: OriginResolver | None = None) -> web.StreamResponse:
    """Answer `request` from its origin. Raises OriginError before a response started, ClientGone after.

    A GET without a body goes to `swarm` first (the fallback download, `proxy.download.fallback`), which answers it
    when the publish gate lets it switch to peers; everything else is relayed here as is. `target` and
    `forward`: the URL and request fields to use instead of the request's own (the explicit fetch,
    `proxy.fetch_endpoint`). `resolver`: the one in `session`'s connector (which applies the DNS-rebinding rule
    to every request); a client not on this machine is first checked against it for internal addresses.
    """
    url = origin_url(request.raw_path) if target is None else target
    if not local_client:
        # The session resolves again when it connects (through its DNS cache). A public name cannot slip a
        # private address into that window (the session's resolver refuses it), but a local name could: one
        # reason --allow-remote is off by default.
        try:
            async with asyncio.timeout(connect_timeout):
                await (resolver or OriginResolver()).addresses_for(url.raw_host or "", url.port or 80,
                                                                   local_client=False)
        except OriginError:
            raise
        except Exception as exc:
            raise describe_failure(exc, url.raw_host or "", url.explicit_port,
                                   connect_timeout=connect_timeout) from None
    upgrade = hdr.wants_upgrade(request.headers.items()) if forward is None else None
    out_headers = hdr.add_via(
        hdr.end_to_end(request.headers.items(), drop=DROP_FROM_REQUEST, upgrade=upgrade is not None),
        request.version,
    )
    out_headers = [(name, _sanitize(value)) for name, value in (out_headers if forward is None else forward)]
    body = request.content if request.body_exists else None
    if body is not None and request.headers.get("Expect", "").lower() == "100-continue" and request.version >= (1, 1):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    if swarm is not None and request.method == "GET" and body is None and upgrade is None:
        answered = await swarm.get(request, url, out_headers, record)
        if answered is not None:
            return answered

    try:
        upstream = await session.request(
            request.method,
            url,
            headers=out_headers,
            data=body,
            allow_redirects=False,
            compress=None,
            chunked=None,
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise describe_failure(exc, url.raw_host or "", url.explicit_port, connect_timeout=session.timeout.sock_connect,
                               read_timeout=session.timeout.sock_read) from None

    try:
        response = response_for(upstream, upgrade=upstream.status == 101 and upgrade is not None)
        if upstream.status == 101:
            return await pipe_upgraded(request, response, upstream, record, tunnel_idle)
        await response.prepare(request)
        await _copy_body(upstream, response, request, record)
        return response
    finally:
        upstream.release()


def response_for(upstream: aiohttp.ClientResponse, *, upgrade: bool = False) -> RelayedResponse:
    """The client's response head for an origin response: end-to-end fields, Via, nothing invented.

    When the origin's body (or its end) came with its head, as a small response's does, the head is held back to go
    out with the first body bytes in one write: one send instead of two, and the client wakes once (the plain relay
    writes them in the same turn of the loop; otherwise the head goes out alone at the next turn, `_send_held_head`).
    A head whose body has not come, or broke off already, goes out when prepared."""
    version = upstream.version or (1, 1)  # aiohttp sets it once the status line is read, as it has been here
    fields = hdr.add_via(hdr.end_to_end(upstream.headers.items(), upgrade=upgrade), version)
    response = RelayedResponse(status=upstream.status, reason=_reason(upstream.reason),
                               headers=[(name, _sanitize(value)) for name, value in fields])
    content = upstream.content
    if not upgrade and (content.total_bytes or content.is_eof()) and content.exception() is None:
        # aiohttp's own Response holds its head the same way; a StreamResponse sends it at `prepare` unless told.
        response._send_headers_immediately = False
    return response


async def _copy_body(upstream: aiohttp.ClientResponse, response: web.StreamResponse,
                     request: web.BaseRequest, record: RequestRecord) -> None:
    content = upstream.content
    try:
        if (body := _body_pipe(upstream, response, request, record)) is not None:
            await body.run()
            upstream.close()  # mid-body to its parser: never back to the pool
        else:
            while True:
                chunk = await content.read(READ_CHUNK)
                if not chunk:
                    break
                await response.write(chunk)
                record.bytes_origin += len(chunk)
    except (TimeoutError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
        if request.transport is None or request.transport.is_closing():
            raise ClientGone("client closed the connection") from None
        # The origin failed mid-body. Ending the response normally would hand the client a short
        # body that looks complete; cutting the connection makes the truncation visible to it
        # (Content-Length unmet or no final chunk).
        upstream.close()
        record.error = f"origin_cut: origin stopped mid-response after {record.bytes_origin} bytes: " \
                       f"{type(exc).__name__}"
        request.transport.close()
        raise ClientGone(record.error) from None
    except ConnectionError:
        upstream.close()
        raise ClientGone("client closed the connection") from None
    await response.write_eof()


def _body_pipe(upstream: aiohttp.ClientResponse, response: web.StreamResponse, request: web.BaseRequest,
               record: RequestRecord) -> Body | None:
    """The rest of a body of known length with at least BODY_PIPE_MIN to come, taken over at the protocol level
    (`proxy.pipe.Body`); None to read it through aiohttp's reader (unknown length, chunked, short, or over)."""
    content, connection, writer = upstream.content, upstream.connection, response._payload_writer
    length = upstream.content_length
    if (length is None or "Transfer-Encoding" in upstream.headers or connection is None
            or connection.transport is None or connection.protocol is None or writer is None or response.chunked
            or request.transport is None or content.is_eof() or content.exception() is not None
            or length - content.total_bytes < BODY_PIPE_MIN):
        return None
    writer.send_headers()  # aiohttp may hold the head back for the first chunk, which now goes past its writer
    buffered = content.read_nowait()
    left = length - content.total_bytes + len(buffered)
    # The session's --read-timeout, which aiohttp's protocol applied until now.
    body = Body(record, request.transport, request.protocol, writer, left, connection.protocol.read_timeout)
    body.adopt(connection.protocol, connection.transport, buffered)
    return body


def _reason(reason: str | None) -> str | None:
    if reason and all(32 <= ord(c) < 127 or c == "\t" for c in reason):
        return reason
    return None
