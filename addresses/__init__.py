"""What an IP address is, and which network it counts in: the one definition every part of swarmproxy uses. Pure.

Three rules depend on it, and they must agree:

* **trust counting** (`network_prefix`): keys are free, addresses are not, so independent parties are counted by
  network. A public IPv4 address stands for its /24, a public IPv6 address for its /48 (the blocks one party
  usually holds). A loopback, private or link-local address stands for itself: on a lab's 127.0.0.x or one LAN
  they are genuinely separate machines, and whoever runs nodes there already owns more than this check guards.
  A special-purpose address (documentation, benchmarking, reserved, multicast, unspecified...) names no sender
  anyone can reach and counts in no network at all, like a name that is not an IP literal.
* **what is shared** (`proxy`): content fetched from a loopback, private, link-local or special address is never
  looked up, announced, vouched for or served unless the user lists that origin.
* **what is relayed** (`proxy`): a public name that resolves to a non-public address is DNS rebinding.

The classes follow the IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and its updates). An
address written in another form that reaches the same IPv4 host is classified as that host: IPv4-mapped
(`::ffff:a.b.c.d`), the NAT64 well-known prefix (`64:ff9b::/96`, RFC 6052), 6to4 (`2002::/16`) and the deprecated
IPv4-compatible form (`::a.b.c.d`). A zone index (`fe80::1%eth0`) and brackets are ignored.
"""

from __future__ import annotations

import enum
import functools
import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

KIND_CACHE = 4096  # addresses whose kind is kept: the peers, origins and clients of the moment
UNKNOWN_PREFIX = "unknown"  # `network_prefix` of anything that counts in no network
# The lowest port a stranger may have us dial (a connect-back, a peer an origin lists): below it, a port is another
# service's on a shared address
LOWEST_PORT = 1024
PUBLIC_IPV4_PREFIX = 24
PUBLIC_IPV6_PREFIX = 48
# One subscriber's IPv6 block: a home line or a VM gets a /64 (RFC 6177), so a public IPv6 address is one source
# per /64 where sources are shared out; per /128 it could take 2^64 per-address shares.
PUBLIC_IPV6_SOURCE_PREFIX = 64


class Kind(enum.Enum):
    LOOPBACK = "loopback"
    PRIVATE = "private"  # RFC 1918, shared address space 100.64/10 (carrier NAT), IPv6 ULA, NAT64 local use
    LINK_LOCAL = "link-local"
    SPECIAL = "special"  # reaches no ordinary host: documentation, benchmarking, reserved, multicast, unspecified...
    PUBLIC = "public"


def _nets(kind: Kind, *cidrs: str) -> list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, Kind]]:
    return [(ipaddress.ip_network(c), kind) for c in cidrs]


LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")  # this machine: where a lab's or a test's peers all are

# Entries overlap (`::1/128` inside the reserved `::/8`): `classify` takes the longest match.
_TABLE = (
    _nets(Kind.LOOPBACK, *LOOPBACK_NETWORKS)
    + _nets(Kind.PRIVATE, "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
            "fc00::/7", "64:ff9b:1::/48")
    + _nets(Kind.LINK_LOCAL, "169.254.0.0/16", "fe80::/10")
    + _nets(Kind.SPECIAL,
            "0.0.0.0/8",  # "this network"
            "192.0.0.0/24",  # IETF protocol assignments
            "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",  # documentation (TEST-NET-1..3)
            "192.88.99.0/24",  # deprecated 6to4 relay anycast
            "198.18.0.0/15",  # benchmarking
            "224.0.0.0/4",  # multicast
            "240.0.0.0/4",  # reserved, and the limited broadcast 255.255.255.255
            "::/128", "::/96",  # unspecified; the rest of ::/96 is IPv4-compatible, handled before the table
            "100::/64",  # discard-only
            "2001::/23",  # IETF protocol assignments (Teredo, ORCHID, ...)
            "2001:db8::/32", "3fff::/20",  # documentation
            "5f00::/16",  # SRv6 segment identifiers
            "ff00::/8",  # multicast
            "::/8", "100::/8", "200::/7", "400::/6", "800::/5", "1000::/4",  # reserved by the IETF
            "4000::/3", "6000::/3", "8000::/3", "a000::/3", "c000::/3", "e000::/4", "f000::/5", "f800::/6",
            "fe00::/9", "fec0::/10")
)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_COMPATIBLE = ipaddress.ip_network("::/96")


# Prefixes that carry an IPv4 host inside an IPv6 address (`effective` reads them): IPv4-mapped, NAT64, 6to4.
_EMBEDDING = (ipaddress.ip_network("::ffff:0:0/96"), _NAT64, _SIXTOFOUR)


