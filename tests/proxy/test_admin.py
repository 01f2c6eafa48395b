"""The admin API: its shapes, that only loopback clients get answers, and never a browser's request on behalf of a
web page (issue 35: `<img src="http://127.0.0.1:PORT/_swarm/fetch?url=...">` on a page made the proxy fetch)."""

from __future__ import annotations

import json
from unittest import mock
from urllib.parse import quote

import pytest
from aiohttp.test_utils import make_mocked_request

from proxy import edge
from proxy.server import is_loopback_peer

from .rawhttp import request


async def admin_get(proxy, path: str):
    address = proxy.addresses["proxy"]
    return await request(address, f"GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n".encode())


async def test_status_shape(proxy):
    response = await admin_get(proxy, "/_swarm/status")
    assert response.status == 200 and response.header("Content-Type").startswith("application/json")
    status = json.loads(response.body)
    assert set(status) == {"version", "uptime_s", "listen", "counters", "today", "swarm", "bittorrent", "network"}
    assert status["network"] == {"mainline": False, "public": False,
                                 "why_off": "--peer-listen off: nothing to share or find"}
    assert status["bittorrent"] is None  # --bt-listen off
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


# What a browser may send: Origin, Sec-Fetch-Site, and whether the extension's own field (edge.CLIENT_FIELD) came.
H = "127.0.0.1:8080"


@pytest.mark.parametrize("host,origins,sites,client,refused", [
    (H, [], [], False, None),  # curl, swarmproxy get, any program: neither field
    (H, [], ["none"], False, None),  # an address typed or a bookmark; Chromium: the extension's fetch
    (H, [], ["same-origin"], False, None),  # Firefox: the extension's fetch
    (H, [], ["NONE "], False, None),
    (H, [], ["cross-site"], False, "a page of another site (Sec-Fetch-Site: cross-site)"),
    (H, [], ["same-site"], False, "a page on another port or name of this machine (Sec-Fetch-Site: same-site)"),
    (H, [], ["some-future-value"], False, "a web page (Sec-Fetch-Site: some-future-value)"),
    (H, [], ["none", "cross-site"], False, "a page of another site (Sec-Fetch-Site: cross-site)"),
    (H, [], ["cross-site"], True, None),  # Chromium: the extension's downloads.download, which sends the field
    (H, [], ["same-site"], True, None),
    (H, ["http://localhost:1234"], ["cross-site"], True, "a page of 'http://localhost:1234' (its Origin)"),
    (H, ["http://evil.example"], [], False, "a page of 'http://evil.example' (its Origin)"),
    (H, ["https://127.0.0.1:8080"], [], False, "a page of 'https://127.0.0.1:8080' (its Origin)"),
    (H, ["http://127.0.0.1:8081"], [], False, "a page of 'http://127.0.0.1:8081' (its Origin)"),
    (H, ["http://localhost:8080"], [], False, "a page of 'http://localhost:8080' (its Origin)"),  # not this name
    (H, ["http://127.0.0.1:8080/"], [], False, "a page of 'http://127.0.0.1:8080/' (its Origin)"),
    (H, ["http://127.0.0.1:8080"], ["same-origin"], False, None),  # a document the proxy served, at this address
    (H, ["HTTP://127.0.0.1:8080"], [], False, None),
    ("[::1]:8080", ["http://[::1]:8080"], [], False, None),
    ("localhost", ["http://LOCALHOST:80"], [], False, None),
    ("localhost:80", ["http://localhost"], [], False, None),
    (None, ["http://127.0.0.1:8080"], [], False, "a page of 'http://127.0.0.1:8080' (its Origin)"),
    (H, ["http://127.0.0.1:8080", "http://evil.example"], [], False, "a page of 'http://evil.example' (its Origin)"),
    (H, ["chrome-extension://abcdefghijklmnopabcdefghijklmnop"], ["none"], False, None),
    (H, ["moz-extension://6c2d1f0e-5a7b-4c3d-9e8f-0a1b2c3d4e5f"], ["same-origin"], False, None),
    (H, ["chrome-extension://"], [], False, "a page of 'chrome-extension://' (its Origin)"),
    (H, ["chrome-extension://abc/page"], [], False, "a page of 'chrome-extension://abc/page' (its Origin)"),
    # An extension without host permission for this address: its requests are CORS requests, marked cross-site.
    (H, ["chrome-extension://abcdefghijklmnopabcdefghijklmnop"], ["cross-site"], False,
     "a page of another site (Sec-Fetch-Site: cross-site)"),
    (H, ["null"], [], False, "a document without an origin of its own (Origin: null: a sandboxed frame, a data: or "
                             "file: page, or a redirect from another site)"),
    (H, ["null"], ["none"], True, "a document without an origin of its own (Origin: null: a sandboxed frame, a "
                                  "data: or file: page, or a redirect from another site)"),
])
def test_cross_site_refusal(host, origins, sites, client, refused):
    assert edge.cross_site_refusal(host, origins, sites, client) == refused


