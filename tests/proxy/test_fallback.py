"""The fallback download end to end in one process: ten full nodes (proxy + block engine + DHT) on 127.0.0.x
and a throttled origin. The first nodes fetch from the origin and publish; later ones switch by T and by R
and finish byte-exact with most bytes from peers."""

from __future__ import annotations

import hashlib
import time

import pytest
import pytest_asyncio

from dht.records import ManifestRecord, ProviderRecord
from proxy.engine import url_key
from proxy.local_swarm import Cluster
from proxy.slow_origin import SlowOrigin

SIZE = 3 * 1024 * 1024 + 12345
DATA = hashlib.sha256(b"fallback").digest() * (SIZE // 32 + 1)
DATA = DATA[:SIZE]

FAST_SWITCH = {"first_byte_timeout": "0.3", "min_rate": "160k", "rate_window": "0.5"}


@pytest_asyncio.fixture
async def origin():
    server = SlowOrigin()
    await server.start()
    yield server
    await server.stop()


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, **FAST_SWITCH)
    yield group
    await group.close()


async def seeded(cluster: Cluster, origin: SlowOrigin, path: str = "/big.bin", data: bytes = DATA,
                 publishers: int = 2, **headers: str) -> str:
    """`publishers` nodes fetch `path` from a fast origin (so they vouch for it); returns its URL."""
    url = origin.add(path, data, headers=headers or None)
    for node in await cluster.grow(publishers):
        status, _, body = await cluster.get(node, url)
        assert status == 200 and body == data
        assert cluster.last_record(node)["transition"] is None
    return url


async def test_later_nodes_switch_by_r_and_by_t_and_get_most_bytes_from_peers(cluster, origin):
    url = await seeded(cluster, origin)
    for node in cluster.nodes:
        assert node.engine.counters.published == 1

    origin.set_rate(64_000)  # far under R: the next node switches by rate
    node = await cluster.add()
    status, headers, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(node)
    assert record["transition"] == "R"
    assert record["manifest_source"] == "quorum"
    assert record["bytes_origin"] + record["bytes_peers"] == SIZE, (record, list(node.stats.history))
    assert record["bytes_peers"] > SIZE // 2
    assert node.engine.counters.published == 0  # got it from peers: provider, never publisher

    origin.set_rate(None)
    origin.first_byte_delay = 30.0  # the origin says nothing: the next node switches by T
    node = await cluster.add()
    status, headers, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    assert headers["Content-Length"] == str(SIZE)
    assert headers["ETag"] == origin.files["/big.bin"][1]
    assert headers["Content-Type"] == "application/octet-stream"
    record = cluster.last_record(node)
    assert record["transition"] == "T"
    assert record["bytes_peers"] > SIZE // 2


async def test_client_range_in_the_middle_is_served_from_peers(cluster, origin):
    url = await seeded(cluster, origin)
    origin.first_byte_delay = 30.0
    node = await cluster.add()
    status, headers, body = await cluster.get(node, url, {"Range": "bytes=1000000-2500000"})
    assert status == 206
    assert body == DATA[1000000:2500001]
    assert headers["Content-Range"] == f"bytes 1000000-2500000/{SIZE}"
    assert cluster.last_record(node)["transition"] == "T"


async def test_origin_dying_mid_transfer_is_finished_from_peers(cluster, origin):
    url = await seeded(cluster, origin)
    origin.die_after["/big.bin"] = 500_000
    node = await cluster.add()
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(node)
    assert record["transition"] == "died"
    assert record["bytes_peers"] > 0


async def test_no_publisher_means_the_origin_alone_finishes(cluster, origin):
    small = DATA[:300_000]
    url = await seeded(cluster, origin, data=small, publishers=1)  # one vouch is no quorum of 2
    origin.set_rate(100_000)
    node = await cluster.add()
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == small
    record = cluster.last_record(node)
    assert record["transition"] == "R"
    assert record["manifest_source"] is None
    assert record["bytes_peers"] == 0 and record["bytes_origin"] == len(small)


@pytest.mark.parametrize("case", [
    pytest.param({"headers": {"Cache-Control": "private, max-age=60"}}, id="cache-control-private"),
    pytest.param({"headers": {"Set-Cookie": "session=1"}}, id="set-cookie"),
    pytest.param({"request": {"Authorization": "Bearer x"}}, id="authorization"),
    pytest.param({"headers": {"ETag": "", "Last-Modified": ""}}, id="no-validator"),
])
async def test_private_responses_are_never_announced(cluster, origin, case):
    path = "/private.bin"
    url = origin.add(path, DATA[:100_000], headers=case.get("headers"))
    nodes = await cluster.grow(3)
    for node in nodes:
        async with cluster.client.get(url, proxy=node.url, headers=case.get("request", {})) as response:
            assert await response.read() == DATA[:100_000]
        await node.fallback.settled()
    key = url_key(url)
    for node in nodes:
        assert node.engine.counters.published == 0 and node.engine.counters.announced == 0
        stored = list(node.dht.store.records(time.time()))
        assert not any(getattr(r, "repr_key", None) == key for r in stored)
        assert not any(isinstance(r, ProviderRecord) for r in stored)
