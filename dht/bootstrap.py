"""Finding the bootstrap nodes: `resolve` turns a configured (host, port) into an address of our socket's family.

A node joins through its bootstrap nodes (and its saved routing table) when it starts; when it has no contact at
all later — none answered at start (a laptop that booted offline, a bootstrap node too busy to answer), or every
contact died — `dht.node.DhtNode` asks them again before a lookup, at most every `REJOIN_SECONDS`: a node that
stayed alone answered every lookup with nothing, for as long as it ran, and nobody else would ever contact it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

log = logging.getLogger(__name__)

REJOIN_SECONDS = 5.0


async def resolve(address: tuple[str, int], local_host: str) -> tuple[str, int] | None:
    """`address` (a hostname allowed) as an address of the family of `local_host`, or None (logged)."""
    host, port = address
    try:
        # Canonical text ("::1", not "0:0::1"): replies are matched against the address a request went to.
        return (str(ipaddress.ip_address(host)), int(port))
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError as exc:
        log.warning("DHT: cannot resolve bootstrap host %s: %s", host, exc)
        return None
    local_family = socket.AF_INET6 if ":" in local_host else socket.AF_INET
    for family, _type, _proto, _name, sockaddr in infos:
        if family == local_family:
            return (str(sockaddr[0]), int(sockaddr[1]))
    return None
