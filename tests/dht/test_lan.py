"""LAN discovery: the beacon codec and filter, and two nodes in separate processes finding each other."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

from dht.lan import BeaconFilter, decode_beacon, encode_beacon

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
