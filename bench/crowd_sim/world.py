"""A simulated flash crowd: Poisson arrivals, each client's node (`node.Node`), and the same crowd straight to the
origin (the direct half), on one virtual clock each; their records and figures.

The setup is the lab's flash crowd (`bench.lab.crowd`): one 100 KB file on an origin of 256 KB/s shared by at most
256 responses at a time, 25 ms one way between any two hosts, 1.25 MB/s per host each way, the proxy's defaults
(T 0.75 s, R 160 kB/s, W 2 s, early lookup 0.25 s, `--trust quorum:2`, 16 peers per download), and the lab's
arrival times for a seed (`bench.crowd_inputs.poisson_arrivals`, the same draws as the lab). The client talks to its own
node on its own host, so only the node's links count.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import time
from collections.abc import Callable

from bench.crowd_inputs import content, poisson_arrivals
from proxy.download.discovery_rule import DEFAULT_LARGE, DiscoveryRule
from proxy.download.parking import (
    CLAIM_RANGES,
    CLOSE_FOR_LOOKUP_SECONDS,
    CLOSE_WHILE_ASKED_SECONDS,
    ParkingSettings,
)
from proxy.download.settings import DownloadSettings
from proxy.download.transition import (
    DEFAULT_EARLY_LOOKUP,
    DEFAULT_FIRST_BYTE_TIMEOUT,
    DEFAULT_MIN_RATE,
    DEFAULT_RATE_WINDOW,
    TransitionSettings,
)
from proxy.origin_head import OriginHead
from server_plugin.peer_pool import PeerPool
from server_plugin.publisher import DEFAULT_HOLD
from swarm.content.manifest import build_manifest
from swarm.discovery.seam import validator_bytes
from swarm.service.swarm_service import PEER_SPARE
from swarm.trust import ManifestClaim, parse_trust

from .events import Clock
from .models import DHTS, Dht, Links, NetParams, Origin, Uplink
from .node import Node

MAX_SPOOL = 1 << 30  # the proxy's default store size bounds what is spooled: far above 100 KB


@dataclasses.dataclass
class SimParams:
    clients: int = 1000
    rate: float = 20.0  # arrivals per second (Poisson)
    size: int = 100_000
    origin_rate: float = 256_000.0
    origin_connections: int = 256
    delay: float = 0.025
    node_up: float = 1_250_000.0
    node_down: float = 1_250_000.0
    dht: str = "ours"  # a key of `models.DHTS`
    trust: str = "quorum:2"
    fetch_peers: int = 16
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT
    min_rate: float = DEFAULT_MIN_RATE
    rate_window: float = DEFAULT_RATE_WINDOW
    early_lookup: float = DEFAULT_EARLY_LOOKUP
    discover_size: int = DEFAULT_LARGE
    close_for_lookup: float = CLOSE_FOR_LOOKUP_SECONDS  # the origin closed while the early lookup runs (0: never)
    close_while_asked: float = CLOSE_WHILE_ASKED_SECONDS  # ... when the origin asked the download to swarm
    claim_ranges: int = CLAIM_RANGES  # Range requests at once a claimer asks its origin again by (1: one stream)
    origin_plugin: bool = False  # the origin publishes its manifest (server_plugin) and hints ...
    origin_busy: int = 2  # ... from this many GETs in flight (the lab's `--origin-busy`)
    origin_hold: float = DEFAULT_HOLD  # ... and holds a hinted body this long for a client that leaves at the hint
    origin_peers: bool = True  # ... and lists the clients hinted before (`Swarm-Peers`; False: as before it did)
    seed: int = 1
    keep_events: int = 2000  # the first clients whose decisions are kept in their records


class World:
    """The swarm half: every client's node, the origin, the links and the DHT."""

    def __init__(self, params: SimParams, say: Callable[[str], None] | None = None) -> None:
        self.params = p = params
        self.say = say or (lambda line: None)
        self.clock = Clock()
        self.net = NetParams(p.delay, p.node_up, p.node_down)
        self.links = Links(self.net)
        self.content = content("main", p.size)
        self.url = "http://origin.example/main.bin"
        self.etag = '"' + hashlib.sha256(self.content).hexdigest()[:32] + '"'
        self.manifest, self.layer = build_manifest([self.content], p.size, url=self.url, validator=self.etag)
        self.claim = ManifestClaim(self.manifest.root, p.size, self.manifest.block_size, validator_bytes(self.etag))
        self.trust = parse_trust(p.trust)
        self.dht = Dht(DHTS[p.dht], random.Random(p.seed + 7))
        self.swarm_origin = Origin(self.clock, self.links, "origin", self.content, rate=p.origin_rate,
                                   max_connections=p.origin_connections,
                                   busy_at=p.origin_busy if p.origin_plugin else None,
                                   body_hold=p.origin_hold if p.origin_plugin else 0.0,
                                   peers=PeerPool(rng=random.Random(p.seed + 11))
                                   if p.origin_plugin and p.origin_peers else None)
        self.fetch_peers = p.fetch_peers
        self.heads: dict[tuple[int, int, int, bool], OriginHead] = {}  # `node.origin_head`'s, by its arguments
        self.settings = DownloadSettings(
            TransitionSettings(p.first_byte_timeout, p.min_rate, p.rate_window, p.early_lookup), max_spool=MAX_SPOOL,
            parking=ParkingSettings(after=self.trust.vouchers, close_for_lookup=p.close_for_lookup,
                                    close_while_asked=p.close_while_asked,
                                    ranges=p.claim_ranges),
            discovery=DiscoveryRule(p.discover_size))
        self.arrivals = poisson_arrivals(p.rate, p.clients, random.Random(p.seed))
        self.records: list[dict] = []
        self.holders = 0  # nodes that announced themselves as providers
        self.vouch_times: list[float] = []  # when each first-hand vouch was put
        self.unfinished: list[Node] = []
        self._live: dict[int, Node] = {}
        self._uplinks: dict[str, Uplink] = {}
        self._nodes: dict[int, Node] = {}  # every node by index: they stay up and serve (the lab's nodes do)

    def node_at(self, index: int) -> Node:
        return self._nodes[index]

    def peers_for(self, manifest) -> int:
        """`SwarmService.peers_for`: --fetch-peers, but at most PEER_SPARE more than the file has blocks."""
        return max(1, min(self.fetch_peers, manifest.num_blocks + PEER_SPARE))

    def uplink(self, host: str) -> Uplink:
        """The uplink `host` serves its peers through."""
        if (uplink := self._uplinks.get(host)) is None:
            uplink = self._uplinks[host] = Uplink(self.clock, self.links, host)
        return uplink

    def run(self, progress_every: float = 10.0) -> dict:
        """Run the crowd to its end; the records and the origin's bytes."""
        wall = time.monotonic()
        self.clock.at(self.arrivals[0], self._arrive, 0)
        self._progress(progress_every, wall)
        self.clock.run(stop=lambda: len(self.records) == self.params.clients)
        self.unfinished = list(self._live.values())
        for node in self.unfinished:
            self.records.append(node.record())
        return {"clients": sorted(self.records, key=lambda r: r["client"]),
                "origin_bytes": self.swarm_origin.bytes_sent, "origin_requests": self.swarm_origin.requests,
                "origin_held": self.swarm_origin.held, "origin_left_in_hold": self.swarm_origin.left_in_hold,
                "virtual_s": round(self.clock.now, 3), "wall_s": round(time.monotonic() - wall, 2),
                "events": self.clock.events, "dht_lookups": self.dht.lookups, "dht_puts": self.dht.puts,
                "vouch_times": [round(t, 3) for t in sorted(self.vouch_times)], "providers": self.holders,
                "bytes_carried": self.links.carried}

    def _arrive(self, index: int) -> None:
        node = Node(self, index, self.arrivals[index], self.settings, keep_events=index < self.params.keep_events)
        self._live[index] = node
        self._nodes[index] = node
        if index + 1 < len(self.arrivals):  # one arrival in the heap at a time
            self.clock.at(self.arrivals[index + 1], self._arrive, index + 1)
        node.start()

    def finished(self, node: Node) -> None:
        self._live.pop(node.index, None)
        if node.first_hand_at is not None:
            self.vouch_times.append(node.first_hand_at)
        self.records.append(node.record())

    def _progress(self, every: float, wall: float) -> None:
        if self.clock.now > 0:
            self.say(f"  t={self.clock.now:7.1f} s  finished {len(self.records)}/{self.params.clients}, origin "
                     f"{self.swarm_origin.bytes_sent:,} B, {self.holders} providers "
                     f"(wall {time.monotonic() - wall:.0f} s)")
        if len(self.records) < self.params.clients:
            self.clock.at(self.clock.now + every, self._progress, every, wall)