def non_public_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Every network `classify` calls other than public, and the IPv6 prefixes that embed an IPv4 host (one may
    name 127.0.0.1 as `::ffff:127.0.0.1` or `64:ff9b::7f00:1`): what a filter that lets only public addresses
    through blocks, when it cannot call `classify` itself (libtorrent's IP filter)."""
    return [network for network, kind in _TABLE if kind is not Kind.PUBLIC] + list(_EMBEDDING)


@functools.lru_cache(maxsize=KIND_CACHE)
def parse(host: str | None) -> IPAddress | None:
    """The address a host string names if it is an IP literal (brackets and a zone index allowed), else None.
    Cached (addresses are immutable): a small request parsed its origin's and client's literals four times."""
    if not host:
        return None
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def effective(ip: IPAddress) -> IPAddress:
    """The IPv4 host an IPv6 address reaches when it embeds one (mapped, NAT64, 6to4, compatible), else `ip`."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _COMPATIBLE and int(ip) > 1:  # `::` and `::1` are themselves, not 0.0.0.0 and 0.0.0.1
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


@functools.lru_cache(maxsize=KIND_CACHE)
def classify(ip: IPAddress) -> Kind:
    """The kind of an address, judged by the host it reaches (`effective`). Cached: each request asks it of its
    origin's and its client's addresses, and the table walk was a tenth of the proxy's CPU per small request."""
    ip = effective(ip)
    best: tuple[int, Kind] | None = None
    for net, kind in _TABLE:
        if net.version == ip.version and ip in net and (best is None or net.prefixlen > best[0]):
            best = (net.prefixlen, kind)
    return best[1] if best is not None else Kind.PUBLIC


@functools.lru_cache(maxsize=KIND_CACHE)
def kind_of(host: str | None) -> Kind | None:
    """`classify` of a host string; None when it is not an IP literal (a name says nothing about where it is).
    Cached, as `classify`: parsing the literal again cost as much as judging it."""
    ip = parse(host)
    return None if ip is None else classify(ip)


def is_public(host: str | None) -> bool:
    return kind_of(host) is Kind.PUBLIC


def is_loopback(host: str | None) -> bool:
    return kind_of(host) is Kind.LOOPBACK


def canonical_host(host: str | None) -> str | None:
    """The one spelling of an IP address: `::ffff:203.0.113.7` → `203.0.113.7`, `[::1]` → `::1`, `0:0::1` → `::1`;
    None for anything that is not an IP literal. A dual-stack socket reports IPv4 senders in the mapped form, and a
    record's host must compare equal to the address it was observed from."""
    ip = parse(host)
    if ip is None:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def source(host: str | None) -> tuple[str | None, str | None]:
    """What a peer's address counts as where sources are shared out (slots, handshakes, an origin's peer list):
    one key per party (the IPv4 host an IPv6 address embeds: whoever holds 192.0.2.1 holds 6to4's whole
    2002:c000:201::/48; a public IPv6 address's /64: one subscriber; any other address itself) and its network
    (`network_prefix`); None for what is not an IP literal, or in no network."""
    ip = parse(host)
    if ip is None:
        return None, None
    network = network_prefix(host)
    ip = effective(ip)
    if ip.version == 6 and classify(ip) is Kind.PUBLIC:
        return str(ipaddress.ip_network(f"{ip}/{PUBLIC_IPV6_SOURCE_PREFIX}", strict=False)), network
    return str(ip), None if network == UNKNOWN_PREFIX else network


@functools.lru_cache(maxsize=KIND_CACHE)
def network_prefix(host: str | None) -> str:
    """The network an address counts in; see the module docstring. Cached, as `parse`: a quorum asks it of every
    vouch of every lookup (half of the crowd simulator's time, `bench.crowd_sim`, before it was).

    `8.8.4.4` → `8.8.4.0/24`, `2a00:1:2:3::5` → `2a00:1:2::/48`, `192.168.1.4` → `192.168.1.4/32`; an address that
    embeds an IPv4 host counts as that host; anything special-purpose, or not an IP literal → `UNKNOWN_PREFIX`.
    """
    ip = parse(host)
    if ip is None:
        return UNKNOWN_PREFIX
    ip = effective(ip)
    kind = classify(ip)
    if kind is Kind.SPECIAL:
        return UNKNOWN_PREFIX
    if kind is not Kind.PUBLIC:
        return f"{ip}/{ip.max_prefixlen}"
    length = PUBLIC_IPV4_PREFIX if ip.version == 4 else PUBLIC_IPV6_PREFIX
    return str(ipaddress.ip_network(f"{ip}/{length}", strict=False))

