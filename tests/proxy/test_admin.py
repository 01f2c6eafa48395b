"""The admin API: its shapes, and that only loopback clients get answers."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request

from proxy.server import is_loopback_peer

from .rawhttp import request


async def admin_get(proxy, path: str):
    address = proxy.addresses["proxy"]
    return await request(address, f"GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n".encode())


async def test_status_shape(proxy):
    response = await admin_get(proxy, "/_swarm/status")
    assert response.status == 200 and response.header("Content-Type").startswith("application/json")
    status = json.loads(response.body)
    assert set(status) == {"version", "uptime_s", "listen", "counters", "today", "swarm"}
    assert status["swarm"] is None  # --peer-listen off: no block engine
    assert status["listen"] == {"proxy": proxy.addresses["proxy"]}
    assert status["uptime_s"] >= 0
    assert {"requests", "bytes_sent", "errors", "tunnels", "connections_open", "requests_swarmed", "bytes_peers",
            "bytes_origin"} <= set(status["counters"])
    assert set(status["today"]) == {"date", "since", "requests", "requests_swarmed", "transitions", "bytes_peers"}


async def test_requests_lists_recent_requests_with_swarm_fields(proxy, origin):
    await request(proxy.addresses["proxy"], f"GET {origin.url}/bytes/123 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    records = json.loads((await admin_get(proxy, "/_swarm/requests")).body)
    record = records[-1]
    assert record["method"] == "GET" and record["url"] == f"{origin.url}/bytes/123"
    assert record["status"] == 200 and record["bytes"] == 123 and record["duration_s"] >= 0
    for later in ("transition", "bytes_origin", "bytes_peers", "manifest_source"):
        assert later in record
    assert record["bytes_origin"] == 123 and record["bytes_peers"] == 0
    assert json.loads((await admin_get(proxy, "/_swarm/requests?limit=0")).body) == []


async def test_metrics_are_prometheus_text(proxy, origin):
    await request(proxy.addresses["proxy"], f"GET {origin.url}/bytes/7 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    response = await admin_get(proxy, "/metrics")
    assert response.status == 200 and response.header("Content-Type").startswith("text/plain")
    text = response.body.decode()
    assert 'swarmproxy_requests_total{method="GET",status_class="2xx"} 1.0' in text
    assert 'swarmproxy_response_bytes_total{source="origin"} 7.0' in text


async def test_unknown_admin_path_is_404_listing_the_paths(proxy):
    response = await admin_get(proxy, "/_swarm/nope")
    assert response.status == 404 and b"/_swarm/status" in response.body


@pytest.mark.parametrize("peer", [("203.0.113.9", 5555), ("192.168.1.2", 1), ("::ffff:10.0.0.1", 1, 0, 0)])
async def test_admin_refuses_non_loopback_clients(proxy, peer):
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: peer if name == "peername" else default
    for path in ("/_swarm/status", "/_swarm/requests", "/_swarm/requests/0123456789abcdef", "/metrics"):
        response = await proxy._handle(make_mocked_request("GET", path, transport=transport))
        assert response.status == 403
        assert b"loopback" in response.body


@pytest.mark.parametrize("peer,expected", [
    (("127.0.0.1", 1), True), (("127.8.9.10", 1), True), (("::1", 1, 0, 0), True),
    (("::ffff:127.0.0.1", 1, 0, 0), True), (("10.0.0.1", 1), False), (("::ffff:8.8.8.8", 1, 0, 0), False),
    (None, False), (("not-an-ip", 1), False),
])
def test_is_loopback_peer(peer, expected):
    assert is_loopback_peer(peer) is expected


@pytest.mark.parametrize("method,target", [
    ("GET", "http://127.0.0.1:9/_swarm/status"),  # the admin API through the relay: still refused
    ("GET", "http://10.1.2.3/"),
    ("GET", "http://[::1]:80/"),
    ("CONNECT", "127.0.0.1:443"),
    ("CONNECT", "192.168.0.1:443"),
])
async def test_remote_clients_cannot_reach_internal_addresses(proxy, method, target):
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        ("203.0.113.9", 5555) if name == "peername" else default)
    response = await proxy._handle(make_mocked_request(method, target, transport=transport))
    assert response.status == 403
    assert b"internal address" in response.body


@pytest.mark.parametrize("address,internal", [
    ("127.0.0.1", True), ("10.0.0.8", True), ("172.16.5.4", True), ("192.168.1.1", True), ("169.254.1.1", True),
    ("0.0.0.0", True), ("::1", True), ("fe80::1%eth0", True), ("fc00::1", True), ("::ffff:127.0.0.1", True),
    ("224.0.0.1", True), ("93.184.216.34", False), ("2606:2800:220:1::1", False), ("::ffff:8.8.8.8", False),
])
def test_is_internal(address, internal):
    from proxy.exposure import is_internal

    assert is_internal(address) is internal
