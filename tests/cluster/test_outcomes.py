"""A push tells the truth: it exits 0 only when every agent holds the file, else 1 saying who holds what; a
transfer that cannot progress never holds a lower one back. Real agents and redis."""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import asdict

import pytest

from bench.cluster_harness import Cluster, redis_missing, wait_until
from cluster.identity import Identity
from cluster.intent import SigningKey
from cluster.push import signed_transfer
from cluster.records import AgentRecord, MemberRecord
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


class StuckAgent:
    """An admitted agent that stays registered and reports PENDING, fetching, never a block further (its peer
    port firewalled, say): what it writes is what a real one would, sealed with its identity."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.identity = Identity.issue(SigningKey.load(cluster.owner_key), "stuck")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        keys, node = self.cluster.keys, self.identity.node
        while not self.stop.is_set():
            with self.cluster.redis.client() as client:
                agent = AgentRecord("127.0.1.99", 9, "dc1", "r1", "stuck")
                client.set(keys.agent(node), self.identity.seal("agent", keys.agent(node), asdict(agent)), px=15_000)
                client.sadd(keys.agents, node)
                for tid in (t.decode() for t in client.smembers(keys.transfers)):
                    member = MemberRecord(node, verified=1, blocks=100, dc="dc1", rack="r1", host="127.0.1.99")
                    where = keys.member(tid, node)
                    client.set(where, self.identity.seal("member", where, asdict(member)), px=15_000)
                    client.sadd(keys.members(tid), node)
            self.stop.wait(0.3)


def test_an_agent_that_never_progresses_is_given_up_on_and_named(tmp_path, redis_server):
    cluster = Cluster(tmp_path, redis_server)
    stuck = StuckAgent(cluster)
    try:
        cluster.add_agent("a0", "127.0.1.10", "dc1", "r1")
        stuck.thread.start()
        wait_until(lambda: len(cluster.registered()) == 2, 60, "the agent and the stuck one registered")
        path = tmp_path / "image.bin"
        path.write_bytes(os.urandom(SIZE))
        push = cluster.push(path, "--timeout", "120", "--give-up-after", "5")
        push.communicate(timeout=180)
        said = (tmp_path / "push.log").read_text()
        assert push.returncode == 1 and re.search(r"stuck: 1% fetched, no progress for \d+ s \(given up\)", said), \
            said[-2000:]
        assert "1/2 agents hold image.bin" in said
        assert (tmp_path / "a0" / "files" / "image.bin").read_bytes() == path.read_bytes()
    finally:
        stuck.stop.set()
        cluster.stop_all()


def test_an_agent_whose_host_died_during_a_push_is_named_unreachable(tmp_path, redis_server):
    """Before, an agent that died mid-push was simply no longer waited for, and the push exited 0 although it
    held nothing."""
    cluster = Cluster(tmp_path, redis_server)
    try:
        for i in range(2):
            cluster.add_agent(f"a{i}", f"127.0.1.{i + 10}", "dc1", "r1")
        wait_until(lambda: len(cluster.registered()) == 2, 60, "2 agents registered")
        path = tmp_path / "image.bin"
        path.write_bytes(os.urandom(1_500_000))
        # 20 s: past the work stealing (10 s) that shows a0 what the dead a1 was to bring it
        push = cluster.push(path, "--timeout", "120", "--give-up-after", "20", "--upload-rate", "200k")
        wait_until(lambda: cluster.transfers(), 30, "the transfer published")
        cluster.kill9(cluster.agents["a1"])  # 7.5 s at least at 200 kB/s: it dies holding part of it at most
        push.communicate(timeout=180)
        said = (tmp_path / "push.log").read_text()
        # Its keys outlive it by their TTL: named as given up on (no progress) or, once they expired, unreachable.
        assert push.returncode == 1 and re.search(r"a1: (unreachable \(gone for \d+ s\)|\d+% fetched, no progress "
                                                  r"for \d+ s \(given up\))", said), said[-2000:]
        assert "1/2 agents hold image.bin" in said
        assert (tmp_path / "a0" / "files" / "image.bin").read_bytes() == path.read_bytes()
    finally:
        cluster.stop_all()


def test_the_same_bytes_pushed_under_a_second_name_say_so(tmp_path, redis_server):
    """One transfer (its id is the content's): the agent keeps them under the first name. Before, the second push
    exited 0 although no agent held files/second.bin (and with names checked, it waited for good)."""
    cluster = Cluster(tmp_path, redis_server)
    try:
        cluster.add_agent("a0", "127.0.1.10", "dc1", "r1")
        wait_until(lambda: len(cluster.registered()) == 1, 60, "an agent registered")
        first, second = tmp_path / "first.bin", tmp_path / "second.bin"
        first.write_bytes(os.urandom(SIZE))
        second.write_bytes(first.read_bytes())
        assert cluster.push(first, "--timeout", "60").wait(timeout=120) == 0
        push = cluster.push(second, "--timeout", "60")
        assert push.wait(timeout=120) == 1
        said = (tmp_path / "push.log").read_text()
        assert "a0: refused (holds this content as 'first.bin', not under a second name)" in said, said[-2000:]
    finally:
        cluster.stop_all()
