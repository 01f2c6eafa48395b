"""A swarmable GET goes to its origin before its download is worked out: its T/R/W, core and ledger are made while
the origin answers, not on the request's way out (issue 41: what the proxy adds to every small request)."""

from __future__ import annotations

import aiohttp
from yarl import URL

from proxy.demo.local_swarm import Cluster
from proxy.download.fallback import Fallback

DATA = b"first" * 1000


async def test_the_get_is_sent_before_its_download_is_worked_out(tmp_path, slow_origin, monkeypatch):
    order: list[str] = []
    real_send, real_choose = aiohttp.ClientRequest.send, Fallback._choose
    url = slow_origin.add("/first.bin", DATA)
    origin_port = URL(url).port

    async def send(self, connection):
        response = await real_send(self, connection)
        if self.proxy is None and self.url.port == origin_port:  # the proxy's, not the test client's
            order.append("sent")
        return response

    def choose(self, *args, **kwargs):
        order.append("chosen")
        return real_choose(self, *args, **kwargs)

    monkeypatch.setattr(aiohttp.ClientRequest, "send", send)
    monkeypatch.setattr(Fallback, "_choose", choose)
    cluster = Cluster(tmp_path)
    try:
        node = await cluster.add()
        for _ in range(2):  # the second on the pooled connection: no connect for the setup to hide behind
            order.clear()
            status, _, body = await cluster.get(node, url)
            assert status == 200 and body == DATA
            assert cluster.last_record(node)["swarm_skipped"] is None  # it went through the fallback download
        assert order == ["sent", "chosen"]
    finally:
        await cluster.close()
