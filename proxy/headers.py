"""Header rewriting for forwarded messages (pure functions, table-tested).

RFC 9110 §7.6.1: a proxy removes the hop-by-hop fields, which are `Connection` itself, every field it
names, and the fields that are hop-by-hop by definition. It adds `Via` (§7.6.3) in both directions.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import __version__

# Hop-by-hop by definition. Proxy-Authorization/-Authenticate are meant for this proxy, never the
# next hop. Trailer goes too: we re-frame bodies and do not forward trailer fields, so announcing
# them would be a lie.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "te",
        "transfer-encoding",
        "upgrade",
        "trailer",
        "proxy-authorization",
        "proxy-authenticate",
    }
)

VIA_PSEUDONYM = "swarmproxy"

# Added to every response the proxy relays (never to a CONNECT tunnel, nor to an answer of its own): the id of
# the request's record, which the admin API serves at /_swarm/requests/<id>, so that a client (the browser
# extension) can learn how its own request went (switched to peers or not, why) without matching URLs and times.
REQUEST_ID = "Swarm-Request"

Headers = list[tuple[str, str]]


def connection_tokens(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Lower-cased field names listed in every Connection header (comma separated, may repeat)."""
    tokens: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def wants_upgrade(headers: Iterable[tuple[str, str]]) -> str | None:
    """The protocol a request asks to upgrade to (e.g. 'websocket'), or None."""
    headers = list(headers)
    if "upgrade" not in connection_tokens(headers):
        return None
    for name, value in headers:
        if name.lower() == "upgrade" and value.strip():
            return value.strip()
    return None


def end_to_end(headers: Iterable[tuple[str, str]], *, drop: Iterable[str] = (), upgrade: bool = False) -> Headers:
    """The fields to forward: everything but hop-by-hop fields, those named in Connection, and `drop`.

    With `upgrade`, `Connection: upgrade` and `Upgrade` are kept (re-emitted in canonical form): they
    are hop-by-hop, but a protocol switch must reach the next hop or it cannot happen at all.
    """
    headers = list(headers)
    named = connection_tokens(headers)
    removed = HOP_BY_HOP | named | {d.lower() for d in drop}
    if upgrade:
        # Fields named in Connection other than Upgrade still go (e.g. 'Connection: Upgrade, Foo').
        removed = removed - {"upgrade"}
    kept = [(name, value) for name, value in headers if name.lower() not in removed]
    if upgrade:
        kept.append(("Connection", "Upgrade"))
    return kept


def via_entry(version: tuple[int, int]) -> str:
    major, minor = version
    protocol = f"{major}.{minor}" if major == 1 else f"{major}"
    return f"{protocol} {VIA_PSEUDONYM}"


def add_via(headers: Headers, version: tuple[int, int]) -> Headers:
    """Append our entry to Via (a new field line keeps the earlier ones intact, RFC 9110 §5.3)."""
    return headers + [("Via", via_entry(version))]


def server_token() -> str:
    return f"swarmproxy/{__version__}"
