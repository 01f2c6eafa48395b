"""The explicit fetch: `GET /_swarm/fetch?url=URL` on the proxy's own port, for loopback clients only.

A browser or an extension cannot send an `https://` URL through a forward proxy without a CONNECT tunnel that
hides the bytes; asking the proxy to fetch the URL itself makes HTTPS content swarmable with no certificate of
ours involved: swarmproxy is the TLS client, verifies the origin as a browser would (`proxy.origin.make_session`),
and answers with the origin's status and fields, or its own error naming the host and the reason (a certificate
failure is a 502, never a fallback to peers or to plain HTTP). Then the same algorithm as a proxied GET runs:
origin first, T/R/W, the publish gate, trust, verified in-order delivery, sharing. The content identity is the
`https://` URL and its validator; equal bytes under an `http://` URL share blocks through the content root.

What goes to the origin is only what a download needs from the client (`FORWARDED`): the admin request's own
fields (its Host, the proxy's name; cookies of the proxy's origin) are never the origin's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from yarl import URL

from .errors import OriginError

PATH = "/_swarm/fetch"
TORRENT_PATH = "/_swarm/fetch/torrent"  # a BitTorrent v2 file (`proxy.torrent_fetch`)
NAME_FIELD = "Swarm-Name"  # its answer's field: the file's name (the magnet's dn, or the torrent's), %-encoded
FETCHED_SCHEMES = ("http", "https")
# The client's fields a download needs (its range, its language); nothing that carries identity.
FORWARDED = ("Range", "If-Range", "Accept", "Accept-Language", "User-Agent")
MAX_URL_LENGTH = 8192


def fetch_target(values: Sequence[str]) -> URL:
    """The one absolute http(s) URL the query's `url` parameter names; OriginError(400) saying why not."""
    if len(values) != 1:
        raise OriginError(400, f"{PATH} needs exactly one url parameter: {PATH}?url=https://host/file")
    text = values[0]
    if len(text) > MAX_URL_LENGTH:
        raise OriginError(400, f"url: longer than {MAX_URL_LENGTH} characters")
    try:
        url = URL(text)
    except (ValueError, TypeError) as exc:
        raise OriginError(400, f"url: cannot parse {text[:200]!r}: {exc}") from None
    if url.scheme.lower() not in FETCHED_SCHEMES or not url.is_absolute() or not url.raw_host:
        raise OriginError(400, f"url: {text[:200]!r} is not an absolute http:// or https:// URL")
    return url.with_fragment(None)


def forwarded_fields(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The request fields to send the origin: FORWARDED ones only, as the client gave them."""
    return [(name, headers[name]) for name in FORWARDED if name in headers]
