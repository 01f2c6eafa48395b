"""`addresses.source`: one key per party where sources are shared out (slots, handshakes, an origin's peer list)."""

from __future__ import annotations

import pytest

import addresses

SOURCES = [
    # (address, its key, its network)
    ("203.0.113.7", "203.0.113.7", None),  # documentation: special, in no network
    ("8.8.8.8", "8.8.8.8", "8.8.8.0/24"),
    ("::ffff:8.8.8.8", "8.8.8.8", "8.8.8.0/24"),  # IPv4-mapped: the same host
    ("2002:808:808::1", "8.8.8.8", "8.8.8.0/24"),  # 6to4: the IPv4 host holds the whole /48 ...
    ("2002:808:808:ffff::2", "8.8.8.8", "8.8.8.0/24"),  # ... so any of its 2^80 addresses is that host
    ("64:ff9b::808:808", "8.8.8.8", "8.8.8.0/24"),  # NAT64 of the same host
    ("2a00:1:2:3::5", "2a00:1:2:3::/64", "2a00:1:2::/48"),  # one subscriber's /64
    ("[2a00:1:2:3::6]", "2a00:1:2:3::/64", "2a00:1:2::/48"),
    ("10.0.0.1", "10.0.0.1", "10.0.0.1/32"),  # a LAN's machines are separate
    ("fd00::1", "fd00::1", "fd00::1/128"),
    ("127.0.0.2", "127.0.0.2", "127.0.0.2/32"),
    ("example.org", None, None),
    (None, None, None),
]


@pytest.mark.parametrize(("host", "key", "network"), SOURCES)
def test_one_key_per_party(host, key, network):
    assert addresses.source(host) == (key, network)
