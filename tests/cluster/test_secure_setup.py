"""The documented setup is the tested one: redis with TLS only (a CA of the cluster's own), no default user, and an
ACL user allowed the cluster's commands on the cluster's keys; agents and a push run through it end to end, and a
client without credentials, or a credential used for anything else, changes nothing."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.cluster_harness import Cluster, RedisServer, python_command, redis_missing, wait_until
from bench.secure_redis import CLUSTER_ACL

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))]


@pytest.fixture
def secure_redis(tmp_path):
    server = RedisServer(tmp_path / "redis", secure=True)
    server.start()
    yield server
    server.stop()


def test_a_push_runs_through_tls_and_the_acl_user(tmp_path, secure_redis):
    assert secure_redis.url.startswith("rediss://swarmproxy:")
    cluster = Cluster(tmp_path, secure_redis)
    try:
        for i in range(3):
            cluster.add_agent(f"a{i}", f"127.0.1.{i + 10}", "dc1", "r1")
        wait_until(lambda: len(cluster.registered()) == 3, 60, "3 agents registered over TLS")
        path = tmp_path / "image.bin"
        path.write_bytes(os.urandom(300_000))
        push = cluster.push(path, "--timeout", "120")
        out, _ = push.communicate(timeout=180)
        assert push.returncode == 0, (tmp_path / "push.log").read_text()[-2000:]
        assert json.loads(out)["agents"] == 3
        tid = json.loads(out)["transfer"]
        env = dict(cluster.env, SWARMPROXY_REDIS=secure_redis.url)  # the password stays off the command line
        status = subprocess.run(python_command("status", "--json"), capture_output=True, text=True, timeout=60,
                                env=env)
        assert status.returncode == 0 and json.loads(status.stdout)["transfers"][0]["finished"] == 3, status.stderr
        cancel = subprocess.run(python_command("cancel", tid, "--key", str(cluster.owner_key)), capture_output=True,
                                text=True, timeout=60, env=env)
        assert cancel.returncode == 0, cancel.stderr
        for agent in cluster.agents.values():
            assert (agent.data_dir / "files" / "image.bin").read_bytes() == path.read_bytes()
            log = (agent.data_dir / "agent.log").read_text()
            assert secure_redis.secure.password not in log
            assert "permissions" not in log  # the ACL allows every command the cluster runs
    finally:
        cluster.stop_all()


def test_no_credentials_or_another_use_of_them_changes_nothing(secure_redis):
    once = {"socket_timeout": 5, "retry": Retry(NoBackoff(), 0)}  # a refusal is final: no retries to wait through
    tls = {"ssl": True, "ssl_ca_certs": str(secure_redis.secure.tls["ca"]), **once}
    with redis.Redis(host=secure_redis.host, port=secure_redis.port, **tls) as anonymous:
        with pytest.raises(redis.AuthenticationError):  # no default user: nothing but AUTH
            anonymous.set("swarmproxy:cluster:transfers", "x")
    with redis.Redis(host=secure_redis.host, port=secure_redis.port, **tls, username="swarmproxy",
                     password="wrong") as guesser:
        with pytest.raises(redis.AuthenticationError):
            guesser.ping()
    with secure_redis.client() as cluster_user:
        assert cluster_user.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            cluster_user.set("somebody-else:key", "x")  # other keys are not the cluster's
        for command in (("FLUSHALL",), ("CONFIG", "SET", "dir", "/tmp"), ("KEYS", "*"), ("ACL", "LIST")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                cluster_user.execute_command(*command)
    with redis.Redis(host=secure_redis.host, port=secure_redis.port, **once) as plain:
        with pytest.raises(redis.ConnectionError):  # no plaintext port at all
            plain.ping()


def test_the_acl_line_in_the_docs_is_the_tested_one():
    from pathlib import Path
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text()
    assert CLUSTER_ACL.format(password="PASSWORD") in docs
