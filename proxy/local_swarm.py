"""Several full nodes (proxy + block engine + DHT) in one event loop, each on its own 127.0.0.x address.

Used by `swarmproxy demo`, the tests and the lab. Node i binds its DHT and peer listener on
127.0.0.(first_host+i), port 0; node 0 is everyone's bootstrap node. LAN discovery is off: nothing leaves
loopback.
"""

from __future__ import annotations

import pathlib

import aiohttp
from multidict import CIMultiDict

from proxy.config import Config
from proxy.server import ProxyServer


class Cluster:
    def __init__(self, tmp_path: pathlib.Path, *, first_host: int = 10, **defaults: str) -> None:
        self.tmp_path = pathlib.Path(tmp_path)
        self.first_host = first_host
        self.defaults = defaults
        self.nodes: list[ProxyServer] = []
        self.client = aiohttp.ClientSession(auto_decompress=False)

    async def add(self, **overrides: str) -> ProxyServer:
        index = len(self.nodes)
        host = f"127.0.0.{self.first_host + index}"
        flags = {"listen": "127.0.0.1:0", "data_dir": str(self.tmp_path / f"node{index}"),
                 "dht_listen": f"{host}:0", "peer_listen": f"{host}:0", "no_lan_discovery": True,
                 "read_timeout": "20", "connect_timeout": "5"}
        if self.nodes:
            flags["bootstrap"] = [self.nodes[0].addresses["dht"]]
        flags.update(self.defaults)
        flags.update(overrides)
        server = ProxyServer(Config.load(flags, environ={}))
        try:
            await server.start()
        except BaseException:
            await server.stop()
            raise
        if server._bootstrap_task is not None:
            await server._bootstrap_task
        server.url = "http://" + server.addresses["proxy"]
        self.nodes.append(server)
        return server

    async def grow(self, count: int, **overrides: str) -> list[ProxyServer]:
        return [await self.add(**overrides) for _ in range(count)]

    async def get(self, node: ProxyServer, url: str, headers: dict[str, str] | None = None
                  ) -> tuple[int, CIMultiDict[str], bytes]:
        """GET through `node`'s proxy; waits until what the node learned is stored and announced."""
        done = node.stats.counters["requests"] + 1
        async with self.client.get(url, proxy=node.url, headers=headers or {}) as response:
            body = await response.read()
            result = response.status, response.headers.copy(), body
        await node.stats.wait_for_requests(done)  # the client may have all bytes before the record is closed
        await node.fallback.settled()
        return result

    def last_record(self, node: ProxyServer) -> dict:
        return node.stats.history[-1].as_json()

    async def close(self) -> None:
        await self.client.close()
        for node in reversed(self.nodes):
            await node.stop()
