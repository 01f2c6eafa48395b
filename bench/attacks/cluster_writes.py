"""One redis write each, against three cluster agents on loopback: measured on any checkout.

1. a seederless push of priority 100 is written into redis, then the owner pushes a file (60 s at most);
2. the owner pushes a new version of the same name;
3. the owner cancels a push under way (one that waits for an agent that has not joined);
4. three ghost agents are registered (and kept registered) in redis, then the owner pushes a file (60 s at most);
5. while the owner's push runs (its seeder at 200 kB/s: 7.5 s at least), FINISHED reports are written for every
   agent, every 20 ms for its first 3 s.

Prints, for each, what the agents and the pusher did. Trees before signed intents took every write as the owner's;
trees before signed reports (`cluster/identity.py`) believed every report.

    python -m bench.attacks.cluster_writes
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import secrets
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable

import cluster
from bench.cluster_harness import Cluster, RedisServer, python_command, wait_until
from cluster.records import FINISHED, AgentRecord, MemberRecord, TransferRecord
from swarm.content.manifest import build_manifest

# Trees with signed intents have the module (looked up beside the package: an editable install would find it in
# another checkout).
SIGNED = (pathlib.Path(cluster.__file__).parent / "intent.py").exists()
REPORTS_SIGNED = (pathlib.Path(cluster.__file__).parent / "identity.py").exists()

SIZE = 300_000


def held(cluster: Cluster, name: str) -> list[bytes | None]:
    """What each agent holds under files/NAME (None: nothing)."""
    return [(a.data_dir / "files" / name).read_bytes() if (a.data_dir / "files" / name).exists() else None
            for a in cluster.agents.values()]


def write(cluster: Cluster, key: str, value: bytes, index: str | None = None, member: str | None = None) -> None:
    with cluster.redis.client() as client:
        client.set(key, value)
        if index is not None:
            client.sadd(index, member)
        client.publish(cluster.keys.wake, b"1")


@contextlib.contextmanager
def attacking(cluster: Cluster, writes: Callable[[], list[tuple[str, bytes, str, str]]], every: float):
    """An attacker with redis write access, for the `with` block: (key, value, index, member) written every
    `every` s."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            with cluster.redis.client() as client:
                for key, value, index, member in writes():
                    client.set(key, value, px=15_000)
                    client.sadd(index, member)
            stop.wait(every)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def ghosts(cluster: Cluster) -> list[tuple[str, bytes, str, str]]:
    """Three agents nobody runs: plain records (what trees before signed reports read) and, where agents seal
    theirs, records sealed with identities a stranger's key admitted."""
    writes = []
    for i in range(3):
        record = AgentRecord(f"127.0.9.{i}", 9, "dc1", "r1", f"ghost{i}")
        if REPORTS_SIGNED:
            from cluster.identity import Identity
            from cluster.intent import SigningKey
            identity = Identity.issue(SigningKey.generate(), f"ghost{i}")
            node = identity.node
            value = identity.seal("agent", cluster.keys.agent(node), dataclasses.asdict(record)).encode()
        else:
            node = secrets.token_hex(32)
            value = record.dump().encode()
        writes.append((cluster.keys.agent(node), value, cluster.keys.agents, node))
    return writes


class Forger:
    """FINISHED reports for every registered agent in the transfer that is not in `before`, from when it is out
    and for `window` s (longer, and the agents' own reports are never read again: only a denial of service)."""

    def __init__(self, cluster: Cluster, before: set[str], window: float = 3.0) -> None:
        self.cluster, self.before, self.window = cluster, before, window
        self.began: float | None = None

    def __call__(self) -> list[tuple[str, bytes, str, str]]:
        if self.began is not None and time.monotonic() - self.began > self.window:
            return []
        writes = forged_finished(self.cluster, self.before)
        if writes and self.began is None:
            self.began = time.monotonic()
        return writes


def forged_finished(cluster: Cluster, before: set[str]) -> list[tuple[str, bytes, str, str]]:
    """A FINISHED report for every registered agent in the transfer that is not in `before`, once it is out."""
    new = set(cluster.transfers()) - before
    if not new:
        return []
    (tid,) = new
    with cluster.redis.client() as client:
        nodes = [n.decode() for n in client.smembers(cluster.keys.agents)]
    return [(cluster.keys.member(tid, node), MemberRecord(node, FINISHED, verified=1, blocks=1).dump().encode(),
             cluster.keys.members(tid), node) for node in nodes]


