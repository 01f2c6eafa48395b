"""Wait until the test internet's Mainline DHT holds an announcement: a read-only stock libtorrent session that
looks a key up until some peer is announced under it, for tests that must not start a download before a provider
can be found (`tests/bench/test_punched_rescue_netns.py`), rather than sleeping for a guess.

    python -m bench.dht_wait ADDRESS KEY_HEX TIMEOUT NODE_ADDRESS:PORT [...]

Run inside a namespace of the test internet (`Topology.spawn`); prints one JSON line, `{"found": [[HOST, PORT],
...], "after_s": S}` or `{"found": [], "after_s": TIMEOUT}`, and exits. Read-only (BEP 43): nobody takes it into
a routing table, so it cannot slow others' searches down.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import libtorrent as lt

SETTINGS = {"enable_dht": False, "dht_bootstrap_nodes": "", "dht_read_only": True, "enable_lsd": False,
            "enable_upnp": False, "enable_natpmp": False,
            "alert_mask": int(lt.alert_category.dht_operation | lt.alert_category.dht)}
ASK_EVERY = 0.5  # s between two lookups of the key


def claim_on_the_dht(topology, machine, url: str, timeout: float = 60.0) -> list[list]:
    """Run this in `machine`'s namespace of `topology` (`bench.internet_netns.Topology`) until some node's claim
    under `url`'s key is on the DHT; the addresses found ([] after `timeout` s)."""
    from bittorrent.mainline_claims import claim_key
    from proxy.engine import url_key

    waiting = topology.spawn(machine, [sys.executable, "-m", "bench.dht_wait", machine.address,
                                       claim_key(url_key(url)).hex(), str(timeout), *topology.bootstrap()],
                             stdout=subprocess.PIPE, text=True)
    return json.loads(waiting.communicate(timeout=timeout + 30)[0])["found"]


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    address, key, timeout = argv[0], lt.sha1_hash(bytes.fromhex(argv[1])), float(argv[2])
    session = lt.session({**SETTINGS, "listen_interfaces": f"{address}:0"})
    while not session.listen_port():  # it binds on its own thread
        session.wait_for_alert(100)
    session.apply_settings({"enable_dht": True})
    for node in argv[3:]:
        host, _, port = node.rpartition(":")
        session.add_dht_node((host, int(port)))
    started = time.monotonic()
    found: set[tuple[str, int]] = set()
    while not found and time.monotonic() - started < timeout:
        session.dht_get_peers(key)
        ask_again = time.monotonic() + ASK_EVERY
        while not found and time.monotonic() < ask_again:
            session.wait_for_alert(100)
            for alert in session.pop_alerts():
                if isinstance(alert, lt.dht_get_peers_reply_alert):
                    found.update((str(host), int(port)) for host, port in alert.peers())
    print(json.dumps({"found": sorted(found), "after_s": round(time.monotonic() - started, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
