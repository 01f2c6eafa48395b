"""What seeding from our block store costs against libtorrent seeding a plain file: the bridge's price.

A file of `--size` bytes (200 MiB by default) is seeded to a stock libtorrent leecher in its own process
(tests/bittorrent/stock_client.py: DHT, LSD, UPnP, NAT-PMP and uTP off) over loopback, `--runs` times each way,
alternating:

* **ours**: the bridge's session (`bittorrent.session.BtSession`, its pinned settings) seeding the content from the
  block store's own data file (`bittorrent.seeder.Seeder`: `seed_mode`, `upload_mode`, the file renamed in);
* **plain**: a libtorrent session with libtorrent's default settings (the world-reaching ones off alike) seeding the
  same torrent from a plain copy of the file, checked before the run starts.

Prints each run's MB/s (the leecher's own time from adding the torrent to holding it whole) and the seeding
process's CPU seconds per GB, then the medians and their ratio; and the bench process's RSS before any session, with
the bridge's session idle, and at the end.

    python -m bench.bt_seed [--size BYTES] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

import libtorrent as lt

from addresses import LOOPBACK_NETWORKS
from bench.attacks.peer_node import rss_kib
from bittorrent.seeder import Seeder
from bittorrent.session import BtSession
from swarm.content.manifest import build_manifest
from swarm.content.sizes import parse_size
from swarm.content.torrent import torrent_of
from swarm.store.disk import DiskBlockStore

CLIENT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "bittorrent" / "stock_client.py"
CHUNK = 8 * 1024 * 1024
PLAIN = {"enable_dht": False, "dht_bootstrap_nodes": "", "enable_lsd": False, "enable_upnp": False,
         "enable_natpmp": False, "enable_outgoing_utp": False, "enable_incoming_utp": False,
         "listen_interfaces": "127.0.0.1:0"}


def rss_mib() -> float:
    return rss_kib(os.getpid()) / 1024


def chunks(path: pathlib.Path):
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            yield chunk


async def leech(torrent_path: pathlib.Path, peer: tuple[str, int], save: pathlib.Path) -> tuple[float, float]:
    """(seconds the leecher took, CPU seconds this process spent meanwhile)."""
    cpu = time.process_time()
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(CLIENT), "--torrent", str(torrent_path), "--peer", f"{peer[0]}:{peer[1]}",
        "--save", str(save), "--timeout", "300", stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    report = json.loads(out)
    if not report["complete"]:
        raise SystemExit(f"the leecher did not finish: {report}")
    shutil.rmtree(save)
    return report["seconds"], time.process_time() - cpu


async def main(size: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        work = pathlib.Path(directory)
        plain_dir = work / "plain"
        plain_dir.mkdir()
        source = work / "content"
        with source.open("wb") as file:
            for offset in range(0, size, CHUNK):
                file.write(os.urandom(min(CHUNK, size - offset)))
        manifest, layer = build_manifest(chunks(source), size)
        torrent = torrent_of(manifest, layer)
        torrent_path = work / "content.torrent"
        torrent_path.write_bytes(torrent.data)
        shutil.copy(source, plain_dir / manifest.root.hex())
        store = DiskBlockStore(work / "blocks")
        store.adopt(manifest, layer, source, move=True)
        print(f"{size:,} bytes, piece length {lt.torrent_info(torrent.data).piece_length():,}; "
              f"python {sys.version.split()[0]}, libtorrent {lt.__version__}")

        before = rss_mib()
        ours = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
        await ours.start()
        seeder = Seeder(ours, store)
        seeder.seed(manifest)
        idle = rss_mib()
        plain = lt.session(PLAIN)
        params = lt.add_torrent_params()
        params.ti = lt.torrent_info(torrent.data)
        params.save_path = str(plain_dir)
        handle = plain.add_torrent(params)
        while not handle.status().is_seeding:  # libtorrent checks the plain file first: not part of a run
            await asyncio.sleep(0.1)
        plain_port = plain.listen_port()

        results: dict[str, list[tuple[float, float]]] = {"ours": [], "plain": []}
        for run in range(runs):
            for name, peer in (("ours", ours.address), ("plain", ("127.0.0.1", plain_port))):
                assert peer is not None
                seconds, cpu = await leech(torrent_path, peer, work / f"got-{name}-{run}")
                results[name].append((seconds, cpu))
                print(f"run {run + 1} {name:5}: {size / seconds / 1e6:7.1f} MB/s, seeder CPU "
                      f"{cpu / (size / 1e9):5.2f} s/GB")
        speeds = {name: statistics.median(size / s / 1e6 for s, _ in values) for name, values in results.items()}
        cpus = {name: statistics.median(c / (size / 1e9) for _, c in values) for name, values in results.items()}
        print(f"median: ours {speeds['ours']:.1f} MB/s, plain {speeds['plain']:.1f} MB/s, ratio "
              f"{speeds['ours'] / speeds['plain']:.2f}; seeder CPU ours {cpus['ours']:.2f} s/GB, plain "
              f"{cpus['plain']:.2f} s/GB")
        print(f"RSS: {before:.0f} MiB before any session, {idle:.0f} MiB with the bridge's session seeding idle, "
              f"{rss_mib():.0f} MiB at the end (both sessions, after {2 * runs} runs)")
        seeder.close()
        await ours.stop()
        del plain
        store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="200Mi", help="the file's size (default 200Mi)")
    parser.add_argument("--runs", type=int, default=3, help="runs each way, alternating (default 3)")
    args = parser.parse_args()
    asyncio.run(main(parse_size(args.size), args.runs))
