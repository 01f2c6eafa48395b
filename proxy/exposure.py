"""Who may make the proxy reach what.

A client on this machine may reach anything it could reach itself. A client from elsewhere (only
possible with --allow-remote) must not use the proxy to reach this machine's loopback or the private
network behind it — including the proxy's own admin API, which would otherwise answer it as a
loopback client.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from .errors import OriginError

AddrInfo = tuple  # one getaddrinfo() entry: (family, type, proto, canonname, sockaddr)


def is_internal(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_unspecified or ip.is_multicast


async def resolve_allowed(host: str, port: int, *, local_client: bool) -> list[AddrInfo]:
    """Resolve host:port; for a non-local client keep only public addresses (OriginError 403 if none).

    The CONNECT tunnel connects to the addresses returned here, so a DNS answer cannot change between
    the check and the connection. The relay checks and then lets its client session resolve again
    (through the session's DNS cache); a rebinding DNS server could slip through that window, which is
    one reason --allow-remote is off by default.
    """
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if local_client:
        return infos
    allowed = [info for info in infos if not is_internal(info[4][0])]
    if not allowed:
        raise OriginError(403, f"forbidden: {host}:{port} is an internal address and the client is not "
                               "on this machine")
    return allowed
