"""The Mainline DHT through the embedded session (`bittorrent.mainline`): a root announced by one node is found by
another, on a DHT of stock libtorrent nodes on this machine that never contacts a public router."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from addresses import LOOPBACK_NETWORKS
from bittorrent.mainline import MainlineDirectory, address_id, root_key
from bittorrent.session import BtSession
from bittorrent.settings import (
    MAINLINE_ROUTERS,
    PRIVATE_NETWORK_ENV,
    bootstrap_routers,
    may_map_ports,
    session_settings,
)

from .stock_dht import stock_dht as stock_dht_nodes


@pytest.fixture
def stock_dht():
    """Stock libtorrent DHT nodes on 127.0.0.1, each told of the others (no router, no public address)."""
    with stock_dht_nodes() as nodes:
        yield nodes


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
    assert not off["enable_upnp"] and not off["enable_natpmp"] and not pack["enable_upnp"]


def test_no_port_mapping_where_the_guard_is_set():
    # UPnP's discovery is a multicast to the LAN, NAT-PMP a datagram to the gateway: neither from a test.
    assert may_map_ports(True, {}) and not may_map_ports(False, {})
    assert not may_map_ports(True, {PRIVATE_NETWORK_ENV: "1"}) and not may_map_ports(True, os.environ)
    mapping = session_settings("127.0.0.1", 0, alert_mask=0, dht_routers=(), port_mapping=True)
    assert mapping["enable_upnp"] and mapping["enable_natpmp"]


async def test_the_table_is_kept_between_runs(stock_dht, tmp_path):
    state = tmp_path / "mainline" / "dht.state"
    first = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS, dht_nodes=stock_dht, state_file=state)
    await first.start()
    async with asyncio.timeout(60):  # it joins: the stock nodes answer it
        while not await first.dht_nodes_now():
            pass
    await first.stop()
    assert state.exists()
    # The next run starts from that table alone: no bootstrap node given, yet it knows the stock nodes.
    again = BtSession("127.0.0.1", 0, reachable=LOOPBACK_NETWORKS, dht_nodes=(), state_file=state)
    await again.start()
    try:
        async with asyncio.timeout(60):
            while not await again.dht_nodes_now():
                pass
    finally:
        await again.stop()


async def test_a_broken_table_starts_a_fresh_one(tmp_path):
    state = tmp_path / "dht.state"
    state.write_bytes(b"not bencoded")
    session = BtSession("127.0.0.1", 0, dht_nodes=(), state_file=state)
    await session.start()  # logged, not fatal
    await session.stop()
    assert state.read_bytes().startswith(b"d")  # and replaced by this run's


def test_a_directory_needs_the_dht():
    from bittorrent.errors import BridgeError

    with pytest.raises(BridgeError, match="without its DHT"):
        MainlineDirectory(BtSession("127.0.0.1", 0))


def test_the_lab_and_the_demo_set_the_guard_for_everything_they_start(monkeypatch):
    import argparse
    import subprocess
    import sys

    from bench import run_as_a_bench
    from proxy.demo.command import run as demo

    # Any `python -m bench.…`; the package imported by anything else (`swarmproxy run` describing the lab's command
    # in its --help) leaves the variable alone: it once kept every installed node off the public network.
    assert run_as_a_bench(["python", "-m", "bench.internet_netns", "--help"])
    assert run_as_a_bench(["python3", "-X", "dev", "-mbench.lab.cli"])
    assert not run_as_a_bench(["python", "-m", "proxy.cli", "run"]) and not run_as_a_bench(["swarmproxy", "run"])
    assert not run_as_a_bench(["python", "-c", "import bench"]) and not run_as_a_bench([])
    clean = {name: value for name, value in os.environ.items() if name != PRIVATE_NETWORK_ENV}
    probe = f"import os, bench, bench.lab.cli; print(os.environ.get({PRIVATE_NETWORK_ENV!r}))"
    answer = subprocess.run([sys.executable, "-c", probe], env=clean, capture_output=True, text=True, check=True)
    assert answer.stdout.strip() == "None"
    from proxy import cli  # `swarmproxy run`'s parser loads every plugin command, the lab's among them

    done = subprocess.run([sys.executable, "-c", "import os, sys, proxy.cli as cli; cli.build_parser(); "
                           f"print(os.environ.get({PRIVATE_NETWORK_ENV!r}))"], env=clean, capture_output=True,
                          text=True, check=True)
    assert "lab" in cli.plugin_commands() and done.stdout.strip() == "None"
    lab = subprocess.run([sys.executable, "-c", "import os, sys, bench.lab.cli as lab\n"
                          "try:\n    lab.main(['--help'])\nexcept SystemExit:\n    pass\n"
                          f"print(os.environ.get({PRIVATE_NETWORK_ENV!r}))"], env=clean, capture_output=True,
                         text=True, check=True)
    assert lab.stdout.strip().endswith("1")  # `swarmproxy lab` sets it before anything starts
    monkeypatch.delenv(PRIVATE_NETWORK_ENV)
    assert demo(argparse.Namespace(size="1", origin_rate="1", peers=0, transport="tcp")) == 2  # (refused args)
    assert os.environ.get(PRIVATE_NETWORK_ENV) == "1"


class HostileNode:
    """A Mainline node on 127.0.0.1 that answers every get_peers with addresses a stranger chose: the intranet, the
    cloud's metadata service, this machine, privileged ports, and one address the user listed."""

    def __init__(self, values: list[tuple[str, int]]) -> None:
        import socket
        import struct
        import threading

        import libtorrent as lt

        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.values = [socket.inet_aton(host) + struct.pack(">H", port) for host, port in values]
        self.running = True
        self.bdecode, self.bencode = lt.bdecode, lt.bencode
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        node_id = os.urandom(20)
        while self.running:
            try:
                data, source = self.socket.recvfrom(4096)
            except TimeoutError:
                continue
            message = self.bdecode(data)
            if not isinstance(message, dict) or message.get(b"y") != b"q":
                continue
            reply = {b"id": node_id, b"nodes": b""}
            if message.get(b"q") == b"get_peers":
                reply.update({b"token": b"tok", b"values": self.values})
            self.socket.sendto(self.bencode({b"t": message[b"t"], b"y": b"r", b"r": reply}), source)

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.socket.close()


