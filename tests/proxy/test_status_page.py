"""The status page's server side (issue 41): its files and headers, that the admin API's rules guard it, and the
cores behind its live data (`proxy.timeline`, `proxy.peer_rates`) stepped with a fake clock. The page itself, in
real browsers, is tests/extension/test_status_page.py."""

from __future__ import annotations

import dataclasses
import json
import re
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request

from proxy.peer_rates import MAX_SAMPLES, PeerRates, Rates, totals
from proxy.stats import Stats
from proxy.status_page import CSP, FILES, StatusPage
from proxy.timeline import MAX_CAUSES, OTHER, Timeline
from swarm.net.transport import ConnectionCounters
from swarm.service.node import Link

from .rawhttp import RawConnection, request

PAGE_FILES = ["/_swarm/", "/_swarm", *(f"/_swarm/ui/{name}" for name in FILES)]
EXACT_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
             "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


async def get(proxy, path: str, *fields: str, method: str = "GET"):
    address = proxy.addresses["proxy"]
    head = "".join(f"{f}\r\n" for f in (f"Host: {address}", *fields))
    return await request(address, f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode())


@pytest.mark.parametrize("path", PAGE_FILES)
async def test_every_file_of_the_page_carries_the_strict_headers(proxy, path):
    response = await get(proxy, path)
    assert response.status == 200, response.body
    assert response.header("Content-Security-Policy") == EXACT_CSP == CSP
    assert response.header("X-Content-Type-Options") == "nosniff"
    assert response.header("X-Frame-Options") == "DENY"
    assert response.header("Referrer-Policy") == "no-referrer"
    assert response.header("Cache-Control") == "no-store"
    name = path.rsplit("/", 1)[1] or "index.html"
    expected = FILES.get(name, FILES["index.html"])
    assert response.header("Content-Type") == expected
    assert response.header("Server") is None and response.header("Access-Control-Allow-Origin") is None
    if expected.startswith("text/html"):
        page = response.body.decode()
        # No inline script, style or handler: the policy would block them, and the page must not need them.
        assert not re.search(r"<script(?![^>]*\ssrc=)|<style|\sstyle\s*=|\son[a-z]+\s*=", page, re.I)
        assert '<script type="module" src="/_swarm/ui/status.js"></script>' in page


@pytest.mark.parametrize("name", [name for name in FILES if name.endswith(".js")])
def test_the_scripts_never_write_markup_nor_make_links(name):
    """A guard beside the browser tests: what the page shows goes in as text. No HTML parser is reached from its
    scripts (innerHTML and kin), no string is run as code, and no element gets a URL (a stranger's `javascript:`)."""
    from proxy.status_page import ui_file

    script = ui_file(name).decode()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(",
                 "setAttribute", ".href", ".src", "srcdoc", "location"):
        assert sink not in script, (name, sink)


