"""The client edge: who may talk to the admin API, which requests are refused before any work, and the
answers written straight to a socket (pure functions, table-tested; `proxy.server` is the asyncio shell).

The admin API shows the request history, full URLs included, so it must answer the user's own tools only,
never a web page. A page can reach it in three ways, all closed here:
  - DNS rebinding: the page's own name (evil.example) is made to resolve to 127.0.0.1, so the browser's
    request reaches the proxy directly, from a loopback address, with `Host: evil.example:PORT`.
    `admin_refusal` accepts only loopback names in Host.
  - Through the proxy: `GET http://localhost:PORT/_swarm/requests` sent to the proxy as a proxy request
    would be forwarded to the proxy itself, which would see a loopback client. `reaches_listener` refuses
    such targets before connecting; a name it cannot see through (any DNS name that resolves to us) arrives
    with our `Via` entry (and that name as Host), which `admin_refusal` refuses too.
  - By its real address: `<img src="http://127.0.0.1:8080/_swarm/fetch?url=...">`, a form, a fetch in
    `no-cors` mode, a navigation. The browser does not let the page read the answer, but the proxy would act
    on the request all the same (fetch a URL that only this machine reaches). Browsers say on whose behalf
    they make a request (`Origin`, `Sec-Fetch-Site`): `cross_site_refusal` refuses a page's.
"""

from __future__ import annotations

import http
import ipaddress
import urllib.parse
from collections.abc import Sequence

# The versions this server speaks (RFC 9112); aiohttp's parser also hands over 0.9 (a request line
# without a version) and 2.0, which it must not answer as if they were HTTP/1.x.
SUPPORTED_VERSIONS = frozenset({(1, 0), (1, 1)})

# What makes a Host field name this machine: no DNS name but localhost can be trusted to (a rebinding
# attacker controls every other name's answers, and browsers resolve `localhost` themselves).
LOOPBACK_NAMES = frozenset({"localhost", "localhost."})

# The parser's message for a request line whose version it does not know (aiohttp's llhttp and Python
# parsers both say this); such a request is answered 505 rather than 400.
UNKNOWN_VERSION_MESSAGE = "Invalid HTTP version"


def version_refusal(version: tuple[int, int] | None) -> str | None:
    """Why a request of this HTTP version (None: one the parser does not know) is not served (answered
    505), or None when it is."""
    if version is None:
        seen = "the request line's HTTP version"
    elif tuple(version) in SUPPORTED_VERSIONS:
        return None
    elif tuple(version) == (0, 9):
        seen = "HTTP/0.9 (a request line without an HTTP version)"
    else:
        seen = f"HTTP/{version[0]}.{version[1]}"
    return f"{seen} is not supported: this proxy speaks HTTP/1.1 and HTTP/1.0 to its clients"


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host field value -> (host, port or None), brackets removed from an IPv6 literal; None when the
    value is not `host[:port]`."""
    value = value.strip()
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket:
            return None
    else:
        host, _, rest = value.partition(":")
        rest = ":" + rest if _ else ""
    if rest and not (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit()):
        return None
    if not host:
        return None
    return host, int(rest[1:]) if rest else None


def is_loopback_literal(host: str) -> bool:
    """`localhost`, or an IPv4/IPv6 loopback address (IPv4-mapped too) written as an address."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return _unmapped(ip).is_loopback


def admin_refusal(host: str | None, via: str | None, port: int | None) -> tuple[int, str] | None:
    """(status, reason) when the admin API must not answer a loopback client's request, else None.

    `host` and `via` are the request's Host and Via fields, `port` the port the proxy listens on.
    """
    if via is not None:
        return 403, (f"the admin API answers direct clients only, and this request came through a proxy "
                     f"(Via: {via[:100]}). Ask it directly, without a proxy: "
                     f"curl http://127.0.0.1:{port}/_swarm/status")
    where = f"localhost, 127.0.0.1 or [::1] (with or without :{port})"
    if host is None:
        return 421, f"the admin API needs a Host field naming this machine: {where}"
    parsed = split_host(host)
    if parsed is None or not is_loopback_literal(parsed[0]) or parsed[1] not in (None, port):
        # A web page whose name was rebound to 127.0.0.1 gets here with its own name as Host.
        return 421, (f"the admin API answers only requests for this machine, with Host {where}; "
                     f"got Host: {host[:100]!r}")
    return None


