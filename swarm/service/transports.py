"""The transports a node listens and fetches on (`make_transports`: the command line's `--transport`), and which of
them reaches a peer best (`prefers_tcp`, for `SwarmService.transport_for`)."""

from __future__ import annotations

import ipaddress

from swarm.net.transport import Transport

__all__ = ["make_transports", "prefers_tcp"]


def make_transports(name: str) -> dict[str, Transport]:
    """`tcp`, `quic` or `both` -> the transports to listen and fetch on."""
    transports: dict[str, Transport] = {}
    if name in ("tcp", "both"):
        from swarm.net.tcp import TcpTransport
        transports["tcp"] = TcpTransport()
    if name in ("quic", "both"):
        from swarm.net.quic import QuicTransport
        transports["quic"] = QuicTransport()
    if not transports:
        raise ValueError(f"unknown transport {name!r}")
    return transports


def prefers_tcp(host: str) -> bool:
    """Loopback and private peers are reached at LAN speed, where TCP beats QUIC."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local
