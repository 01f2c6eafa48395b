"""A lookup that fails never fails the download, and a bug in one is said as a bug, not as a busy network's miss."""

from __future__ import annotations

import logging

import pytest
import pytest_asyncio

from proxy.demo.local_swarm import Cluster
from swarm.errors import FetchFailed

from .test_fallback import DATA, FAST_SWITCH

SMALL = DATA[:300_000]


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, **FAST_SWITCH)
    yield group
    await group.close()


@pytest.mark.parametrize("raised,reason,level", [
    (FetchFailed("no provider answered"), "lookup-failed", logging.INFO),  # the engine's own failure: quietly
    (ZeroDivisionError("a bug"), "lookup-bug", logging.ERROR),  # a bug: with its traceback (it used to read
])                                                                # "lookup-failed" at WARNING, with no traceback)
async def test_a_lookup_that_raises_leaves_the_origin_to_finish(cluster, slow_origin, caplog, raised, reason,
                                                                  level):
    url = slow_origin.add("/crawl.bin", SMALL)
    slow_origin.set_rate(100_000)  # slower than R: the download switches and looks the swarm up
    node = await cluster.add()

    async def find(*args, **kwargs):
        raise raised

    node.engine.find = find
    with caplog.at_level(logging.INFO, logger="swarmproxy.fallback"):
        status, _, body = await cluster.get(node, url)
    assert status == 200 and body == SMALL
    record = cluster.last_record(node)
    assert record["transition"] == "R" and record["bytes_origin"] == len(SMALL)
    assert record["swarm_skipped"].startswith(reason), record["swarm_skipped"]
    said = [r for r in caplog.records if "lookup" in r.getMessage() and r.levelno == level]
    assert said and (said[0].exc_info is not None) == (level == logging.ERROR)
