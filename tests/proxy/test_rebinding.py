"""DNS rebinding through the proxy (issue 35 §2): a page served under a public name of the attacker's, re-pointed at
127.0.0.1, makes the browser ask the proxy for that name again; the proxy must not fetch this machine's services
for it. Names are answered by a `StaticResolver` (no DNS query); every address used is on loopback.

Before the fix the proxy fetched `http://rebind.example:PORT/secret` from 127.0.0.1 and the page got 200 and the
secret (`python -m bench.attacks.rebinding --tree` on the old tree)."""

from __future__ import annotations

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from proxy.origin_resolver import StaticResolver
from proxy.server import ProxyServer

from .conftest import proxy_config
from .rawhttp import RawConnection, request

SECRET = b"the local service's secret\n"
NAMES = {
    "rebind.example": ["127.0.0.1"],  # the attacker's public name, re-pointed at this machine
    "zero.example": ["0.0.0.0"],  # "0.0.0.0 day": reaches this machine's services on Linux and macOS
    "mapped.example": ["::ffff:127.0.0.1"],
    "app.localhost": ["127.0.0.1"],
    "nas": ["127.0.0.1"],
    "printer.local": ["127.0.0.1"],
    "wiki.corp.example.com": ["127.0.0.1"],
    "mirror.example.com": ["127.0.0.1"],
}


