"""SwarmNodes (QUIC) inside a namespace of the test internet, for tests/bench/test_punch_netns.py and the
connectivity matrix (`bench.nat_matrix`).

    python -m tests.bench.punch_node coordinator PORT
    python -m tests.bench.punch_node target PORT COORDINATOR_HOST:PORT TTL
    python -m tests.bench.punch_node requester PORT COORDINATOR_HOST:PORT TARGET_HOST:PORT TTL
    python -m tests.bench.punch_node direct HOST:PORT
    python -m tests.bench.punch_node matrix PORT REQUESTER_PORT COORDINATOR_HOST:PORT TTL

Each prints one JSON line when it has something to say (the coordinator and the target: their node id, then they
run until killed; the requester and direct: whether a QUIC session with a HANDSHAKE exchange was made).

`matrix` is one machine of the matrix, a target and a dialler in one process: a target as above (listening on
PORT, a rendezvous with the coordinator; it prints its node id), then it reads one JSON line on its standard input,
`[[NAME, "HOST:PORT"], ...]`, the other machines as a stranger would know them, and tries each: a direct dial (as
`direct`: a transport that does not listen), all at once; then, for each that failed, all at once, a punch through
the coordinator (as `requester`, from another node, listening on REQUESTER_PORT: written when the coordinator kept
one session per address, so that a request from the rendezvous's socket unregistered it; it keeps them all now,
and the second node stays as a requester a stranger's target sees from another port). Then one JSON line,
`{"tried": {NAME: {"direct": {...}, "punch": {...} or null}}}`, each `{"ok": true, "remote": [HOST, PORT],
"peer": NODE_ID}` or `{"ok": false, "error": ...}`; it serves as a target until its standard input closes.

The limits on punching are raised here (`LAB_LIMITS`): the matrix introduces each target to every other machine
within seconds, where the product lets one requester cause 3 introductions a minute, and a node act on 3 a minute
per coordinator (`swarm.core.punch.PER_SOURCE`)."""

from __future__ import annotations

import asyncio
import json
import sys

from swarm.core.punch import PunchCoordinator, PunchLimiter
from swarm.net import wire
from swarm.net.quic import QuicTransport
from swarm.service.node import SwarmNode
from swarm.service.punch import Punching
from swarm.store.memory import MemoryBlockStore

LAB_LIMITS = {"per_source": 64, "per_window": 1024}
DIRECT_TIMEOUT = 2.0  # s for a direct dial (the lab's round trips are well under a millisecond)
PUNCH_TIMEOUT = 3.0  # s for a punch: the coordinator's answer, then the dial


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def _punching(ttl: int | None) -> Punching:
    return Punching(ttl=ttl, coordinator=PunchCoordinator(PunchLimiter(**LAB_LIMITS)),
                    limiter=PunchLimiter(**LAB_LIMITS))


async def _direct(node: SwarmNode, address: tuple[str, int], timeout: float = 3.0) -> dict:
    """A QUIC session with a HANDSHAKE exchange from `node`, which does not listen: its own socket."""
    try:
        connection = await node.open_connection(address, wire.QUERY_ROOT, timeout)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    answer = {"ok": True, "remote": list(connection.remote_address), "peer": node._answered[connection].hex()}
    connection.abort("dialled")
    return answer


async def _punched(node: SwarmNode, coordinator: tuple[str, int], address: tuple[str, int],
                   timeout: float = 5.0) -> dict:
    """A session with the node known at `address` through `node`'s punch, `coordinator` introducing them."""
    try:
        connection = await node.punching.connect(node, coordinator, address, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    answer = {"ok": True, "remote": list(connection.remote_address), "peer": node._answered[connection].hex()}
    connection.abort("punched")
    return answer


async def _matrix(port: int, requester_port: int, coordinator: tuple[str, int], ttl: int) -> None:
    loop = asyncio.get_running_loop()
    target = SwarmNode(MemoryBlockStore(), QuicTransport())
    target.punching = _punching(ttl)
    await target.start("0.0.0.0", port)
    await target.punching.rendezvous(target, coordinator)
    requester = SwarmNode(MemoryBlockStore(), QuicTransport())
    requester.punching = _punching(ttl)
    await requester.start("0.0.0.0", requester_port)
    _say(node_id=target.node_id.hex())
    others = json.loads(await loop.run_in_executor(None, sys.stdin.readline))
    dialler = SwarmNode(MemoryBlockStore(), QuicTransport())
    direct = await asyncio.gather(*(_direct(dialler, _address(at), DIRECT_TIMEOUT) for _, at in others))
    failed = [i for i, answer in enumerate(direct) if not answer["ok"]]
    punched = dict(zip(failed, await asyncio.gather(
        *(_punched(requester, coordinator, _address(others[i][1]), PUNCH_TIMEOUT) for i in failed)), strict=True))
    _say(tried={name: {"direct": direct[i], "punch": punched.get(i)} for i, (name, _) in enumerate(others)})
    await loop.run_in_executor(None, sys.stdin.read)  # serving as a target until the matrix is done
    for node in (requester, target):
        await node.close()


async def main(argv: list[str]) -> None:
    role = argv[0]
    if role == "direct":  # a transport that does not listen: its own socket, another port than the node's
        node = SwarmNode(MemoryBlockStore(), QuicTransport())
        answer = await _direct(node, _address(argv[1]))
        _say(**{k: v for k, v in answer.items() if k != "peer"})
        return
    if role == "matrix":
        await _matrix(int(argv[1]), int(argv[2]), _address(argv[3]), int(argv[4]))
        return
    ttl_at = {"target": 3, "requester": 4}.get(role, len(argv))
    ttl = int(argv[ttl_at]) if ttl_at < len(argv) else None
    node = SwarmNode(MemoryBlockStore(), QuicTransport())
    node.punching = _punching(ttl)
    await node.start("0.0.0.0", int(argv[1]))
    if role == "coordinator":
        _say(node_id=node.node_id.hex())
        await asyncio.Event().wait()
    elif role == "target":
        await node.punching.rendezvous(node, _address(argv[2]))
        _say(node_id=node.node_id.hex())
        await asyncio.Event().wait()
    else:
        answer = await _punched(node, _address(argv[2]), _address(argv[3]))
        _say(**answer)
        await node.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
