"""LAN discovery: the beacon codec and filter, loopback confinement, and two nodes in separate processes finding each
other — on lo (TEST_CONFIG.lan_interface), so no beacon of the suite reaches the machine's real network."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

from dht.lan import _IP_MULTICAST_ALL, BeaconFilter, LanDiscovery, decode_beacon, encode_beacon
from tests.dht.conftest import TEST_CONFIG

ROOT = Path(__file__).resolve().parents[2]


def test_beacon_round_trip_and_rejects():
    beacon = encode_beacon(b"\x01" * 20, 4242)
    assert len(beacon) == 28
    assert decode_beacon(beacon) == (b"\x01" * 20, 4242)
    assert decode_beacon(beacon[:-1]) is None
    assert decode_beacon(b"XPLAN\x01" + beacon[6:]) is None
    assert decode_beacon(beacon[:-2] + b"\x00\x00") is None  # port 0
    assert decode_beacon(b"") is None


def test_beacon_filter():
    beacons = BeaconFilter(own_id=b"\x00" * 20, repeat_ping_after_s=100)
    assert not beacons.should_ping("10.0.0.1", b"\x00" * 20, 1, 0)  # ourselves
    assert beacons.should_ping("10.0.0.1", b"\x01" * 20, 1, 0)
    assert not beacons.should_ping("10.0.0.1", b"\x01" * 20, 1, 1)  # pinged recently
    assert beacons.should_ping("10.0.0.1", b"\x01" * 20, 1, 101)
    # a noisy host inventing ids is rate limited
    results = [beacons.should_ping("10.0.0.9", os.urandom(20), 1, 200) for _ in range(20)]
    assert sum(results) <= 5


def test_the_suite_beacons_on_loopback():
    # Every test that turns discovery on derives its config from TEST_CONFIG (tests/dht/lan_peer.py does).
    assert TEST_CONFIG.lan_interface == "127.0.0.1"
    lan = LanDiscovery(b"\x01" * 20, 4242, None, port=free_udp_port(), interface=TEST_CONFIG.lan_interface)
    sock = lan._open_socket()
    try:
        assert socket.inet_ntoa(sock.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, 4)) == "127.0.0.1"
        assert sock.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL) == 1
        assert sock.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP) == 1
        if sys.platform == "linux":  # only the group joined on lo: not a real LAN's beacons another socket joined
            assert sock.getsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL) == 0
    finally:
        sock.close()


async def test_a_loopback_lan_never_pings_another_host():
    pinged = []

    async def ping(address):
        pinged.append(address)
        return b"\x02" * 20

    lan = LanDiscovery(b"\x01" * 20, 4242, ping, interface="127.0.0.1")
    lan.datagram_received(encode_beacon(b"\x02" * 20, 4000), ("192.0.2.1", 6779))  # heard from a real LAN
    lan.datagram_received(encode_beacon(b"\x03" * 20, 4001), ("127.0.0.5", 6779))
    await asyncio.gather(*lan._pings)
    assert pinged == [("127.0.0.5", 4001)]
    assert lan.counters["dropped_off_link"] == 1
    # the default interface (a user's LAN) pings whoever beacons, as before
    lan = LanDiscovery(b"\x01" * 20, 4242, ping, interface="0.0.0.0")
    lan.datagram_received(encode_beacon(b"\x02" * 20, 4000), ("192.0.2.1", 6779))
    await asyncio.gather(*lan._pings)
    assert pinged[-1] == ("192.0.2.1", 4000)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_two_processes_find_each_other_without_bootstrap():
    group_port = free_udp_port()  # a private group port: other test runs on this host do not interfere
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.dht.lan_peer", str(group_port), cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        hello = [json.loads(await asyncio.wait_for(p.stdout.readline(), 15)) for p in procs]
        assert all(h["lan"] for h in hello), "multicast socket could not be opened"
        found = [json.loads(await asyncio.wait_for(p.stdout.readline(), 25)) for p in procs]
        codes = [await asyncio.wait_for(p.wait(), 10) for p in procs]
        assert codes == [0, 0], [await p.stderr.read() for p in procs]
        assert hello[1]["node_id"] in found[0]["found"]
        assert hello[0]["node_id"] in found[1]["found"]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
