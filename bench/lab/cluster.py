"""The lab's cluster: each swarmproxy node's user on the node's own address, as a browser beside its proxy.

`proxy.demo.local_swarm.Cluster` puts every proxy on 127.0.0.1 and gives all users one client session. The
lab's emulated network delays and caps traffic per host, so users talking to their proxies from 127.0.0.1
would all share that one host's links; here each node's proxy listens on the node's own address and its user
connects from that address, so the hop stays on the node's host (undelayed, as on one machine).
"""

from __future__ import annotations

import aiohttp

from proxy.demo.local_swarm import Cluster
from proxy.server import ProxyServer


class LocalClientsCluster(Cluster):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._sessions: dict[str, aiohttp.ClientSession] = {}  # by node address

    def proxy_listen(self, host: str) -> str:
        return f"{host}:0"

    def client_for(self, node: ProxyServer) -> aiohttp.ClientSession:
        session = self._sessions.get(node.host)
        if session is None:
            connector = aiohttp.TCPConnector(local_addr=(node.host, 0))
            # No total timeout: aiohttp's default of 300 s would cut a long download (the lab's large file)
            # that the proxy is still delivering; callers bound their own waits.
            session = self._sessions[node.host] = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None))
        return session

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()
        await super().close()
