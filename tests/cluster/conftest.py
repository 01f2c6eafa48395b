"""A real redis-server for the cluster tests, started on a free port in the test's directory."""

from __future__ import annotations

import pytest

from bench.cluster_harness import RedisServer


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["plain", "tls-acl"])
def attacked_redis(request, tmp_path):
    """For the attacks on the cluster's trust: a redis anyone reaches, and the documented production setup (TLS
    only, an ACL user: docs/cluster.md), where the attacker holds the cluster's own credentials."""
    server = RedisServer(tmp_path / "redis", secure=request.param == "tls-acl")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def three_agents(tmp_path, attacked_redis):
    """Three agents in one rack on `attacked_redis` (both setups), registered."""
    from bench.cluster_harness import Cluster, wait_until

    group = Cluster(tmp_path, attacked_redis)
    for i in range(3):
        group.add_agent(f"a{i}", f"127.0.1.{i + 10}", "dc1", "r1")
    wait_until(lambda: len(group.registered()) == 3, 60, "3 agents registered")
    yield group
    group.stop_all()
