"""What the proxy has done: counters, the recent-request history, Prometheus metrics, the access log.

One `Stats` per server (its own Prometheus registry), so several proxies in one test process do not
share counters.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import logging
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

import prometheus_client as prom

from swarm.service.report import FetchReport

from .publish_gate import redact_url
from .timeline import SOURCES, Timeline

access_log = logging.getLogger("swarmproxy.access")


MAX_EVENTS = 40
# Requests under way the status page follows (`Stats.under_way`): far above --max-connections' default.
MAX_LIVE = 10_000
_REPEATED = re.compile(r"\+[0-9.]+s (?P<text>.*?)(?: \(x(?P<count>[0-9]+)\))?", re.DOTALL)


@dataclasses.dataclass
class RequestRecord:
    """One line of /_swarm/requests. Fields after `error` are filled in by the swarm fallback."""

    method: str
    url: str
    client: str
    started: float  # wall clock, seconds since the epoch
    status: int | None = None
    bytes: int = 0
    duration_s: float | None = None
    error: str | None = None
    transition: str | None = None
    bytes_origin: int = 0
    bytes_peers: int = 0  # from our peers (the swarmproxy protocol)
    bytes_bittorrent: int = 0  # from BitTorrent peers (`swarmproxy get magnet:`, proxy.torrent_fetch)
    # What the block engine delivered to the client and is not split yet into bytes_peers and bytes_origin (its
    # Range requests to the origin): the split is known when its fetch stops (`Account`; `download.ledger`), and
    # this is 0 again then. The status page shows a download under way with it.
    bytes_swarm: int = 0
    manifest_source: str | None = None
    peers: list[str] = dataclasses.field(default_factory=list)
    # Why the swarm part gave up (`swarm_failed: ...`, `manifest_mismatch: ...`) while the origin went on: the
    # response may still be complete, so this is not an `error` unless the client was cut off too.
    swarm_error: str | None = None
    # Why peers were not used for this GET when they could have helped: the publish gate's reason (`private`,
    # `no-validator`, ...) or, after a switch, why no lookup found a usable manifest (`below-quorum (1
    # publisher)`, `no-record`, `no-provider`, `dht-off`, ...). None when the swarm was used or not needed.
    swarm_skipped: str | None = None
    # A download taken segment by segment (`manifest_source` "segments"): where each segment came from, in order
    # (`peers` once a quorum vouched for it, `origin` by Range when nobody else had it in time).
    segments: list[str] = dataclasses.field(default_factory=list)
    # The T, R and W this GET was watched with: the flags, or what the adaptive core (`download.adaptive`) chose for
    # its host, as `trw_source` says. After a T, R or crowd switch, `switch_verdict` is the core's judgement:
    # `helped` (peers delivered, and it ended sooner than the origin's rate promised) or `needless`.
    first_byte_timeout: float | None = None
    min_rate: float | None = None
    rate_window: float | None = None
    trw_source: str | None = None
    switch_verdict: str | None = None
    # The record's name in the `Swarm-Request` response field and at /_swarm/requests/<id> (`Stats.begin`).
    id: str = ""
    # What the download decided and why, in order, each "+S.SSs text" from its start (`event`): lookups' answers,
    # switches, claims, parking. At most MAX_EVENTS are kept (a long download's later polls are dropped).
    events: list[str] = dataclasses.field(default_factory=list)

    def event(self, seconds: float, text: str) -> None:
        """Add a line; the same text again (a poll's answer unchanged) updates the last line's time and count."""
        if self.events and (last := _REPEATED.fullmatch(self.events[-1])) and last["text"] == text:
            self.events[-1] = f"+{seconds:.2f}s {text} (x{int(last['count'] or 1) + 1})"
        elif len(self.events) < MAX_EVENTS:
            self.events.append(f"+{seconds:.2f}s {text}" if len(self.events) < MAX_EVENTS - 1 else "... (more)")

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def shown(self) -> dict[str, Any]:
        """As `as_json`, with the URL as the admin API may show it: a signed URL's credentials redacted."""
        return {**self.as_json(), "url": redact_url(self.url)}


# What `Stats.today` counts: the day's requests, those that got bytes from peers (swarmed), the switches to the
# swarm, and the bytes peers delivered.
TODAY_COUNTERS = ("requests", "requests_swarmed", "transitions", "bytes_peers")


class _DiscoveryCollector:
    """Counters kept by the swarm service, exported as they are when scraped."""

    METRICS = (("lookups", "DHT lookups made (a key's claims, a root's providers)"),
               ("announced", "Content roots announced as provided"),
               ("published", "Manifest records vouched for (a URL's or a segment's)"),
               ("claims", "In-progress claims put (this node fetches a URL or segment from its origin)"))

    def __init__(self, counters: Callable[[], Any]) -> None:
        self.counters = counters

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        values = self.counters()
        for name, text in self.METRICS:
            yield CounterMetricFamily(f"swarmproxy_dht_{name}", text, value=getattr(values, name, 0))

    def describe(self):
        return []


class _BitTorrentCollector:
    """The BitTorrent bridge's figures (`proxy.bridge.Bridge.status`), read at each scrape."""

    def __init__(self, status: Callable[[], dict[str, Any]]) -> None:
        self.status = status

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        status = self.status()
        yield GaugeMetricFamily("swarmproxy_bittorrent_torrents", "Contents seeded to BitTorrent clients",
                                value=status.get("torrents", 0))
        yield GaugeMetricFamily("swarmproxy_bittorrent_peers", "BitTorrent peers connected now",
                                value=status.get("peers", 0))
        yield CounterMetricFamily("swarmproxy_bittorrent_uploaded_bytes", "Payload bytes sent to BitTorrent peers",
                                  value=status.get("uploaded_bytes", 0))
        yield CounterMetricFamily("swarmproxy_bittorrent_downloaded_bytes",
                                  "Payload bytes received from BitTorrent peers",
                                  value=status.get("downloaded_bytes", 0))
        admission = status.get("admission") or {}
        yield GaugeMetricFamily("swarmproxy_bittorrent_sources_blocked",
                                "Addresses and networks the BitTorrent listener refuses now (over a connection bound)",
                                value=len(admission.get("blocked", ())))
        yield CounterMetricFamily("swarmproxy_bittorrent_blocks",
                                  "Blocks of a source over a BitTorrent connection bound, since start",
                                  value=admission.get("blocks_made", 0))

    def describe(self):
        return []


def _child(metric: Any, children: dict[tuple[str, ...], Any], values: tuple[str, ...]) -> Any:
    """`metric.labels(*values)`, kept in `children` once made."""
    child = children.get(values)
    if child is None:
        child = children[values] = metric.labels(*values)
    return child


class Stats:
    def __init__(self, history: int, clock: Callable[[], float] = time.time) -> None:
        self.started_monotonic = time.monotonic()
        self._clock = clock  # wall clock, seconds since the epoch: what "today" is judged by
        self.started_wall = clock()
        self._today: dict[str, Any] = {"date": None}
        self._day = (0.0, 0.0)  # the local day `_today` counts, as [midnight, next midnight) in clock seconds
        self.history: collections.deque[RequestRecord] = collections.deque(maxlen=history)
        self.counters: collections.Counter[str] = collections.Counter()
        self.connections_open = 0
        # told the number of open client connections after each change (`proxy.idle_trim`)
        self.on_connections: Callable[[int], None] = lambda count: None
        # The status page's last hour (`proxy.timeline`), and the records still under way with the bytes of each
        # already put in it: a download's bytes go in as the page's polls see them arrive (`sample`), the rest
        # when it finishes, so a long download shows as a rate, not as one spike at its end.
        self.timeline = Timeline()
        self._live: dict[str, tuple[RequestRecord, dict[str, int]]] = {}
        self._waiters: list[asyncio.Future] = []
        self.registry = prom.CollectorRegistry(auto_describe=True)
        self._requests = prom.Counter(
            "swarmproxy_requests", "Requests answered, by method and status class",
            ["method", "status_class"], registry=self.registry,
        )
        self._bytes = prom.Counter(
            "swarmproxy_response_bytes", "Body bytes sent to clients, by source",
            ["source"], registry=self.registry,
        )
        # the children by source, made once: `labels` on every request was a twentieth of its CPU
        self._by_source = {source: self._bytes.labels(source) for source in ("origin", "peers", "bittorrent")}
        self._errors = prom.Counter(
            "swarmproxy_errors", "Requests that failed, by cause", ["cause"], registry=self.registry,
        )
        self._duration = prom.Histogram(
            "swarmproxy_request_duration_seconds", "Time from request to last byte",
            registry=self.registry,
        )
        self._connections = prom.Gauge(
            "swarmproxy_client_connections", "Client connections open", registry=self.registry,
        )
        self._refused = prom.Counter(
            "swarmproxy_connections_refused", "Client connections answered 503 (over --max-connections)",
            registry=self.registry,
        )
        self._header_timeouts = prom.Counter(
            "swarmproxy_header_timeouts", "Client connections answered 408 and closed (request head not complete "
            "within --header-timeout)", registry=self.registry,
        )

        self._transitions = prom.Counter(
            "swarmproxy_transitions", "Downloads switched from the origin to the swarm, by cause "
            "(T: no first byte in time, R: too slow, died: origin broke off)", ["cause"], registry=self.registry,
        )

        self._skipped = prom.Counter(
            "swarmproxy_swarm_skipped", "GETs that did not use peers, by why (the publish gate's reason, or why no "
            "usable manifest was found after a switch)", ["reason"], registry=self.registry,
        )
        # Their children by label values, as each first comes: prometheus' `labels` locks and checks its arguments
        # on every call, twice a request. These hold no more than the metrics themselves keep.
        self._requests_by: dict[tuple[str, ...], Any] = {}
        self._skipped_by: dict[tuple[str, ...], Any] = {}

        self._hash_failures = prom.Counter(
            "swarmproxy_hash_failures", "Blocks or hash layers from peers that failed verification (never sent "
            "to a client)", registry=self.registry,
        )
        self._bans = prom.Counter(
            "swarmproxy_peer_bans", "Peers banned during swarm downloads (bad data)", registry=self.registry,
        )

    def swarm_fetch(self, report: FetchReport) -> None:
        """Count what one block-engine download saw (its `SwarmNode.fetch(report=...)`)."""
        self.counters["hash_failures"] += report.hash_failures
        self.counters["peer_bans"] += report.banned
        self._hash_failures.inc(report.hash_failures)
        self._bans.inc(report.banned)

    def transition(self, cause: str) -> None:
        self.counters["transitions"] += 1
        self.today()["transitions"] += 1
        self._transitions.labels(cause).inc()
        self.timeline.add_transition(cause, self._clock())

    def sample(self) -> None:
        """Put the bytes the downloads under way received since the last sample into the timeline (the status
        page's poll calls this before reading it)."""
        now = self._clock()
        for record, sampled in self._live.values():
            self._sample(record, sampled, now)

    def _sample(self, record: RequestRecord, sampled: dict[str, int], now: float, *, final: bool = False) -> None:
        # Bytes the block engine delivered count as the peers' until its fetch's split says how many were the
        # origin's Range answers; those are then moved to the origin's side of what was sampled, so every byte is
        # counted once (an earlier bucket may show a few of them as the peers').
        totals = {"origin": record.bytes_origin, "bittorrent": record.bytes_bittorrent,
                  "peers": record.bytes_peers + (0 if final else record.bytes_swarm)}
        excess = max(0, sampled["peers"] - totals["peers"])
        sampled["peers"] -= excess
        sampled["origin"] += excess
        for source in SOURCES:
            if (count := totals[source] - sampled[source]) > 0:  # the rest add nothing: one call, not three
                self.timeline.add_bytes(source, count, now)
                sampled[source] = totals[source]

    def under_way(self) -> list[RequestRecord]:
        """The requests not finished yet, oldest first (the history may have dropped some of them already)."""
        return [record for record, _ in self._live.values()]

    async def wait_for_requests(self, count: int) -> None:
        """Return once `count` requests have finished (their records complete): for tests, no polling."""
        while self.counters["requests"] < count:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def now(self) -> float:
        """The wall clock this Stats judges days and the timeline's buckets by."""
        return self._clock()

    def uptime(self) -> float:
        return time.monotonic() - self.started_monotonic

    def today(self) -> dict[str, Any]:
        """The counters of the current local day (TODAY_COUNTERS), since midnight or since this proxy started,
        whichever is later (`since`, seconds since the epoch): a user asks how much swarmed today, and nothing is
        kept across restarts. Started afresh at the first call of a new day."""
        now = self._clock()
        if self._day[0] <= now < self._day[1]:  # asked on every request: the day's bounds, not a date, each time
            return self._today
        date = datetime.date.fromtimestamp(now)  # local: the user's day, not UTC's
        midnight = datetime.datetime.combine(date, datetime.time()).timestamp()
        tomorrow = datetime.datetime.combine(date + datetime.timedelta(days=1), datetime.time())
        self._day = (midnight, tomorrow.timestamp())
        if self._today["date"] != date.isoformat():
            self._today = {"date": date.isoformat(), "since": round(max(midnight, self.started_wall), 3),
                           **dict.fromkeys(TODAY_COUNTERS, 0)}
        return self._today

    def begin(self, method: str, url: str, client: str) -> RequestRecord:
        # The id goes to the client in Swarm-Request, where a page's own scripts can read it: random, so that it
        # tells no site how many requests the proxy answered, nor that two sites' visitors are one proxy's user
        # (a per-run tag or a counter would); and an id from before a restart names nothing after it. It is no
        # secret otherwise: only the admin API, which answers this machine alone, serves the record.
        record = RequestRecord(method=method, url=url, client=client, started=time.time(), id=secrets.token_hex(8))
        self.history.append(record)
        self._live[record.id] = (record, dict.fromkeys(SOURCES, 0))
        if len(self._live) > MAX_LIVE:  # a record some bug never finished: forgotten, not kept for ever
            del self._live[next(iter(self._live))]
        return record

    def find(self, record_id: str) -> RequestRecord | None:
        """The record named `record_id`, while the history still holds it (the newest are the likeliest asked)."""
        return next((record for record in reversed(self.history) if record.id == record_id), None)

    def finish(self, record: RequestRecord, status: int | None, sent: int, duration: float,
               error: str | None = None) -> None:
        """Close a record: `sent` is the body bytes the client got, from any source."""
        record.status = status
        record.bytes = sent
        record.duration_s = round(duration, 6)
        record.error = error
        if (live := self._live.pop(record.id, None)) is not None:
            self._sample(record, live[1], self._clock(), final=True)
        self.counters["requests"] += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.counters["bytes_sent"] += sent
        self.counters["bytes_origin"] += record.bytes_origin
        self.counters["bytes_peers"] += record.bytes_peers
        self.counters["bytes_bittorrent"] += record.bytes_bittorrent
        today = self.today()
        today["requests"] += 1
        today["bytes_peers"] += record.bytes_peers
        if record.bytes_peers:  # swarmed: peers delivered some of it (a switch alone may have found none)
            self.counters["requests_swarmed"] += 1
            today["requests_swarmed"] += 1
        status_class = f"{status // 100}xx" if status else "none"
        _child(self._requests, self._requests_by, (record.method, status_class)).inc()
        for source, count in (("origin", record.bytes_origin), ("peers", record.bytes_peers),
                              ("bittorrent", record.bytes_bittorrent)):
            if count:
                self._by_source[source].inc(count)
        self._duration.observe(duration)
        if record.swarm_skipped:
            # the key: a bounded set of labels
            _child(self._skipped, self._skipped_by, (record.swarm_skipped.split(" ")[0],)).inc()
        if error:
            self.error(error)
        access_log.info(
            "%s %s %s %s %dB %.3fs%s", record.client, record.method, redact_url(record.url),
            status if status is not None else "-", sent, duration, f" ({error.strip()})" if error else "",
        )

    def error(self, cause: str) -> None:
        self.counters["errors"] += 1
        self._errors.labels(cause.split(":", 1)[0]).inc()

    def connection_opened(self) -> None:
        self.connections_open += 1
        self._connections.inc()
        self.on_connections(self.connections_open)

    def connection_closed(self) -> None:
        self.connections_open -= 1
        self._connections.dec()
        self.on_connections(self.connections_open)

    def connection_refused(self) -> None:
        self.counters["connections_refused"] += 1
        self._refused.inc()

    def header_timeout(self) -> None:
        self.counters["header_timeouts"] += 1
        self._header_timeouts.inc()

    def snapshot(self) -> dict[str, int]:
        return {
            "requests": self.counters["requests"],
            "bytes_sent": self.counters["bytes_sent"],
            "errors": self.counters["errors"],
            "tunnels": self.counters["tunnels"],
            "bad_requests": self.counters["bad_requests"],
            "header_timeouts": self.counters["header_timeouts"],
            "connections_open": self.connections_open,
            "connections_refused": self.counters["connections_refused"],
            "transitions": self.counters["transitions"],
            "requests_swarmed": self.counters["requests_swarmed"],
            "bytes_origin": self.counters["bytes_origin"],
            "bytes_peers": self.counters["bytes_peers"],
            "bytes_bittorrent": self.counters["bytes_bittorrent"],
            "hash_failures": self.counters["hash_failures"],
            "peer_bans": self.counters["peer_bans"],
        }

    def watch_discovery(self, counters: Callable[[], Any]) -> None:
        """Export what this node told the DHT (`swarm.service.shares.ShareCounters`, read at each scrape): the
        privacy rule's effect, visible (`proxy.download.discovery_rule`)."""
        self.registry.register(_DiscoveryCollector(counters))

    def watch_bittorrent(self, status: Callable[[], dict[str, Any]]) -> None:
        """Export the BitTorrent bridge's torrents, peers and bytes (`--bt-listen`)."""
        self.registry.register(_BitTorrentCollector(status))

    def prometheus_text(self) -> bytes:
        return prom.generate_latest(self.registry)
