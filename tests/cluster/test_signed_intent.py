"""Only the owner can push, replace or cancel: attacks with one redis write each, against real agents and redis.

Each test fails on the tree before signed intents: a forged push of top priority wedged every later push, a forged
cancel dropped a transfer, a re-push of a name left the older bytes in place, and a cancelled push exited 0. Each
runs on a plain redis and on the documented TLS + ACL setup, the attacker holding the cluster's credentials.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from bench.cluster_harness import Cluster, python_command, redis_missing, wait_until
from cluster.intent import SigningKey
from cluster.push import signed_transfer
from cluster.records import TransferRecord
from swarm.content.manifest import build_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))]

SIZE = 300_000


@pytest.fixture
def cluster(three_agents):  # plain, and the documented TLS + ACL setup
    return three_agents


def logged(cluster: Cluster, text: str) -> bool:
    return all(text in (agent.data_dir / "agent.log").read_text() for agent in cluster.agents.values())


def post(cluster: Cluster, record: TransferRecord) -> None:
    """What anyone who can write to redis can do: put a transfer record there and wake the agents."""
    with cluster.redis.client() as client:
        client.set(cluster.keys.transfer(record.tid), record.dump())
        client.sadd(cluster.keys.transfers, record.tid)
        client.publish(cluster.keys.wake, b"1")


def pushed(cluster: Cluster, path: pathlib.Path, *extra: str) -> str:
    push = cluster.push(path, "--timeout", "120", *extra)
    out, _ = push.communicate(timeout=180)
    assert push.returncode == 0, (cluster.directory / "push.log").read_text()[-2000:]
    return json.loads(out)["transfer"]


def test_a_forged_push_and_a_forged_cancel_change_nothing(cluster, tmp_path):
    manifest, layer = build_manifest([os.urandom(SIZE)], SIZE)
    unsigned = TransferRecord(manifest.root.hex()[:16], "evil.bin", TransferRecord.pack(manifest.encode()),
                              TransferRecord.pack(b"".join(layer)), priority=100, seeder="00" * 32)
    post(cluster, unsigned)  # no seeder: it would wedge every later push
    manifest, layer = build_manifest([os.urandom(SIZE)], SIZE)
    stranger = signed_transfer(manifest, layer, "evil2.bin", SigningKey.generate(), priority=100)
    post(cluster, stranger)
    wait_until(lambda: logged(cluster, f"transfer {unsigned.tid}: refusing its push: no signed intent")
               and logged(cluster, f"transfer {stranger.tid}: refusing its push: signed by a key this agent does "
                                   "not trust"), 30, "both forged pushes refused")
    assert cluster.members(unsigned.tid) == {} and cluster.members(stranger.tid) == {}

    good = tmp_path / "good.bin"
    good.write_bytes(os.urandom(SIZE))
    tid = pushed(cluster, good)  # the owner's push goes through, the forged top priority notwithstanding
    with cluster.redis.client() as client:
        client.set(cluster.keys.cancel(tid), b"1")  # a forged cancel
        client.publish(cluster.keys.wake, b"1")
    wait_until(lambda: logged(cluster, f"transfer {tid}: refusing its cancel"), 30, "the forged cancel refused")
    for agent in cluster.agents.values():
        assert (agent.data_dir / "files" / "good.bin").read_bytes() == good.read_bytes()
        assert not (agent.data_dir / "files" / "evil.bin").exists()


def test_a_later_push_of_a_name_replaces_it_and_an_older_one_is_refused(cluster, tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"1" * SIZE)
    first = pushed(cluster, path)
    with cluster.redis.client() as client:
        old_record = client.get(cluster.keys.transfer(first))
    path.write_bytes(b"2" * SIZE)
    second = pushed(cluster, path)
    for agent in cluster.agents.values():  # the new bytes, under the same name
        assert (agent.data_dir / "files" / "model.bin").read_bytes() == b"2" * SIZE

    restarted = cluster.agents["a0"]
    cluster.kill9(restarted)  # a restart forgets its runs, not what it accepted
    with cluster.redis.client() as client:
        client.delete(cluster.keys.transfer(second))  # only the older push is left to take up ...
        client.set(cluster.keys.transfer(first), old_record)  # ... re-posted as it was signed
    cluster.start(restarted)
    wait_until(lambda: f"transfer {first}: refusing its push: rollback" in
               (restarted.data_dir / "agent.log").read_text(), 60, "the rollback refused after a restart")
    assert (restarted.data_dir / "files" / "model.bin").read_bytes() == b"2" * SIZE


def test_a_push_cancelled_by_its_owner_exits_non_zero(cluster, tmp_path):
    path = tmp_path / "waiting.bin"
    path.write_bytes(os.urandom(SIZE))
    push = cluster.push(path, "--hosts", "nowhere/*/*")  # no agent yet: it waits for one to join
    wait_until(lambda: cluster.transfers(), 60, "the transfer published")
    (tid,) = cluster.transfers()
    done = subprocess.run(python_command("cancel", tid, "--redis", cluster.redis.url, "--key", str(cluster.owner_key)),
                          capture_output=True, text=True, timeout=60, env=cluster.env)
    assert done.returncode == 0, done.stderr
    push.communicate(timeout=60)
    assert push.returncode == 1
    assert "was cancelled" in (cluster.directory / "push.log").read_text()