async def test_the_data_endpoints_are_json_under_the_same_headers(proxy, origin):
    await request(proxy.addresses["proxy"], f"GET {origin.url}/bytes/50 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    for path in ("/_swarm/timeline", "/_swarm/peers"):
        response = await get(proxy, path)
        assert response.status == 200 and response.header("Content-Type") == "application/json"
        assert response.header("X-Content-Type-Options") == "nosniff"
        assert response.header("Content-Security-Policy") == CSP
    timeline = json.loads((await get(proxy, "/_swarm/timeline")).body)
    assert timeline["bucket_s"] == 10 and len(timeline["bytes"]["origin"]) == 360
    assert sum(timeline["bytes"]["origin"]) == 50 and timeline["under_way"] == 0
    peers = json.loads((await get(proxy, "/_swarm/peers")).body)
    assert peers == {"engine": False, "connections": 0, "peers": [], "rate_up": None, "rate_down": None,
                     "bittorrent": None}  # --peer-listen off


async def test_head_answers_the_fields_without_a_body_and_nothing_acts(proxy):
    address = proxy.addresses["proxy"]
    connection = await RawConnection.open(address)
    try:
        await connection.send(f"HEAD /_swarm/ HTTP/1.1\r\nHost: {address}\r\n\r\n".encode())
        head = await connection.response(head_request=True)
    finally:
        await connection.close()
    assert head.status == 200 and head.body == b"" and head.header("Content-Security-Policy") == CSP
    for method in ("POST", "PUT", "DELETE"):
        for path in ("/_swarm/", "/_swarm/ui/status.js", "/_swarm/timeline", "/_swarm/peers"):
            response = await get(proxy, path, "Content-Length: 0", method=method)
            assert response.status == 405, (method, path)


@pytest.mark.parametrize("path", ["/_swarm/ui/", "/_swarm/ui/nope.js", "/_swarm/ui/../admin.py",
                                  "/_swarm/ui/%2e%2e/admin.py", "/_swarm/ui/ui/status.js", "/_swarm/ui/STATUS.JS"])
async def test_only_the_listed_files_are_served(proxy, path):
    response = await get(proxy, path)
    assert response.status == 404 and b"import" not in response.body


@pytest.mark.parametrize("path", ["/_swarm/", "/_swarm/ui/status.js", "/_swarm/timeline", "/_swarm/peers"])
@pytest.mark.parametrize("fields,status", [
    (("Sec-Fetch-Site: cross-site",), 403), (("Sec-Fetch-Site: same-site",), 403),
    (("Origin: http://evil.example",), 403), (("Origin: null",), 403),
    (("Via: 1.1 other-proxy",), 403),
])
async def test_the_admin_rules_guard_the_page(proxy, path, fields, status):
    response = await get(proxy, path, *fields)
    assert response.status == status and b"script" not in response.body


@pytest.mark.parametrize("path", ["/_swarm/", "/_swarm/ui/status.js", "/_swarm/timeline", "/_swarm/peers"])
async def test_a_rebound_name_is_refused_and_the_pages_own_requests_are_served(proxy, path):
    address = proxy.addresses["proxy"]
    port = address.rsplit(":", 1)[1]
    rebound = await request(address, f"GET {path} HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n".encode())
    assert rebound.status == 421
    # What the page's own fetches and module script send (Chromium and Firefox): served.
    own = await get(proxy, path, f"Origin: http://{address}", "Sec-Fetch-Site: same-origin")
    assert own.status == 200
    typed = await get(proxy, path, "Sec-Fetch-Site: none", "Sec-Fetch-Mode: navigate")
    assert typed.status == 200


@pytest.mark.parametrize("peer", [("203.0.113.9", 5555), ("::ffff:10.0.0.1", 1, 0, 0)])
async def test_the_page_answers_loopback_clients_only(proxy, peer):
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: peer if name == "peername" else default
    for path in ("/_swarm/", "/_swarm/ui/status.js", "/_swarm/timeline", "/_swarm/peers"):
        response = await proxy._handle(make_mocked_request("GET", path, transport=transport))
        assert response.status == 403 and b"loopback" in response.body


async def test_requests_newest_first_limited_and_under_way(proxy):
    records = [proxy.stats.begin("GET", f"http://example.com/{i}", "127.0.0.1") for i in range(5)]
    for record in records[:3]:
        proxy.stats.finish(record, 200, 0, 0.1)
    newest = json.loads((await get(proxy, "/_swarm/requests?order=newest&limit=2")).body)
    assert [r["url"] for r in newest] == ["http://example.com/4", "http://example.com/3"]
    oldest_first = json.loads((await get(proxy, "/_swarm/requests?limit=2")).body)
    assert [r["url"] for r in oldest_first] == ["http://example.com/3", "http://example.com/4"]
    under_way = json.loads((await get(proxy, "/_swarm/requests?under_way=1&order=newest")).body)
    assert [r["url"] for r in under_way] == ["http://example.com/4", "http://example.com/3"]
    assert all(r["duration_s"] is None for r in under_way)


# -- the timeline core ------------------------------------------------------------------------------------------------

T0 = 1_800_000_000.0  # a multiple of 10 s


def test_timeline_buckets_bytes_and_transitions_by_time():
    timeline = Timeline(bucket_s=10, span_s=60)
    timeline.add_bytes("origin", 100, T0 + 1)
    timeline.add_bytes("origin", 50, T0 + 9.99)
    timeline.add_bytes("peers", 70, T0 + 10)
    timeline.add_bytes("bittorrent", 0, T0 + 10)  # nothing: no bucket needed
    timeline.add_transition("T", T0 + 12)
    timeline.add_transition("T", T0 + 31)
    timeline.add_transition("crowd", T0 + 31)
    shown = timeline.shown(T0 + 35)
    assert shown["start"] == T0 + 30 - 50 and shown["bucket_s"] == 10 and shown["span_s"] == 60
    assert shown["bytes"] == {"origin": [0, 0, 150, 0, 0, 0], "peers": [0, 0, 0, 70, 0, 0],
                              "bittorrent": [0] * 6}
    assert shown["transitions"] == {"T": [0, 0, 0, 1, 0, 1], "crowd": [0, 0, 0, 0, 0, 1]}


@pytest.mark.parametrize("later,origin", [
    (0, [0, 0, 0, 0, 0, 5]),
    (50, [5, 0, 0, 0, 0, 0]),  # the first bucket is the oldest still in the hour
    (60, [0] * 6),  # an hour (here a minute) later, gone
    (10_000, [0] * 6),
])
def test_timeline_forgets_what_is_older_than_its_span(later, origin):
    timeline = Timeline(bucket_s=10, span_s=60)
    timeline.add_bytes("origin", 5, T0)
    for step in range(0, later, 10):  # traffic all along keeps the ring at its bound
        timeline.add_bytes("peers", 1, T0 + 10 + step)
    assert timeline.shown(T0 + later)["bytes"]["origin"] == origin
    assert len(timeline._buckets) <= 6


def test_timeline_clock_going_back_counts_in_the_newest_bucket():
    timeline = Timeline(bucket_s=10, span_s=60)
    timeline.add_bytes("origin", 1, T0 + 20)
    timeline.add_bytes("origin", 2, T0 + 5)  # NTP stepped the clock back
    assert timeline.shown(T0 + 20)["bytes"]["origin"] == [0, 0, 0, 0, 0, 3]


def test_timeline_bounds_its_causes_and_refuses_unknown_sources():
    timeline = Timeline()
    for i in range(MAX_CAUSES + 5):
        timeline.add_transition(f"cause{i}", T0)
    causes = timeline.shown(T0)["transitions"]
    assert len(causes) == MAX_CAUSES + 1 and causes[OTHER][-1] == 5
    with pytest.raises(ValueError):
        timeline.add_bytes("cache", 1, T0)
    with pytest.raises(ValueError):
        Timeline(bucket_s=0)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_stats_samples_downloads_under_way_into_the_timeline():
    clock = Clock(T0)
    stats = Stats(10, clock=clock)
    record = stats.begin("GET", "http://example.com/f", "127.0.0.1")
    assert stats.under_way() == [record]
    record.bytes_origin = 1000
    stats.sample()
    clock.now = T0 + 10
    record.bytes_origin, record.bytes_peers = 1500, 4000
    stats.sample()
    stats.sample()  # nothing new: nothing counted twice
    stats.transition("R")
    clock.now = T0 + 20
    record.bytes_peers = 5000
    stats.finish(record, 200, 6500, 20.0)  # the rest, at its end
    assert stats.under_way() == []
    shown = stats.timeline.shown(T0 + 20)
    assert shown["bytes"]["origin"][-3:] == [1000, 500, 0]
    assert shown["bytes"]["peers"][-3:] == [0, 4000, 1000]
    assert shown["transitions"] == {"R": [0] * 357 + [0, 1, 0]}


def test_swarm_bytes_count_as_peers_until_their_split_and_every_byte_once():
    clock = Clock(T0)
    stats = Stats(10, clock=clock)
    record = stats.begin("GET", "http://example.com/f", "127.0.0.1")
    record.bytes_origin, record.bytes_swarm = 500, 3000  # the block engine delivered 3000, not split yet
    stats.sample()
    clock.now = T0 + 10
    # Its fetch stops: 2000 came from peers, 1000 from the origin's Range answers (`Account`).
    record.bytes_origin, record.bytes_peers, record.bytes_swarm = 1500, 2000, 0
    stats.sample()
    stats.finish(record, 200, 3500, 10.0)
    shown = stats.timeline.shown(T0 + 10)
    assert shown["bytes"]["peers"][-2:] == [3000, 0] and shown["bytes"]["origin"][-2:] == [500, 0]
    assert sum(shown["bytes"]["peers"]) + sum(shown["bytes"]["origin"]) == record.bytes  # each byte once


# -- peer rates ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("samples,expected", [
    # (now, sent, received) per call; the rates the last call answers
    ([(0, 0, 0)], Rates(None, None)),  # one sample: no rate yet
    ([(0, 0, 0), (1, 100, 1000)], Rates(100, 1000)),
    ([(0, 0, 0), (1, 100, 1000), (1, 200, 1000)], Rates(100, 1000)),  # the same instant: not a new sample
    ([(0, 0, 0), (2, 100, 0), (4, 300, 0), (6, 600, 0), (8, 1000, 0)], Rates(150, 0)),
    ([(0, 500, 500), (1, 0, 0), (2, 10, 20)], Rates(10, 20)),  # counters went back: a new connection, anew
])
def test_peer_rates_over_the_window(samples, expected):
    rates = PeerRates(window=5.0)
    answer = None
    for now, sent, received in samples:
        answer = rates.update({"a": (sent, received)}, now)
    assert answer is not None and answer["a"] == expected


