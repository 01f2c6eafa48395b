"""What /_swarm/status counts about the swarm: requests swarmed (peers delivered some of the body) and bytes from
peers, since the proxy started and for the current local day; and, end to end, that a download finished from
peers shows in both."""

from __future__ import annotations

import datetime
import hashlib
import json

from proxy.demo.local_swarm import Cluster
from proxy.stats import MAX_EVENTS, Stats

from .rawhttp import request


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def local_noon(date: datetime.date) -> float:
    return datetime.datetime.combine(date, datetime.time(12)).timestamp()


def finish(stats: Stats, *, origin: int = 0, peers: int = 0, transition: str | None = None) -> None:
    record = stats.begin("GET", "http://example.com/f", "127.0.0.1")
    if transition:
        stats.transition(transition)
        record.transition = transition
    record.bytes_origin, record.bytes_peers = origin, peers
    stats.finish(record, 200, origin + peers, 0.5)


def test_swarmed_requests_and_bytes_from_peers_since_start_and_today() -> None:
    day = datetime.date(2026, 3, 14)
    clock = Clock(local_noon(day))
    stats = Stats(10, clock=clock)
    finish(stats, origin=100)
    finish(stats, origin=10, peers=90, transition="R")
    finish(stats, origin=50, transition="T")  # switched, but no peer had it: not swarmed
    counters = stats.snapshot()
    assert (counters["requests"], counters["requests_swarmed"], counters["transitions"]) == (3, 1, 2)
    assert (counters["bytes_origin"], counters["bytes_peers"], counters["bytes_sent"]) == (160, 90, 250)
    assert stats.today() == {"date": "2026-03-14", "since": round(clock.now, 3), "requests": 3,
                             "requests_swarmed": 1, "transitions": 2, "bytes_peers": 90}

    # The next local day starts from zero (asked before any request of that day, too); the totals go on.
    clock.now = local_noon(day + datetime.timedelta(days=1))
    midnight = datetime.datetime.combine(day + datetime.timedelta(days=1), datetime.time()).timestamp()
    assert stats.today() == {"date": "2026-03-15", "since": round(midnight, 3), "requests": 0,
                             "requests_swarmed": 0, "transitions": 0, "bytes_peers": 0}
    finish(stats, peers=7, transition="crowd")
    assert stats.today()["requests_swarmed"] == 1 and stats.today()["bytes_peers"] == 7
    assert stats.snapshot()["requests_swarmed"] == 2 and stats.snapshot()["bytes_peers"] == 97


