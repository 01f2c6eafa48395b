"""Who may make the proxy reach what, and what it may share: pure decisions about addresses. What an address is
(loopback, private, link-local, special, public) is the `addresses` package's one definition; this module decides
with it and does no I/O (`proxy.origin_resolver` applies its answers to DNS results).

Three rules:

* **A client from elsewhere** (only possible with --allow-remote) must not use the proxy to reach this machine's
  loopback or the private network behind it, including the proxy's own admin API, which would otherwise answer
  it as a loopback client (`is_internal`).
* **DNS rebinding** (`screen`): behind an explicit proxy the browser never resolves names, the proxy does. A page
  served under an attacker's public name that is then re-pointed at 127.0.0.1 or 10.x would have the proxy fetch
  a local service, and the page would read the answer as its own origin's. So a public name reaches public
  addresses only. A name that is local by itself (`localhost`, a single label, `.local`, ...), an IP literal (an
  address the user typed is not rebinding), a name under `--local-domains` (a split-horizon intranet) and an
  origin listed in `--share-private-origins` reach whatever they resolve to.
* **Sharing** (`may_share`): content fetched from a non-public address belongs to this machine or its network;
  it is never looked up, announced, vouched for or served unless the user lists its origin.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import addresses

# A --share-private-origins entry: an address in `addresses.canonical_host` form, and its port (None: any port).
Origin = tuple[str, int | None]

# Names that are local by definition, whatever they resolve to: RFC 6761 `localhost`, mDNS `.local` (RFC 6762),
# ICANN's private-use `.internal` (2024), the home network's `.home.arpa` (RFC 8375) and the `.lan` of countless
# home routers. None of them can be a public site's name, so no page of an attacker's is served under one.
LOCAL_SUFFIXES = ("localhost", "local", "internal", "lan", "home.arpa")


def is_internal(address: str) -> bool:
    """Not a public address: loopback, private, link-local or special (0.0.0.0 reaches this machine on Linux;
    multicast and reserved addresses are nobody's origin). A name that is not an IP literal is internal too:
    nothing here connects to a name it did not resolve."""
    return not addresses.is_public(address)


def _name(host: str) -> str:
    return host.lower().rstrip(".")


def is_local_name(host: str, local_domains: Iterable[str] = ()) -> bool:
    """Whether `host` is the user's own by its very name: an IP literal, a single label (an intranet host found
    through the search domain), a name under `LOCAL_SUFFIXES` or under one of `local_domains`."""
    if addresses.parse(host) is not None:
        return True
    name = _name(host)
    if "." not in name:
        return True
    return any(name == suffix or name.endswith("." + suffix) for suffix in (*LOCAL_SUFFIXES, *local_domains))


def is_listed(address: str, port: int | None, origins: Iterable[Origin]) -> bool:
    """Whether `address`:`port` is one of the user's listed origins (the same address, and the same port unless
    the entry names none)."""
    canonical = addresses.canonical_host(address)
    return canonical is not None and any(
        canonical == listed and (listed_port is None or listed_port == port) for listed, listed_port in origins)


def screen(host: str, port: int, resolved: Sequence[str], *, local_domains: Iterable[str] = (),
           origins: Iterable[Origin] = ()) -> tuple[list[int], list[int]]:
    """Which of the addresses `host` resolved to the proxy may connect to: the indexes kept, and those refused as
    DNS rebinding (a public name, a non-public address nobody listed). A name whose answers mix public and
    private addresses keeps only the public ones: an attacker who adds 127.0.0.1 to a public answer, and makes the
    public address fail, must not get the private one tried next (the trick that beat browsers' pinning)."""
    if is_local_name(host, local_domains):
        return list(range(len(resolved))), []
    origins = tuple(origins)
    kept: list[int] = []
    refused: list[int] = []
    for index, address in enumerate(resolved):
        allowed = addresses.is_public(address) or is_listed(address, port, origins)
        (kept if allowed else refused).append(index)
    return kept, refused


def _with_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def rebinding_refusal(host: str, port: int, refused: Sequence[str]) -> str:
    """The 403 page's text for a public name that resolved only to addresses it may not reach: the host, what it
    resolved to, why that is refused and the two ways to allow it."""
    first = refused[0]
    kind = addresses.kind_of(first)
    what = f"a {kind.value} address" if kind is not None else "not a public address"
    shown = ", ".join(refused[:4]) + (", ..." if len(refused) > 4 else "")
    name = _name(host)
    return (f"forbidden: {host} resolved to {shown} ({what}), but {host} is a public name. A web page can point "
            f"its own public name at this machine or your network and read what is there through the proxy (DNS "
            f"rebinding), so a public name may reach public addresses only. If {host} is yours, allow it with "
            f"--local-domains {name} (every name under that domain may then resolve to private addresses), or "
            f"with --share-private-origins {_with_port(addresses.canonical_host(first) or first, port)} (this "
            f"origin only; its content is then swarmed and served to peers like a public origin's).\n")


PRIVATE_ORIGIN = "private-origin"  # why a GET was not swarmed: its origin is this machine's or its network's


def may_swarm_name(host: str, port: int, local_domains: Iterable[str] = (), origins: Iterable[Origin] = ()) -> bool:
    """Before anything is connected: may a GET of `host`:`port` be looked up before its head comes? An IP literal
    when public or listed; a name unless it is local by itself or under `local_domains` (it may resolve to a
    private address, and a lookup would tell the DHT about it before the connection says where it went). A
    public name can reach only public addresses, or listed ones (`screen`); at the head, `may_share` decides on
    where the connection really went."""
    if addresses.parse(host) is not None:
        return addresses.is_public(host) or is_listed(host, port, origins)
    return not is_local_name(host, local_domains)


def may_share(connected_address: str | None, port: int, origins: Iterable[Origin]) -> bool:
    """Whether content fetched from `connected_address`:`port` (where the origin connection really went) may be
    looked up, announced, vouched for or served: a public address always, a non-public one only when the user
    listed it, an unknown one (None, or not an IP literal) never."""
    if connected_address is None or addresses.parse(connected_address) is None:
        return False
    if addresses.is_public(connected_address):
        return True
    return is_listed(connected_address, port, origins)
