"""`PortMaps`: the router's word on each port asked, by mapping transport, latest first."""

from __future__ import annotations

from bittorrent.port_maps import PortMaps


def test_the_latest_word_per_port_and_transport():
    maps = PortMaps()
    maps.asked(0, "tcp", 5000)
    maps.asked(1, "udp", 5000)
    assert maps.external_port(5000, "tcp") is None  # asked, not mapped yet
    maps.failed(0, "natpmp", "no router answered")
    maps.mapped(0, "upnp", "tcp", 41000)
    assert maps.external_port(5000, "tcp") == 41000 and maps.external_port(5000, "udp") is None
    maps.failed(0, "upnp", "lease expired")  # a mapping that expires is no longer shown as mapped
    assert maps.external_port(5000, "tcp") is None
    maps.mapped(7, "natpmp", "tcp", 6881)  # libtorrent's own listener, mapped unasked
    assert maps.status() == [
        {"port": 5000, "protocol": "tcp", "mapped": {}, "errors": {"natpmp": "no router answered",
                                                                   "upnp": "lease expired"}},
        {"port": 5000, "protocol": "udp", "mapped": {}, "errors": {}},
        {"port": None, "protocol": "tcp", "mapped": {"natpmp": 6881}, "errors": {}},
    ]
