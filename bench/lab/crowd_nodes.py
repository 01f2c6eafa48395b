"""The parts of a crowd run: its parameters, its files, and the swarmproxy nodes that serve its clients.

`SwarmNodes` runs every client's full node (proxy + block engine + DHT, on 127.2.x.y) in this process;
`workers.WorkerPool` spreads the same nodes over worker processes. `crowd.CrowdRun` drives a run with either.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import hashlib
import logging
import pathlib
from collections.abc import Callable

import aiohttp

from bench.crowd_inputs import content
from proxy.demo.slow_origin import SlowOrigin
from proxy.download.discovery_rule import DEFAULT_LARGE
from proxy.download.transition import (
    DEFAULT_EARLY_LOOKUP,
    DEFAULT_FIRST_BYTE_TIMEOUT,
    DEFAULT_MIN_RATE,
    DEFAULT_RATE_WINDOW,
)
from proxy.server import ProxyServer
from server_plugin.aiohttp_plugin import install
from server_plugin.publisher import Publisher, Representation
from swarm.content.sizes import parse_block_size
from swarm.service.swarm_service import FETCH_PEERS, LINGER

from .cluster import LocalClientsCluster

log = logging.getLogger("swarmproxy.lab")

DIRECT_ORIGIN, SWARM_ORIGIN = "127.0.0.2", "127.0.0.3"
STARTUP_BATCH = 50


@dataclasses.dataclass
class CrowdParams:
    clients: int = 1000
    rate: float = 20.0  # arrivals per second (Poisson)
    size: int = 100_000
    objects: list[int] = dataclasses.field(default_factory=list)  # page: fetched in parallel after `size`
    origin_rate: float = 256_000.0
    origin_connections: int = 256
    delay: float = 0.025  # one way, between any two hosts
    node_up: float = 1_250_000.0  # bytes/s per host (10 Mbit/s)
    node_down: float = 1_250_000.0
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT  # the proxy's own defaults, unless a sweep sets them
    min_rate: float = DEFAULT_MIN_RATE
    rate_window: float = DEFAULT_RATE_WINDOW
    early_lookup: float = DEFAULT_EARLY_LOOKUP
    block_size: str = "auto"
    linger: float = LINGER
    fetch_peers: int = FETCH_PEERS
    trust: str = "quorum:2"
    discover_size: str = str(DEFAULT_LARGE)  # the privacy rule's size threshold (`--discover-size`; 0: every size)
    transport: str = "tcp"
    direct: bool = True  # also run the direct half
    client_timeout: float = 1800.0
    seed: int = 1
    origin_plugin: bool = False  # the origin publishes manifests and hints (server_plugin)
    origin_busy: int = 2  # ... and asks clients to swarm from this many GETs in flight
    workers: int = 0  # worker processes holding the swarmproxy nodes; 0: all in the main process


NO_FULL_COLLECTION = 1 << 30  # gc threshold 2: young collections this many times before a full one


def publish(origin: SlowOrigin, busy_at: int, block_size: str = "auto") -> Publisher:
    """Install server_plugin on `origin` (before it starts): manifests of its files in `block_size` blocks,
    `Swarm-Hint` from `busy_at` GETs in flight."""
    publisher = Publisher(busy_at=busy_at, block_size=parse_block_size(block_size))

    def resolve(request) -> Representation | None:
        entry = origin.files.get(request.path)
        if entry is None:
            return None
        data, etag, _ = entry
        return Representation(request.path, len(data), lambda: (data,), validator=etag, version=etag)
    origin.setup.append(lambda app: install(app, resolve, publisher))
    return publisher


def host(network: int, index: int) -> str:
    """The index-th address of 127.<network>.0.0/16, skipping .0 and .255."""
    return f"127.{network}.{index // 254}.{index % 254 + 1}"


@dataclasses.dataclass
class Files:
    """The scenario's files on one origin, the main object and the page's small ones, as plain data (a worker
    process gets a copy): their URLs and each body's SHA-256."""
    main: str
    objects: list[str]
    digest: dict[str, str]

    @classmethod
    def on(cls, origin: SlowOrigin, params: CrowdParams) -> Files:
        main = origin.add("/main.bin", content("main", params.size))
        objects = [origin.add(f"/object{i}.bin", content(f"object{i}", size)) for i, size in enumerate(params.objects)]
        return cls(main, objects, {origin.url + path: hashlib.sha256(entry[0]).hexdigest()
                                   for path, entry in origin.files.items()})


async def fetch_one(session: aiohttp.ClientSession, url: str, digest: str, proxy: str | None) -> dict:
    async with session.get(url, proxy=proxy) as response:
        hasher, nbytes = hashlib.sha256(), 0
        async for chunk in response.content.iter_any():
            hasher.update(chunk)
            nbytes += len(chunk)
        ok = response.status == 200 and hasher.hexdigest() == digest
        return {"status": response.status, "bytes": nbytes, "exact": ok}


