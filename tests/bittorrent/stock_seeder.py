"""A stock libtorrent seeder, in its own process: makes a v2 torrent of one file (libtorrent's own create_torrent),
writes it to `--torrent-out`, seeds it on `--listen HOST` (any port) and prints one JSON line
{"port": int, "info_hash": hex}; it seeds until its standard input closes.

`--corrupt-piece N` seeds a copy of the file with piece N's bytes flipped, told that it has every piece verified,
so it serves the bad bytes (a lying seeder). `--dht-node HOST:PORT` (repeatable) joins a Mainline DHT of the
test's own through those nodes, where libtorrent announces the torrent. Its settings are pinned as the stock
client's are: nothing leaves the machine (no public DHT router, no LSD, UPnP, NAT-PMP, uTP; the torrent names no
tracker).

    python tests/bittorrent/stock_seeder.py --file PATH --torrent-out FILE [--listen HOST] [--piece-length N]
        [--corrupt-piece N] [--dht-node HOST:PORT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import libtorrent as lt


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--file", required=True)
    parser.add_argument("--torrent-out", required=True)
    parser.add_argument("--listen", default="127.0.0.1")
    parser.add_argument("--piece-length", type=int, default=0)
    parser.add_argument("--corrupt-piece", type=int, default=None)
    parser.add_argument("--dht-node", action="append", default=[])
    args = parser.parse_args()
    directory, name = os.path.split(os.path.abspath(args.file))
    files = lt.file_storage()
    files.add_file(name, os.path.getsize(args.file))
    creator = lt.create_torrent(files, args.piece_length, lt.create_torrent.v2_only)
    lt.set_piece_hashes(creator, directory)
    data = lt.bencode(creator.generate())
    with open(args.torrent_out, "wb") as out:
        out.write(data)
    info = lt.torrent_info(data)
    session = lt.session({
        "listen_interfaces": f"{args.listen}:0", "enable_dht": False, "dht_bootstrap_nodes": "",
        "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False, "enable_outgoing_utp": False,
        "enable_incoming_utp": False, "alert_mask": int(lt.alert_category.status | lt.alert_category.error),
    })
    port = 0
    while not port:  # it binds on its own thread: wait for it to say so
        session.wait_for_alert(5000)
        for alert in session.pop_alerts():
            if isinstance(alert, lt.listen_succeeded_alert) and alert.socket_type == lt.socket_type_t.tcp:
                port = alert.port
            elif isinstance(alert, lt.listen_failed_alert):
                print(json.dumps({"error": alert.message()}), flush=True)
                return 1
    if args.dht_node:  # on once listening (started before, libtorrent's DHT has no socket to run on yet)
        session.apply_settings({"enable_dht": True})
        for node in args.dht_node:
            host, _, node_port = node.rpartition(":")
            session.add_dht_node((host, int(node_port)))
    params = lt.add_torrent_params()
    params.ti = info
    params.save_path = directory
    if args.corrupt_piece is not None:
        lying = tempfile.mkdtemp()
        shutil.copy(args.file, os.path.join(lying, name))
        with open(os.path.join(lying, name), "r+b") as copy:
            copy.seek(args.corrupt_piece * info.piece_length())
            chunk = copy.read(info.piece_length())
            copy.seek(args.corrupt_piece * info.piece_length())
            copy.write(bytes(b ^ 0xFF for b in chunk))
        params.save_path = lying
        pieces = info.num_pieces()
        params.have_pieces = [True] * pieces
        params.verified_pieces = [True] * pieces
    params.flags &= ~(lt.torrent_flags.auto_managed | lt.torrent_flags.paused)
    session.add_torrent(params)
    print(json.dumps({"port": port, "info_hash": info.info_hashes().v2.to_bytes().hex()}),
          flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
