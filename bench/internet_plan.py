"""The address plan of the test internet the Internet mode's tests and lab build in network namespaces (issue 39,
docs/ARCHITECTURE.md "The Internet mode").

Its "public" segment must be public to all three judges of an address: our rules (`addresses`: the quorum's
networks, the publish gate, the BitTorrent filter), the security rule (`proxy.exposure.may_share`), both asserted
by the test, and libtorrent, which treats loopback and private addresses as local (sessions on 127.0.x.y did not
form one DHT) and, with `dht_ignore_dark_internet` (on by default, and so in our session), drops every DHT message
from the class A networks it holds unused (`LIBTORRENT_DARK_INTERNET`). Loopback, RFC 1918, and the documentation
and benchmarking ranges are each special to one of them, so the plan takes addresses of 55.0.0.0/8, public and
allocated (to the US DoD) and not in libtorrent's list (the first plan's 7.0.0.0/8 is: a node behind the test NATs
heard no DHT node answer, `tests/bench/test_internet_netns.py`), which no test could ever reach: a namespace of the
test internet has routes to its own segments only, never to the machine's uplink
(`tests/bench/test_internet_plan.py` asserts it in a namespace of its own). Homes behind the test NATs use
192.168.x.0/24, as homes do.
"""

from __future__ import annotations

import ipaddress

__all__ = ["PUBLIC", "segment", "HOME", "LIBTORRENT_DARK_INTERNET"]

PUBLIC = ipaddress.ip_network("55.55.0.0/16")  # the "internet": routers' outside, DHT nodes, public nodes
HOME = ipaddress.ip_network("192.168.0.0/16")  # the homes behind the NATs, one /24 each
# The first bytes of the IPv4 networks whose DHT messages libtorrent drops under `dht_ignore_dark_internet`
# (src/kademlia/dht_tracker.cpp, `class_a`; 1.x also had 51).
LIBTORRENT_DARK_INTERNET = frozenset({3, 6, 7, 9, 11, 19, 21, 22, 25, 26, 28, 29, 30, 33, 34, 48, 51, 56})


def segment(index: int) -> ipaddress.IPv4Network:
    """The `index`th /24 of the public segment (a link between routers, or a network of public nodes)."""
    if not 0 <= index < 256:
        raise ValueError(f"segment {index} outside 0..255")
    return ipaddress.ip_network(f"{PUBLIC.network_address + 256 * index}/24")
