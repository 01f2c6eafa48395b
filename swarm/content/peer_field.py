"""The origin's peer list: `Swarm-Peers`, and the `peer=PORT` token of `Swarm-Accept` it is built from.

A busy origin running server_plugin hints `Swarm-Hint: swarm`; without more, each client then looks the file's
providers up in the DHT, and that lookup was most of a hinted download (0.16 s at the median of 0.5 s on the crowd
simulator, 0.5 s at its p99; and the first seconds of a crowd, when announcements are not visible yet, find nobody).
The origin sees every client of the crowd: a client whose first GET says `Swarm-Accept: hint, peer=6881` leaves at
the hint and swarms, serving what it fetches on its peer port; the plugin keeps the last such clients of each file,
one per address (the address the request came from, never one the client names), and a hinted head lists some of
them: `Swarm-Peers: 203.0.113.7:6881, [2001:db8::1]:6881`. Blocks from them are checked against the origin's own
manifest, so a wrong entry costs a connection attempt, never a byte. Both sides parse what the other sends as a
stranger's: bounded, IP literals only (no name is ever resolved), no port below 1024.
"""

from __future__ import annotations

import re

import addresses

__all__ = ["PEERS_HEADER", "ACCEPT_PEER", "PEERS_GIVEN", "LOWEST_PEER_PORT", "format_peers", "parse_peers",
           "peer_port", "accept_field"]

PEERS_HEADER = "Swarm-Peers"
ACCEPT_PEER = "peer"  # `Swarm-Accept: hint, peer=6881`: the port this client serves what it fetches on
PEERS_GIVEN = 16  # entries a head lists (a download starts with --fetch-peers, 16 by default)
LOWEST_PEER_PORT = addresses.LOWEST_PORT  # a port below it is another service's on a shared address
_MAX_TOKENS = 16  # a field's tokens looked at (the rest ignored): bounded work for a stranger's field
# ASCII digits only: `\d` and int() take any script's digits (٦٨٨١, ６８８１), which no port is written in
_ENTRY = re.compile(r"\[([0-9a-fA-F:.]{2,45})\]:([0-9]{1,5})|([0-9.]{7,15}):([0-9]{1,5})")
_PORT = re.compile(r"[0-9]{1,5}")


def _valid_port(text: str) -> int | None:
    port = int(text) if _PORT.fullmatch(text) else 0
    return port if LOWEST_PEER_PORT <= port < 65536 else None


def format_peers(peers: list[tuple[str, int]]) -> str:
    """`host:port` entries, IPv6 hosts in brackets."""
    return ", ".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in peers)


def parse_peers(value: str | None, limit: int = PEERS_GIVEN) -> list[tuple[str, int]]:
    """The entries of a `Swarm-Peers` field that are an IP literal and a port from LOWEST_PEER_PORT on, each once,
    at most `limit` (the rest of the field is ignored); anything else is skipped, never resolved."""
    peers: dict[tuple[str, int], None] = {}
    for token in (value or "").split(",")[:limit * 2]:
        match = _ENTRY.fullmatch(token.strip())
        if match is None:
            continue
        host, port_text = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        host, port = addresses.canonical_host(host), _valid_port(port_text)
        if host is not None and port is not None and len(peers) < limit:
            peers[(host, port)] = None
    return list(peers)


def peer_port(accept: str | None) -> int | None:
    """The port a request's `Swarm-Accept` field names by `peer=PORT` (one from LOWEST_PEER_PORT on), or None."""
    for token in (accept or "").split(",")[:_MAX_TOKENS]:
        name, equals, port = token.strip().partition("=")
        if equals and name.strip().lower() == ACCEPT_PEER:
            return _valid_port(port.strip())
    return None


def accept_field(hint: str, port: int | None) -> str:
    """The `Swarm-Accept` value of a client that leaves at the hint, serving on `port` (None: it serves nothing)."""
    return hint if port is None else f"{hint}, {ACCEPT_PEER}={port}"
