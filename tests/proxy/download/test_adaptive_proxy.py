"""Adaptive T/R/W in a running proxy: the settings the core learns for an origin host reach the next download from
it, and /_swarm/requests shows what each GET was watched with; `--no-adaptive` keeps the flags."""

from __future__ import annotations

import hashlib
import json

import pytest

from proxy.demo.local_swarm import Cluster

DATA = hashlib.sha256(b"adaptive").digest() * 4000  # 128,000 bytes


@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive", "no-adaptive"])
async def test_a_far_origin_trips_t_once_then_the_learned_t_reaches_the_next_download(tmp_path, slow_origin,
                                                                                     adaptive):
    # A far but fast origin: every first byte 0.6 s after the request, twice the flag's T. No DHT, so a T switch
    # finds nobody at once and the origin's late answer is relayed: a switch that did not help.
    flags = {"first_byte_timeout": "0.3", "min_rate": "160k", "rate_window": "0.5", "dht_listen": "off"}
    if not adaptive:
        flags["no_adaptive"] = "true"
    lone = Cluster(tmp_path, **flags)
    try:
        slow_origin.first_byte_delay = 0.6
        first, second = slow_origin.add("/one.bin", DATA), slow_origin.add("/two.bin", DATA)
        node = await lone.add()
        for url in (first, second):
            status, _, body = await lone.get(node, url)
            assert status == 200 and body == DATA
        async with lone.client.get(f"{node.url}/_swarm/requests") as response:
            records = json.loads(await response.read())
    finally:
        await lone.close()
    before, after = records[-2:]
    assert before["transition"] == "T" and before["first_byte_timeout"] == 0.3
    assert before["min_rate"] == 160_000 and before["rate_window"] == 0.5
    if adaptive:
        assert before["trw_source"] == "flags (no history)" and before["switch_verdict"] == "needless"
        # T now lies above the host's first byte (within the bound 4 x 0.3 s): the same origin is not left again.
        assert 0.6 < after["first_byte_timeout"] <= 1.2
        assert after["trw_source"].startswith("adaptive (1 downloads")
        assert after["transition"] is None and after["switch_verdict"] is None
    else:
        assert before["trw_source"] == after["trw_source"] == "flags (--no-adaptive)"
        assert after["first_byte_timeout"] == 0.3 and after["transition"] == "T"
        assert before["switch_verdict"] is None
    assert after["min_rate"] == 160_000 and after["rate_window"] == 0.5