# What Chromium 156 and Firefox ESR 153 sent to /_swarm/fetch (tests/extension/test_cross_site.py runs the pages;
# bench/attacks/cross_site.py lists the same shapes), OWN standing for the proxy's own origin. Sec-Fetch-Mode and
# -Dest are kept as sent: the rule does not look at them.
BROWSER_SHAPES = {
    "chromium img, a page of another site": (
        "GET", False, ["Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors", "Sec-Fetch-Dest: image",
                       "Referer: http://localhost:5555/"]),
    "firefox img, a page on another port of 127.0.0.1": (
        "GET", False, ["Referer: http://127.0.0.1:5555/", "Sec-Fetch-Dest: image", "Sec-Fetch-Mode: no-cors",
                       "Sec-Fetch-Site: same-site"]),
    "chromium fetch no-cors": ("GET", False, ["Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors",
                                              "Sec-Fetch-Dest: empty"]),
    "chromium fetch cors": ("GET", False, ["Origin: http://localhost:5555", "Sec-Fetch-Site: cross-site",
                                           "Sec-Fetch-Mode: cors", "Sec-Fetch-Dest: empty"]),
    "cors preflight for the extension's field": (
        "OPTIONS", False, ["Origin: http://localhost:5555", "Access-Control-Request-Method: GET",
                           "Access-Control-Request-Headers: swarm-client", "Sec-Fetch-Site: cross-site",
                           "Sec-Fetch-Mode: cors", "Sec-Fetch-Dest: empty"]),
    "firefox form GET into a frame": ("GET", False, ["Sec-Fetch-Dest: iframe", "Sec-Fetch-Mode: navigate",
                                                     "Sec-Fetch-Site: cross-site"]),
    "chromium form POST": ("POST", False, ["Origin: http://localhost:5555", "Sec-Fetch-Site: cross-site",
                                           "Sec-Fetch-Mode: navigate", "Sec-Fetch-Dest: iframe"]),
    "chromium <a download> without referrer": ("GET", False, ["Sec-Fetch-Site: cross-site",
                                                              "Sec-Fetch-Mode: navigate", "Sec-Fetch-Dest: document"]),
    "firefox navigation by a page": ("GET", False, ["Referer: http://localhost:5555/", "Sec-Fetch-Dest: document",
                                                    "Sec-Fetch-Mode: navigate", "Sec-Fetch-Site: cross-site"]),
    "sandboxed frame": ("GET", False, ["Origin: null", "Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: cors"]),
    "chromium extension download without its field": ("GET", False, ["Sec-Fetch-Site: cross-site",
                                                                     "Sec-Fetch-Mode: navigate",
                                                                     "Sec-Fetch-Dest: empty"]),
    "curl, swarmproxy get": ("GET", True, ["User-Agent: curl/8.5.0", "Accept: */*"]),
    "chromium address typed by the user": ("GET", True, ["Sec-Fetch-Site: none", "Sec-Fetch-Mode: navigate",
                                                         "Sec-Fetch-User: ?1", "Sec-Fetch-Dest: document"]),
    "firefox address typed by the user": ("GET", True, ["Sec-Fetch-Dest: document", "Sec-Fetch-Mode: navigate",
                                                        "Sec-Fetch-Site: none", "Sec-Fetch-User: ?1"]),
    "chromium extension fetch": ("GET", True, ["Sec-Fetch-Site: none", "Sec-Fetch-Mode: cors",
                                               "Sec-Fetch-Dest: empty"]),
    "firefox extension fetch": ("GET", True, ["Sec-Fetch-Dest: empty", "Sec-Fetch-Mode: cors",
                                              "Sec-Fetch-Site: same-origin"]),
    "chromium extension download": ("GET", True, ["Swarm-Client: extension", "Sec-Fetch-Site: cross-site",
                                                  "Sec-Fetch-Mode: navigate", "Sec-Fetch-Dest: empty"]),
    "firefox extension download": ("GET", True, ["Swarm-Client: extension", "Sec-Fetch-Dest: empty",
                                                 "Sec-Fetch-Mode: no-cors", "Sec-Fetch-Site: none"]),
    "a page of the proxy's own origin": ("GET", True, ["Origin: OWN", "Sec-Fetch-Site: same-origin",
                                                       "Sec-Fetch-Mode: cors"]),
}


