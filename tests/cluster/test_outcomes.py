"""A push tells the truth: it exits 0 only when every agent holds the file, else 1 saying who holds what; a
transfer that cannot progress never holds a lower one back. Real agents and redis."""

from __future__ import annotations

import json
import os

import pytest

from bench.cluster_harness import Cluster, redis_missing, wait_until
from cluster.intent import SigningKey
from cluster.push import signed_transfer
from swarm.content.manifest import build_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))]

SIZE = 300_000


def test_an_agent_short_of_disk_space_refuses_and_the_push_says_so(tmp_path, redis_server):
    cluster = Cluster(tmp_path, redis_server)
    try:
        cluster.add_agent("a0", "127.0.1.10", "dc1", "r1")
        cluster.add_agent("a1", "127.0.1.11", "dc1", "r1")
        cluster.add_agent("full", "127.0.1.12", "dc1", "r1", extra=("--disk-reserve", "1000T"))
        wait_until(lambda: len(cluster.registered()) == 3, 60, "3 agents registered")
        path = tmp_path / "image.bin"
        path.write_bytes(os.urandom(SIZE))
        push = cluster.push(path, "--timeout", "120")
        push.communicate(timeout=180)
        said = (tmp_path / "push.log").read_text()
        assert push.returncode == 1, said
        assert "2/3 agents hold image.bin" in said and "full: refused (not enough disk space" in said
        for name in ("a0", "a1"):
            assert (tmp_path / name / "files" / "image.bin").read_bytes() == path.read_bytes()
        assert not (tmp_path / "full" / "files" / "image.bin").exists()
        assert "refusing it: not enough disk space" in (tmp_path / "full" / "agent.log").read_text()
    finally:
        cluster.stop_all()


def test_a_transfer_nobody_can_serve_does_not_hold_a_lower_one_back(tmp_path, redis_server):
    """The owner's own push whose seeder died (no one holds it) stays in redis for days; a lower-priority push
    still lands once the dead one has held the turn for 15 periods without a block (7.5 s at the harness's
    period of 0.5 s), which wedged the queue for good before."""
    cluster = Cluster(tmp_path, redis_server)
    try:
        cluster.add_agent("a0", "127.0.1.10", "dc1", "r1")
        wait_until(lambda: len(cluster.registered()) == 1, 60, "an agent registered")
        manifest, layer = build_manifest([os.urandom(SIZE)], SIZE)
        dead = signed_transfer(manifest, layer, "dead.bin", SigningKey.load(cluster.owner_key), priority=100,
                               seeder="00" * 32)
        with cluster.redis.client() as client:
            client.set(cluster.keys.transfer(dead.tid), dead.dump())
            client.sadd(cluster.keys.transfers, dead.tid)
        path = tmp_path / "alive.bin"
        path.write_bytes(os.urandom(SIZE))
        push = cluster.push(path, "--timeout", "120")
        out, _ = push.communicate(timeout=180)
        assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
        assert json.loads(out)["agents"] == 1
        assert (tmp_path / "a0" / "files" / "alive.bin").read_bytes() == path.read_bytes()
    finally:
        cluster.stop_all()
