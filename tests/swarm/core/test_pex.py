"""`swarm.core.pex`: which peers a fetch connects to from its peers' PEXes, and what a serving core makes of a
content session's PEX (`PeersAsked`). Table-driven; no sockets, no clock."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from swarm.core.pex import JOINED, PER_NETWORK, PER_PEX, PexJoin
from swarm.core.serve import PeersAsked
from swarm.net import wire
from tests.swarm.core.test_serve import core, handshake

TCP, QUIC = wire.Transport.TCP, wire.Transport.QUIC


def peer(host: str, port: int = 6881, transports: wire.Transport = TCP) -> wire.PexPeer:
    return wire.PexPeer(ip_address(host), port, transports)


# (offered by, the PEX's entries, the fetch's transport) → the addresses it connects to
CASES = {
    "public from a public peer": ("8.8.8.8", [peer("1.1.1.1")], TCP, [("1.1.1.1", 6881)]),
    "another transport": ("8.8.8.8", [peer("1.1.1.1", transports=QUIC)], TCP, []),
    "either transport": ("8.8.8.8", [peer("1.1.1.1", transports=TCP | QUIC)], QUIC, [("1.1.1.1", 6881)]),
    "exchange off (transport 0)": ("8.8.8.8", [peer("1.1.1.1")], 0, []),
    "a privileged port": ("8.8.8.8", [peer("1.1.1.1", port=22)], TCP, []),
    # A stranger cannot make us connect into our own machine or LAN; peers of a lab or a LAN may offer theirs.
    "loopback from a public peer": ("8.8.8.8", [peer("127.0.0.1")], TCP, []),
    "private from a public peer": ("8.8.8.8", [peer("192.168.1.5")], TCP, []),
    "link-local from a public peer": ("8.8.8.8", [peer("169.254.1.1")], TCP, []),
    "loopback from a loopback peer": ("127.0.0.2", [peer("127.0.0.3")], TCP, [("127.0.0.3", 6881)]),
    "private from a private peer": ("10.0.0.2", [peer("10.0.0.3")], TCP, [("10.0.0.3", 6881)]),
    "loopback from a private peer": ("10.0.0.2", [peer("127.0.0.1")], TCP, []),
    "public from a loopback peer": ("127.0.0.2", [peer("1.1.1.1")], TCP, [("1.1.1.1", 6881)]),
    "special: documentation": ("8.8.8.8", [peer("192.0.2.7")], TCP, []),
    "special: multicast": ("8.8.8.8", [peer("224.0.0.1")], TCP, []),
    "special: unspecified": ("8.8.8.8", [peer("0.0.0.0")], TCP, []),
    "one per host": ("8.8.8.8", [peer("1.1.1.1"), peer("1.1.1.1", port=7000)], TCP, [("1.1.1.1", 6881)]),
    "two per network": ("8.8.8.8", [peer("1.1.1.1"), peer("1.1.1.2"), peer("1.1.1.3"), peer("2.2.2.2")], TCP,
                        [("1.1.1.1", 6881), ("1.1.1.2", 6881), ("2.2.2.2", 6881)]),
    "ipv6 /48": ("2001:4860::1", [peer("2606:4700::1"), peer("2606:4700::2"), peer("2606:4700::3")], TCP,
                 [("2606:4700::1", 6881), ("2606:4700::2", 6881)]),
    "at most PER_PEX of one PEX": ("8.8.8.8", [peer(f"1.1.{i}.1") for i in range(40)], TCP,
                                   [(f"1.1.{i}.1", 6881) for i in range(PER_PEX)]),
}


@pytest.mark.parametrize("by,peers,transport,expected", CASES.values(), ids=CASES.keys())
def test_a_pex_is_taken_within_its_bounds(by, peers, transport, expected):
    assert PER_NETWORK == 2
    assert PexJoin(int(transport)).offered(peers, by) == expected


def test_an_address_tried_is_never_tried_again_nor_its_host_joined_by_a_pex():
    join = PexJoin(int(TCP))
    assert join.connecting(("1.1.1.1", 6881))
    assert not join.connecting(("1.1.1.1", 6881))  # the provider list and a refresh name it again
    assert join.offered([peer("1.1.1.1", port=7000), peer("2.2.2.2")], "8.8.8.8") == [("2.2.2.2", 6881)]
    assert not join.connecting(("2.2.2.2", 6881))  # joined by a PEX: a refresh does not connect again


def test_many_pexes_join_at_most_joined_addresses_in_all_and_two_per_network_across_them():
    join = PexJoin(int(TCP))
    chosen = []
    for liar in range(20):  # twenty peers, each with its own forty addresses
        chosen += join.offered([peer(f"{liar + 1}.{i}.0.1") for i in range(40)] + [peer("99.0.0.1")],
                               f"8.8.{liar}.8")
    assert len(chosen) == JOINED == join.joined
    assert sum(host.startswith("99.0.0.") for host, _ in chosen) <= 1


SERVE = {
    "serves on a port": ([wire.Pex((peer("0.0.0.0", 5000, TCP | QUIC),))], [PeersAsked(5000, int(TCP | QUIC))]),
    "asks only": ([wire.Pex(())], [PeersAsked(0, 0)]),
    "a second PEX is ignored": ([wire.Pex(()), wire.Pex((peer("0.0.0.0", 5000),))], []),
    "more than one entry is ignored": ([wire.Pex((peer("0.0.0.0", 5000), peer("1.1.1.1")))], []),
}


@pytest.mark.parametrize("messages,expected", SERVE.values(), ids=SERVE.keys())
def test_a_content_sessions_first_pex_asks_for_the_others(messages, expected):
    serve = core()
    handshake(serve)
    for at, message in enumerate(messages[:-1]):
        serve.on_message(message, float(at))
    assert serve.on_message(messages[-1], 10.0) == expected