def test_peer_rates_forget_closed_connections_and_stay_bounded():
    rates = PeerRates(window=1000.0)
    for now in range(100):
        rates.update({"a": (now, now), "b": (2 * now, 0)}, float(now))
    assert all(len(s) <= MAX_SAMPLES for s in rates._samples.values())
    assert set(rates.update({"b": (500, 0)}, 200.0)) == {"b"} and set(rates._samples) == {"b"}
    assert totals([Rates(1, 2), Rates(None, None), Rates(3, 4)]) == Rates(4, 6)
    assert totals([Rates(None, None)]) == Rates(None, None)


@dataclasses.dataclass
class FakeEngine:
    shown: list[tuple[str, Link]]

    def links(self) -> list[tuple[str, Link]]:
        return self.shown


async def test_peers_lists_each_connection_with_its_rates():
    serving, fetching = ConnectionCounters(), ConnectionCounters()
    links = [("tcp", Link(("10.0.0.2", 7000), b"\x01" * 32, b"\xab" * 32, True, serving)),
             ("quic", Link(("2001:db8::5", 7001), None, None, False, fetching))]
    clock = Clock(100.0)
    page = StatusPage(Stats(10), lambda: FakeEngine(links), lambda: None, clock=clock)
    first = json.loads((await page.peers(make_mocked_request("GET", "/_swarm/peers"))).body)
    assert first["connections"] == 2 and first["rate_up"] is None
    serving.bytes_sent, fetching.bytes_received = 20_000, 3_000
    clock.now = 102.0
    second = json.loads((await page.peers(make_mocked_request("GET", "/_swarm/peers"))).body)
    assert second["rate_up"] == 10_000 and second["rate_down"] == 1_500
    assert second["peers"] == [
        {"transport": "tcp", "address": "10.0.0.2:7000", "direction": "serving", "node": "01" * 8,
         "root": "ab" * 8, "bytes_up": 20_000, "bytes_down": 0, "rate_up": 10_000, "rate_down": 0},
        {"transport": "quic", "address": "[2001:db8::5]:7001", "direction": "fetching", "node": None, "root": None,
         "bytes_up": 0, "bytes_down": 3_000, "rate_up": 0, "rate_down": 1_500},
    ]