def run_direct(params: SimParams, say: Callable[[str], None] | None = None) -> dict:
    """The same crowd, every client straight to its own origin (the same model, no proxy)."""
    say = say or (lambda line: None)
    wall = time.monotonic()
    clock = Clock()
    net = NetParams(params.delay, params.node_up, params.node_down)
    links = Links(net)
    data = content("main", params.size)
    origin = Origin(clock, links, "origin", data, rate=params.origin_rate, max_connections=params.origin_connections)
    arrivals = poisson_arrivals(params.rate, params.clients, random.Random(params.seed))
    records: list[dict] = []

    def arrive(index: int) -> None:
        got = [0]
        exact = [True]

        def on_data(piece: bytes) -> None:
            if data[got[0]:got[0] + len(piece)] != piece:
                exact[0] = False
            got[0] += len(piece)
            if got[0] >= len(data):
                records.append({"client": index, "arrival": round(arrivals[index], 4),
                                "duration_s": round(clock.now - arrivals[index], 4), "bytes": got[0],
                                "exact": exact[0] and got[0] == len(data), "bytes_origin": got[0]})
        origin.get(f"d{index}", clock.now, lambda *head: None, on_data)
        if index + 1 < len(arrivals):
            clock.at(arrivals[index + 1], arrive, index + 1)

    clock.at(arrivals[0], arrive, 0)
    clock.run()
    say(f"  direct: {len(records)}/{params.clients} done at t={clock.now:.0f} s (wall {time.monotonic() - wall:.1f} s)")
    return {"clients": sorted(records, key=lambda r: r["client"]), "origin_bytes": origin.bytes_sent,
            "virtual_s": round(clock.now, 3), "wall_s": round(time.monotonic() - wall, 2)}


def idle_origin_time(params: SimParams) -> float:
    """One client alone on the origin, straight to it: the 'idle origin' of the goal's p99."""
    alone = dataclasses.replace(params, clients=1)
    return run_direct(alone)["clients"][0]["duration_s"]
