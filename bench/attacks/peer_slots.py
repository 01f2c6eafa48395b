"""Peer slot exhaustion (issue 19, item 3), measured against a real node in its own process.

A fresh node (`bench/attacks/peer_node.py`, 64 serving slots, seeding one 4 MiB file on a port-0 listener; its
code from `--tree`, default this checkout) is handed N idle connections — each sends a HANDSHAKE for the node's
content root (roots are public in the DHT) and then nothing, never reading either — or, with `--silent`, N
connections that send nothing at all. Then a real downloader (a SwarmNode of this checkout) asks the node for the
manifest and the whole file.

Printed, as JSON: the connections the node serves and how many are handshaken once the idle ones are in; whether
the downloader was served (and in how many seconds, or why not); how many idle connections the node closed to
make room; the node's RSS before and after.

With `--flood N` (issue 35, item 5) the connections are not idle but downloading, all from one address
(127.0.0.2): each sends a HANDSHAKE and then REQUESTs one 16 KiB block every `--every` seconds (8), reading the
replies, and reconnects at once whenever the node closes it; the flood runs for `--flood-seconds` (45). Once all
N have taken a block, a downloader from another address (127.0.0.3) tries to fetch the file, trying again every
second while it is refused. Printed: its time to first block and to the whole file, counted from its first try,
and how many tries it took; how many flood connections the node closed and how many of the reconnects it
refused.

    python -m bench.attacks.peer_slots [--idle 64] [--silent] [--transport tcp|quic] [--timeout 20] [--tree DIR]
    python -m bench.attacks.peer_slots --flood 64 [--every 8] [--flood-seconds 45] [--transport tcp|quic]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import socket
import time

from bench.attacks.peer_node import BLOCK, THIS_TREE, Target, closed_by_peer, rss_kib
from swarm.errors import SwarmError, TransportError
from swarm.net import wire
from swarm.net.quic import QuicTransport
from swarm.net.tcp import TcpTransport
from swarm.service.node import SwarmNode
from swarm.store.memory import MemoryBlockStore


class _Idle:
    """One idle connection: a raw TCP socket, or this checkout's QUIC connection; never reads."""

    def __init__(self, sock: socket.socket | None = None, connection=None) -> None:
        self.sock, self.connection = sock, connection

    @property
    def closed_by_node(self) -> bool:
        if self.connection is not None:
            return self.connection.close_reason is not None
        return closed_by_peer(self.sock)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.abort()
        else:
            self.sock.close()


async def _idle(transport: str, address, root: bytes, index: int, silent: bool) -> _Idle:
    handshake = wire.Handshake(wire.PROTOCOL_VERSION, index.to_bytes(32, "big"), root)
    if transport == "quic":
        connection = await QuicTransport().connect(address)  # (it opens the control stream: the node sees it)
        if not silent:
            connection.send_nowait(handshake)
        return _Idle(connection=connection)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address)
    if not silent:
        sock.send(handshake.encode())
    return _Idle(sock=sock)


async def _download(transport: str, address, root: bytes, timeout: float) -> dict:
    node = SwarmNode(MemoryBlockStore(), QuicTransport() if transport == "quic" else TcpTransport())
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            manifest = await node.fetch_manifest(root, [address], timeout=timeout)
            size = 0
            async for chunk in node.fetch(manifest, [address], stall_timeout=timeout):
                size += len(chunk)
        return {"served": size == manifest.size, "bytes": size, "seconds": round(time.monotonic() - started, 2)}
    except (SwarmError, TimeoutError) as exc:
        return {"served": False, "why": str(exc) or type(exc).__name__,
                "seconds": round(time.monotonic() - started, 2)}
    finally:
        await node.close()


def _transport(kind: str, source: str):
    transport = QuicTransport() if kind == "quic" else TcpTransport()
    transport.listen_host = source  # its connections leave from `source` (`swarm.net.transport.source_address`)
    return transport


