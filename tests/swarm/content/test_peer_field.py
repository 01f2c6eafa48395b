"""`Swarm-Peers` and `Swarm-Accept: peer=PORT`: what each side makes of the other's field, a stranger's."""

from __future__ import annotations

import pytest

from swarm.content.peer_field import PEERS_GIVEN, accept_field, format_peers, parse_peers, peer_port


@pytest.mark.parametrize(("value", "expected"), [
    (None, []),
    ("", []),
    ("203.0.113.7:6881", [("203.0.113.7", 6881)]),
    (" 203.0.113.7:6881 ,[2001:db8::1]:7000", [("203.0.113.7", 6881), ("2001:db8::1", 7000)]),
    ("[::ffff:203.0.113.7]:6881", [("203.0.113.7", 6881)]),  # one spelling: the mapped form is the IPv4 host
    ("203.0.113.7:6881, 203.0.113.7:6881", [("203.0.113.7", 6881)]),  # each once
    ("example.com:6881, 203.0.113.7:6881", [("203.0.113.7", 6881)]),  # a name is never resolved: skipped
    ("203.0.113.7:80, 203.0.113.7:1023, 203.0.113.7:65536, 203.0.113.7:0", []),  # another service's, or no port
    ("203.0.113.7, :6881, 203.0.113.999:6881, [2001:db8::1:6881", []),
    ("203.0.113.7:6881; evil, 203.0.113.8:06881", [("203.0.113.8", 6881)]),
    ("203.0.113.7:\u0666\u0668\u0668\u0661, 203.0.113.8:\uff16\uff18\uff18\uff11", []),  # not ASCII digits
])
def test_parse_peers(value, expected):
    assert parse_peers(value) == expected


def test_parse_peers_is_bounded():
    field = ", ".join(f"203.0.113.{i}:7000" for i in range(1, 200))
    assert len(parse_peers(field)) == PEERS_GIVEN
    assert parse_peers("x, " * 100_000 + "203.0.113.7:6881") == []  # only the first tokens are looked at


def test_format_then_parse():
    peers = [("203.0.113.7", 6881), ("2001:db8::1", 7000)]
    assert format_peers(peers) == "203.0.113.7:6881, [2001:db8::1]:7000"
    assert parse_peers(format_peers(peers)) == peers


@pytest.mark.parametrize(("value", "port"), [
    (None, None),
    ("hint", None),
    ("hint, peer=6881", 6881),
    ("PEER = 7000 , hint", 7000),
    ("hint, peer=80", None),  # below 1024: never listed
    ("hint, peer=70000", None),
    ("hint, peer=x", None),
    ("hint, peer=", None),
    ("hint, peer=\uff16\uff18\uff18\uff11", None),  # fullwidth digits: int() reads them, no port is written so
])
def test_peer_port(value, port):
    assert peer_port(value) == port


def test_accept_field():
    assert accept_field("hint", None) == "hint"
    assert accept_field("hint", 6881) == "hint, peer=6881"
    assert peer_port(accept_field("hint", 6881)) == 6881
