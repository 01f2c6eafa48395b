"""A coordinator that survives (issue 40), end to end with real processes: a push goes on through a `kill -9` of
the redis primary and a Sentinel failover to a replica that had missed everything the push wrote, its owners
write that state back within a reconcile period, and every agent ends with the pushed bytes, both without TLS and in
the documented secure setup (TLS only on every node and sentinel, ACL users, signed pushes); and a push goes on
moving data while redis is stopped (SIGSTOP) for 10 s.

Skipped, with the reason, where `redis-server` is not installed (it runs the sentinels too: `redis-server CONF
--sentinel`). Every port is picked free; nothing sleeps to synchronise (`wait_until` polls with a deadline), the
one `sleep` is the outage's length.
"""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.cluster_harness import Cluster, python_command, redis_missing, wait_until
from bench.redis_sentinel import SERVICE, SentinelGroup
from bench.secure_redis import flags, tls_only
from cluster.run import manifest_of
from tests.cluster.test_cluster_processes import payload, sha256, slot_holders

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))]

MiB = 1 << 20
OUTAGE = 10.0  # s redis is stopped while the push runs (the figure)


@pytest.fixture(params=["plain", "tls"])
def sentinel_group(request, tmp_path):
    group = SentinelGroup(tmp_path / "redis", tls=request.param == "tls")
    try:
        group.start()
        yield group
    finally:
        group.stop()


def two_racks(cluster: Cluster):
    return [cluster.add_agent(f"r{rack}a{i}", f"127.0.{rack}.{i + 10}", "dc1", f"r{rack}")
            for rack in (1, 2) for i in range(2)]


def no_tracebacks(cluster: Cluster, tmp_path) -> None:
    logs = {a.name: (a.data_dir / "agent.log").read_text() for a in cluster.agents.values()}
    logs["push"] = (tmp_path / "push.log").read_text()
    assert not [name for name, text in logs.items() if "Traceback" in text], logs


def only_tls_answers(group: SentinelGroup) -> None:
    """No data node and no sentinel answers a plaintext client (`port 0`: their one port is `tls-port`), and the
    replica's link to the primary is up through TLS (`tls-replication yes`): the TLS case cannot pass in plaintext."""
    for port in (group.primary.port, group.replica.port, *(s.port for s in group.sentinels)):
        with redis.Redis(host=group.host, port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0)) as plain:
            with pytest.raises(redis.ConnectionError):
                plain.ping()
    with group.node(group.replica) as replica:
        assert replica.config_get("port", "tls-replication") == {"port": "0", "tls-replication": "yes"}
        assert replica.info("replication")["master_link_status"] == "up"


def test_a_push_goes_on_through_a_primary_kill9_and_failover(tmp_path, sentinel_group):
    """2 racks x 2 agents on a Sentinel-managed redis (ACL users, the sentinels behind a password). The replica is
    cut off before the push, so the primary dies holding writes nobody else has: the transfer, every member record,
    every slot, every provider. After the failover the agents and the pusher find the new primary through the
    sentinels, and within a reconcile period the owners have written it all back (the slot holders their own
    slots, nobody else: the new primary is young as a primary). The push ends, every copy byte-exact. In the "tls"
    case every client (agents, push, status) gets a rediss+sentinel:// URL with the test CA (ssl_ca_certs=)."""
    group = sentinel_group
    cluster = Cluster(tmp_path, group)
    try:
        two_racks(cluster)
        group.ready()
        if group.tls:
            assert group.url.startswith("rediss+sentinel://") and "ssl_ca_certs=" in group.url
            only_tls_answers(group)
        env = dict(cluster.env, SWARMPROXY_REDIS=group.url.replace(f"/{SERVICE}/", "/nosuch/"))
        wrong = subprocess.run(python_command("status"), capture_output=True, text=True, timeout=60, env=env)
        assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1, wrong.stderr
        assert "know no live primary of service 'nosuch'" in wrong.stderr and group.password not in wrong.stderr
        wait_until(lambda: len(cluster.registered()) == 4, 60, "4 agents registered through the sentinels")
        group.cut_replication()  # from now on the replica lags: what the push writes dies with the primary
        size = 24 * MiB
        digest = payload(tmp_path / "payload.bin", size)
        push = cluster.push(tmp_path / "payload.bin", "--upload-rate", "3M")  # ~8 s: the failover strikes mid-way
        tid = wait_until(lambda: next(iter(cluster.transfers()), None), 30, "the transfer published")
        # Every agent is a rack representant (two a rack) and stands for one of the DC's five slots too.
        wait_until(lambda: len(slot_holders(cluster, tid)) == 8, 30, "every slot taken")
        wait_until(lambda: all((m := cluster.member_of(tid, a)) and m.verified > 0 for a in cluster.agents.values()),
                   30, "every agent receiving")
        holders = slot_holders(cluster, tid)
        members = set(cluster.members(tid))
        with group.node(group.replica) as replica:
            assert not replica.exists(cluster.keys.transfer(tid)) and not replica.exists(*holders)

        group.primary.process.send_signal(signal.SIGKILL)
        group.primary.process.wait(timeout=15)
        wait_until(lambda: group.primary_port() == group.replica.port, 30, "the sentinels' failover to the replica")
        promoted = time.monotonic()
        assert not cluster.all_finished(tid), "the push ended before the failover: make it slower"
        wait_until(lambda: tid in cluster.transfers() and set(cluster.members(tid)) >= members
                   and slot_holders(cluster, tid) == holders, 30, "the lost state written back")
        rewritten = time.monotonic() - promoted
        print(f"lost state written back {rewritten:.2f} s after the sentinels named the new primary "
              f"(reconcile period {cluster.reconcile:g} s)")
        # A period (the agents' retry of a failed reconcile), plus the reconcile itself and this poll's, on two
        # cores shared with five busy processes.
        assert rewritten <= cluster.reconcile + 2.0

        out, _ = push.communicate(timeout=120)
        assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
        assert json.loads(out)["agents"] == 4
        for agent in cluster.agents.values():
            assert sha256(agent.data_dir / "files" / "payload.bin") == digest, agent.name
        assert slot_holders(cluster, tid) == holders  # the roles survived the failover
        no_tracebacks(cluster, tmp_path)
        for agent in cluster.agents.values():
            assert group.password not in (agent.data_dir / "agent.log").read_text()
    finally:
        cluster.stop_all()


