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
