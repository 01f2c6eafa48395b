"""Several full nodes (proxy + block engine + DHT) in one event loop, each on its own 127.0.0.x address.

Used by `swarmproxy demo`, the tests and the lab (whose variant, bench/lab/cluster.py, gives each node's user
an address of its own). Node i binds its DHT and peer listener on 127.0.0.(first_host+i), port 0; node 0 is
everyone's bootstrap node, and its origin connections leave from that address too (`ProxyServer.origin_source`),
as another host's would. LAN discovery is off: nothing leaves loopback. The demo's, the tests' and the lab's
origins listen on 127.0.0.1, so it is listed in `--share-private-origins` (as a user lists an office mirror):
content from any other loopback address stays unshared, as on a user's machine.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import aiohttp
from multidict import CIMultiDict

from proxy.config import Config
from proxy.server import ProxyServer


class LocalNode(ProxyServer):
    """A node of the cluster: its proxy, and where it stands in the cluster."""

    url: str  # its proxy, as a client's proxy setting says it
    host: str  # its own loopback address
    index: int  # its place in the order nodes were added


class Cluster:
    def __init__(self, tmp_path: pathlib.Path, *, first_host: int = 10, hosts: Sequence[str] | None = None,
                 bootstrap: str | None = None, **defaults: str) -> None:
        """`hosts`: the nodes' addresses in order (the lab's 127.x.y.z); default 127.0.0.(first_host+i).

        `bootstrap`: every node's DHT bootstrap (HOST:PORT), for a cluster that joins another's network (the
        lab's worker processes, a test's attacker); by default node 0 is everyone's.
        """
        self.tmp_path = pathlib.Path(tmp_path)
        self.first_host = first_host
        self.hosts = hosts
        self.bootstrap = bootstrap
        self._closed = False
        self._added = 0
        self.defaults = defaults
        self.nodes: list[LocalNode] = []
        self.client = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None))

    async def add(self, **overrides: str) -> LocalNode:
        """Start the next node. Several may start at once after the first (everyone's bootstrap) is up;
        `nodes` is then in order of readiness, and each node's `index` says which address it took."""
        index = self._added
        self._added += 1
        host = self.hosts[index] if self.hosts is not None else f"127.0.0.{self.first_host + index}"
        flags = {"listen": self.proxy_listen(host), "data_dir": str(self.tmp_path / f"node{index}"),
                 "dht_listen": f"{host}:0", "peer_listen": f"{host}:0", "no_lan_discovery": True,
                 "read_timeout": "20", "connect_timeout": "5", "share_private_origins": "127.0.0.1"}
        if self.bootstrap is not None:
            flags["bootstrap"] = [self.bootstrap]
        elif index:
            flags["bootstrap"] = [self.nodes[0].addresses["dht"]]
        flags.update(self.defaults)
        flags.update(overrides)
        server = LocalNode(Config.load(flags, environ={}))
        server.origin_source = host  # its origin connections leave from its address, as another host's would
        try:
            await server.start()
        except BaseException:
            await server.stop()
            raise
        if server._bootstrap_task is not None:
            await server._bootstrap_task
        server.url, server.host, server.index = "http://" + server.addresses["proxy"], host, index
        self.nodes.append(server)
        return server

    async def grow(self, count: int, **overrides: str) -> list[LocalNode]:
        return [await self.add(**overrides) for _ in range(count)]

    async def get(self, node: LocalNode, url: str, headers: dict[str, str] | None = None
                  ) -> tuple[int, CIMultiDict[str], bytes]:
        """GET through `node`'s proxy; waits until what the node learned is stored and announced."""
        done = node.stats.counters["requests"] + 1
        async with self.client_for(node).get(url, proxy=node.url, headers=headers or {}) as response:
            body = await response.read()
            result = response.status, response.headers.copy(), body
        await node.stats.wait_for_requests(done)  # the client may have all bytes before the record is closed
        assert node.fallback is not None  # (a started node has one)
        await node.fallback.settled()
        return result

    def proxy_listen(self, host: str) -> str:
        """Where the proxy of the node at `host` listens: loopback's usual address, as a user's would."""
        return "127.0.0.1:0"

    def client_for(self, node: LocalNode) -> aiohttp.ClientSession:
        """The session a user of `node` browses with: one shared by every node's users here."""
        return self.client

    def last_record(self, node: LocalNode) -> dict:
        return node.stats.history[-1].as_json()

    async def close(self) -> None:
        """Stop every node, even when one fails to stop (the first failure is raised after); calling it again
        does nothing."""
        if self._closed:
            return
        self._closed = True
        await self.client.close()
        failures = []
        for node in reversed(self.nodes):
            try:
                await node.stop()
            except Exception as exc:  # noqa: BLE001 - the other nodes must still stop
                failures.append(exc)
        if failures:
            raise failures[0]
