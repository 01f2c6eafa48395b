"""Authenticated reports end to end (real agents, a real push, a real redis-server): an attacker who can write to
redis registers ghost agents, or writes FINISHED for every agent while a push runs, and neither changes what the
push waits for or what it says (`cluster.identity`). On trees before, the ghosts held every push until its
timeout, and the forged reports ended it before the agents held the file (`python -m bench.attacks.cluster_writes`,
rows 4 and 5)."""

from __future__ import annotations

import json
import os

import pytest

from bench.attacks.cluster_writes import Forger, attacking, ghosts, held
from bench.cluster_harness import redis_missing, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))]


@pytest.fixture
def cluster(three_agents):  # plain, and the documented TLS + ACL setup
    return three_agents


def test_ghost_agents_are_not_waited_for(cluster, tmp_path):
    written = ghosts(cluster)
    with attacking(cluster, lambda: written, 0.2):
        with cluster.redis.client() as client:
            wait_until(lambda: len(client.smembers(cluster.keys.agents)) == 6, 30, "the ghosts registered")
        path = tmp_path / "plain.bin"
        path.write_bytes(os.urandom(300_000))
        push = cluster.push(path, "--timeout", "60")
        out, _ = push.communicate(timeout=120)
    assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
    assert json.loads(out)["agents"] == 3  # the summary counts the agents it can believe
    assert held(cluster, "plain.bin") == [path.read_bytes()] * 3


def test_forged_finished_reports_do_not_end_a_push(cluster, tmp_path):
    path = tmp_path / "slow.bin"
    path.write_bytes(os.urandom(1_500_000))
    before = set(cluster.transfers())
    with attacking(cluster, Forger(cluster, before, window=3.0), 0.02):  # then the agents' own are read
        push = cluster.push(path, "--timeout", "60", "--upload-rate", "200k")  # 7.5 s at least: a long window
        push.communicate(timeout=120)
        holding = held(cluster, "slow.bin")  # as the push exits: what it said is true now
        assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
        assert holding == [path.read_bytes()] * 3
