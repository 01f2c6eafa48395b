"""The fallback's first GET says it leaves at the origin's hint (`Swarm-Accept: hint`), and a busy origin running
server_plugin holds that response's body until the proxy has left: the proxy closes at the hinted head, finds no
peer, and asks for the rest by Range, which says nothing and gets its bytes at once. Against SlowOrigin with the
aiohttp plugin installed, through a real node."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from yarl import URL

from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin
from server_plugin.aiohttp_plugin import install
from server_plugin.publisher import Publisher, Representation
from swarm.content.manifest import ACCEPT_HEADER
from swarm.content.peer_field import PEERS_HEADER

DATA = bytes(range(256)) * 400  # 102,400 bytes: 7 blocks


class Seen(list):
    """The requests the origin saw, as (method, Range, Swarm-Accept); while `ranges_wait` is set, a Range request
    is answered only once it is set."""

    ranges_wait: asyncio.Event | None = None


def plugin_on(slow_origin, publisher: Publisher) -> Seen:
    """Install the plugin on `slow_origin` (every file, busy from the first GET); the requests it saw."""
    seen = Seen()

    @web.middleware
    async def note(request, handler):
        seen.append((request.method, request.headers.get("Range"), request.headers.get(ACCEPT_HEADER)))
        if seen.ranges_wait is not None and "Range" in request.headers:
            await seen.ranges_wait.wait()
        return await handler(request)

    def resolve(request):
        entry = slow_origin.files.get(request.path)
        if entry is None:
            return None
        return Representation(request.path, len(entry[0]), lambda: (entry[0],), validator=entry[1])

    def setup(app: web.Application) -> None:
        app.middlewares.append(note)
        install(app, resolve, publisher)
    slow_origin.setup.append(setup)
    return seen


@contextlib.asynccontextmanager
async def plugin_and_node(tmp_path, host: str | None = None):
    """SlowOrigin serving DATA with the plugin (busy from the first GET, a hold that would time the test out) and a
    node: the file's URL (on `host` if given), the requests the origin saw, the publisher, the cluster and node."""
    slow_origin, publisher = SlowOrigin(), Publisher(busy_at=1, hold=30.0)
    seen = plugin_on(slow_origin, publisher)
    slow_origin.add("/f.bin", DATA)
    base = URL(await slow_origin.start())
    url = str(base if host is None else base.with_host(host)) + "/f.bin"
    cluster = Cluster(tmp_path)
    try:
        yield url, seen, publisher, cluster, await cluster.add()
    finally:
        await cluster.close()
        await slow_origin.stop()


async def test_the_first_get_says_it_leaves_and_the_busy_origin_holds_its_body(tmp_path):
    async with plugin_and_node(tmp_path) as (url, seen, publisher, cluster, node):
        status, _, body = await cluster.get(node, url, headers={ACCEPT_HEADER: "nonsense"})
        assert status == 200 and body == DATA
        # the client's own field was dropped, the proxy's sent, with the port it serves what it fetches on
        assert seen[0] == ("GET", None, f"hint, peer={node.engine.address[1]}")
        assert seen[1][0] == "GET" and seen[1][1] is not None and seen[1][2] is None  # the rest, by Range
        assert publisher.held == 1 and publisher.left_in_hold == 1
        assert cluster.last_record(node)["bytes_origin"] == len(DATA)


async def test_the_next_node_fetches_from_the_peers_the_busy_origin_lists(tmp_path):
    # Node A fetches the file (hinted, nobody listed yet: the rest by Range) and serves it; its GET named its peer
    # port and came from its own address. Node B's hinted head then lists A, and B's fetch starts with A at once,
    # though its DHT finds nobody. The origin then answers no Range request until B is done: an idle origin
    # answered the endgame's duplicates first on a loaded machine, and B got every byte from it.
    async with plugin_and_node(tmp_path) as (url, seen, publisher, cluster, first):
        status, _, body = await cluster.get(first, url)
        assert status == 200 and body == DATA
        host, port = first.engine.address
        assert seen[0] == ("GET", None, f"hint, peer={port}") and len(publisher.peers) == 1
        second = await cluster.add()

        async def nobody(*_args, **_kwargs):
            return []
        second.engine.service.providers = nobody
        del seen[:]
        seen.ranges_wait = asyncio.Event()
        try:
            status, headers, body = await asyncio.wait_for(cluster.get(second, url), 60)  # a hang fails
        finally:
            seen.ranges_wait.set()
        assert status == 200 and body == DATA and headers[PEERS_HEADER] == f"{host}:{port}"
        record = cluster.last_record(second)
        assert record["peers"] == [f"{host}:{port}"] and record["bytes_peers"] > 0


async def test_a_name_that_may_be_private_is_not_told(tmp_path):
    async with plugin_and_node(tmp_path, "localhost") as (url, seen, publisher, cluster, node):  # never looked up
        status, _, body = await cluster.get(node, url, headers={ACCEPT_HEADER: "hint"})
        assert status == 200 and body == DATA
        assert seen and all(accept is None for _, _, accept in seen)  # neither the client's field nor ours
        assert publisher.held == 0


async def test_a_relayed_request_never_carries_the_clients_field(tmp_path):
    # A GET with a cookie is relayed as it comes (the publish gate refuses it): the client's Swarm-Accept is dropped
    # there too, so no origin holds a body for a proxy that never said it leaves.
    async with plugin_and_node(tmp_path) as (url, seen, publisher, cluster, node):
        status, _, body = await cluster.get(node, url, headers={ACCEPT_HEADER: "hint", "Cookie": "a=b"})
        assert status == 200 and body == DATA
        assert seen == [("GET", None, None)] and publisher.held == 0
        assert cluster.last_record(node)["swarm_skipped"] == "cookie"
