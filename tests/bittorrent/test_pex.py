"""Attack: a stranger on the BitTorrent port sends a peer exchange (ut_pex) naming an address on this machine or
the LAN. A seed that dials the peers it hears of would connect there for the stranger (a port scan of the
intranet, from our address). The bridge's session dials nobody (`seeding_outgoing_connections` off)."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading

import libtorrent
import pytest

from addresses import LOOPBACK_NETWORKS
from bittorrent.seeder import Seeder
from bittorrent.session import BtSession
from swarm.content.manifest import build_manifest
from swarm.service.store_work import BytesBody, fill_entry
from swarm.store.disk import DiskBlockStore

from .checked import checked

EXTENSION_BIT = 0x10  # reserved byte 5: BEP 10's extension protocol
EXTENDED = 20  # the extension protocol's message id


async def read_message(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    while True:
        (length,) = struct.unpack(">I", await reader.readexactly(4))
        if length:  # (a keep-alive has none)
            payload = await reader.readexactly(length)
            return payload[0], payload[1:]


def message(kind: int, body: bytes) -> bytes:
    return struct.pack(">IB", len(body) + 1, kind) + body


async def send_pex(address: tuple[str, int], info_hash: bytes,
                   named: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect as a peer of the torrent and tell it, by ut_pex, of a peer at `named`."""
    reader, writer = await asyncio.open_connection(*address)
    reserved = bytearray(8)
    reserved[5] |= EXTENSION_BIT
    writer.write(b"\x13BitTorrent protocol" + bytes(reserved) + info_hash[:20] + os.urandom(20))
    writer.write(message(EXTENDED, b"\x00" + libtorrent.bencode({b"m": {b"ut_pex": 1}})))
    await reader.readexactly(68)  # its handshake
    while True:  # its extended handshake says which id its ut_pex takes
        kind, body = await read_message(reader)
        if kind == EXTENDED and body[0] == 0:
            theirs = libtorrent.bdecode(body[1:])[b"m"][b"ut_pex"]
            break
    added = socket.inet_aton(named[0]) + struct.pack(">H", named[1])
    writer.write(message(EXTENDED, bytes([theirs]) + libtorrent.bencode({b"added": added, b"added.f": b"\x00"})))
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize("dials", [False, True], ids=["ours", "control: libtorrent's default"])
async def test_a_peer_exchange_cannot_make_the_seed_connect_into_the_intranet(tmp_path, dials):
    store = DiskBlockStore(tmp_path / "blocks")
    data = os.urandom(300_000)
    manifest, layer = build_manifest([data], len(data), url="http://192.31.196.1/f.bin", validator='"v1"')
    fill_entry(store, manifest, layer, BytesBody(data), threading.Event())
    session = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS)
    await session.start()
    if dials:  # the control: what libtorrent does by default, so that this test shows the attack is real
        session.session.apply_settings({"seeding_outgoing_connections": True})
    seeder = Seeder(session, store)
    seeder.seed(manifest)
    seeding = seeder.seeded(manifest.root)
    assert seeding is not None
    await checked(seeding.handle)
    dialled = asyncio.Event()

    async def intranet_service(reader, writer):
        dialled.set()
        writer.close()

    target = await asyncio.start_server(intranet_service, "127.0.0.2", 0)
    try:
        named = target.sockets[0].getsockname()[:2]
        reader, writer = await send_pex(session.address, seeding.torrent.info_hash, named)
        try:
            if dials:
                await asyncio.wait_for(dialled.wait(), 30)  # at once, in practice
            else:
                with pytest.raises(TimeoutError):  # what the control does within a second, ours never does
                    await asyncio.wait_for(dialled.wait(), 3)
        finally:
            writer.close()
    finally:
        target.close()
        seeder.close()
        await session.stop()
        store.close()