async def test_status_reports_them(proxy, origin):
    before = datetime.date.today().isoformat()
    await request(proxy.addresses["proxy"], f"GET {origin.url}/bytes/40 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    status = await status_of(proxy)
    assert status["counters"]["requests_swarmed"] == 0 and status["counters"]["bytes_origin"] == 40
    today = status["today"]
    assert today["date"] in (before, datetime.date.today().isoformat())  # (a test run across midnight)
    assert (today["requests"], today["requests_swarmed"], today["bytes_peers"]) == (1, 0, 0)


async def status_of(proxy) -> dict:
    address = proxy.addresses["proxy"]
    return json.loads((await request(address, f"GET /_swarm/status HTTP/1.1\r\nHost: {address}\r\n\r\n"
                                              .encode())).body)


async def test_a_download_finished_from_peers_counts(tmp_path, slow_origin):
    """Three nodes fetch a file from the origin and vouch for it; a fourth, whose origin crawls, switches (R) and
    takes most of it from them: its status says one request swarmed, with those bytes from peers."""
    data = hashlib.sha256(b"stats").digest() * (600_000 // 32)
    cluster = Cluster(tmp_path, first_byte_timeout="0.3", min_rate="160k", rate_window="0.5", discover_size="0")
    try:
        url = slow_origin.add("/f.bin", data)
        for node in await cluster.grow(3):
            assert (await cluster.get(node, url))[2] == data
            assert node.stats.snapshot()["requests_swarmed"] == 0
        slow_origin.set_rate(64_000)
        node = await cluster.add()
        status, _, body = await cluster.get(node, url)
        assert status == 200 and body == data
        peers = cluster.last_record(node)["bytes_peers"]
        assert peers > len(data) // 2
        answer = await status_of(node)
        assert answer["counters"]["requests_swarmed"] == 1 and answer["counters"]["bytes_peers"] == peers
        assert answer["today"]["requests_swarmed"] == 1 and answer["today"]["bytes_peers"] == peers
        assert answer["today"]["transitions"] == 1
        # Split at the swarm fetch's end, nothing left unsplit; the status page's timeline holds each byte once.
        record = cluster.last_record(node)
        assert record["bytes_swarm"] == 0 and record["bytes_origin"] + record["bytes_peers"] == len(data)
        timeline = node.stats.timeline.shown(node.stats.now())["bytes"]
        assert (sum(timeline["origin"]), sum(timeline["peers"])) == (
            sum(r.bytes_origin for r in node.stats.history), sum(r.bytes_peers for r in node.stats.history))
    finally:
        await cluster.close()


def test_the_day_turns_at_local_midnight_and_back_if_the_clock_does() -> None:
    day = datetime.date(2026, 3, 14)
    midnight = datetime.datetime.combine(day + datetime.timedelta(days=1), datetime.time()).timestamp()
    clock = Clock(midnight - 0.001)
    stats = Stats(10, clock=clock)
    finish(stats, origin=1)
    assert (stats.today()["date"], stats.today()["requests"]) == ("2026-03-14", 1)
    clock.now = midnight
    finish(stats, origin=1)
    assert (stats.today()["date"], stats.today()["requests"], stats.today()["since"]) == ("2026-03-15", 1, midnight)
    clock.now = midnight - 0.001  # the clock set back (NTP): that day's counters start again
    assert (stats.today()["date"], stats.today()["requests"]) == ("2026-03-14", 0)


def test_prometheus_counts_requests_by_method_and_status_and_skips_by_reason() -> None:
    stats = Stats(10, clock=Clock(local_noon(datetime.date(2026, 3, 14))))
    for method, status, skipped in (("GET", 200, "private-origin (x)"), ("GET", 200, None), ("GET", 404, None),
                                    ("POST", 200, "method")):
        record = stats.begin(method, "http://example.com/f", "127.0.0.1")
        record.swarm_skipped = skipped
        stats.finish(record, status, 0, 0.01)
    text = stats.prometheus_text().decode()
    for line in ('swarmproxy_requests_total{method="GET",status_class="2xx"} 2.0',
                 'swarmproxy_requests_total{method="GET",status_class="4xx"} 1.0',
                 'swarmproxy_requests_total{method="POST",status_class="2xx"} 1.0',
                 'swarmproxy_swarm_skipped_total{reason="private-origin"} 1.0',
                 'swarmproxy_swarm_skipped_total{reason="method"} 1.0'):
        assert line in text.splitlines(), line


def test_a_records_events_are_stamped_from_its_start_and_bounded() -> None:
    """`events` says what a download decided and why; a long download's later lines are dropped, not its first."""
    record = Stats(history=10).begin("GET", "http://example.com/f", "127.0.0.1")
    record.event(0.5, "lookup: no-record (2 fetching, 0 of them ahead)")
    assert record.events == ["+0.50s lookup: no-record (2 fetching, 0 of them ahead)"]
    for seconds in (1.5, 2.5):  # a poll's unchanged answer: the last line's time and count, not a new line
        record.event(seconds, "lookup: no-record (2 fetching, 0 of them ahead)")
    assert record.events == ["+2.50s lookup: no-record (2 fetching, 0 of them ahead) (x3)"]
    record.events.clear()
    for i in range(2 * MAX_EVENTS):
        record.event(1.0 + i, f"poll {i}")
    assert len(record.events) == MAX_EVENTS and record.events[-1] == "... (more)"
    assert record.events[0] == "+1.00s poll 0" and record.as_json()["events"] == record.events
