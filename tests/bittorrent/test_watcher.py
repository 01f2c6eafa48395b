"""The BitTorrent listener's admission, live (`bittorrent.watcher`): one address flooding it with connections that
never handshake is refused, and a client from another address still gets in.

Attack test: on the tree before the admission, 300 such connections from one address held all 200 of the session's
slots, and a client's handshake arriving then was closed unanswered.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import threading

from bittorrent.seeder import Seeder
from bittorrent.session import BtSession
from swarm.content.manifest import build_manifest
from swarm.service.shares import ContentShared
from swarm.service.store_work import BytesBody, fill_entry
from swarm.store.disk import DiskBlockStore

ATTACKER = "127.0.7.1"
FLOOD = 300  # more than the session's 200 slots

# In its own process, as an attacker would be: opens every connection at once, sends nothing, holds them until
# its standard input closes.
FLOODER = textwrap.dedent("""
    import socket, sys
    port, count, source = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    held = []
    for _ in range(count):
        s = socket.socket(); s.setblocking(False); s.bind((source, 0))
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        held.append(s)
    print("opened", flush=True)
    sys.stdin.read()
""")


async def answered(port: int, source: str, info_hash: bytes) -> bool:
    """Whether the session answers a handshake for `info_hash` sent from `source` (with its own handshake)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    try:
        writer.write(b"\x13BitTorrent protocol" + bytes(8) + info_hash[:20] + os.urandom(20))
        try:
            reply = await asyncio.wait_for(reader.readexactly(68), 10)
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        return reply[28:48] == info_hash[:20]
    finally:
        writer.close()


async def until(condition, what: str) -> None:
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0.05)


async def test_a_flood_from_one_address_is_refused_and_others_still_get_in(tmp_path):
    store = DiskBlockStore(tmp_path / "blocks")
    session = BtSession("127.0.0.1", 0)
    _, port = await session.start()
    seeder = Seeder(session, store)
    try:
        data = os.urandom(100_000)
        manifest, layer = build_manifest([data], len(data), url="http://192.31.196.1/f.bin", validator='"v1"')
        fill_entry(store, manifest, layer, BytesBody(data), threading.Event())
        seeder.on_share(ContentShared(manifest))
        seeding = seeder.seeded(manifest.root)
        assert seeding is not None
        info_hash = seeding.torrent.info_hash

        flooder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", FLOODER, str(port), str(FLOOD), ATTACKER,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        try:
            assert flooder.stdout is not None and flooder.stdin is not None
            await flooder.stdout.readline()
            await until(lambda: session.status([])["admission"]["blocked"], "the flooder blocked")
            assert session.status([])["admission"]["blocked"] == [ATTACKER]
            # Another address is admitted while the flooder still holds its connections open...
            assert await answered(port, "127.0.7.2", info_hash)
            # ... and the flooder itself is not, not even with a proper handshake.
            assert not await answered(port, ATTACKER, info_hash)
        finally:
            if flooder.stdin is not None:
                flooder.stdin.close()
            await flooder.wait()
    finally:
        seeder.close()
        await session.stop()
        store.close()
