"""The embedded session's settings: nothing reaches the world on its own, and a stranger's take is bounded."""

from __future__ import annotations

import libtorrent
import pytest

from bittorrent.settings import MAX_CONNECTIONS, dht_read_only, session_settings

PACK = session_settings("127.0.0.1", 0, alert_mask=0)


@pytest.mark.parametrize(("name", "value"), [
    ("enable_dht", False),  # BitTorrent's DHT: off until the Internet mode turns it on
    ("dht_bootstrap_nodes", ""),  # and no public router's name to ask if it ever were on by mistake
    ("enable_lsd", False),  # BEP 14 multicast
    ("enable_upnp", False), ("enable_natpmp", False),  # port mapping on the user's router
    ("enable_outgoing_utp", False), ("enable_incoming_utp", False),  # one TCP listener, counted whole
    ("allow_multiple_connections_per_ip", False),  # one connection per address and torrent
    ("connections_limit", MAX_CONNECTIONS),
    ("no_connect_privileged_ports", True),  # a holepunch naming port 22 or 80 is never dialled
    ("close_redundant_connections", False),  # a download between two asks keeps its seeds
])
def test_a_setting_that_bounds_or_silences_the_session(name, value):
    assert PACK[name] == value  # type: ignore[literal-required]


def test_libtorrent_takes_every_setting_as_it_is():
    session = libtorrent.session(PACK)
    applied = session.get_settings()
    assert {name: applied[name] for name in PACK} == PACK  # a misspelt or refused setting would differ


def test_an_ipv6_listener_is_bracketed():
    assert session_settings("::1", 6881, alert_mask=0)["listen_interfaces"] == "[::1]:6881"


# (host, DHT nodes, the router mapped the DHT's port, the external address is ours, read-only?)
READ_ONLY_CASES = [
    ("192.168.1.10", ("55.55.11.2:6881",), False, False, True),  # behind a NAT, on a public DHT
    ("0.0.0.0", ("router.bittorrent.com:6881",), False, False, True),  # a name is the public network
    ("192.168.1.10", ("55.55.11.2:6881",), True, False, False),  # the router mapped the port
    ("0.0.0.0", ("router.bittorrent.com:6881",), False, True, False),  # our external address is this machine's
    ("55.55.52.2", ("55.55.11.2:6881",), False, False, False),  # listening on a public address
    ("10.0.0.5", ("10.0.0.1:6881", "[fd00::1]:6881"), False, False, False),  # a DHT of one's own LAN
    ("10.0.0.5", ("10.0.0.1:6881", "[2a00:1450::1]:6881"), False, False, True),  # ... with one public node
]  # fmt: skip


@pytest.mark.parametrize("host, nodes, mapped, ours, expected", READ_ONLY_CASES)
def test_dht_read_only_table(host, nodes, mapped, ours, expected):
    assert dht_read_only(host, nodes, mapped=mapped, external_is_ours=ours) is expected
