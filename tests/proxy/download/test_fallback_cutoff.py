"""A merge whose one peer is cut off mid-transfer, in one process (the lab's case: tests/bench/
test_bad_networks_netns.py flushes every router's conntrack, the downloader's home router included, so the peer's
connection and the origin's stream both go silent or break).

The seed sends `SERVED` blocks and then nothing more on a connection that stays open (its NAT mapping expired);
the origin's stream breaks off at `CUT`. The origin still serves ranges, and the swarm's fetch has it as its Range
source: the download must finish byte-exact. It did not: the fetch's Range source was asked only for blocks no peer
has ("spread" picks), the silent seed held them all until its third strike, 30 s on, and the fetch's 30 s stall
watchdog cut the download first ("no block arrived for 30 s from 0 peer(s)"). The origin's picks are spread only
while some peer answers now (`swarm.core.policy`)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest_asyncio

from proxy.demo.local_swarm import Cluster
from proxy.engine import url_key

from .test_fallback import FAST_SWITCH, seeded

SIZE = 1_500_000
DATA = (hashlib.sha256(b"cutoff").digest() * (SIZE // 32 + 1))[:SIZE]
SERVED = 4  # blocks the seed sends before its mapping expires
CUT = 700_000  # where the origin's stream breaks off


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, **FAST_SWITCH)
    yield group
    await group.close()


async def test_a_merge_whose_peer_goes_silent_and_whose_origin_stream_breaks_finishes_by_range(cluster, slow_origin):
    url = await seeded(cluster, slow_origin, data=DATA, publishers=3)
    seed = cluster.nodes[0]
    root = seed.engine._own_manifests[url_key(url)].root
    for other in cluster.nodes[1:]:  # only the seed serves
        other.engine.withdraw(root, "test")
    await asyncio.gather(*(n.engine.settled() for n in cluster.nodes))
    serving = seed.engine.nodes["tcp"]
    real, sent, never = serving._send_block, [], asyncio.Event()

    async def cut_off(connection, core, action):
        if len(sent) >= SERVED:
            await never.wait()  # the mapping is gone: the connection stays open and nothing more arrives
        sent.append(action.block)
        await real(connection, core, action)

    serving._send_block = cut_off
    slow_origin.set_rate(120_000)
    slow_origin.die_after["/big.bin"] = CUT  # (a Range response of a block is far shorter: only the stream breaks)
    node = await cluster.add()
    try:
        status, _, body = await cluster.get(node, url)
    finally:
        record = cluster.last_record(node)
    assert record["error"] is None, record
    assert status == 200 and body == DATA
    assert sent[:SERVED] == list(range(3, 3 + SERVED))  # the swarm began at block 3, the stream's last block
    assert record["bytes_origin"] + record["bytes_peers"] == SIZE  # (the seed's 4 blocks lay behind the stream's
    # break: the stream had delivered them first, and they count as the origin's)
