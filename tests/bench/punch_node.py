"""One SwarmNode (QUIC) inside a namespace of the test internet, for tests/bench/test_punch_netns.py.

    python -m tests.bench.punch_node coordinator PORT
    python -m tests.bench.punch_node target PORT COORDINATOR_HOST:PORT TTL
    python -m tests.bench.punch_node requester PORT COORDINATOR_HOST:PORT TARGET_HOST:PORT TTL
    python -m tests.bench.punch_node direct HOST:PORT

Each prints one JSON line when it has something to say (the coordinator and the target: their node id, then they
run until killed; the requester and direct: whether a QUIC session with a HANDSHAKE exchange was made)."""

from __future__ import annotations

import asyncio
import json
import sys

from swarm.net import wire
from swarm.net.quic import QuicTransport
from swarm.service.node import SwarmNode
from swarm.service.punch import Punching
from swarm.store.memory import MemoryBlockStore


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


async def main(argv: list[str]) -> None:
    role = argv[0]
    if role == "direct":  # a transport that does not listen: its own socket, another port than the node's
        node = SwarmNode(MemoryBlockStore(), QuicTransport())
        try:
            connection = await node.open_connection(_address(argv[1]), wire.QUERY_ROOT, 3.0)
            _say(ok=True, remote=list(connection.remote_address))
        except Exception as exc:  # noqa: BLE001 - reported to the test
            _say(ok=False, error=f"{type(exc).__name__}: {exc}")
        return
    ttl_at = {"target": 3, "requester": 4}.get(role, len(argv))
    ttl = int(argv[ttl_at]) if ttl_at < len(argv) else None
    node = SwarmNode(MemoryBlockStore(), QuicTransport())
    node.punching = Punching(ttl=ttl)
    await node.start("0.0.0.0", int(argv[1]))
    if role == "coordinator":
        _say(node_id=node.node_id.hex())
        await asyncio.Event().wait()
    elif role == "target":
        await node.punching.rendezvous(node, _address(argv[2]))
        _say(node_id=node.node_id.hex())
        await asyncio.Event().wait()
    else:
        try:
            connection = await node.punching.connect(node, _address(argv[2]), _address(argv[3]), timeout=5.0)
            _say(ok=True, remote=list(connection.remote_address), peer=node._answered[connection].hex())
        except Exception as exc:  # noqa: BLE001 - reported to the test
            _say(ok=False, error=f"{type(exc).__name__}: {exc}")
        await node.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
