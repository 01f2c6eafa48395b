"""Peer port memory amplification (issue 19, item 2), measured against a real node in its own process.

Two attacks, each against a fresh node (`bench/attacks/peer_node.py`) that seeds one 4 MiB file (16 KiB blocks)
on a port-0 listener; the node runs the code of `--tree` (default: this checkout), the attacker this checkout's:

  headers    N connections each send 14 bytes — a BLOCK header announcing a 4 MiB payload, and one byte of it —
             and stay open. (Before the fix each made the node allocate the whole 4 MiB buffer.)
  requests   P peers each send a HANDSHAKE and R pipelined REQUESTs, and never read a byte. (Before the fix each
             REQUEST started a send, and their replies piled up in the node.)

Printed, as JSON: the node's RSS (VmRSS, read from /proc by this process) before, under attack once settled, and
after the attackers closed, with the growth in MiB; the connections the node was serving and its asyncio tasks
under attack; how many attacker connections the node had closed.

    python -m bench.attacks.peer_memory headers  [--connections 400] [--transport tcp|quic] [--tree DIR]
    python -m bench.attacks.peer_memory requests [--peers 1] [--requests 200000] [--transport tcp|quic] [--tree DIR]

TCP attackers are raw sockets; QUIC ones use this checkout's QUIC transport (the BLOCK header as raw bytes on the
control stream; the REQUESTs each on their own stream, never reading the replies).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import socket
import time

from bench.attacks.peer_node import BLOCK, THIS_TREE, Target, closed_by_peer, settled_rss
from swarm.net import wire
from swarm.net.quic import QuicTransport
from swarm.net.transport import ConnectionSettings

MiB = 1024 * 1024
HEADER = wire.encode_block_header(0, 0, 4 * MiB) + b"\0"  # the 14 bytes


class _TcpAttacker:
    """A raw socket that writes its bytes (as fast as the node takes them) and never reads."""

    def __init__(self, sock: socket.socket, data: bytes) -> None:
        self.sock = sock
        self.sending = asyncio.ensure_future(asyncio.get_running_loop().sock_sendall(sock, data))
        self.sending.add_done_callback(lambda task: task.cancelled() or task.exception())

    @property
    def closed_by_node(self) -> bool:
        return closed_by_peer(self.sock)

    def close(self) -> None:
        self.sending.cancel()
        self.sock.close()


async def _tcp(address, data: bytes) -> _TcpAttacker:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address)
    return _TcpAttacker(sock, data)


class _QuicAttacker:
    def __init__(self, connection) -> None:
        self.connection = connection

    @property
    def closed_by_node(self) -> bool:
        return self.connection.close_reason is not None

    def close(self) -> None:
        self.connection.abort()


async def _quic_headers(address) -> _QuicAttacker:
    connection = await QuicTransport().connect(address)
    connection.send_raw(HEADER)
    return _QuicAttacker(connection)


async def _quic_requests(address, root: bytes, requests: int) -> _QuicAttacker:
    connection = await QuicTransport(ConnectionSettings(receive_limit=64 * 1024)).connect(address)
    connection.expected.limit = requests  # the attacker's own transport must not refuse the replies it never reads
    connection.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, b"\xaa" * 32, root))
    for index in range(requests):
        connection.send_nowait(wire.Request(index % 256, 0, BLOCK))
    return _QuicAttacker(connection)


async def run(args: argparse.Namespace) -> dict:
    async with Target(args.tree, args.transport) as target:
        before = await settled_rss(target.pid)
        started = time.monotonic()
        if args.attack == "headers":
            if args.transport == "tcp":
                attackers = [await _tcp(target.address, HEADER) for _ in range(args.connections)]
            else:
                attackers = [await _quic_headers(target.address) for _ in range(args.connections)]
        else:
            handshake = wire.Handshake(wire.PROTOCOL_VERSION, b"\xaa" * 32, target.root).encode()
            requests = b"".join(wire.Request(index % 256, 0, BLOCK).encode() for index in range(args.requests))
            if args.transport == "tcp":
                attackers = [await _tcp(target.address, handshake + requests) for _ in range(args.peers)]
            else:
                attackers = [await _quic_requests(target.address, target.root, args.requests)
                             for _ in range(args.peers)]
        under_attack = await settled_rss(target.pid)
        stats = target.stats()
        closed = sum(attacker.closed_by_node for attacker in attackers)
        for attacker in attackers:
            attacker.close()
        await asyncio.sleep(1.0)  # (the node notices the closes)
        after = await settled_rss(target.pid)
        return {
            "tree": str(args.tree), "attack": args.attack, "transport": args.transport,
            **({"connections": args.connections} if args.attack == "headers"
               else {"peers": args.peers, "requests_per_peer": args.requests}),
            "rss_before_mib": round(before / 1024, 1),
            "rss_under_attack_mib": round(under_attack / 1024, 1),
            "rss_growth_mib": round((under_attack - before) / 1024, 1),
            "rss_after_close_mib": round(after / 1024, 1),
            "rss_kept_after_close_mib": round((after - before) / 1024, 1),
            "node_connections_under_attack": stats.get("connections"),
            "node_tasks_under_attack": stats.get("tasks"),
            "attacker_connections_closed_by_node": closed,
            "seconds": round(time.monotonic() - started, 1),
        }


def main() -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--tree", type=pathlib.Path, default=THIS_TREE,
                        help="the swarmproxy checkout whose node is attacked (default: this one)")
    common.add_argument("--transport", choices=("tcp", "quic"), default="tcp", help="the node's (default: tcp)")
    parser = argparse.ArgumentParser(prog="python -m bench.attacks.peer_memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    attacks = parser.add_subparsers(dest="attack", required=True)
    headers = attacks.add_parser("headers", parents=[common], help="N connections x a 14-byte BLOCK header")
    headers.add_argument("--connections", type=int, default=400, help="attacker connections (default: 400)")
    requests = attacks.add_parser("requests", parents=[common], help="P peers x R pipelined REQUESTs, never reading")
    requests.add_argument("--peers", type=int, default=1, help="attacking peers (default: 1)")
    requests.add_argument("--requests", type=int, default=200_000, help="REQUESTs per peer (default: 200000)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
