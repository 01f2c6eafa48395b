"""One redis write each, against three cluster agents on loopback: measured on any checkout.

1. a seederless push of priority 100 is written into redis, then the owner pushes a file (60 s at most);
2. the owner pushes a new version of the same name;
3. the owner cancels a push under way (one that waits for an agent that has not joined).

Prints, for each, what the agents and the pusher did. Trees before signed intents took every write as the owner's.

    python -m bench.attacks.cluster_writes
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import tempfile
import time

from bench.cluster_harness import Cluster, RedisServer, python_command, wait_until
from cluster.records import TransferRecord
from swarm.content.manifest import build_manifest

import cluster

# Trees with signed intents have the module (looked up beside the package: an editable install would find it in
# another checkout).
SIGNED = (pathlib.Path(cluster.__file__).parent / "intent.py").exists()

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


def owner(*args: str) -> list[str]:
    return list(args) + (["--key", "OWNER"] if SIGNED else [])


def run(directory: pathlib.Path) -> dict:
    server = RedisServer(directory / "redis")
    server.start()
    cluster = Cluster(directory, server)
    result: dict[str, object] = {"tree": "signed intents" if SIGNED else "unsigned"}
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
