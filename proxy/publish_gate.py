"""May this request/response pair ever be swarmed or announced? (pure functions, table-tested)

Announcing a URL tells strangers what we fetched, and serving a stranger's blocks for it assumes
everyone gets the same bytes, so the gate is stricter than a shared cache (RFC 9111 §3; docs/ARCHITECTURE.md
"Privacy and exposure"). A pair is swarmable only when every rule below holds; the first rule that
fails names the `reason`:

  request side (`request_gate`, decidable before any response — the T case)
    url            the URL is not printable ASCII, does not parse or has no host
    scheme         not http or https
    userinfo       credentials in the URL (user:pass@host)
    signed-url     a query, fragment or `;path` parameter named like a credential, signature or expiry
                   (S3, GCS, CloudFront, Azure SAS, Akamai, nginx secure_link, OAuth, api keys, sessions...)
    secret-value   a parameter whose value is not a short word, small number or version: the URL rule fails
                   closed on values (`proxy.url_privacy` says exactly what passes and why)
    method         not GET (methods are case-sensitive, RFC 9110 §9.1)
    conditional    If-None-Match / If-Modified-Since / If-Match / If-Unmodified-Since (If-Range is fine:
                   it only turns a Range request into a full answer)
    no-store       Cache-Control: no-store on the request
    private        Cache-Control: private on the request
    authorization  / cookie: credentials on the request. `request_gate` cannot know yet whether the
                   response will be `public`, so it refuses; `gate` lets `public` excuse them
  response side (`gate`)
    no-response    there is no response yet: use `request_gate` for the before-headers decision
    status         final status other than 200 or 206
    content-range  a 206 whose Content-Range is not `bytes a-b/N` with a known N (multipart, `*`, nonsense)
                   or disagrees with its Content-Length
    no-store, private   in the response's Cache-Control (any `private`, also `private="set-cookie"`)
    authorization, cookie   credentials on the request and the response is not `Cache-Control: public`
    freshness      credentials excused by `public`, but the response does not state a positive freshness
                   lifetime of its own: s-maxage, else max-age, else Expires minus Date (RFC 9111 §4.2.1
                   order), must be > 0, and `no-cache` refuses. RFC 9111 §3.5 lets a shared cache store
                   such a response on `public`, `s-maxage` or `must-revalidate` alone, because it checks
                   back with the origin (with the next user's credentials) once the response is stale;
                   strangers served by peers never check back, so we want `public` (the origin says it is
                   the same for everyone) and a lifetime during which it says no check is needed
    set-cookie     the response sets a cookie: it is someone's session
    vary           Vary names anything but Accept-Encoding (`Vary: *` included)
    no-validator   neither a strong ETag nor a Last-Modified (weak `W/` ETags do not identify bytes)
    no-length      no usable length: Content-Length missing, malformed or conflicting, or framed by
                   Transfer-Encoding (RFC 9112 §6.3: then Content-Length must be ignored)
    encoding       a Content-Encoding other than identity with only Last-Modified as validator: gzip and
                   identity variants at one URL share Last-Modified, so (URL, validator) would not name
                   one byte sequence; a strong ETag differs per encoding (RFC 9110 §8.8.3)
    ok             swarmable

Headers come as any iterable of (name, value) pairs or a mapping with `.items()` (aiohttp's
CIMultiDict included — iterating one directly would yield names only). Names are case-insensitive
and repeated fields are merged with ", " as RFC 9110 §5.3 allows, except where noted.

`redact_url` (from `proxy.url_privacy`) is re-exported here: the URL as a log or the admin API may show it,
with whatever this gate refuses in it replaced by REDACTED.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .url_privacy import redact_url, url_reason

__all__ = ["GateDecision", "OK", "cache_control", "content_length_of", "content_range", "gate", "last_modified",
           "gate_and_length", "redact_url", "request_gate", "strong_etag", "validator_of"]

HeaderSource = Iterable[tuple[str, str]] | Mapping[str, str] | Any


@dataclass(frozen=True)
class GateDecision:
    swarmable: bool
    reason: str


OK = GateDecision(True, "ok")

_CONDITIONAL = ("if-none-match", "if-modified-since", "if-match", "if-unmodified-since")

_STRONG_ETAG = re.compile(r'"[\x21\x23-\x7e\x80-\xff]*"')
_DIGITS = re.compile(r"[0-9]{1,19}")  # < 2**63; longer is nonsense (and int() refuses > 4300 digits)
_CONTENT_RANGE = re.compile(r"bytes[ \t]+([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19})", re.IGNORECASE)
_DIRECTIVE = re.compile(r'\s*([^\s=,";]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"?|[^\s,;]*))?\s*')


# -- header access -----------------------------------------------------------------------------------------


def _fields(headers: HeaderSource | None) -> dict[str, list[str]]:
    """Lower-cased name -> every field line's value, in order."""
    if headers is None:
        return {}
    items = headers.items() if hasattr(headers, "items") else headers
    fields: dict[str, list[str]] = {}
    for name, value in items:
        key = str(name).strip().lower()
        if key in fields:
            fields[key].append(str(value).strip())
        else:  # not `setdefault(key, [])`, which makes a list for every field line
            fields[key] = [str(value).strip()]
    return fields


