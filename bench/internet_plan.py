"""The address plan of the test internet the Internet mode's tests and lab build in network namespaces (issue 39,
docs/ARCHITECTURE.md "The Internet mode").

Its "public" segment must be public to all three judges of an address: our rules (`addresses`: the quorum's
networks, the publish gate, the BitTorrent filter), the security rule (`proxy.exposure.may_share`), both asserted
by the test, and libtorrent (which treats loopback and private addresses as local: sessions on 127.0.x.y did not
form one DHT; that its DHT forms on this plan is for the namespace tests to show). Loopback,
RFC 1918, and the documentation and benchmarking ranges are each special to one of them, so the plan takes
addresses of 7.0.0.0/8, public and allocated (to the US DoD), which no test could ever reach: a namespace of the
test internet has routes to its own segments only, never to the machine's uplink
(`tests/bench/test_internet_plan.py` asserts it in a namespace of its own). Homes behind the test NATs use
192.168.x.0/24, as homes do.
"""

from __future__ import annotations

import ipaddress

__all__ = ["PUBLIC", "segment", "HOME"]

PUBLIC = ipaddress.ip_network("7.7.0.0/16")  # the "internet": routers' outside, DHT nodes, public nodes
HOME = ipaddress.ip_network("192.168.0.0/16")  # the homes behind the NATs, one /24 each


def segment(index: int) -> ipaddress.IPv4Network:
    """The `index`th /24 of the public segment (a link between routers, or a network of public nodes)."""
    if not 0 <= index < 256:
        raise ValueError(f"segment {index} outside 0..255")
    return ipaddress.ip_network(f"{PUBLIC.network_address + 256 * index}/24")
