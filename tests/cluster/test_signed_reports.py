"""Authenticated reports end to end (real agents, a real push, a real redis-server): an attacker who can write to
redis registers ghost agents, or writes FINISHED for every agent while a push runs, and neither changes what the
push waits for or what it says (`cluster.identity`). On trees before, the ghosts held every push until its
timeout, and the forged reports ended it before the agents held the file (`python -m bench.attacks.cluster_writes`,
rows 4 and 5)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from bench.attacks.cluster_writes import Forger, ghosts, held, keep_writing
from bench.cluster_harness import Cluster, redis_missing, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))]


@pytest.fixture
def cluster(tmp_path, attacked_redis):  # plain, and the documented TLS + ACL setup
    group = Cluster(tmp_path, attacked_redis)
    for i in range(3):
        group.add_agent(f"a{i}", f"127.0.1.{i + 10}", "dc1", "r1")
    wait_until(lambda: len(group.registered()) == 3, 60, "3 agents registered")
    yield group
    group.stop_all()


def attacked(cluster: Cluster, writes, every: float):
    stop = threading.Event()
    return stop, keep_writing(cluster, writes, every, stop)


def test_ghost_agents_are_not_waited_for(cluster, tmp_path):
    written = ghosts(cluster)
    stop, thread = attacked(cluster, lambda: written, 0.2)
    try:
        with cluster.redis.client() as client:
            wait_until(lambda: len(client.smembers(cluster.keys.agents)) == 6, 30, "the ghosts registered")
        path = tmp_path / "plain.bin"
        path.write_bytes(os.urandom(300_000))
        push = cluster.push(path, "--timeout", "60")
        out, _ = push.communicate(timeout=120)
    finally:
        stop.set()
        thread.join()
    assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
    assert json.loads(out)["agents"] == 3  # the summary counts the agents it can believe
    assert held(cluster, "plain.bin") == [path.read_bytes()] * 3


def test_forged_finished_reports_do_not_end_a_push(cluster, tmp_path):
    path = tmp_path / "slow.bin"
    path.write_bytes(os.urandom(1_500_000))
    before = set(cluster.transfers())
    stop, thread = attacked(cluster, Forger(cluster, before, window=3.0), 0.02)  # then the agents' own are read
    try:
        push = cluster.push(path, "--timeout", "60", "--upload-rate", "200k")  # 7.5 s at least: a long window
        push.communicate(timeout=120)
        holding = held(cluster, "slow.bin")  # as the push exits: what it said is true now
        assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
        assert holding == [path.read_bytes()] * 3
    finally:
        stop.set()
        thread.join()
