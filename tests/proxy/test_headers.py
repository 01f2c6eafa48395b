"""Hop-by-hop removal and Via (RFC 9110 §7.6), table-driven."""

import pytest

from proxy import headers as hdr

CASES = [
    # (incoming, upgrade, expected outgoing)
    ([("Host", "a"), ("Accept", "*/*")], False, [("Host", "a"), ("Accept", "*/*")]),
    ([("Connection", "close"), ("X-A", "1")], False, [("X-A", "1")]),
    ([("Connection", "keep-alive, X-Secret"), ("X-Secret", "s"), ("X-A", "1")], False, [("X-A", "1")]),
    ([("Connection", "X-One"), ("Connection", "x-two"), ("X-One", "1"), ("X-TWO", "2"), ("X-Three", "3")],
     False, [("X-Three", "3")]),
    ([("Keep-Alive", "timeout=5"), ("Proxy-Connection", "keep-alive"), ("TE", "trailers"),
      ("Transfer-Encoding", "chunked"), ("Upgrade", "h2c"), ("Trailer", "X"), ("Proxy-Authorization", "Basic x"),
      ("Content-Length", "3")], False, [("Content-Length", "3")]),
    ([("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Key", "k")], True,
     [("Upgrade", "websocket"), ("Sec-WebSocket-Key", "k"), ("Connection", "Upgrade")]),
    ([("Connection", "Upgrade, X-Hop"), ("Upgrade", "websocket"), ("X-Hop", "1")], True,
     [("Upgrade", "websocket"), ("Connection", "Upgrade")]),
    ([("connection", ",,  ,"), ("X-A", "1")], False, [("X-A", "1")]),
]


@pytest.mark.parametrize("incoming,upgrade,expected", CASES)
def test_end_to_end(incoming, upgrade, expected):
    assert hdr.end_to_end(incoming, upgrade=upgrade) == expected


def test_drop_extra_fields_case_insensitively():
    assert hdr.end_to_end([("HOST", "x"), ("expect", "100-continue"), ("A", "1")], drop=("Host", "Expect")) == [
        ("A", "1")]


@pytest.mark.parametrize("incoming,expected", [
    ([("Connection", "Upgrade"), ("Upgrade", "websocket")], "websocket"),
    ([("Connection", "keep-alive, upgrade"), ("Upgrade", " h2c ")], "h2c"),
    ([("Upgrade", "websocket")], None),  # not named in Connection: not a request to switch
    ([("Connection", "upgrade")], None),
    ([], None),
])
def test_wants_upgrade(incoming, expected):
    assert hdr.wants_upgrade(incoming) == expected


@pytest.mark.parametrize("version,entry", [((1, 1), "1.1 swarmproxy"), ((1, 0), "1.0 swarmproxy"),
                                           ((2, 0), "2 swarmproxy")])
def test_via_appends_a_field_line(version, entry):
    assert hdr.add_via([("Via", "1.1 cache")], version) == [("Via", "1.1 cache"), ("Via", entry)]
