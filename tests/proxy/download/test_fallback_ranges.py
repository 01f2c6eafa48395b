"""A claimer asks its slow origin again by several Ranges at once, end to end in one process: a download of a slow
origin's file closed while its early lookup runs, finding nobody else fetching it, says it fetches it and asks for the
rest by four Range requests (`proxy.download.ranged_origin`); the client gets exactly the file, and the node vouches
for it (every byte came from the origin)."""

from __future__ import annotations

import hashlib

import pytest_asyncio

from proxy.demo.local_swarm import Cluster
from proxy.download.origin_pieces import Pieces

DATA = (hashlib.sha256(b"ranges").digest() * 6_250)[:200_000]
# Under R (160k) at the early point (0.3 s after the first byte); W = 30 s so only that point judges it; a file under
# the size the privacy rule looks up at its head (16 MiB), so its only lookup is the early one.
SETTINGS = {"first_byte_timeout": "5", "min_rate": "160k", "rate_window": "30", "early_lookup": "0.3"}


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, **SETTINGS)
    yield group
    await group.close()


def pieces_asked(requests: list[tuple[str, str, str | None]]) -> list[tuple[int, int]]:
    asked = [r.removeprefix("bytes=").split("-") for _, _, r in requests if r is not None]
    return sorted((int(lo), int(hi) + 1) for lo, hi in asked)


async def test_a_claimer_asks_for_the_rest_by_four_ranges_and_vouches_for_the_file(cluster, slow_origin):
    url = slow_origin.add("/crowd.bin", DATA)
    slow_origin.set_rate(60_000)
    node, = await cluster.grow(1)
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(node)
    assert any("by 4 Ranges at once" in event for event in record["events"]), record["events"]
    assert record["bytes_origin"] == len(DATA) and record["bytes_peers"] == 0
    assert node.engine.counters.published == 1  # first-hand: it vouches, as with one stream
    # One GET, then the rest from where delivery stopped, cut as `Pieces` cuts it: each piece asked once.
    asked = pieces_asked(slow_origin.requests)
    start = asked[0][0]
    plan = Pieces.cut(start, len(DATA), 4)
    assert asked == [plan.bounds(i) for i in range(plan.count)] and plan.count == 4
    assert [r for _, _, r in slow_origin.requests].count(None) == 1
