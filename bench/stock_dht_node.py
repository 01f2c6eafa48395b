"""One stock libtorrent DHT node, as its own process: a node of the test internet's Mainline DHT
(`bench/internet_netns.py` runs one in each of its DHT namespaces).

    python -m bench.stock_dht_node ADDRESS PORT [PEER_ADDRESS:PORT ...]

It listens on ADDRESS:PORT (UDP for the DHT, TCP beside it, as libtorrent does), is told of the other nodes with
`add_dht_node`, prints its port on one line once it listens, and serves until it is killed or its standard input
closes. Its settings are `tests/bittorrent/stock_dht.py`'s: the DHT on with no bootstrap router (it knows only the
nodes it is told of), local peer discovery, UPnP and NAT-PMP off: it sends nothing on its own but to those nodes
and to whoever talks to it.
"""

from __future__ import annotations

import sys
import threading

import libtorrent as lt

SETTINGS = {"enable_dht": True, "dht_bootstrap_nodes": "", "enable_lsd": False, "enable_upnp": False,
            "enable_natpmp": False, "alert_mask": int(lt.alert_category.status)}


def _peer(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    address, port, peers = argv[0], int(argv[1]), [_peer(p) for p in argv[2:]]
    session = lt.session({**SETTINGS, "listen_interfaces": f"{address}:{port}"})
    while not (bound := session.listen_port()):  # it binds on its own thread: wait until it says where
        session.wait_for_alert(100)
    for peer in peers:
        session.add_dht_node(peer)
    print(bound, flush=True)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    while not closed.is_set():
        session.wait_for_alert(500)
        session.pop_alerts()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