def owner(*args: str) -> list[str]:
    return list(args) + (["--key", "OWNER"] if SIGNED else [])


def run(directory: pathlib.Path) -> dict:
    server = RedisServer(directory / "redis")
    server.start()
    cluster = Cluster(directory, server)
    result: dict[str, object] = {"tree": ("signed intents and reports" if REPORTS_SIGNED else "signed intents")
                                         if SIGNED else "unsigned"}
    try:
        for i in range(3):
            cluster.add_agent(f"a{i}", f"127.0.1.{i + 10}", "dc1", "r1")
        wait_until(lambda: len(cluster.registered()) == 3, 60, "3 agents registered")
        manifest, layer = build_manifest([os.urandom(SIZE)], SIZE)
        forged = TransferRecord(manifest.root.hex()[:16], "evil.bin", TransferRecord.pack(manifest.encode()),
                                TransferRecord.pack(b"".join(layer)), priority=100, seeder="00" * 32)
        write(cluster, cluster.keys.transfer(forged.tid), forged.dump().encode(), cluster.keys.transfers, forged.tid)
        good = directory / "good.bin"
        good.write_bytes(os.urandom(SIZE))
        began = time.monotonic()
        push = cluster.push(good, "--timeout", "60")
        push.communicate(timeout=120)
        result["1. forged top-priority push, then the owner's push"] = (
            f"push exit {push.returncode} after {time.monotonic() - began:.1f} s; "
            f"agents holding the file: {sum(1 for b in held(cluster, 'good.bin') if b == good.read_bytes())}/3")
        version = directory / "model.bin"
        version.write_bytes(b"1" * SIZE)
        cluster.push(version, "--timeout", "60").communicate(timeout=120)
        version.write_bytes(b"2" * SIZE)
        second = cluster.push(version, "--timeout", "60")
        second.communicate(timeout=120)
        versions = held(cluster, "model.bin")
        result["2. re-push of a name"] = (f"push exit {second.returncode}; agents holding the new bytes: "
                                          f"{versions.count(b'2' * SIZE)}/3, the old: {versions.count(b'1' * SIZE)}/3")
        waiting = directory / "waiting.bin"
        waiting.write_bytes(os.urandom(SIZE))
        before = set(cluster.transfers())
        push = cluster.push(waiting, "--hosts", "nowhere/*/*")
        wait_until(lambda: set(cluster.transfers()) - before, 60, "the push published")
        (tid,) = set(cluster.transfers()) - before
        args = owner("cancel", tid, "--redis", server.url)
        args = [str(cluster.owner_key) if a == "OWNER" else a for a in args] if SIGNED else args
        subprocess.run(python_command(*args), capture_output=True, timeout=60, env=cluster.env, check=True)
        push.communicate(timeout=60)
        result["3. the owner cancels a push under way"] = f"push exit {push.returncode}"

        ghosts_written = ghosts(cluster)
        with attacking(cluster, lambda: ghosts_written, 0.5):
            plain = directory / "plain.bin"
            plain.write_bytes(os.urandom(SIZE))
            began = time.monotonic()
            push = cluster.push(plain, "--timeout", "60")
            push.communicate(timeout=120)
            result["4. three ghost agents, then the owner's push"] = (
                f"push exit {push.returncode} after {time.monotonic() - began:.1f} s; agents holding the file: "
                f"{sum(1 for b in held(cluster, 'plain.bin') if b == plain.read_bytes())}/3")
        before = set(cluster.transfers())
        with attacking(cluster, Forger(cluster, before), 0.02):
            slow = directory / "slow.bin"
            slow.write_bytes(os.urandom(5 * SIZE))
            began = time.monotonic()
            push = cluster.push(slow, "--timeout", "60", "--upload-rate", "200k")
            push.communicate(timeout=120)
            holding = sum(1 for b in held(cluster, "slow.bin") if b == slow.read_bytes())  # when the push exits
            result["5. forged FINISHED reports during a push"] = (
                f"push exit {push.returncode} after {time.monotonic() - began:.1f} s; agents holding the file "
                f"when it exited: {holding}/3")
        return result
    finally:
        cluster.stop_all()
        server.stop()


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        result = run(pathlib.Path(directory))
    for name, value in result.items():
        print(f"{name:52} {value}")


if __name__ == "__main__":
    main()
