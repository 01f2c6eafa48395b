"""A stock libtorrent client, in its own process: downloads one torrent (a magnet link or a .torrent file) into a
directory and prints one JSON line: {"complete": bool, "seconds": float, "error": str|null, "peers": int}.

Its settings are pinned so that nothing leaves the machine: no DHT (and no bootstrap routers), no local peer
discovery, no UPnP or NAT-PMP, no uTP; our torrents name no tracker. It listens on 127.0.0.1.

    python tests/bittorrent/stock_client.py (--magnet LINK | --torrent FILE) --save DIR [--peer HOST:PORT]
        [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import libtorrent as lt

SETTINGS = {
    "listen_interfaces": "127.0.0.1:0", "enable_dht": False, "dht_bootstrap_nodes": "", "enable_lsd": False,
    "enable_upnp": False, "enable_natpmp": False, "enable_outgoing_utp": False, "enable_incoming_utp": False,
    "alert_mask": int(lt.alert_category.error | lt.alert_category.status),
}


def main() -> int:
    parser = argparse.ArgumentParser()
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--magnet")
    source.add_argument("--torrent")
    parser.add_argument("--save", required=True)
    parser.add_argument("--peer", help="HOST:PORT to connect to (a .torrent names none)")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    session = lt.session(SETTINGS)
    if args.magnet:
        params = lt.parse_magnet_uri(args.magnet)
    else:
        params = lt.add_torrent_params()
        params.ti = lt.torrent_info(args.torrent)
    params.save_path = args.save
    handle = session.add_torrent(params)
    if args.peer:
        host, _, port = args.peer.rpartition(":")
        handle.connect_peer((host.strip("[]"), int(port)))
    started, error = time.monotonic(), None
    while time.monotonic() - started < args.timeout:
        status = handle.status()
        if status.is_seeding:
            break
        for alert in session.pop_alerts():
            if isinstance(alert, (lt.torrent_error_alert, lt.file_error_alert)):
                error = alert.message()
        if error:
            break
        session.wait_for_alert(100)
    status = handle.status()
    print(json.dumps({"complete": bool(status.is_seeding), "seconds": round(time.monotonic() - started, 3),
                      "error": error or (None if status.is_seeding else f"not complete in {args.timeout:g} s"),
                      "peers": status.num_peers}))
    return 0 if status.is_seeding else 1


if __name__ == "__main__":
    sys.exit(main())
