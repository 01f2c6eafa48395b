"""A Mainline DHT of stock libtorrent nodes on 127.0.0.1, each told of the others: no router, no public address,
nothing leaves the machine. Shared by the tests of `bittorrent.mainline` and of the proxy's Internet mode."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import libtorrent as lt

STOCK_NODES = 6


@contextlib.contextmanager
def stock_dht(count: int = STOCK_NODES) -> Iterator[tuple[str, ...]]:
    """The nodes' `127.0.0.1:port`s, for `--mainline-bootstrap` or `BtSession(dht_nodes=...)`."""
    sessions = [lt.session({"listen_interfaces": "127.0.0.1:0", "enable_dht": True, "dht_bootstrap_nodes": "",
                            "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False,
                            "alert_mask": int(lt.alert_category.status)}) for _ in range(count)]
    ports = []
    for session in sessions:  # each binds on its own thread: wait until it says where
        while not (port := session.listen_port()):
            session.wait_for_alert(100)
        ports.append(port)
    for session in sessions:
        for port in ports:
            session.add_dht_node(("127.0.0.1", port))
    try:
        yield tuple(f"127.0.0.1:{port}" for port in ports)
    finally:
        del sessions
