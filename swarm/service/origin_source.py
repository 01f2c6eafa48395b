"""The origin as a Range source: one block range per HTTP `Range` request (a thin asyncio shell over aiohttp).

When the proxy falls back to the swarm, the origin stays one source among the peers (docs/ARCHITECTURE.md,
"Transition"):
`OriginRangeSource.fetch(offset, length)` asks it for exactly that byte range of the representation and returns
the bytes, or raises `OriginSourceError`. The bytes are *not* trusted here: like a peer's, they go through the
block hash check before anything else sees them. What this module guarantees is that the bytes come from the
same byte space as the manifest — the same representation, unencoded, at the right offset — so that a changed
or differently encoded file shows up as a source failure instead of as a stream of hash failures.

A request succeeds only if all of these hold; anything else is an `OriginSourceError`:

* status `206`, not `multipart/byteranges`;
* exactly one `Content-Range: bytes first-last/complete` with `first`/`last` the range asked and `complete`
  the manifest's size (`*` is refused: a source that does not know the length cannot be checked);
* no `Content-Encoding` (or the one expected), because `Accept-Encoding: identity` is sent: a range over a
  gzip-encoded representation would be a range of a different byte space;
* the response's `ETag` / `Last-Modified`, when present, equal to the validator — aiohttp's own static file
  handler, for one, ignores an ETag in `If-Range` and would happily serve a range of the new file;
* a body of exactly `length` bytes (`Content-Length`, when sent, must say so too).

Every request carries `If-Range: <validator>` when a validator is known (a strong ETag, or a Last-Modified
HTTP-date), so an origin whose representation changed answers `200` with the new one rather than a range of it.

Errors carry `permanent`: `True` means "this origin cannot serve ranges of this representation any more" (it
ignores `Range`, the validator or size changed, it answers in a byte space we cannot use, it refuses access);
the caller should stop using it as a Range source (`FetchCore.on_origin_failure(..., permanent=True)`). After
the first permanent failure the source refuses further fetches without contacting the origin. Transient
failures (5xx, 408/429, timeout, reset, truncated body) may be retried, here or elsewhere.

Requirements on the session: it must not decompress (create it with `auto_decompress=False`; the constructor
checks, and every request also passes `auto_decompress=False`), since the merkle root covers the bytes as sent.
Redirects are not followed: a representation is one URL; a 3xx means it moved, which is a permanent failure.

Limits: at most `max_concurrent` requests in flight (the origin's own cap, distinct from the per-peer caps,
so a flood of fallbacks cannot hammer it); a body is streamed into a preallocated buffer and never read past
`length + 1` bytes, so a `200` with a multi-gigabyte body costs one small read. `timeout` is a stall timeout
(connecting, waiting for the headers, or between body reads); an overall deadline is the request policy's
business — it cancels the `fetch` task, which closes the connection and frees the slot.
"""

from __future__ import annotations

import asyncio
import datetime
import re
from collections.abc import Callable
from email.utils import parsedate_to_datetime

import aiohttp
from yarl import URL

from swarm.errors import OriginSourceError

__all__ = ["OriginRangeSource", "DEFAULT_MAX_CONCURRENT", "DEFAULT_TIMEOUT"]

DEFAULT_MAX_CONCURRENT = 2
# No byte for this long: the request stalled. An overloaded origin shares its bandwidth among all its
# responses: the lab's 256 KB/s among 200 Range requests of a 100-client crowd sends each 16 KiB every 13 s,
# and at 10 s those requests failed and were asked again from the start, over and over.
DEFAULT_TIMEOUT = 30.0

# RFC 9110 §14.4: `range-unit SP first-pos "-" last-pos "/" ( complete-length / "*" )`. The unit is
# case-insensitive; digit counts are bounded so a hostile header cannot make us parse a huge integer.
_CONTENT_RANGE = re.compile(r"(?i:bytes) (\d{1,20})-(\d{1,20})/(\d{1,20}|\*)", re.ASCII)

# Statuses worth retrying later: the origin is busy or briefly unwell, the representation may still be fine.
_TRANSIENT_STATUSES = frozenset({408, 425, 429})


def _parse_http_date(value: str) -> datetime.datetime | None:
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:  # "-0000" and obsolete forms parse as naive; HTTP dates are always UTC
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed


class OriginRangeSource:
    """Fetches byte ranges of one representation from its origin with HTTP Range requests.

    `size` is the representation's length from the manifest; `validator` its strong ETag (with quotes, e.g.
    `'"abc"'`) or Last-Modified HTTP-date, or None when neither is known (then only `Content-Range`'s complete
    length and the block hashes stand between us and a changed file). `content_encoding` is the manifest's
    content coding, if the representation itself is encoded (a `.gz` served with `Content-Encoding: gzip`);
    by default the unencoded representation is asked for with `Accept-Encoding: identity`.

    Counters for metrics: `requests` (sent to the origin), `bytes_received` (body bytes read, including those
    of failed requests: it is the load we put on the origin), `failures`; gauges `in_flight` and `queued`.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        *,
        size: int,
        validator: str | None,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        timeout: float = DEFAULT_TIMEOUT,
        content_encoding: str | None = None,
    ) -> None:
        if session.auto_decompress:
            raise ValueError("the session must be created with auto_decompress=False: ranges are of encoded bytes")
        parsed_url = URL(url)
        if not parsed_url.is_absolute() or parsed_url.scheme not in ("http", "https"):
            raise ValueError(f"origin URL must be absolute http(s), got {url!r}")
        if type(size) is not int or size < 0:
            raise ValueError(f"size must be a non-negative int, got {size!r}")
        if type(max_concurrent) is not int or max_concurrent < 1:
            raise ValueError(f"max_concurrent must be a positive int, got {max_concurrent!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self._session = session
        self._url = parsed_url
        self._size = size
        self._validator = validator
        self._etag, self._date = self._classify_validator(validator)
        self._content_encoding = content_encoding.strip().lower() if content_encoding else None
        self._max_concurrent = max_concurrent
        self._semaphore = asyncio.Semaphore(max_concurrent)
        # total=None: a block of a slow origin may legitimately take long; only stalls are cut here.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        self._disabled: OriginSourceError | None = None
        self._in_flight = 0
        self._queued = 0
        self._requests = 0
        self._bytes_received = 0
        self._failures = 0

    @staticmethod
    def _classify_validator(validator: str | None) -> tuple[str | None, datetime.datetime | None]:
        """`(etag, date)`: which kind of validator this is, refusing what If-Range cannot carry."""
        if validator is None:
            return None, None
        if validator.startswith('"') and validator.endswith('"') and len(validator) >= 2:
            return validator, None
        if validator.startswith("W/"):
            # RFC 9110 §13.1.5: a client MUST NOT send a weak ETag in If-Range; it could not protect us anyway.
            raise ValueError(f"a weak ETag cannot be an If-Range validator: {validator!r}")
        date = _parse_http_date(validator)
        if date is None:
            raise ValueError(f"validator is neither a strong ETag nor an HTTP-date: {validator!r}")
        return None, date

    # -- metrics ----------------------------------------------------------------------------------------------

    @property
    def max_concurrent(self) -> int:
        return self._max_concurrent

    @property
    def in_flight(self) -> int:
        """Requests currently at the origin (never more than `max_concurrent`)."""
        return self._in_flight

    @property
    def queued(self) -> int:
        """`fetch` calls waiting for a free slot under the cap."""
        return self._queued

    @property
    def requests(self) -> int:
        return self._requests

    @property
    def bytes_received(self) -> int:
        return self._bytes_received

    @property
    def failures(self) -> int:
        return self._failures

    @property
    def disabled(self) -> OriginSourceError | None:
        """The permanent failure that retired this source, or None while it is usable."""
        return self._disabled

    # -- fetching ---------------------------------------------------------------------------------------------

    async def fetch(self, offset: int, length: int) -> bytes:
        """Bytes `offset .. offset+length-1` of the representation, or `OriginSourceError`.

        Waits for a slot under the concurrency cap first; the stall timeout starts only once the slot is held,
        since queueing behind our own cap is not the origin's fault. `ValueError` for a range outside `size`.
        """
        if type(offset) is not int or type(length) is not int or offset < 0 or length < 1:
            raise ValueError(f"bad range: offset {offset!r}, length {length!r}")
        if offset + length > self._size:
            raise ValueError(f"range {offset}+{length} beyond the representation's {self._size} bytes")
        self._raise_if_disabled()
        self._queued += 1
        try:
            await self._semaphore.acquire()
        finally:
            self._queued -= 1
        try:
            # Checked again: a request queued behind one that found the origin unusable must not be sent.
            self._raise_if_disabled()
            self._in_flight += 1
            self._requests += 1
            try:
                return await self._request(offset, length)
            except OriginSourceError as error:
                self._failures += 1
                if error.permanent and self._disabled is None:
                    self._disabled = error
                raise
            finally:
                self._in_flight -= 1
        finally:
            self._semaphore.release()

    def _raise_if_disabled(self) -> None:
        if self._disabled is not None:
            raise OriginSourceError(
                f"origin no longer used as a Range source: {self._disabled}",
                permanent=True,
                status=self._disabled.status,
            )

    async def _request(self, offset: int, length: int) -> bytes:
        last = offset + length - 1
        headers = {
            "Range": f"bytes={offset}-{last}",
            # Set explicitly: aiohttp would otherwise offer gzip/deflate/br, and the origin could answer with a
            # range of the compressed bytes.
            "Accept-Encoding": self._content_encoding or "identity",
        }
        if self._validator is not None:
            headers["If-Range"] = self._validator
        try:
            async with self._session.get(
                self._url,
                headers=headers,
                allow_redirects=False,
                raise_for_status=False,
                auto_decompress=False,
                timeout=self._timeout,
            ) as response:
                try:
                    self._check_headers(response, offset, last, length)
                    return await self._read_body(response, length)
                except OriginSourceError:
                    # Drop the connection rather than drain it: the rest may be a whole multi-GB 200 body.
                    response.close()
                    raise
        except OriginSourceError:
            raise
        except TimeoutError as exc:  # aiohttp's ServerTimeoutError / ConnectionTimeoutError derive from it
            raise OriginSourceError(
                f"origin Range request {offset}-{last} stalled for more than {self._timeout.sock_read} s",
                permanent=False,
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            # Refused, reset, closed mid-body (ClientPayloadError), unparsable response: the connection failed,
            # not necessarily the representation.
            raise OriginSourceError(
                f"origin Range request {offset}-{last} failed: {type(exc).__name__}: {exc}", permanent=False
            ) from exc

    def _check_headers(self, response: aiohttp.ClientResponse, offset: int, last: int, length: int) -> None:
        status = response.status
        asked = f"bytes {offset}-{last}/{self._size}"

        def fail(message: str, *, permanent: bool = True) -> OriginSourceError:
            return OriginSourceError(f"origin answered {status} to Range {asked}: {message}", permanent=permanent,
                                     status=status)

        if status != 206:
            raise fail(self._status_reason(response), permanent=not self._status_is_transient(status))
        content_type = response.headers.get("Content-Type", "")
        if content_type.split(";", 1)[0].strip().lower() == "multipart/byteranges":
            raise fail("multipart/byteranges, one part was asked for")
        encodings = response.headers.getall("Content-Encoding", [])
        encoding = ",".join(e.strip().lower() for e in encodings if e.strip()) or None
        if encoding == "identity":
            encoding = None
        if encoding != self._content_encoding:
            raise fail(f"Content-Encoding {encoding or 'none'}, expected {self._content_encoding or 'none'}: "
                       "a range of a differently encoded byte space")
        ranges = response.headers.getall("Content-Range", [])
        if len(ranges) != 1:
            raise fail(f"{len(ranges)} Content-Range headers, expected one")
        match = _CONTENT_RANGE.fullmatch(ranges[0].strip())
        if match is None:
            raise fail(f"malformed Content-Range {ranges[0]!r}")
        first, end, complete = match.groups()
        if complete == "*":
            raise fail("Content-Range with unknown complete length '*', the size cannot be checked")
        if int(complete) != self._size:
            raise fail(f"complete length {complete}, the representation is {self._size} bytes: it changed")
        if (int(first), int(end)) != (offset, last):
            raise fail(f"Content-Range {ranges[0]!r} is not the range asked")
        self._check_validator(response, fail)
        if response.content_length is not None and response.content_length != length:
            raise fail(f"Content-Length {response.content_length}, the range is {length} bytes")

    def _check_validator(
        self, response: aiohttp.ClientResponse, fail: Callable[[str], OriginSourceError]
    ) -> None:
        # Defence in depth behind If-Range: an origin that ignores If-Range (or only understands dates) still
        # labels its 206 with the current validator, and a different one means a different representation.
        if self._etag is not None:
            etag = response.headers.get("ETag")
            if etag is not None and etag.strip() != self._etag:
                raise fail(f"ETag {etag.strip()} differs from the validator {self._etag}: the representation changed")
        elif self._date is not None:
            header = response.headers.get("Last-Modified")
            modified = _parse_http_date(header) if header is not None else None
            if modified is not None and modified != self._date:
                raise fail(f"Last-Modified {header} differs from the validator {self._validator}: it changed")

    @staticmethod
    def _status_is_transient(status: int) -> bool:
        return status in _TRANSIENT_STATUSES or 500 <= status <= 599

    def _status_reason(self, response: aiohttp.ClientResponse) -> str:
        status = response.status
        if status == 200:
            return ("the full representation instead of a range: the origin ignores Range, or the If-Range "
                    "validator no longer matches (the representation changed)")
        if status == 416:
            unsatisfied = response.headers.get("Content-Range")
            return f"range not satisfiable (Content-Range {unsatisfied!r}): the representation changed size"
        if 300 <= status <= 399:
            return f"a redirect to {response.headers.get('Location')!r}: the representation moved"
        if self._status_is_transient(status):
            return "temporary failure"
        return "not a partial content response"

    async def _read_body(self, response: aiohttp.ClientResponse, length: int) -> bytes:
        # One preallocated buffer, filled in place; reads are capped at what is still missing, so the body is
        # never buffered past `length` bytes, plus the one byte that proves an overlong body.
        buffer = bytearray(length)
        received = 0
        stream = response.content
        while received < length:
            chunk = await stream.read(length - received)
            if not chunk:
                break
            buffer[received : received + len(chunk)] = chunk
            received += len(chunk)
            self._bytes_received += len(chunk)
        if received < length:
            # A clean end of a close-delimited or chunked body before the promised range: most likely a cut
            # connection (a Content-Length mismatch would have been caught earlier), so worth another try.
            raise OriginSourceError(
                f"origin body ended after {received} of {length} bytes of range "
                f"{response.headers.get('Content-Range')}",
                permanent=False,
                status=response.status,
            )
        extra = await stream.read(1)
        if extra:
            self._bytes_received += len(extra)
            raise OriginSourceError(
                f"origin body is longer than the {length} bytes of range {response.headers.get('Content-Range')}",
                permanent=True,
                status=response.status,
            )
        return bytes(buffer)  # the one copy: callers and the hash check expect immutable bytes