def test_a_push_goes_on_moving_data_while_redis_is_stopped_for_10_s(tmp_path, redis_server):
    """redis frozen (SIGSTOP: connections stay open, nothing answers, every call times out) for 10 s mid-push:
    every agent keeps storing verified blocks from the peers it is connected to, and the push ends byte-exact."""
    cluster = Cluster(tmp_path, redis_server)
    try:
        agents = two_racks(cluster)
        wait_until(lambda: len(cluster.registered()) == 4, 60, "4 agents registered")
        size = 32 * MiB
        digest = payload(tmp_path / "payload.bin", size)
        push = cluster.push(tmp_path / "payload.bin", "--upload-rate", "2M")  # 16 s: outlasts the outage
        tid = wait_until(lambda: next(iter(cluster.transfers()), None), 30, "the transfer published")
        wait_until(lambda: all((m := cluster.member_of(tid, a)) and m.verified > 0 for a in agents), 30,
                   "every agent receiving")
        root = manifest_of(cluster.transfers()[tid])[0].root

        def stored() -> dict[str, int]:  # verified blocks per agent, from its store's bitmap (updated in place)
            return {a.name: sum(byte.bit_count() for byte in (a.data_dir / "blocks" / f"{root.hex()}.bits")
                                .read_bytes()) for a in agents}

        before = stored()
        redis_server.process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(OUTAGE)  # the outage's length (the scenario), not a wait for anything
            during = stored()
        finally:
            redis_server.process.send_signal(signal.SIGCONT)
        moved = {name: during[name] - before[name] for name in before}
        print(f"blocks stored per agent while redis was stopped for {OUTAGE:g} s: {moved}")
        assert all(n > 0 for n in moved.values()), moved
        assert not cluster.all_finished(tid)
        out, _ = push.communicate(timeout=120)
        assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
        for agent in agents:
            assert sha256(agent.data_dir / "files" / "payload.bin") == digest, agent.name
        no_tracebacks(cluster, tmp_path)
    finally:
        cluster.stop_all()


def test_the_tls_lines_in_the_docs_are_the_tested_ones(tmp_path):
    """docs/cluster.md's data node flags and sentinel.conf lines for TLS are the ones the TLS case runs."""
    group = SentinelGroup(tmp_path, tls=True)  # not started: only its configuration is read
    docs = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text().replace(" \\\n    ", " ")
    assert group.primary.extra[-2:] == ("--tls-replication", "yes") and group.replica.tls == group.tls
    node = " ".join([*flags(tls_only(group.tls, 6380)), *group.primary.extra[-2:]])
    sentinel = "\n".join(group.listen_lines(26379))
    for lines in (node, sentinel):
        assert lines.replace(f"{group.tls['ca'].parent}/", "") in docs, lines