async def test_a_lookup_hands_over_no_address_a_stranger_may_not_be_dialled_at():
    """Attack: a DHT node answers a lookup with intranet, metadata-service and loopback addresses and privileged
    ports; our transport would dial them (libtorrent's IP filter guards only its own connections). Only the public
    address and the one in a listed network come through. On the tree before, all seven did."""
    values = [("127.0.0.2", 4000), ("10.1.2.3", 8080), ("169.254.169.254", 8080), ("192.168.1.1", 2222),
              ("0.0.0.0", 4000), ("55.55.1.1", 22), ("55.55.1.1", 4000), ("127.0.9.5", 4000)]
    hostile = HostileNode(values)
    # The hostile node on 127.0.0.1, listed as reachable (else the IP filter keeps the DHT from hearing it at all).
    session = BtSession("127.0.0.1", 0, reachable=("127.0.0.1/32", "127.0.9.0/24"),
                        dht_nodes=(f"127.0.0.1:{hostile.port}",))
    await session.start()
    try:
        async with asyncio.timeout(30):
            while not await session.dht_nodes_now():
                pass
        heard = session.dht_lookup(root_key(bytes(32)))
        async with asyncio.timeout(30):
            answer = await heard.get()
        session.dht_lookup_over(root_key(bytes(32)), heard)
        assert sorted(answer) == [("127.0.9.5", 4000), ("55.55.1.1", 4000)]
    finally:
        await session.stop()
        hostile.close()
