"""The Mainline DHT through the embedded session (`bittorrent.mainline`): a root announced by one node is found by
another, on a DHT of stock libtorrent nodes on this machine that never contacts a public router."""

from __future__ import annotations

import asyncio
import contextlib
import os

import libtorrent as lt
import pytest

from addresses import LOOPBACK_NETWORKS
from bittorrent.mainline import MainlineDirectory, address_id, root_key
from bittorrent.session import BtSession
from bittorrent.settings import MAINLINE_ROUTERS, PRIVATE_NETWORK_ENV, bootstrap_routers, session_settings

STOCK_NODES = 6


@pytest.fixture
def stock_dht():
    """Stock libtorrent DHT nodes on 127.0.0.1, each told of the others (no router, no public address)."""
    sessions = [lt.session({"listen_interfaces": "127.0.0.1:0", "enable_dht": True, "dht_bootstrap_nodes": "",
                            "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False,
                            "alert_mask": int(lt.alert_category.status)}) for _ in range(STOCK_NODES)]
    ports = []
    for session in sessions:  # each binds on its own thread: wait until it says where
        while not (port := session.listen_port()):
            session.wait_for_alert(100)
        ports.append(port)
    for session in sessions:
        for port in ports:
            session.add_dht_node(("127.0.0.1", port))
    yield tuple(f"127.0.0.1:{port}" for port in ports)
    del sessions


async def found(directory: MainlineDirectory, root: bytes, wanted: tuple[str, int]) -> list[tuple[str, int]]:
    """What one lookup finds, up to `wanted` (it listens `LOOKUP_SECONDS` for nothing more)."""
    got = []
    async with contextlib.aclosing(directory.find_providers(root)) as providers:
        async for provider in providers:
            got.append(provider.address)
            if provider.address == wanted:
                break
    return got


async def test_a_root_announced_by_one_node_is_found_by_another(stock_dht, monkeypatch):
    monkeypatch.setattr("bittorrent.mainline.LOOKUP_SECONDS", 1.0)  # a lookup before the announcement lands
    nodes = [BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS, dht_nodes=stock_dht) for _ in range(2)]
    for node in nodes:
        await node.start()
    announcer, finder = (MainlineDirectory(node) for node in nodes)
    try:
        root = os.urandom(32)
        await announcer.announce(root, ("0.0.0.0", 4242))
        async with asyncio.timeout(60):  # the nodes join the DHT, then the announcement lands: ask until it has
            while ("127.0.0.1", 4242) not in (answer := await found(finder, root, ("127.0.0.1", 4242))):
                assert answer == []  # nothing but what was announced
        assert answer == [("127.0.0.1", 4242)]
        assert finder.status()["providers_found"] >= 1 and announcer.status()["announced"] == 1
        await announcer.withdraw(root)  # no more announcements (what the DHT holds expires on its own)
        assert announcer.status()["announced"] == 0
    finally:
        announcer.close()
        for node in nodes:
            await node.stop()


def test_keys_and_names():
    root = bytes(range(32))
    assert len(root_key(root)) == 20 and root_key(root) != root[:20]  # ours: a stock client never asks it
    assert root_key(root) != root_key(bytes(32))
    assert address_id("127.0.0.1", 1) != address_id("127.0.0.1", 2)


def test_no_public_router_where_the_guard_is_set():
    assert bootstrap_routers(True, {}) == MAINLINE_ROUTERS  # the Internet mode, on a user's machine
    assert bootstrap_routers(False, {}) == ()
    assert bootstrap_routers(True, {PRIVATE_NETWORK_ENV: "1"}) == ()
    assert PRIVATE_NETWORK_ENV in os.environ  # the suite sets it (tests/conftest.py), for every process it starts
    assert bootstrap_routers(True, os.environ) == ()
    pack = session_settings("127.0.0.1", 0, alert_mask=0, dht_routers=())  # the DHT on, no router at all
    assert pack["enable_dht"] and pack["dht_bootstrap_nodes"] == ""
    off = session_settings("127.0.0.1", 0, alert_mask=0)
    assert not off["enable_dht"] and off["dht_bootstrap_nodes"] == ""


def test_a_directory_needs_the_dht():
    from bittorrent.errors import BridgeError

    with pytest.raises(BridgeError, match="without its DHT"):
        MainlineDirectory(BtSession("127.0.0.1", 0))


def test_the_lab_and_the_demo_set_the_guard_for_everything_they_start(monkeypatch):
    import argparse
    import subprocess
    import sys

    from proxy.demo.command import run as demo

    clean = {name: value for name, value in os.environ.items() if name != PRIVATE_NETWORK_ENV}
    probe = f"import os, bench; print(os.environ.get({PRIVATE_NETWORK_ENV!r}))"
    answer = subprocess.run([sys.executable, "-c", probe], env=clean, capture_output=True, text=True, check=True)
    assert answer.stdout.strip() == "1"  # any `python -m bench.…`
    monkeypatch.delenv(PRIVATE_NETWORK_ENV)
    assert demo(argparse.Namespace(size="1", origin_rate="1", peers=0, transport="tcp")) == 2  # (refused args)
    assert os.environ.get(PRIVATE_NETWORK_ENV) == "1"
