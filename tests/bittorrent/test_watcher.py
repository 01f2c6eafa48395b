"""The embedded session's IP filter, live (`bittorrent.watcher`): one address flooding the listener with connections
that never handshake is refused while a client from another address still gets in, and a stranger's holepunch
cannot make the session dial a non-public address.

Attack test: on the tree before the admission, 300 such connections from one address held all 200 of the session's
slots, and a client's handshake arriving then was closed unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import sys
import textwrap
import threading

import libtorrent as lt

from addresses import LOOPBACK_NETWORKS
from bittorrent.seeder import Seeder
from bittorrent.session import BtSession
from bittorrent.settings import HANDSHAKE_TIMEOUT
from swarm.content.manifest import build_manifest
from swarm.service.shares import ContentShared
from swarm.service.store_work import BytesBody, fill_entry
from swarm.store.disk import DiskBlockStore

from .checked import checked, until

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


async def answered_again(port: int, source: str, info_hash: bytes, within: float) -> bool:
    """`answered`, tried again a moment after each refusal (as a client does) for up to `within` s."""
    try:
        async with asyncio.timeout(within):
            while not await answered(port, source, info_hash):
                await asyncio.sleep(0.5)  # a client's pause before it tries again, not a wait for a condition
        return True
    except TimeoutError:
        return False


@contextlib.asynccontextmanager
async def seeding_session(tmp_path, reachable):
    """A session seeding one 100 kB file: its port and the torrent's info-hash."""
    store = DiskBlockStore(tmp_path / "blocks")
    session = BtSession("127.0.0.1", 0, reachable=reachable)
    _, port = await session.start()
    seeder = Seeder(session, store)
    try:
        data = os.urandom(100_000)
        manifest, layer = build_manifest([data], len(data), url="http://192.31.196.1/f.bin", validator='"v1"')
        fill_entry(store, manifest, layer, BytesBody(data), threading.Event())
        seeder.on_share(ContentShared(manifest))
        seeding = seeder.seeded(manifest.root)
        assert seeding is not None
        await checked(seeding.handle)
        yield session, port, seeding.torrent.info_hash
    finally:
        seeder.close()
        await session.stop()
        store.close()


async def test_a_flood_from_one_address_is_refused_and_others_still_get_in(tmp_path):
    async with seeding_session(tmp_path, LOOPBACK_NETWORKS) as (session, port, info_hash):
        flooder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", FLOODER, str(port), str(FLOOD), ATTACKER,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        try:
            assert flooder.stdout is not None and flooder.stdin is not None
            await flooder.stdout.readline()
            await until(lambda: session.status([])["admission"]["blocked"], "the flooder blocked")
            assert session.status([])["admission"]["blocked"] == [ATTACKER]
            # The admission blocks first, then hands libtorrent the filter, which applies it on its own thread
            # (`get_ip_filter` waits for that thread): a handshake sent in between was answered (once in CI).
            await until(lambda: session.session.get_ip_filter().access(ATTACKER) == 1, "libtorrent's filter")
            # Another address is admitted while the flooder still holds its connections open: at once, unless the
            # burst filled every slot before the filter landed (once in CI); then, as a real client that tries
            # again, once libtorrent's handshake timeout has freed them (SECURITY.md, "Residual risks")...
            assert await answered_again(port, "127.0.7.2", info_hash, within=3 * HANDSHAKE_TIMEOUT)
            # ... and the flooder itself is not, not even with a proper handshake.
            assert not await answered(port, ATTACKER, info_hash)
        finally:
            if flooder.stdin is not None:
                flooder.stdin.close()
            await flooder.wait()


async def test_a_strangers_holepunch_cannot_make_the_session_dial_the_intranet(tmp_path):
    """BEP 55: a peer sends `connect` messages naming addresses; libtorrent dials them whatever PEX and seeding
    settings say. Only the IP filter stops it: an address outside the reachable networks is never dialled, while
    one inside is (the control, which also tells the test the messages were read: they are read in order).
    On the tree before the filter, 127.0.0.1 was dialled."""

    dialled: list[str] = []

    async def listener(host: str) -> tuple[asyncio.Server, int]:
        async def on(_reader, writer):
            dialled.append(host)
            writer.close()
        server = await asyncio.start_server(on, host, 0)
        return server, server.sockets[0].getsockname()[1]

    intranet, intranet_port = await listener("127.0.0.1")
    control, control_port = await listener("127.0.9.1")
    # the attacker's and the control's network is reachable; 127.0.0.1 is not
    async with seeding_session(tmp_path, ("127.0.9.0/24",)) as (_session, port, info_hash):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.9.7", 0))
        reserved = bytearray(8)
        reserved[5] |= 0x10  # the extension protocol (BEP 10)
        writer.write(b"\x13BitTorrent protocol" + bytes(reserved) + info_hash[:20] + os.urandom(20))
        ours = lt.bencode({"m": {"ut_holepunch": 4}})
        writer.write(struct.pack(">IBB", len(ours) + 2, 20, 0) + ours)
        await reader.readexactly(68)
        async with asyncio.timeout(10):
            while True:  # its extended handshake: the id it gave ut_holepunch
                length = struct.unpack(">I", await reader.readexactly(4))[0]
                body = await reader.readexactly(length)
                if body[:2] == b"\x14\x00":
                    extensions = lt.bdecode(body[2:])[b"m"]
                    break
        holepunch = extensions[b"ut_holepunch"]
        for host, target in (("127.0.0.1", intranet_port), ("127.0.9.1", control_port)):
            connect = bytes([1, 0]) + socket.inet_aton(host) + struct.pack(">H", target)  # msg connect, IPv4
            writer.write(struct.pack(">IBB", len(connect) + 2, 20, holepunch) + connect)
        await writer.drain()
        await until(lambda: "127.0.9.1" in dialled, "the control dialled")
        assert dialled == ["127.0.9.1"]
        writer.close()
        intranet.close()
        control.close()
