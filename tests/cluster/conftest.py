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