def _merged(fields: dict[str, list[str]], name: str) -> str | None:
    values = fields.get(name)
    return None if values is None else ", ".join(values)


def _present(fields: dict[str, list[str]], name: str) -> bool:
    """At least one non-blank field line (an empty `Cookie:` carries nothing)."""
    return any(fields.get(name, ()))


def _list_tokens(value: str | None) -> list[str]:
    return [t.strip().lower() for t in (value or "").split(",") if t.strip()]


def cache_control(value: str | None) -> dict[str, str | None]:
    """Cache-Control directives, names lower-cased, quoted arguments unquoted (RFC 9111 §5.2).

    Commas inside a quoted argument (`private="set-cookie, x-a"`) do not split directives. The first
    occurrence of a repeated directive wins; unparsable text between commas is skipped.
    """
    directives: dict[str, str | None] = {}
    text = value or ""
    i = 0
    while i < len(text):
        match = _DIRECTIVE.match(text, i)
        if match is None or match.end() == i:
            # Not a directive here: skip to the next comma outside quotes.
            comma = text.find(",", i)
            i = len(text) if comma < 0 else comma + 1
            continue
        name, arg = match.group(1).lower(), match.group(2)
        if arg is not None and arg.startswith('"'):
            arg = re.sub(r"\\(.)", r"\1", arg[1:-1] if len(arg) > 1 and arg.endswith('"') else arg[1:])
        directives.setdefault(name, arg)
        i = match.end()
        comma = text.find(",", i)
        i = len(text) if comma < 0 else comma + 1
    return directives


def _http_date(value: str) -> bool:
    try:
        return email.utils.parsedate_to_datetime(value) is not None
    except (TypeError, ValueError, IndexError, OverflowError):
        return False


def _single_integer(values: list[str]) -> int | None:
    """A Content-Length: one number, or the same number repeated ("5, 5", RFC 9110 §8.6)."""
    numbers = {t.strip() for v in values for t in v.split(",")}
    if len(numbers) != 1:
        return None
    (number,) = numbers
    return int(number) if _DIGITS.fullmatch(number) else None


def content_range(value: str | None) -> tuple[int, int, int] | None:
    """(first, last, complete length) of `bytes a-b/N`, or None if absent, unknown-length or invalid."""
    match = _CONTENT_RANGE.fullmatch((value or "").strip())
    if match is None:
        return None
    first, last, complete = (int(g) for g in match.groups())
    if not first <= last < complete:
        return None
    return first, last, complete


# -- public helpers -------------------------------------------------------------------------------------


def strong_etag(response_headers: HeaderSource | None) -> str | None:
    """The ETag as sent (with its quotes) if there is exactly one and it is strong and well-formed."""
    return _strong_etag(_fields(response_headers))


def last_modified(response_headers: HeaderSource | None) -> str | None:
    """The Last-Modified value as sent, if there is exactly one and it is an HTTP-date."""
    return _last_modified(_fields(response_headers))


def _strong_etag(fields: dict[str, list[str]]) -> str | None:
    values = fields.get("etag", [])
    if len(values) != 1 or not _STRONG_ETAG.fullmatch(values[0]):
        return None  # absent, weak (W/"..."), unquoted, or two ETag fields that contradict
    return values[0]


def _last_modified(fields: dict[str, list[str]]) -> str | None:
    # An invalid date is to be ignored (RFC 9110 §8.8.2); it would make a poor identity anyway.
    values = fields.get("last-modified", [])
    if len(values) != 1 or not _http_date(values[0]):
        return None
    return values[0]


def validator_of(response_headers: HeaderSource | None) -> str | None:
    """The validator that names the representation: the strong ETag as sent (e.g. `"abc"`), else
    `"LM " + Last-Modified` (e.g. `LM Tue, 15 Nov 1994 08:12:31 GMT`), else None.

    The prefix keeps a Last-Modified from ever equalling an ETag. The length, which docs/ARCHITECTURE.md pairs
    with Last-Modified, travels separately in the manifest (size), so it is not repeated here.
    """
    fields = _fields(response_headers)
    etag = _strong_etag(fields)
    if etag is not None:
        return etag
    modified = _last_modified(fields)
    return None if modified is None else "LM " + modified


def content_length_of(status: int | None, response_headers: HeaderSource | None) -> int | None:
    """The representation's complete length: Content-Length of a 200, the `/N` of a 206's
    Content-Range; None when unknown, malformed, or the body is framed by Transfer-Encoding."""
    return _content_length(status, _fields(response_headers))


