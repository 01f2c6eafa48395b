"""The cluster end to end: a real redis-server, agents and pushers as real processes on 127.0.x.y addresses.

Skipped, with the reason, where `redis-server` is not installed (scripts/test.sh installs it). No fixed port
(redis and every peer port are picked free), no sleep as synchronisation: `wait_until` polls the state the agents
write in redis, with a deadline.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import time

import pytest

from bench.cluster_harness import Cluster, redis_missing, wait_until
from bench.cluster_sim import figures
from cluster.overlay import Level
from cluster.run import manifest_of

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))]

MiB = 1 << 20
LATE = 5.0  # s after the push that rack 3 joins (issue 22)


@pytest.fixture
def cluster(tmp_path, redis_server):
    c = Cluster(tmp_path, redis_server)
    yield c
    c.stop_all()


def payload(path: pathlib.Path, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        left = size
        while left:
            chunk = os.urandom(min(left, MiB))
            digest.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(MiB):
            digest.update(chunk)
    return digest.hexdigest()


def add_rack(cluster: Cluster, rack: int, per_rack: int = 4, start: bool = True):
    return [cluster.add_agent(f"r{rack}a{i}", f"127.0.{rack}.{i + 10}", "dc1", f"r{rack}", start=start)
            for i in range(per_rack)]


def reps_per_rack(cluster: Cluster, tid: str) -> dict[str, set[str]]:
    members = cluster.members(tid)
    reps: dict[str, set[str]] = {}
    for agent in cluster.agents.values():
        record = members.get(agent.node or "")
        reps.setdefault(agent.rack, set())
        if record is not None and record.role in ("rack", "dc"):
            reps[agent.rack].add(agent.name)
    return reps


def slot_holders(cluster: Cluster, tid: str) -> dict[str, str]:
    with cluster.redis.client() as client:
        keys = [k.decode() for k in client.scan_iter(match=f"{cluster.keys.ns}:t:{tid}:slot:*")]
        return {k: v.decode() for k, v in zip(keys, client.mget(keys)) if v is not None} if keys else {}


def test_push_to_12_agents_byte_exact_two_representants_per_rack(cluster, tmp_path):
    """3 racks x 4 agents, one 64 MiB push: every copy byte-exact, exactly 2 representants per rack, only they
    carry bytes across racks; the seeder sends the file about once and each rack uplink carries about one copy."""
    for rack in (1, 2, 3):
        add_rack(cluster, rack)
    wait_until(lambda: len(cluster.registered()) == 12, 60, "12 agents registered")
    size = 64 * MiB
    digest = payload(tmp_path / "payload.bin", size)
    push = cluster.push(tmp_path / "payload.bin")
    out, _ = push.communicate(timeout=240)
    assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
    result = json.loads(out)
    tid = result["transfer"]
    wait_until(lambda: cluster.all_finished(tid), 30, "every agent FINISHED")
    for agent in cluster.agents.values():
        assert sha256(agent.data_dir / "files" / "payload.bin") == digest, agent.name
    reps = reps_per_rack(cluster, tid)
    assert {rack: len(names) for rack, names in reps.items()} == {"r1": 2, "r2": 2, "r3": 2}
    rack_slots = [k for k in slot_holders(cluster, tid) if ":slot:rack:" in k]
    assert len(rack_slots) == 6
    members = cluster.members(tid)
    for agent in cluster.agents.values():
        record = members[agent.node]
        across = record.received[Level.DC.label] + record.received[Level.OUTSIDE.label]
        if agent.name not in reps[agent.rack]:
            assert across == 0, f"{agent.name} is no representant but received {across} bytes across racks"
            assert record.sent[Level.DC.label] + record.sent[Level.OUTSIDE.label] == 0
    seen = figures(cluster, tid, size, result)
    assert seen["seeder_ratio"] <= 1.05, seen
    assert seen["max_uplink_copies"] <= 1.10, seen


def test_killed_agent_late_rack_and_redis_restart_all_finish(cluster, redis_server, tmp_path):
    """One run, three troubles: rack 3 joins 5 s late (Kraken #244), a representant is `kill -9`ed at half its
    progress and restarted (it resumes from its store and keeps its role), and redis is shut down without saving
    and started again mid-transfer. Everyone finishes byte-exact, with two representants per rack.

    32 MiB with the seeder held to 3 MB/s, so that the transfer lasts long enough (~11 s) for the troubles to
    strike while it runs; 64 MiB at that rate would make this test take half a minute more for nothing."""
    add_rack(cluster, 1)
    add_rack(cluster, 2)
    late = add_rack(cluster, 3, start=False)
    wait_until(lambda: len(cluster.registered()) == 8, 60, "8 agents registered")
    size = 32 * MiB
    digest = payload(tmp_path / "payload.bin", size)
    push = cluster.push(tmp_path / "payload.bin", "--upload-rate", "3M")
    tid = wait_until(lambda: next(iter(cluster.transfers()), None), 30, "the transfer published")

    # Rack 3 joins LATE seconds after the push began (the scenario's delay, not a wait for anything).
    wait_until(lambda: (m := cluster.member_of(tid, cluster.agents["r2a3"])) and m.verified > 0, 30,
               "rack 2 receiving")
    time.sleep(LATE)
    for agent in late:
        cluster.start(agent)

    victim = next(a for a in cluster.agents.values()
                  if a.rack == "r1" and (m := cluster.member_of(tid, a)) is not None and m.role in ("rack", "dc"))
    role_before = cluster.member_of(tid, victim).role

    # kill -9 the representant at half its progress, and restart it.
    record = wait_until(lambda: (m := cluster.member_of(tid, victim)) and m.progress >= 0.5 and m, 120,
                        f"{victim.name} at 50 %")
    cluster.kill9(victim)
    verified_at_kill = record.verified  # as its last record said (up to one period old)
    root = manifest_of(cluster.transfers()[tid])[0].root
    marked_at_kill = sum(byte.bit_count() for byte in (victim.data_dir / "blocks" / f"{root.hex()}.bits").read_bytes())
    cluster.start(victim)

    # redis shut down without saving and started again, mid-transfer.
    wait_until(lambda: (m := cluster.member_of(tid, victim)) and m.resumed > 0, 60, f"{victim.name} resumed")
    assert not cluster.all_finished(tid), "the transfer ended before redis could be restarted: make it slower"
    holders_before = slot_holders(cluster, tid)
    redis_server.shutdown_nosave()
    redis_server.start()

    out, _ = push.communicate(timeout=240)
    assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
    wait_until(lambda: len(cluster.registered()) == 12 and cluster.all_finished(tid), 120, "every agent FINISHED")
    for agent in cluster.agents.values():
        assert sha256(agent.data_dir / "files" / "payload.bin") == digest, agent.name

    # Agents that first met the transfer while redis was young again stand for a free slot only a slot TTL into
    # the new server's life (holders come first): rack 3, started right before the restart, may still be filling.
    wait_until(lambda: {rack: len(names) for rack, names in reps_per_rack(cluster, tid).items()} ==
               {"r1": 2, "r2": 2, "r3": 2}, 60, "two representants per rack")
    seen = figures(cluster, tid, size, {"seconds": 0, "seeder_ratio": 0})
    late_rack = seen["racks"]["dc1/r3"]
    assert late_rack["cross_rack_by_non_representants"] == 0  # the late rack, too, through its two
    # ... and it got its copy from the other racks through its two, about once. Its representants may stand one
    # after the other (the second only a slot TTL into the restarted redis's life): the stall clock starts when a
    # member stands (`cluster.stalls.StallWatch`), and a representant takes from its rack what its rack holds
    # rather than across the level (the engine's nearest first). Measured 1.000-1.010 here, 1.37 and 1.40 in two
    # CI runs of the full suite on a busier machine. Not the 1.10 of the undisturbed run: a block asked of a far
    # source just before a rack peer's HAVE arrives, or held by a rack peer whose requests timed out (redis away
    # for 3-5 s, two cores shared by 13 processes), may still cross twice (docs/cluster.md, "Limits"). What this
    # asserts is that the two divided the work at all: with no division the rack takes two copies (1.98 was seen
    # once, from a bug since fixed); the figure under chaos belongs to the lab (`lab cluster-…`, staggered start).
    print(f"late rack uplink copies: {late_rack['uplink_copies']}")
    members = cluster.members(tid)
    late_members = {a.name: (members[a.node].role, members[a.node].received, members[a.node].extra_bytes)
                    for a in late}
    assert late_rack["uplink_copies"] <= 1.5, (late_rack, late_members)
    assert holders_before.items() <= slot_holders(cluster, tid).items(), "a holder lost its slot to redis restarting"
    final = cluster.member_of(tid, victim)
    assert final.role == role_before  # it re-read its role: its slots were still under its node id
    # What it had stored survived the kill: at most the block being written when it died fails re-verification.
    assert final.resumed >= verified_at_kill
    assert marked_at_kill - final.resumed <= 1, (marked_at_kill, final.resumed)
    # Bytes received after the restart beyond what it lacked then: endgame duplicates only (reported, bounded).
    assert final.extra_bytes <= 0.05 * size, final.extra_bytes


def test_two_pushes_finish_in_priority_order(cluster, tmp_path):
    """Agents fetch one transfer at a time, the higher priority first: pushed second, it preempts the first."""
    add_rack(cluster, 1, per_rack=3)
    wait_until(lambda: len(cluster.registered()) == 3, 60, "3 agents registered")
    size = 16 * MiB
    digests = {name: payload(tmp_path / name, size) for name in ("low.bin", "high.bin")}
    # The first at a quarter of the second's rate: 16 s of work, so that the second push's start (a process;
    # seconds on a loaded 2-core machine, where a 4 s and then an 8 s first transfer finished before the second
    # was published) comes while the first is still under way.
    low = cluster.push(tmp_path / "low.bin", "--upload-rate", "1M", "--priority", "0", host="127.0.0.2")
    low_tid = wait_until(lambda: next(iter(cluster.transfers()), None), 30, "the first transfer published")
    wait_until(lambda: any((m := cluster.member_of(low_tid, a)) and m.verified for a in cluster.agents.values()),
               30, "the low-priority transfer under way")
    high = cluster.push(tmp_path / "high.bin", "--upload-rate", "4M", "--priority", "5", host="127.0.0.3")
    for push in (high, low):
        push.communicate(timeout=240)
        assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
    high_tid = next(t for t in cluster.transfers() if t != low_tid)
    for agent in cluster.agents.values():
        for name in digests:
            assert sha256(agent.data_dir / "files" / name) == digests[name], (agent.name, name)
        assert cluster.member_of(high_tid, agent).finished < cluster.member_of(low_tid, agent).finished, agent.name


def test_a_corrupted_peer_is_banned_and_its_bytes_never_stored(cluster, tmp_path):
    """A rack peer whose stored copy was overwritten serves bad blocks: a newcomer drops them, bans it, and ends
    byte-exact from the others."""
    agents = add_rack(cluster, 1, per_rack=3)
    wait_until(lambda: len(cluster.registered()) == 3, 60, "3 agents registered")
    size = 8 * MiB
    digest = payload(tmp_path / "payload.bin", size)
    push = cluster.push(tmp_path / "payload.bin")
    out, _ = push.communicate(timeout=240)
    assert push.returncode == 0
    tid = json.loads(out)["transfer"]
    bad = agents[0]
    with open(bad.data_dir / "files" / "payload.bin", "r+b") as handle:  # the store's data file (a hard link)
        handle.write(os.urandom(size))
    # The good peers are paused until the newcomer has met the bad one: otherwise it may fetch every block from
    # them and never ask the bad peer at all (seen in CI).
    good = agents[1:]
    for agent in good:
        agent.process.send_signal(signal.SIGSTOP)
    try:
        newcomer = cluster.add_agent("r1a9", "127.0.1.99", "dc1", "r1")
        wait_until(lambda: (m := cluster.member_of(tid, newcomer)) and m.banned >= 1, 120, "the bad peer banned")
    finally:
        for agent in good:
            agent.process.send_signal(signal.SIGCONT)
    wait_until(lambda: (m := cluster.member_of(tid, newcomer)) and m.state == "FINISHED", 120, "the newcomer done")
    assert sha256(newcomer.data_dir / "files" / "payload.bin") == digest
    record = cluster.member_of(tid, newcomer)
    assert record.hash_failures >= 1 and record.banned >= 1, record


def test_a_slow_representant_does_not_hold_its_rack_back(cluster, tmp_path):
    """Work stealing: rack 1's two representants each bring in half the file; one of them uploads to its rack at
    2 kB/s. Its partner stalls, and after `STEAL_AFTER` s the other racks and the seeder show it everything."""
    slow = cluster.add_agent("r1slow", "127.0.1.10", "dc1", "r1", start=False)
    slow.args += ["--rack-capacity", "2k"]
    cluster.start(slow)
    partner = cluster.add_agent("r1a1", "127.0.1.11", "dc1", "r1")
    add_rack(cluster, 2, per_rack=2)
    wait_until(lambda: len(cluster.registered()) == 4, 60, "4 agents registered")
    size = 8 * MiB
    digest = payload(tmp_path / "payload.bin", size)
    push = cluster.push(tmp_path / "payload.bin")
    out, _ = push.communicate(timeout=240)
    assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
    tid = json.loads(out)["transfer"]
    for agent in cluster.agents.values():
        assert sha256(agent.data_dir / "files" / "payload.bin") == digest, agent.name
    took = cluster.member_of(tid, partner)
    assert took.received[Level.RACK.label] < size / 4  # what the slow one managed to pass on
    # Its own half came across racks by design; the slow one's half too, stolen once it stalled.
    assert took.received[Level.DC.label] + took.received[Level.OUTSIDE.label] >= 0.75 * size
