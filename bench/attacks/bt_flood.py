"""Strangers against the BitTorrent bridge's listener (`--bt-listen`): connections that never say which torrent
they want, and connections that handshake for our torrent from many addresses, while a real client downloads.

The bridge's session (its pinned settings: 200 peers at once, one connection per address and torrent, handshakes
within 10 s) seeds a file from a block store, in this process; the attacker opens `--idle` connections that send
nothing and `--handshaking` connections, from `--addresses` 127.0.x.y addresses, that send a valid handshake for the
torrent and then nothing. Then a stock libtorrent leecher (tests/bittorrent/stock_client.py, its own process)
downloads the file. Prints how many connections the session held a second into the attack and which sources its
admission refused (`bittorrent/admission.py`; a tree before it prints `?`), how many attacker connections were
still open after the handshake timeout, the process's RSS before, at the peak and after, and the leecher's time
beside its time with no attacker. (The attacker shares this process's event loop; the admission judges
connections on its own thread, so that does not slow it.)

    python -m bench.attacks.bt_flood [--idle N] [--handshaking N] [--size BYTES] [--addresses N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import sys
import tempfile
import threading

from addresses import LOOPBACK_NETWORKS
from bench.attacks.peer_node import rss_kib
from bittorrent.seeder import Seeder
from bittorrent.session import BtSession
from bittorrent.settings import HANDSHAKE_TIMEOUT
from swarm.content.manifest import build_manifest
from swarm.content.sizes import parse_size
from swarm.service.store_work import BytesBody, fill_entry
from swarm.store.disk import DiskBlockStore

CLIENT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "bittorrent" / "stock_client.py"


def rss_mib() -> float:
    return rss_kib(os.getpid()) / 1024


async def leech(work: pathlib.Path, torrent: pathlib.Path, peer: tuple[str, int], name: str) -> float:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(CLIENT), "--torrent", str(torrent), "--peer", f"{peer[0]}:{peer[1]}",
        "--save", str(work / name), "--timeout", "120", stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    report = json.loads(out)
    return report["seconds"] if report["complete"] else float("inf")


async def open_from(source: str, target: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*target, local_addr=(source, 0))


async def still_open(reader: asyncio.StreamReader) -> bool:
    """Whether the session has not closed this connection (reads nothing it has not sent)."""
    try:
        await asyncio.wait_for(reader.read(1 << 16), 0.05)
    except TimeoutError:
        return True
    except OSError:
        return False
    return not reader.at_eof()


def source(index: int, addresses: int) -> str:
    """The attacker's `index`th connection's address: `addresses` of them in turn (127.0.1.1, 127.0.1.2, ...)."""
    n = index % addresses
    return f"127.0.{1 + n // 250}.{1 + n % 250}"


async def main(idle: int, handshaking: int, size: int, addresses: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        work = pathlib.Path(directory)
        store = DiskBlockStore(work / "blocks")
        data = os.urandom(size)
        manifest, layer = build_manifest([data], size, url="http://192.31.196.1/f.bin", validator='"v1"')
        fill_entry(store, manifest, layer, BytesBody(data), threading.Event())
        session = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
        address = await session.start()
        seeder = Seeder(session, store)
        seeder.seed(manifest)
        seeding = seeder.seeded(manifest.root)
        assert seeding is not None
        torrent = work / "f.torrent"
        torrent.write_bytes(seeding.torrent.data)
        baseline = await leech(work, torrent, address, "baseline")
        before = rss_mib()

        handshake = (b"\x13BitTorrent protocol" + bytes(8) + seeding.torrent.info_hash[:20])
        idle_conns = [await open_from(source(i, addresses), address) for i in range(idle)]
        shaking = []
        for i in range(handshaking):
            reader, writer = await open_from(source(idle + i, addresses), address)
            writer.write(handshake + os.urandom(20))
            shaking.append((reader, writer))
        await asyncio.sleep(1)
        peak = rss_mib()
        # (a tree before the admission has none: the script runs there too, for the before/after table)
        held = session.status([]).get("admission", {"connections": "?", "opening": "?", "blocked": []})
        during = await leech(work, torrent, address, "attacked")
        await asyncio.sleep(HANDSHAKE_TIMEOUT + 2)  # past the handshake timeout
        idle_left = sum([await still_open(reader) for reader, _ in idle_conns])
        shaking_left = sum([await still_open(reader) for reader, _ in shaking])
        for _, writer in idle_conns + shaking:
            writer.close()
        await asyncio.sleep(1)
        print(f"seeding {size:,} bytes at {address[0]}:{address[1]}; the attacker has {addresses} address(es)")
        print(f"idle connections (no handshake): {idle} opened, {idle_left} still open "
              f"{HANDSHAKE_TIMEOUT + 2} s later")
        print(f"handshaking connections: {handshaking} opened, {shaking_left} still open then "
              f"(they send nothing more)")
        print(f"a second after the attack began the session held {held['connections']} connections "
              f"({held['opening']} before their handshake); sources refused: {', '.join(held['blocked']) or 'none'}")
        print(f"a real client's download: {baseline:.2f} s alone, {during:.2f} s with the attackers connected")
        print(f"RSS: {before:.0f} MiB before, {peak:.0f} MiB with the attackers connected, {rss_mib():.0f} MiB after")
        seeder.close()
        await session.stop()
        store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=300, help="connections that never handshake (300)")
    parser.add_argument("--handshaking", type=int, default=300, help="handshaking connections, one per address (300)")
    parser.add_argument("--size", default="20Mi", help="the seeded file's size (20Mi)")
    parser.add_argument("--addresses", type=int, default=600, help="addresses the attacker has (600: one each)")
    args = parser.parse_args()
    asyncio.run(main(args.idle, args.handshaking, parse_size(args.size), args.addresses))