class _Flood:
    """N connections from one address, each taking one block every `every` seconds and reconnecting when closed."""

    def __init__(self, kind: str, address, root: bytes, blocks: int, every: float) -> None:
        self.kind, self.address, self.root, self.blocks, self.every = kind, address, root, blocks, every
        self.stop = asyncio.Event()
        self.served: set[int] = set()  # flooders that have taken a block on their current connection
        self.connects = self.refused = self.closed_by_node = self.blocks_taken = 0

    async def connection(self, index: int) -> None:
        transport = _transport(self.kind, "127.0.0.2")
        while not self.stop.is_set():
            try:
                connection = await transport.connect(self.address, timeout=5.0)
            except SwarmError:
                self.refused += 1
                await asyncio.sleep(0.2)
                continue
            self.connects += 1
            try:
                await self._download(index, connection)
            except (TransportError, TimeoutError):
                pass
            finally:
                self.served.discard(index)
                if not self.stop.is_set():
                    if connection.close_reason is not None:
                        self.closed_by_node += 1
                    await asyncio.sleep(0.05)  # (and then straight back)
                connection.abort("flood over")

    async def _download(self, index: int, connection) -> None:
        connection.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, index.to_bytes(32, "big"), self.root))
        block = index
        while not self.stop.is_set():
            connection.send_nowait(wire.Request(block % self.blocks, 0, BLOCK))
            block += 64
            async with asyncio.timeout(self.every + 10):
                while not isinstance(message := await connection.receive(), wire.Block):
                    if message is None:  # closed by the node, or refused before the handshake
                        if index not in self.served:
                            self.refused += 1
                        return
            self.blocks_taken += 1
            self.served.add(index)
            stopping = asyncio.ensure_future(self.stop.wait())
            await asyncio.wait({stopping, connection.closed}, timeout=self.every, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if connection.close_reason is not None:
                return


async def _newcomer(kind: str, address, root: bytes, timeout: float) -> dict:
    """A downloader from 127.0.0.3 that tries again every second while refused."""
    node = SwarmNode(MemoryBlockStore(), _transport(kind, "127.0.0.3"))
    started = time.monotonic()
    tries, first_block, why = 0, None, None
    try:
        while time.monotonic() - started < timeout:
            tries += 1
            try:
                manifest = await node.fetch_manifest(root, [address], timeout=5.0)
                size = 0
                async for chunk in node.fetch(manifest, [address], stall_timeout=timeout):
                    if first_block is None:
                        first_block = time.monotonic() - started
                    size += len(chunk)
                return {"served": size == manifest.size, "tries": tries,
                        "seconds_to_first_block": round(first_block, 2),
                        "seconds_to_whole_file": round(time.monotonic() - started, 2)}
            except (SwarmError, TimeoutError) as exc:
                why = str(exc) or type(exc).__name__
                await asyncio.sleep(1.0)
        return {"served": False, "tries": tries, "why": why, "seconds": round(time.monotonic() - started, 2)}
    finally:
        await node.close()


async def run_flood(args: argparse.Namespace) -> dict:
    async with Target(args.tree, args.transport) as target:
        flood = _Flood(args.transport, target.address, target.root, target.size // BLOCK, args.every)
        began = time.monotonic()
        tasks = [asyncio.ensure_future(flood.connection(index)) for index in range(args.flood)]
        deadline = time.monotonic() + 30
        while len(flood.served) < min(args.flood, target.max_peers) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # until every slot it could get has taken a block (a measurement, not a test)
        filled_after = time.monotonic() - began
        await asyncio.sleep(0.5)  # (the node's stats file is rewritten every 0.2 s)
        held = target.stats()
        newcomer = asyncio.ensure_future(_newcomer(args.transport, target.address, target.root, args.timeout))
        done, _ = await asyncio.wait({newcomer}, timeout=max(1.0, args.flood_seconds - (time.monotonic() - began)))
        flood_served_at_newcomer_end = len(flood.served)
        await asyncio.sleep(max(0.0, args.flood_seconds - (time.monotonic() - began)))  # the flood runs its course
        flood.stop.set()
        result = await newcomer
        await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "tree": str(args.tree), "transport": args.transport, "flood_connections": args.flood,
            "flood_source": "127.0.0.2", "one_block_every_seconds": args.every,
            "flood_seconds": args.flood_seconds, "node_connections_with_flood_in": held.get("connections"),
            "flood_filled_the_node_in_seconds": round(filled_after, 2),
            "newcomer_from_127.0.0.3": result,
            "newcomer_served_while_the_flood_ran": bool(done) and result.get("served", False),
            "flood_connections_downloading_when_newcomer_done": flood_served_at_newcomer_end,
            "flood_connections_closed_by_node": flood.closed_by_node,
            "flood_reconnects_refused": flood.refused, "flood_connects": flood.connects,
            "flood_blocks_taken": flood.blocks_taken,
        }


async def run(args: argparse.Namespace) -> dict:
    if args.flood:
        return await run_flood(args)
    async with Target(args.tree, args.transport) as target:
        before = rss_kib(target.pid)
        idle = [await _idle(args.transport, target.address, target.root, index, args.silent)
                for index in range(args.idle)]
        expected = 0 if args.silent else args.idle
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the node has seen them all (a measurement, not a test)
            stats = target.stats()
            if stats.get("connections", 0) >= args.idle and stats.get("handshaken", 0) >= expected:
                break
            await asyncio.sleep(0.1)
        held = target.stats()
        newcomer = await _download(args.transport, target.address, target.root, args.timeout)
        await asyncio.sleep(0.5)  # (the node's stats file is rewritten every 0.2 s)
        result = {
            "tree": str(args.tree), "transport": args.transport, "idle_connections": args.idle,
            "idle_kind": "silent (no handshake)" if args.silent else "handshaken, then nothing",
            "node_connections_with_idle_in": held.get("connections"),
            "node_handshaken_with_idle_in": held.get("handshaken"),
            "newcomer": newcomer,
            "idle_closed_by_node": sum(connection.closed_by_node for connection in idle),
            "node_connections_after": target.stats().get("connections"),
            "rss_before_mib": round(before / 1024, 1),
            "rss_after_mib": round(rss_kib(target.pid) / 1024, 1),
        }
        for connection in idle:
            connection.close()
        return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.attacks.peer_slots", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=pathlib.Path, default=THIS_TREE,
                        help="the swarmproxy checkout whose node is attacked (default: this one)")
    parser.add_argument("--transport", choices=("tcp", "quic"), default="tcp", help="the node's (default: tcp)")
    parser.add_argument("--idle", type=int, default=64, help="idle connections opened first (default: 64)")
    parser.add_argument("--silent", action="store_true", help="idle connections send no HANDSHAKE either")
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="seconds the downloader tries before giving up (default: 20; with --flood: 60)")
    parser.add_argument("--flood", type=int, default=0,
                        help="downloading connections from one address instead of idle ones (issue 35)")
    parser.add_argument("--every", type=float, default=8.0, help="--flood: seconds between blocks (default: 8)")
    parser.add_argument("--flood-seconds", type=float, default=45.0,
                        help="--flood: how long the flood runs (default: 45)")
    args = parser.parse_args()
    if args.flood and args.timeout == parser.get_default("timeout"):
        args.timeout = 60.0
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
