"""libtorrent, unorganised, on a `bench.cluster_netns.Topology`: the baseline of `swarmproxy lab cluster-tekel`.

One libtorrent session per host, each a process in its host's network namespace (a process lives in one
namespace), listening on that namespace's address only. Settings pinned so that nothing leaves the machine and
nothing but the shaped links sets the pace: no DHT, LSD, UPnP, NAT-PMP, no uTP, no rate limits, plaintext (RC4
would cost CPU that 18 sessions on 2 cores lack). As `bench.lab.bittorrent` does for the browser lab, the tracker is
ideal: once every session listens, each is told every other's address at once (`connect_peer`), and nothing else.
The seeder holds the file from the start (seed mode); the torrent's pieces are the cluster's blocks.

A session (`python -m bench.lab.cluster_bt --torrent F --save DIR --listen ADDR [--seed]`) prints its port, reads
one line of peers ("ADDR:PORT ...") on stdin, connects to them, prints `finished WALLTIME` once it holds every
piece, and keeps seeding until its stdin closes; then it prints its payload bytes up and down as JSON and exits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import select
import subprocess
import sys
import time
from typing import Any

from .. import extra

lt = extra.require("libtorrent", who="bench.lab.cluster_bt")

POLL = 0.05  # s between two looks at a session's state: the resolution of a finish time
BLOCK = 16 * 1024  # libtorrent's request size: a piece is a multiple of it

SETTINGS: dict[str, Any] = {
    "enable_dht": False, "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False,
    "enable_outgoing_utp": False, "enable_incoming_utp": False,
    "out_enc_policy": 2, "in_enc_policy": 2,
    "aio_threads": 2, "hashing_threads": 1,
    "alert_mask": int(lt.alert_category.error),
}


def make_torrent(path: pathlib.Path, piece_size: int) -> bytes:
    """A v1 torrent of the file at `path`, without trackers or web seeds (bencoded)."""
    if piece_size <= 0 or piece_size % BLOCK:
        raise ValueError(f"piece size must be a positive multiple of {BLOCK}, got {piece_size}")
    data = path.read_bytes()
    creator = lt.create_torrent([lt.create_file_entry(path.name, len(data))], piece_size, lt.create_torrent.v1_only)
    for piece in range(creator.num_pieces()):
        creator.set_hash(piece, hashlib.sha1(data[piece * piece_size:(piece + 1) * piece_size]).digest())
    return lt.bencode(creator.generate())


def peer(args: argparse.Namespace) -> int:
    session = lt.session({**SETTINGS, "listen_interfaces": f"{args.listen}:0"})
    params = lt.add_torrent_params()
    params.ti = lt.torrent_info(str(args.torrent))
    params.save_path = str(args.save)
    if args.seed:
        params.flags |= lt.torrent_flags.seed_mode
    handle = session.add_torrent(params)
    print(session.listen_port(), flush=True)
    line = sys.stdin.readline()
    for address in line.split():
        host, port = address.rsplit(":", 1)
        if host != args.listen:
            handle.connect_peer((host, int(port)))
    finished = args.seed
    while True:
        if not finished and handle.status().is_seeding:
            print(f"finished {time.time():.4f}", flush=True)
            finished = True
        readable, _, _ = select.select([sys.stdin], [], [], POLL)  # the poll period, or stdin closed: stop
        if readable and not sys.stdin.readline():
            break
    status = handle.status()
    print(json.dumps({"up": status.total_payload_upload, "down": status.total_payload_download,
                      "complete": status.is_seeding}), flush=True)
    return 0


class Swarm:
    """Sessions on hosts of a built topology: `start(peers)` tells them about each other; `finished` collects
    each receiver's finish time (wall clock) as it prints it; `stop()` ends them and returns their byte counts."""

    def __init__(self, topology, torrent: pathlib.Path, directory: pathlib.Path, seeder: str,
                 receivers: list[str], payload: pathlib.Path) -> None:
        self.processes: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.finished: dict[str, float] = {}
        for name in [seeder, *receivers]:
            host = topology.hosts[name]
            save = directory / name
            save.mkdir(parents=True, exist_ok=True)
            if name == seeder:
                (save / payload.name).write_bytes(payload.read_bytes())
            argv = [sys.executable, "-m", "bench.lab.cluster_bt", "--torrent", str(torrent), "--save", str(save),
                    "--listen", host.address, *(["--seed"] if name == seeder else [])]
            self.processes[name] = topology.spawn(host, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                  text=True, cwd=str(pathlib.Path(__file__).resolve().parents[2]))
        for name, process in self.processes.items():
            assert process.stdout is not None
            self.ports[name] = int(process.stdout.readline())
        self.addresses = {name: topology.hosts[name].address for name in self.processes}
        self.receivers = receivers

    def start(self) -> float:
        line = " ".join(f"{self.addresses[n]}:{self.ports[n]}" for n in self.processes) + "\n"
        began = time.time()
        for process in self.processes.values():
            assert process.stdin is not None
            process.stdin.write(line)
            process.stdin.flush()
        return began

    def wait(self, timeout: float) -> None:
        """Until every receiver printed its finish time, or `timeout` s."""
        deadline = time.monotonic() + timeout
        waiting: dict[Any, str] = {self.processes[n].stdout: n for n in self.receivers}
        while waiting and time.monotonic() < deadline:
            readable, _, _ = select.select(list(waiting), [], [], max(0.0, deadline - time.monotonic()))
            for stream in readable:
                line = stream.readline()
                name = waiting.pop(stream)
                if line.startswith("finished "):
                    self.finished[name] = float(line.split()[1])

    def stop(self) -> dict[str, dict]:
        counts = {}
        for process in self.processes.values():
            assert process.stdin is not None
            process.stdin.close()
        for name, process in self.processes.items():
            assert process.stdout is not None
            out = process.stdout.read()  # to its end: the session exits once its stdin is closed
            process.wait(timeout=30)
            lines = [line for line in out.splitlines() if line.startswith("{")]
            counts[name] = json.loads(lines[-1]) if lines else {}
        return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torrent", type=pathlib.Path, required=True)
    parser.add_argument("--save", type=pathlib.Path, required=True)
    parser.add_argument("--listen", required=True, help="this namespace's address")
    parser.add_argument("--seed", action="store_true", help="holds the file: seed mode")
    return peer(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