@pytest.mark.parametrize("shape", list(BROWSER_SHAPES))
async def test_the_explicit_fetch_refuses_what_a_browser_sends_for_a_page(proxy, origin, shape):
    """The proxy does not fetch the URL (the origin sees nothing) for a page's request; it does for the user's
    own tools, the address bar and the extension."""
    method, fetched, fields = BROWSER_SHAPES[shape]
    address = proxy.addresses["proxy"]
    head = "".join(f"{field.replace('OWN', f'http://{address}')}\r\n" for field in [f"Host: {address}", *fields])
    key = f"shape{list(BROWSER_SHAPES).index(shape)}"
    url = quote(f"{origin.url}/echo?{key}", safe="")
    response = await request(address, f"{method} /_swarm/fetch?url={url} HTTP/1.1\r\n{head}"
                                      f"Content-Length: 0\r\n\r\n".encode())
    hits = [r for r in origin.requests if r["path"].endswith(f"?{key}")]
    if fetched:
        assert response.status == 200 and len(hits) == 1, (response.status, response.body)
    else:
        assert response.status == 403 and hits == [], (response.status, response.body)
        assert response.header("Content-Type").startswith("text/plain")
        assert response.body.startswith(b"403 Forbidden: swarmproxy's admin API") and b"web page" in response.body
        assert not response.header("Access-Control-Allow-Origin")


@pytest.mark.parametrize("path", ["/_swarm/status", "/_swarm/requests", "/_swarm/requests/0123456789abcdef",
                                  "/_swarm/dht", "/_swarm/dht/providers/" + "ab" * 32, "/metrics",
                                  "/_swarm/fetch?url=http%3A%2F%2F127.0.0.1%3A9%2F", "/_swarm/nope", "/favicon.ico"])
@pytest.mark.parametrize("fields", [("Sec-Fetch-Site: cross-site",), ("Sec-Fetch-Site: same-site",),
                                    ("Origin: http://localhost:5555",), ("Origin: null",)])
async def test_every_admin_path_refuses_a_pages_request(proxy, path, fields, caplog):
    address = proxy.addresses["proxy"]
    head = "".join(f"{field}\r\n" for field in (f"Host: {address}", *fields))
    response = await request(address, f"GET {path} HTTP/1.1\r\n{head}\r\n".encode())
    assert response.status == 403 and b"never a request a browser makes for a web page" in response.body
    assert b"0123456789abcdef" not in response.body and b"swarmproxy_" not in response.body
    # Logged once, the path without its query (the URL a page chose).
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused GET ")]
    assert logged == [f"refused GET {path.partition('?')[0]}: a browser's request for a web page, made by "
                      + edge.cross_site_refusal(address, [f[8:] for f in fields if f.startswith("Origin")],
                                                [f[16:] for f in fields if f.startswith("Sec-Fetch-Site")],
                                                False)]
