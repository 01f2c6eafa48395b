"""One crowd run: Poisson arrivals downloading from a throttled origin, directly and through swarmproxy, at once.

Both halves run at once, each against its own origin with the same limits (Pack's setup: 256 KB/s in total,
256 concurrent connections), so a noisy machine slows both alike:

- direct: client i connects from 127.1.x.y straight to the origin;
- swarmproxy: client i talks to its own full node (proxy + block engine + DHT, started before the run on
  127.2.x.y) and the node decides origin or swarm. `crowd_nodes.SwarmNodes` runs them all in this process, or
  `workers.WorkerPool` spreads them over worker processes (`CrowdParams.workers`) on one shared network.

A node's DHT and peer traffic leaves from its own address (the transports send from the address they listen
on), so each node has its own emulated uplink and downlink. Its origin requests (the proxy's HTTP client) leave
from 127.0.0.1, which the proxy has no option to change: all nodes' origin bytes share that host's emulated
downlink, never the node's own. That link carries at most the origin's 256 KB/s, a fifth of one node's link.

Every client fetches `size` bytes (then, for the page scenario, `objects` in parallel) and is timed from its
arrival to its last byte; every body is compared with the origin's bytes. `CrowdRun.run` returns plain dicts:
per-client records plus the origin's byte counts, ready for `report.py`.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import random
import time
from collections.abc import Callable

import aiohttp

from bench.crowd_inputs import poisson_arrivals
from proxy.demo.slow_origin import SlowOrigin
from server_plugin.publisher import Representation

from .crowd_nodes import (
    DIRECT_ORIGIN,
    SWARM_ORIGIN,
    CrowdParams,
    Files,
    SwarmNodes,
    arrive_at,
    fetch_all,
    host,
    no_full_collections,
    publish,
)
from .honesty import Sampler
from .netem import SharedLinks
from .workers import WorkerPool

log = logging.getLogger("swarmproxy.lab")


class CrowdRun:
    def __init__(self, params: CrowdParams, workdir: pathlib.Path, say: Callable[[str], None],
                 sampler: Sampler, links: SharedLinks | None = None) -> None:
        self.params = params
        self.sampler = sampler  # watches the swarmproxy half only: not the nodes starting, not the direct tail
        self.workdir = workdir
        self.say = say
        self.links = links  # with worker processes: the network they join
        self.t0 = 0.0
        self.direct: list[dict] = []
        self.swarm: list[dict] = []

    async def run(self) -> dict:
        p = self.params
        arrivals = poisson_arrivals(p.rate, p.clients, random.Random(p.seed))
        origins = {name: SlowOrigin(rate=p.origin_rate, max_connections=p.origin_connections, host=address)
                   for name, address in (("direct", DIRECT_ORIGIN), ("swarmproxy", SWARM_ORIGIN))}
        publishers = {name: publish(origin, p.origin_busy, p.block_size) for name, origin in origins.items()} \
            if p.origin_plugin else {}
        for origin in origins.values():
            await origin.start()
        files = {name: Files.on(origin, p) for name, origin in origins.items()}
        for name, publisher in publishers.items():  # hashed now: not in a thread during the measured arrivals
            for path, (data, etag, _) in origins[name].files.items():
                await publisher.manifest(Representation(path, len(data), lambda d=data: (d,), validator=etag,
                                                        version=etag))

        def origin_bytes(name: str) -> int:  # the plugin's layer endpoint is not throttled, but it counts
            return origins[name].bytes_sent + (publishers[name].layer_bytes if name in publishers else 0)
        tasks: list[asyncio.Future] = []
        if p.workers:

            assert self.links is not None, "worker processes need the shared network"
            swarm: SwarmNodes | WorkerPool = WorkerPool(p, self.workdir, self.links, self.say)
        else:
            swarm = SwarmNodes(p, self.workdir, list(range(p.clients)))
        try:
            where = f" in {p.workers} worker processes" if p.workers else ""
            self.say(f"starting {p.clients} swarmproxy nodes (proxy + block engine + DHT){where}...")
            started = time.monotonic()
            await swarm.start(say=self.say)
            self.say(f"  all up in {time.monotonic() - started:.1f} s; {p.clients} clients arrive at "
                     f"{p.rate:g}/s for ~{arrivals[-1]:.0f} s")
            with no_full_collections():
                # workers must hear "go" before the first arrival
                t0 = self.t0 = asyncio.get_running_loop().time() + (1.0 if p.workers else 0.5)
                self.sampler.start()
                swarm_half = asyncio.ensure_future(swarm.run_clients(t0, arrivals, files["swarmproxy"],
                                                                     self.swarm.append))
                tasks.append(swarm_half)
                if p.direct:
                    tasks += [asyncio.ensure_future(self._direct_client(i, t0 + arrivals[i], files["direct"]))
                              for i in range(p.clients)]
                progress = asyncio.ensure_future(self._progress(t0))
                try:
                    # Every loop is judged over the swarmproxy half's span, when the machine is busiest: the
                    # direct half's tail (minutes of clients trickling from the origin) would dilute the lag.
                    await swarm_half
                    await self.sampler.stop()
                    await asyncio.gather(*tasks)
                finally:
                    progress.cancel()
                    await self.sampler.stop()
            await swarm.close()
            return {
                "arrivals": arrivals,
                "direct": {"clients": self.direct, "origin_bytes": origin_bytes("direct")} if p.direct
                else None,
                "swarmproxy": {"clients": self.swarm, "origin_bytes": origin_bytes("swarmproxy")},
                "workers": getattr(swarm, "verdicts", None),
            }
        finally:
            for task in tasks:
                task.cancel()
            await swarm.close()
            for origin in origins.values():
                await origin.stop()

    async def _progress(self, t0: float) -> None:
        loop = asyncio.get_running_loop()
        total = self.params.clients * (2 if self.params.direct else 1)
        while True:
            await asyncio.sleep(5.0)  # a progress line every 5 s
            done = len(self.direct) + len(self.swarm)
            self.say(f"  t={loop.time() - t0:6.1f} s  finished: swarmproxy {len(self.swarm)}/{self.params.clients}"
                     + (f", direct {len(self.direct)}/{self.params.clients}" if self.params.direct else "")
                     + ("" if done < total else " (all)"))

    async def _direct_client(self, index: int, when: float, files: Files) -> None:
        arrived = await arrive_at(when)
        record: dict = {"client": index, "host": host(1, index), "arrival": round(when - self.t0, 4)}
        connector = aiohttp.TCPConnector(local_addr=(record["host"], 0), limit=0)
        # no total timeout (aiohttp's default is 300 s): _fetch_all bounds the whole client by client_timeout
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                         timeout=aiohttp.ClientTimeout(total=None)) as session:
            try:
                fetched = await fetch_all(session, files, None, self.params.client_timeout)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                record.update(error=f"{type(exc).__name__}: {exc}", exact=False)
            else:
                record.update(bytes=sum(f["bytes"] for f in fetched), exact=all(f["exact"] for f in fetched),
                              bytes_origin=sum(f["bytes"] for f in fetched), bytes_peers=0)
        record["duration_s"] = round(asyncio.get_running_loop().time() - arrived, 4)
        self.direct.append(record)
