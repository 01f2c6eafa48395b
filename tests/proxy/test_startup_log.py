"""The start-up block names every listener and what is shared (issue 23 §3)."""

from __future__ import annotations

import logging

import pytest

from proxy.server import ProxyServer

from .conftest import proxy_config


def _block(caplog) -> str:
    lines = [r.getMessage() for r in caplog.records if r.name == "swarmproxy" and r.levelno == logging.INFO]
    start = next(i for i, line in enumerate(lines) if line.startswith("swarmproxy listening on"))
    return "\n".join(lines[start:start + 8])


@pytest.mark.asyncio
@pytest.mark.parametrize("flags, shared", [
    ({"linger": "42"}, "shared with peers for 42 s (--linger)"),
    ({"linger": "0"}, "shared with peers until the store evicts them (--linger 0)"),
    ({"no_share": True}, "not shared with peers (--no-share)"),
])
async def test_the_block_names_each_listener_and_what_is_shared(tmp_path, caplog, flags, shared):
    caplog.set_level(logging.INFO, logger="swarmproxy")
    cfg = proxy_config(tmp_path, dht_listen="127.0.0.1:0", peer_listen="127.0.0.1:0", transport="both",
                       store_size="1MiB", **flags)
    server = ProxyServer(cfg)
    addresses = await server.start()
    try:
        block = _block(caplog)
    finally:
        await server.stop()
    assert f"http://{addresses['proxy']}" in block
    assert "/_swarm/status" in block and f"http://{addresses['proxy']}/_swarm/)" in block
    assert f"udp://{addresses['dht']}" in block and "LAN discovery off" in block
    assert f"peers fetch from {addresses['peer']} over TCP and QUIC (UDP)" in block
    assert shared in block
    assert "public network: off (SWARMPROXY_PRIVATE_NETWORK is set" in block  # the suite's guard (tests/conftest.py)
    assert "block store up to 1 MiB (--store-size)" in block and str(tmp_path / "data") in block


@pytest.mark.asyncio
async def test_a_plain_proxy_says_nothing_is_shared(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="swarmproxy")
    server = ProxyServer(proxy_config(tmp_path))
    addresses = await server.start()
    try:
        block = _block(caplog)
    finally:
        await server.stop()
    assert f"http://{addresses['proxy']}" in block
    assert "DHT off" in block and "nothing is shared with peers" in block and "no block store" in block