def _content_length(status: int | None, fields: dict[str, list[str]]) -> int | None:
    if status == 206:
        mapped = content_range(_merged(fields, "content-range"))
        if mapped is None:
            return None
        first, last, complete = mapped
        if "content-length" in fields and _single_integer(fields["content-length"]) != last - first + 1:
            return None
        return complete
    if status != 200 or "transfer-encoding" in fields or "content-length" not in fields:
        return None
    return _single_integer(fields["content-length"])


# -- the gate -----------------------------------------------------------------------------------------------


def _request_reason(method: str, url: str, fields: dict[str, list[str]]) -> str | None:
    reason = url_reason(url)
    if reason is not None:
        return reason
    if method != "GET":
        return "method"
    if not fields.keys().isdisjoint(_CONDITIONAL):
        return "conditional"
    directives = cache_control(_merged(fields, "cache-control"))
    if "no-store" in directives:
        return "no-store"
    if "private" in directives:
        return "private"
    return None


def _credential(fields: dict[str, list[str]]) -> str | None:
    if _present(fields, "authorization"):
        return "authorization"
    if _present(fields, "cookie"):
        return "cookie"
    return None


def request_gate(method: str, url: str, request_headers: HeaderSource | None) -> GateDecision:
    """What can be decided before the origin answers (the T case). Conservative: credentials are
    refused here, since only a response could excuse them."""
    fields = _fields(request_headers)
    reason = _request_reason(method, url, fields) or _credential(fields)
    return OK if reason is None else GateDecision(False, reason)


def gate(method: str, url: str, request_headers: HeaderSource | None, status: int | None,
         response_headers: HeaderSource | None) -> GateDecision:
    """Whether this request/response pair may be swarmed and announced; see the module docstring."""
    return gate_and_length(method, url, request_headers, status, response_headers)[0]


def gate_and_length(method: str, url: str, request_headers: HeaderSource | None, status: int | None,
                    response_headers: HeaderSource | None) -> tuple[GateDecision, int | None]:
    """`gate`'s decision and `content_length_of`'s length together, each field list read once: an origin's head
    is described with both on every GET the fallback download relays (`proxy.origin_head.describe`)."""
    request, response = _fields(request_headers), _fields(response_headers)
    reason = _request_reason(method, url, request)
    if reason is None:
        reason = _response_reason(request, status, response)
    return OK if reason is None else GateDecision(False, reason), _content_length(status, response)


def _response_reason(request: dict[str, list[str]], status: int | None,
                     response: dict[str, list[str]]) -> str | None:
    if status is None:
        # Same refusal as request_gate where it has one, so the two never disagree.
        return _credential(request) or "no-response"
    if status not in (200, 206):
        return "status"
    if status == 206 and _content_length(206, response) is None:
        return "content-range"
    directives = cache_control(_merged(response, "cache-control"))
    if "no-store" in directives:
        return "no-store"
    if "private" in directives:
        return "private"
    credential = _credential(request)
    if credential is not None:
        if "public" not in directives:
            return credential
        # Stricter than RFC 9111 §3.5 on purpose: see "freshness" in the module docstring.
        if not _fresh_for_strangers(directives, response):
            return "freshness"
    if "set-cookie" in response or "set-cookie2" in response:
        return "set-cookie"
    if any(token != "accept-encoding" for token in _list_tokens(_merged(response, "vary"))):
        return "vary"  # includes "*"
    etag = _strong_etag(response)
    if etag is None and _last_modified(response) is None:
        return "no-validator"
    if _content_length(status, response) is None:
        return "no-length"
    encodings = [t for t in _list_tokens(_merged(response, "content-encoding")) if t != "identity"]
    if encodings and etag is None:
        return "encoding"
    return None


def _fresh_for_strangers(directives: dict[str, str | None], response: dict[str, list[str]]) -> bool:
    """The response states a positive freshness lifetime itself and does not ask for revalidation."""
    if "no-cache" in directives:
        return False  # every reuse must be checked with the origin, also the qualified form, to be safe
    for name in ("s-maxage", "max-age"):  # a shared cache's precedence; an invalid one is stale (§4.2.1)
        if name in directives:
            arg = (directives[name] or "").strip()
            return bool(_DIGITS.fullmatch(arg)) and int(arg) > 0
    # Expires counts only against the response's own Date: the gate has no clock, and Expires alone (or an
    # invalid one, §5.3) says nothing about whether it is still fresh.
    expires, date = response.get("expires", []), response.get("date", [])
    if len(expires) != 1 or len(date) != 1:
        return False
    until, now = _epoch(expires[0]), _epoch(date[0])
    return until is not None and now is not None and until > now


def _epoch(value: str) -> int | None:
    try:
        parsed = email.utils.parsedate_tz(value)
        return None if parsed is None else email.utils.mktime_tz(parsed)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
