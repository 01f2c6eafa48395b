"""Which network an address stands for: the unit in which independence is counted. Pure, no I/O.

Keys are free; addresses are not. Whoever counts "independent" parties (a manifest quorum, the storing nodes that
vouch for where a record came from) counts networks, not keys or single addresses. The prefix of a public IPv4
address is its /24 and of a public IPv6 address its /48, the blocks one party usually controls. Loopback, private
(RFC 1918, ULA fc00::/7) and link-local addresses count per full address: a lab on 127.0.0.x or nodes on one LAN
are genuinely separate machines there, and an attacker who can run nodes on your loopback or LAN already owns
more than this check guards. Anything that is not an IP literal shares one `UNKNOWN_PREFIX` with everything else
like it, so any number of unknowns weigh one.
"""

from __future__ import annotations

import ipaddress

UNKNOWN_PREFIX = "unknown"
PUBLIC_IPV4_PREFIX = 24
PUBLIC_IPV6_PREFIX = 48

_LOCAL_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",  # IPv4
    "::1/128", "fc00::/7", "fe80::/10",  # IPv6
))


def canonical_host(host: str | None) -> str | None:
    """The one spelling of an IP address: `::ffff:203.0.113.7` → `203.0.113.7`, `[::1]` → `::1`,
    `0:0::1` → `::1`; None for anything that is not an IP literal. A dual-stack socket reports IPv4 senders
    in the mapped form, and a record's host must compare equal to the address it was observed from."""
    if not host:
        return None
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def network_prefix(host: str | None) -> str:
    """The network an address stands for; see the module docstring.

    `203.0.113.7` → `203.0.113.0/24`, `2001:db8:1:2::5` → `2001:db8:1::/48`, `192.168.1.4` → `192.168.1.4/32`,
    `::ffff:203.0.113.7` is the IPv4 address, anything that is not an IP address (None, "", a host name) or
    cannot identify a sender (unspecified, multicast) → `unknown`.
    """
    text = canonical_host(host)
    if text is None:
        return UNKNOWN_PREFIX  # a name proves nothing about where its owner sits
    ip = ipaddress.ip_address(text)
    if ip.is_unspecified or ip.is_multicast:
        return UNKNOWN_PREFIX
    if _is_local(ip):
        return f"{ip}/{ip.max_prefixlen}"
    length = PUBLIC_IPV4_PREFIX if ip.version == 4 else PUBLIC_IPV6_PREFIX
    return str(ipaddress.ip_network(f"{ip}/{length}", strict=False))


def _is_local(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    # An explicit list, not ip.is_private: that also covers documentation and benchmarking ranges,
    # which would let one party's many addresses there count one by one.
    return any(ip.version == net.version and ip in net for net in _LOCAL_NETWORKS)