class Secret:
    """A loopback service holding something a web page must not read; counts every request it gets."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        app = web.Application()
        app.router.add_get("/secret", self.secret)
        app.router.add_get("/ws", self.websocket)
        self.runner = web.AppRunner(app, access_log=None)

    async def secret(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request.path)
        return web.Response(body=SECRET)

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request.path)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_bytes(SECRET)
        await ws.close()
        return ws


@pytest_asyncio.fixture
async def secret():
    service = Secret()
    await service.runner.setup()
    site = web.TCPSite(service.runner, "127.0.0.1", 0)
    await site.start()
    service.port = site._server.sockets[0].getsockname()[1]
    yield service
    await service.runner.cleanup()


async def started(tmp_path, **overrides) -> ProxyServer:
    # Nothing listed: the suite's other proxies list 127.0.0.1, which any name may then reach by design.
    flags = {"connect_ports": "*", "read_timeout": "5", "connect_timeout": "5", "share_private_origins": "",
             **overrides}
    server = ProxyServer(proxy_config(tmp_path, **flags), resolver=StaticResolver(NAMES))
    await server.start()
    return server


@pytest_asyncio.fixture
async def proxy(tmp_path):
    server = await started(tmp_path)
    yield server
    await server.stop()


def get(url: str) -> bytes:
    return f"GET {url} HTTP/1.1\r\nHost: ignored.example\r\n\r\n".encode()


def assert_refused(response, host: str, address: str) -> None:
    assert response.status == 403, response.body
    text = response.body.decode()
    assert f"{host} resolved to {address}" in text
    assert "--local-domains" in text and "--share-private-origins" in text
    assert SECRET not in response.body


@pytest.mark.parametrize("host,address", [("rebind.example", "127.0.0.1"), ("zero.example", "0.0.0.0"),
                                          ("mapped.example", "::ffff:127.0.0.1")])
async def test_a_public_name_resolving_to_this_machine_is_refused(proxy, secret, host, address):
    response = await request(proxy.addresses["proxy"], get(f"http://{host}:{secret.port}/secret"))
    assert_refused(response, host, address)
    assert secret.requests == []
    record = proxy.stats.history[-1]
    assert record.status == 403 and record.error.startswith(f"forbidden: {host} resolved to")


@pytest.mark.parametrize("host", ["app.localhost", "nas", "printer.local", "127.0.0.1"])
async def test_names_that_are_local_by_themselves_and_literals_still_work(proxy, secret, host):
    response = await request(proxy.addresses["proxy"], get(f"http://{host}:{secret.port}/secret"))
    assert response.status == 200 and response.body == SECRET


async def test_local_domains_allow_a_split_horizon_intranet(tmp_path, secret):
    url = f"http://wiki.corp.example.com:{secret.port}/secret"
    server = await started(tmp_path, local_domains="corp.example.com")
    try:
        assert (await request(server.addresses["proxy"], get(url))).body == SECRET
        assert_refused(await request(server.addresses["proxy"], get(f"http://rebind.example:{secret.port}/secret")),
                       "rebind.example", "127.0.0.1")
    finally:
        await server.stop()


async def test_a_listed_origin_may_be_reached_by_a_public_name_on_its_port_only(tmp_path, secret):
    server = await started(tmp_path, share_private_origins=f"127.0.0.1:{secret.port}")
    try:
        listed = await request(server.addresses["proxy"], get(f"http://mirror.example.com:{secret.port}/secret"))
        assert listed.body == SECRET
    finally:
        await server.stop()
    server = await started(tmp_path, share_private_origins="127.0.0.1:1")  # the same address, another port
    try:
        other = await request(server.addresses["proxy"], get(f"http://mirror.example.com:{secret.port}/secret"))
        assert_refused(other, "mirror.example.com", "127.0.0.1")
    finally:
        await server.stop()


async def test_a_websocket_upgrade_to_a_rebound_name_is_refused(proxy, secret):
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await session.ws_connect(f"ws://rebind.example:{secret.port}/ws",
                                     proxy="http://" + proxy.addresses["proxy"])
    assert caught.value.status == 403
    assert secret.requests == []


async def test_a_connect_tunnel_to_a_rebound_name_is_refused(proxy, secret):
    """A browser tunnels ws:// through CONNECT too: a page could talk plain WebSocket to a local service."""
    connection = await RawConnection.open(proxy.addresses["proxy"])
    await connection.send(f"CONNECT rebind.example:{secret.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    answer = await connection.response(head_request=True)  # the head only: a 200 would be an open tunnel
    assert answer.status == 403
    answer.body = await connection.reader.readexactly(int(answer.header("Content-Length")))
    assert_refused(answer, "rebind.example", "127.0.0.1")
    await connection.close()
    local = await RawConnection.open(proxy.addresses["proxy"])
    await local.send(f"CONNECT app.localhost:{secret.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert (await local.response(head_request=True)).status == 200
    await local.send(b"GET /secret HTTP/1.1\r\nHost: app.localhost\r\n\r\n")
    assert (await local.response()).body == SECRET
    await local.close()
    assert secret.requests == ["/secret"]


async def test_the_explicit_fetch_refuses_a_rebound_name(proxy, secret):
    url = f"http://rebind.example:{secret.port}/secret"
    port = proxy.addresses["proxy"].rsplit(":", 1)[1]
    response = await request(proxy.addresses["proxy"],
                             f"GET /_swarm/fetch?url={url} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
    assert_refused(response, "rebind.example", "127.0.0.1")
    assert secret.requests == []


async def test_the_fallback_download_refuses_a_rebound_name(tmp_path, secret):
    """With the block engine on, a GET goes through the fallback download (`proxy.download.fallback`) first."""
    server = await started(tmp_path, peer_listen="127.0.0.1:0")
    try:
        assert server.fallback is not None
        response = await request(server.addresses["proxy"], get(f"http://rebind.example:{secret.port}/secret"))
        assert_refused(response, "rebind.example", "127.0.0.1")
        assert (await request(server.addresses["proxy"], get(f"http://nas:{secret.port}/secret"))).body == SECRET
    finally:
        await server.stop()
    assert secret.requests == ["/secret"]


async def test_an_unknown_name_is_still_a_502_naming_it(proxy):
    response = await request(proxy.addresses["proxy"], get("http://no-such-host.example/x"))
    assert response.status == 502 and b"dns: cannot resolve host no-such-host.example" in response.body