# Fetch Metadata (https://w3c.github.io/webappsec-fetch-metadata/; Chromium since 76, Firefox since 90): on whose
# behalf a browser makes a request. `none`: the user's own (an address typed or a bookmark), or, in Chromium, an
# extension's fetch with host permission; `same-origin`: a document of the proxy's own origin, and in Firefox an
# extension's fetch with host permission. `same-site` (a page on another port of 127.0.0.1) and `cross-site` are a
# page's requests.
OWN_FETCH_SITES = frozenset({"none", "same-origin"})
# The origins of browser extensions, which can only ask us with the user's consent (host permission); a web page's
# `Origin` is its own scheme://host:port, never one of these.
EXTENSION_SCHEMES = frozenset({"chrome-extension", "moz-extension"})
# What the extension sends on its downloads through /_swarm/fetch: Chromium marks a download an extension starts
# (downloads.download) `Sec-Fetch-Site: cross-site`, as it would a page's. A page cannot send this field: a form,
# an element or a navigation has no way to, `fetch` in `no-cors` mode drops it, and in `cors` mode it needs a
# preflight (OPTIONS, with the page's `Origin`), which is refused here and never answered with CORS fields.
CLIENT_FIELD = "Swarm-Client"
SITE_WORDS = {"cross-site": "a page of another site", "same-site": "a page on another port or name of this machine"}


def cross_site_refusal(host: str | None, origins: Sequence[str], fetch_sites: Sequence[str],
                       client_field: bool) -> str | None:
    """Who made this admin request, when a browser made it on behalf of a web page; None when it did not.

    `host` is the request's Host (already one of this machine's names), `origins` and `fetch_sites` every
    `Origin` and `Sec-Fetch-Site` value, `client_field` whether `CLIENT_FIELD` was sent. A request with neither
    field (curl, `swarmproxy get`, any program) passes. Refused: an `Origin` other than this very address
    (`http://` + Host) or an extension's, `Origin: null` (a sandboxed frame, a data: or file: page, a redirect
    from another origin); a `Sec-Fetch-Site` other than `none` or `same-origin`, unless `client_field`.
    """
    for origin in origins:
        value = origin.strip()
        if value.lower() == "null":
            return ("a document without an origin of its own (Origin: null: a sandboxed frame, a data: or "
                    "file: page, or a redirect from another site)")
        if not (_is_extension_origin(value) or _is_own_origin(value, host)):
            return f"a page of {value[:100]!r} (its Origin)"
    for site in fetch_sites:
        value = site.strip().lower()
        if value not in OWN_FETCH_SITES and not client_field:
            where = SITE_WORDS.get(value, "a web page")
            return f"{where} (Sec-Fetch-Site: {site.strip()[:40]})"
    return None


def cross_site_text(who: str) -> str:
    """The body of the 403 that `cross_site_refusal` leads to."""
    return (f"403 Forbidden: swarmproxy's admin API (/_swarm/..., /metrics) and its explicit fetch answer this "
            f"machine's own tools (curl, swarmproxy get, the swarmproxy extension) and addresses typed into a "
            f"browser, never a request a browser makes for a web page; this one was made by {who}. A web page "
            f"must not make the proxy fetch URLs nor read what it did.")


def _is_extension_origin(value: str) -> bool:
    scheme, sep, rest = value.partition("://")
    return bool(sep) and scheme.lower() in EXTENSION_SCHEMES and bool(rest) and "/" not in rest


