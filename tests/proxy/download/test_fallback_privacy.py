"""What a node tells the DHT, end to end with the product's defaults: fast browsing nothing, a slow origin or a large
file what swarming needs, a private origin nothing at all (`proxy.download.discovery_rule`, `proxy.exposure.may_share`).

Before the rule, every public GET was looked up as it left and every completed response published: 50 GETs of a
4 KB file gave 51 DHT publications. Before the sharing rule, anything fetched from a loopback or private address
was looked up, announced and served to strangers."""

from __future__ import annotations

import hashlib

import pytest_asyncio

from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin
from proxy.exposure import PRIVATE_ORIGIN

SMALL = (hashlib.sha256(b"a page's image").digest() * 128)[:4000]
TOLD = ("lookups", "announced", "published", "claims")


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, first_byte_timeout="0.3", min_rate="160k", rate_window="0.5")
    yield group
    await group.close()


def told(node) -> dict[str, int]:
    return {name: getattr(node.engine.counters, name) for name in TOLD}


async def test_fast_small_downloads_tell_the_dht_nothing(cluster, slow_origin):
    _, browser = await cluster.grow(2)
    urls = [slow_origin.add(f"/img/{i}.png", SMALL + bytes([i])) for i in range(50)]
    for url in urls:
        status, _, body = await cluster.get(browser, url)
        assert status == 200 and len(body) == len(SMALL) + 1
    await browser.engine.settled()
    assert told(browser) == dict.fromkeys(TOLD, 0)
    assert browser.engine.service.status()["lookups"] == 0  # and /_swarm/status says so


async def test_a_slow_origin_is_looked_up_and_what_it_sent_announced(cluster, slow_origin):
    _, browser = await cluster.grow(2)
    url = slow_origin.add("/slow.bin", SMALL * 50)
    slow_origin.set_rate(50_000)  # under R (160 kB/s): an R switch
    status, _, body = await cluster.get(browser, url)
    assert status == 200 and body == SMALL * 50
    await browser.engine.settled()
    counts = told(browser)
    assert counts["lookups"] >= 1 and counts["announced"] >= 1 and counts["published"] >= 1


async def test_a_large_file_from_a_fast_origin_is_announced(tmp_path, slow_origin):
    group = Cluster(tmp_path, discover_size="100k")
    try:
        _, browser = await group.grow(2)
        status, _, _ = await group.get(browser, slow_origin.add("/big.iso", SMALL * 30))
        assert status == 200
        await browser.engine.settled()
        assert told(browser)["announced"] >= 1 and told(browser)["published"] >= 1
    finally:
        await group.close()


async def test_an_unlisted_private_origin_is_never_looked_up_announced_or_served(cluster):
    """The cluster lists 127.0.0.1 only: an origin on 127.0.0.2 is this machine's, however slow."""
    private = SlowOrigin(host="127.0.0.2", rate=50_000)
    await private.start()
    try:
        _, browser = await cluster.grow(2)
        url = private.add("/intranet.bin", SMALL * 50)
        status, _, body = await cluster.get(browser, url)
        assert status == 200 and body == SMALL * 50
        await browser.engine.settled()
        assert told(browser) == dict.fromkeys(TOLD, 0)
        assert cluster.last_record(browser)["swarm_skipped"] == PRIVATE_ORIGIN
        assert not browser.engine.store.roots()  # nothing of it is kept to serve
    finally:
        await private.stop()
