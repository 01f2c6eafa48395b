"""Peer slot exhaustion (issue 19, item 3), measured against a real node in its own process.

A fresh node (`bench/attacks/peer_node.py`, 64 serving slots, seeding one 4 MiB file on a port-0 listener; its
code from `--tree`, default this checkout) is handed N idle connections — each sends a HANDSHAKE for the node's
content root (roots are public in the DHT) and then nothing, never reading either — or, with `--silent`, N
connections that send nothing at all. Then a real downloader (a SwarmNode of this checkout) asks the node for the
manifest and the whole file.

Printed, as JSON: the connections the node serves and how many are handshaken once the idle ones are in; whether
the downloader was served (and in how many seconds, or why not); how many idle connections the node closed to
make room; the node's RSS before and after.

    python -m bench.attacks.peer_slots [--idle 64] [--silent] [--transport tcp|quic] [--timeout 20] [--tree DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import socket
import time

from bench.attacks.peer_node import THIS_TREE, Target, closed_by_peer, rss_kib
from swarm.errors import SwarmError
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


async def run(args: argparse.Namespace) -> dict:
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
                        help="seconds the downloader tries before giving up (default: 20)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