@contextlib.contextmanager
def no_full_collections():
    """While the crowd runs: no full garbage collection, and what exists when it starts is never scanned.

    Full collections over a thousand nodes' objects stall the loop for tens of ms while freeing nothing
    (bench/dht.py found the same); what exists now lives to the end of the run. Over what 40 largefile nodes
    build up, one took 100-120 ms (gc.callbacks), 100 nodes had timers 162 ms late at p99, and it stalls every
    node of the process at once, which nodes in processes of their own never do. Young generations are still
    collected."""
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTION)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


async def arrive_at(when: float) -> float:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, when - loop.time()))  # the client's arrival time
    return loop.time()


async def fetch_all(session: aiohttp.ClientSession, files: Files, proxy: str | None, timeout: float) -> list[dict]:
    async with asyncio.timeout(timeout):
        first = await fetch_one(session, files.main, files.digest[files.main], proxy)
        rest = await asyncio.gather(*(fetch_one(session, url, files.digest[url], proxy) for url in files.objects))
    return [first, *rest]


class SwarmNodes:
    """The swarmproxy half in this process: the nodes of the clients `indices` (all of them, or one worker's
    share) and those clients, each talking to its own node."""

    def __init__(self, params: CrowdParams, workdir: pathlib.Path, indices: list[int],
                 bootstrap: str | None = None) -> None:
        self.params = p = params
        self.indices = indices
        self.nodes: dict[int, ProxyServer] = {}  # by client index
        self.cluster = LocalClientsCluster(
            workdir, hosts=[host(2, i) for i in indices], bootstrap=bootstrap,
            log_level="ERROR", first_byte_timeout=str(p.first_byte_timeout),
            min_rate=str(p.min_rate), rate_window=str(p.rate_window),
            early_lookup=str(p.early_lookup),
            # Pack's linger 0 is "leave when done"; the proxy's --linger 0 means "until evicted".
            linger=str(p.linger or 0.001),
            trust=p.trust, transport=p.transport, block_size=p.block_size,
            fetch_peers=str(p.fetch_peers), read_timeout="60", discover_size=p.discover_size,
            share_private_origins=SWARM_ORIGIN)  # the lab's origin, on loopback: listed as a user lists a mirror

    async def start(self, on_first: Callable[[str], None] | None = None,
                    say: Callable[[str], None] | None = None) -> None:
        """Start every node; `on_first` gets the first one's DHT address as soon as it is up."""
        first = await self.cluster.add()
        if on_first is not None:
            on_first(first.addresses["dht"])
        started = [first]
        while len(started) < len(self.indices):  # in batches: each node's DHT bootstrap waits on round trips
            batch = min(STARTUP_BATCH, len(self.indices) - len(started))
            started += await asyncio.gather(*(self.cluster.add() for _ in range(batch)))
            if say is not None and len(started) % 200 < STARTUP_BATCH:
                say(f"  {len(started)}/{len(self.indices)} nodes up")
        self.nodes = {self.indices[node.index]: node for node in started}

    async def run_clients(self, t0: float, arrivals: list[float], files: Files,
                          on_record: Callable[[dict], None]) -> None:
        async def client(index: int) -> None:
            on_record(await self._client(index, t0, t0 + arrivals[index], files))
        await asyncio.gather(*(client(i) for i in self.indices))

    async def close(self) -> None:
        await self.cluster.close()

    async def _client(self, index: int, t0: float, when: float, files: Files) -> dict:
        node = self.nodes[index]
        arrived = await arrive_at(when)
        record: dict = {"client": index, "host": node.host, "arrival": round(when - t0, 4)}
        before = node.stats.counters["requests"]
        try:
            fetched = await fetch_all(self.cluster.client_for(node), files, node.url, self.params.client_timeout)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            record.update(error=f"{type(exc).__name__}: {exc}", exact=False)
            fetched = []
        record["duration_s"] = round(asyncio.get_running_loop().time() - arrived, 4)
        if fetched:
            await node.stats.wait_for_requests(before + len(fetched))  # the node closes its record after the body
        proxied = [r.as_json() for r in list(node.stats.history)[-len(fetched):]] if fetched else []
        record.update(
            bytes=sum(f["bytes"] for f in fetched), exact=bool(fetched) and all(f["exact"] for f in fetched),
            bytes_origin=sum(r["bytes_origin"] for r in proxied), bytes_peers=sum(r["bytes_peers"] for r in proxied),
            causes=[r["transition"] or "origin" for r in proxied],
            manifest_sources=[r["manifest_source"] for r in proxied if r["manifest_source"]],
            segments=["".join(source[0] for source in r["segments"]) for r in proxied if r["segments"]],
            events=[r["events"] for r in proxied],  # each request's decisions: why it went where it did
        )
        return record


