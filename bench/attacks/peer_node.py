"""The target of the peer-port attacks (`peer_memory`, `peer_slots`): a real SwarmNode in a process of its own.

The attack scripts start it with `Target`, pointing it at any checkout of swarmproxy (`--tree`): the node's code
comes from that tree, the attacker's from this one, so the same attack measures a tree before and after a fix.
It seeds one file on a port-0 listener (TCP or QUIC, on uvloop as `swarmproxy run` does), writes where it listens,
and every 0.2 s writes what it holds: connections being served (from arrival), handshaken ones, tasks. Its RSS is
read from /proc/PID/status by the attacker's process.

    python bench/attacks/peer_node.py --tree DIR --file F --data-dir D --ready R --stats S [--transport quic]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve()
THIS_TREE = HERE.parents[2]
BLOCK = 16384
_TCP_ESTABLISHED = 1  # linux/tcp_states.h; the first byte of TCP_INFO


# --- the attacker's side ---------------------------------------------------------------------------------------


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closed a TCP socket we never read from (a peek would see its unread replies)."""
    if sock.fileno() < 0:
        return True
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != _TCP_ESTABLISHED


def rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


async def settled_rss(pid: int, *, quiet: float = 2.0, longest: float = 30.0) -> int:
    """The target's RSS once it has stopped changing by more than 1 MiB for `quiet` seconds (a measurement)."""
    start = time.monotonic()
    samples: list[tuple[float, int]] = []
    while True:
        now = time.monotonic()
        samples.append((now, rss_kib(pid)))
        recent = [rss for at, rss in samples if at >= now - quiet]
        if now - start >= quiet and max(recent) - min(recent) < 1024 or now - start >= longest:
            return samples[-1][1]
        await asyncio.sleep(0.25)


class Target:
    """`async with Target(tree, transport) as target`: the node process, its address, root and pid."""

    def __init__(self, tree: pathlib.Path, transport: str, *, size: int = 256 * BLOCK, max_peers: int = 64) -> None:
        self.tree, self.transport, self.size, self.max_peers = tree, transport, size, max_peers
        self.process: subprocess.Popen | None = None

    async def __aenter__(self) -> Target:
        self._dir = tempfile.TemporaryDirectory(prefix="peer-attack-")
        work = pathlib.Path(self._dir.name)
        (work / "content").write_bytes(os.urandom(self.size))
        self.ready, self.stats_file = work / "ready.json", work / "stats.json"
        env = dict(os.environ, PYTHONPATH=f"{self.tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        self.process = subprocess.Popen(
            [sys.executable, str(HERE), "--tree", str(self.tree), "--file", str(work / "content"),
             "--data-dir", str(work / "data"), "--ready", str(self.ready), "--stats", str(self.stats_file),
             "--transport", self.transport, "--max-peers", str(self.max_peers)],
            cwd=self.tree, env=env)
        deadline = time.monotonic() + 60
        while not self.ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the target did not start")
            await asyncio.sleep(0.05)
        ready = json.loads(self.ready.read_text())
        self.address = (ready["host"], ready["port"])
        self.root = bytes.fromhex(ready["root"])
        self.pid = self.process.pid
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        if self.process.poll() is None:
            self.process.kill()
        self._dir.cleanup()

    def stats(self) -> dict:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(self.stats_file.read_text())
        return {}


# --- the target's side -----------------------------------------------------------------------------------------


def _engine(name: str, before_subpackages: str):
    """A class of the target tree's engine: at its place today, or where a tree before the swarm/ sub-packages
    (--tree of an older checkout) kept it."""
    module, _, attribute = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError:
        return getattr(importlib.import_module(before_subpackages), attribute)


async def serve(args: argparse.Namespace) -> None:
    SwarmNode = _engine("swarm.service.node.SwarmNode", "swarm.node")
    DiskBlockStore = _engine("swarm.store.disk.DiskBlockStore", "swarm.store_disk")
    if args.transport == "quic":
        transport = _engine("swarm.net.quic.QuicTransport", "swarm.transport_quic")()
    else:
        transport = _engine("swarm.net.tcp.TcpTransport", "swarm.transport_tcp")()
    node = SwarmNode(DiskBlockStore(pathlib.Path(args.data_dir)), transport, max_peers=args.max_peers)
    manifest = await node.seed_file(args.file, block_size=BLOCK)
    host, port = await node.start("127.0.0.1", 0)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    ready = {"host": host, "port": port, "root": manifest.root.hex(), "pid": os.getpid()}
    pathlib.Path(args.ready + ".tmp").write_text(json.dumps(ready))
    os.replace(args.ready + ".tmp", args.ready)
    while not stop.is_set():
        serving = sum(1 for task in node._tasks if task.get_coro().__name__ == "_serve")
        handshaken = sum(len(connections) for connections in node._serving.values())
        stats = {"connections": serving, "handshaken": handshaken, "tasks": len(node._tasks)}
        pathlib.Path(args.stats + ".tmp").write_text(json.dumps(stats))
        os.replace(args.stats + ".tmp", args.stats)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)
    await node.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", required=True, help="the swarmproxy checkout whose node runs (on PYTHONPATH)")
    parser.add_argument("--file", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--stats", required=True)
    parser.add_argument("--transport", choices=("tcp", "quic"), default="tcp")
    parser.add_argument("--max-peers", type=int, default=64)
    args = parser.parse_args()
    try:
        import uvloop
        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(args))


if __name__ == "__main__":
    main()
