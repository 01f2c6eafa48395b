"""The test internet's address plan (`bench/internet_plan.py`): public to every judge of an address, and a namespace
addressed from it has no route off the machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import libtorrent as lt
import pytest

import addresses
from bench.internet_plan import HOME, LIBTORRENT_DARK_INTERNET, PUBLIC, segment
from bittorrent.settings import session_settings
from proxy.exposure import may_share


@pytest.mark.parametrize("host", [str(segment(0)[1]), str(segment(17)[200]), str(segment(255)[254])])
def test_the_public_segment_is_public_to_our_rules(host):
    assert addresses.is_public(host)
    assert may_share(host, 6881, ())  # the security rule: shared, announced, dialled with nothing listed
    assert addresses.network_prefix(host).endswith("/24")  # one network per /24, as on the internet


def test_libtorrent_hears_the_public_segment():
    """libtorrent's DHT drops every message from its "dark internet" unless told not to, and our session does not."""
    assert PUBLIC.network_address.packed[0] not in LIBTORRENT_DARK_INTERNET
    assert lt.default_settings()["dht_ignore_dark_internet"] is True
    assert "dht_ignore_dark_internet" not in session_settings("0.0.0.0", 0, alert_mask=0, dht_routers=())


def test_homes_are_private_and_segments_are_disjoint():
    assert not addresses.is_public(str(HOME[1]))
    assert segment(1).network_address == segment(0).broadcast_address + 1 and segment(255).subnet_of(PUBLIC)
    with pytest.raises(ValueError):
        segment(256)


def _ip(netns: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", netns, "ip", *args], capture_output=True, text=True, timeout=30)


def test_a_namespace_of_the_plan_has_no_route_off_the_machine():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2: it makes a network namespace")
    netns = f"sp-plan-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", netns], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace: {made.stderr.strip()}")
    try:
        inside, outside = "pl0", "pl1"
        assert _ip(netns, "link", "add", inside, "type", "veth", "peer", "name", outside).returncode == 0
        address = segment(3)[10]
        assert _ip(netns, "addr", "add", f"{address}/24", "dev", inside).returncode == 0
        for link in ("lo", inside, outside):
            assert _ip(netns, "link", "set", link, "up").returncode == 0
        assert _ip(netns, "route", "get", str(segment(3)[20])).returncode == 0  # its own segment: a route
        for far in ("1.1.1.1", str(segment(4)[1]), "192.168.1.1"):  # the internet, another segment, a home
            lookup = _ip(netns, "route", "get", far)
            assert lookup.returncode != 0 and "unreachable" in lookup.stderr, (far, lookup.stdout)
    finally:
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)