def _is_own_origin(value: str, host: str | None) -> bool:
    """Is `value` (an Origin) `http://` + Host: a document the proxy itself served, at the address asked?"""
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() != "http" or host is None:
        return False
    theirs, ours = split_host(rest), split_host(host)
    if theirs is None or ours is None:
        return False
    return theirs[0].lower() == ours[0].lower() and (theirs[1] or 80) == (ours[1] or 80)


def reaches_listener(host: str, port: int | None, listen_host: str, listen_port: int) -> bool:
    """Would connecting to host:port reach the proxy's own listener (host written as an address, or
    localhost)? Then forwarding there would ask the proxy itself. A DNS name is not looked up here."""
    if port != listen_port:
        return False
    name = host.strip("[]").lower()
    candidates = ["127.0.0.1", "::1"] if name in LOOPBACK_NAMES else [name.split("%", 1)[0]]
    try:
        listen = _unmapped(ipaddress.ip_address(listen_host))
    except ValueError:
        return False
    for text in candidates:
        try:
            ip = _unmapped(ipaddress.ip_address(text))
        except ValueError:
            continue
        # Connecting to 0.0.0.0 or :: reaches this machine; a listener on 0.0.0.0 or :: takes every
        # loopback address (either family: claiming too much only refuses loopback:OUR-PORT).
        if ip.is_unspecified or ip == listen or (listen.is_unspecified and ip.is_loopback):
            return True
    return False


def self_refusal(host: str, port: int | None, listen: str) -> str:
    return (f"url: {host}:{port} is this proxy itself ({listen}), and it does not forward requests to "
            f"itself. For its admin API ask it directly, without a proxy: curl http://{listen}/_swarm/status")


def parse_error_summary(message: str) -> str:
    """aiohttp's parse error text on one line, without the excerpt of the request it quotes (which may
    hold a signed URL and does not belong in a log)."""
    head = message.split("\n\n", 1)[0]
    return " ".join(line.strip() for line in head.splitlines() if line.strip()).rstrip(":")[:300]


MISSING_HOST = ("400 Bad Request: an HTTP/1.1 request needs a Host field; to use this proxy send "
                "'GET http://host/path HTTP/1.1' with 'Host: host', or for a tunnel 'CONNECT host:port HTTP/1.1' "
                "with 'Host: host:port' (a CONNECT target is always host:port)")
MALFORMED_LINE = ("400 Bad Request: malformed request line: expected 'METHOD TARGET HTTP/1.1', one space between "
                  "each (a space inside a URL must be sent as %20)")


def parse_error_text(kind: str, message: str) -> str | None:
    """Our own words for the parse errors a newcomer meets, by aiohttp's exception class name and message;
    None leaves aiohttp's text. Its own say "Bad status line: Expected HTTP/" for a space in a URL, "Missing
    'Host' header" for `CONNECT host` and only the URL when a port is out of range."""
    if kind == "InvalidURLError":
        try:
            _ = urllib.parse.urlsplit(message).port  # raises on a port out of range: aiohttp said only the URL
        except ValueError as exc:
            # urlsplit's words: "Port out of range 0-65535", "Port could not be cast to integer value as 'x'"
            return f"400 Bad Request: invalid URL {message}: {str(exc)[:1].lower()}{str(exc)[1:]}"
        return f"400 Bad Request: invalid URL {message}: not an absolute http:// URL this proxy can read"
    if kind == "BadStatusLine":
        return MALFORMED_LINE
    if message.startswith("Missing 'Host' header"):
        return MISSING_HOST
    return None


def closing_response(status: int, text: str, *, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A whole HTTP/1.1 response that ends the connection, for answers written straight to a transport
    (no request object exists yet, or none will: over --max-connections, a request head that came late)."""
    body = (text if text.endswith("\n") else text + "\n").encode()
    fields = [("Content-Type", "text/plain; charset=utf-8"), *extra, ("Connection", "close"),
              ("Content-Length", str(len(body)))]
    head = f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields)
    return head.encode("latin-1") + b"\r\n" + body


def phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _unmapped(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip
