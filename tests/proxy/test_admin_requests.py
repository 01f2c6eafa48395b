"""The `Swarm-Request` field on relayed responses and the record it names at /_swarm/requests/<id>: on every
relayed answer (plain relay, the fallback download, the explicit fetch), never on a CONNECT tunnel nor on the
proxy's own answers; an origin's own field replaced; unknown and expired ids 404; URLs redacted as in the list;
the admin API's usual checks (loopback, Host, no Via, not a web page's request)."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest
import pytest_asyncio
from aiohttp import web

from proxy.demo.local_swarm import Cluster
from proxy.headers import REQUEST_ID
from proxy.server import ProxyServer

from .conftest import body_bytes, proxy_config
from .rawhttp import RawConnection, request

ID = re.compile(r"[0-9a-f]{16}")


def get(url: str) -> bytes:
    return f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


async def admin_get(proxy: ProxyServer, path: str, *fields: str):
    head = "".join(f"{field}\r\n" for field in (f"Host: {proxy.addresses['proxy']}",) + fields)
    return await request(proxy.addresses["proxy"], f"GET {path} HTTP/1.1\r\n{head}\r\n".encode())


async def record_of(proxy: ProxyServer, record_id: str) -> dict:
    response = await admin_get(proxy, f"/_swarm/requests/{record_id}")
    assert response.status == 200 and response.header("Content-Type").startswith("application/json")
    return json.loads(response.body)


async def test_a_relayed_response_names_its_record_which_the_admin_api_serves(proxy, origin):
    first = await request(proxy.addresses["proxy"], get(f"{origin.url}/bytes/123"))
    second = await request(proxy.addresses["proxy"], get(f"{origin.url}/status/404"))
    ids = [first.header(REQUEST_ID), second.header(REQUEST_ID)]
    assert all(ID.fullmatch(i or "") for i in ids) and ids[0] != ids[1], ids
    assert first.all(REQUEST_ID) == [ids[0]]

    record = await record_of(proxy, ids[0])
    assert record["id"] == ids[0] and record["url"] == f"{origin.url}/bytes/123"
    assert record["status"] == 200 and record["bytes"] == 123 and record["transition"] is None
    assert (await record_of(proxy, ids[1]))["status"] == 404  # the origin's answer, relayed: it has one too
    listed = json.loads((await admin_get(proxy, "/_swarm/requests")).body)
    assert [r["id"] for r in listed[-2:]] == ids


async def test_a_head_and_the_explicit_fetch_carry_it_too(proxy, origin):
    head = await request(proxy.addresses["proxy"],
                         f"HEAD {origin.url}/bytes/10 HTTP/1.1\r\nHost: x\r\n\r\n".encode(), head_request=True)
    assert (await record_of(proxy, head.header(REQUEST_ID)))["method"] == "HEAD"
    fetched = await admin_get(proxy, f"/_swarm/fetch?url={quote(origin.url + '/bytes/9', safe='')}")
    assert fetched.status == 200 and fetched.body == body_bytes(9)
    assert (await record_of(proxy, fetched.header(REQUEST_ID)))["url"] == f"{origin.url}/bytes/9"


async def test_the_explicit_fetchs_answer_is_sandboxed_and_a_relayed_one_is_not(proxy, origin):
    """An explicit fetch is served at the proxy's own origin, same-origin with the admin API: a link to it opened
    from outside the browser (Sec-Fetch-Site: none, allowed) must not run the fetched page's scripts there."""
    fetched = await admin_get(proxy, f"/_swarm/fetch?url={quote(origin.url + '/bytes/9', safe='')}")
    assert fetched.status == 200 and fetched.header("Content-Security-Policy") == "sandbox"
    relayed = await request(proxy.addresses["proxy"], f"GET {origin.url}/bytes/9 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert relayed.status == 200 and relayed.header("Content-Security-Policy") is None


async def test_the_fallback_download_names_its_record(tmp_path, origin):
    """With the block engine on, a GET is answered by the fallback download (proxy.download.fallback), not the relay."""
    lone = Cluster(tmp_path, dht_listen="off")
    try:
        node = await lone.add()
        status, fields, body = await lone.get(node, f"{origin.url}/bytes/5000")
        assert status == 200 and body == body_bytes(5000)
        assert fields.getall(REQUEST_ID) == [node.stats.history[-1].id]
        record = await record_of(node, fields[REQUEST_ID])
        assert record["bytes_origin"] == 5000 and record["bytes_peers"] == 0
    finally:
        await lone.close()


async def test_a_websocket_upgrade_carries_it(proxy, origin):
    connection = await RawConnection.open(proxy.addresses["proxy"])
    try:
        await connection.send(f"GET {origin.url}/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                              "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                              "Sec-WebSocket-Version: 13\r\n\r\n".encode())
        switched = await connection.response(head_request=True)
        assert switched.status == 101 and ID.fullmatch(switched.header(REQUEST_ID) or "")
    finally:
        await connection.close()
    assert (await record_of(proxy, switched.header(REQUEST_ID)))["url"] == f"{origin.url}/ws"


@pytest_asyncio.fixture
async def forging_origin():
    """An origin that sends a Swarm-Request field of its own."""
    async def handler(_request: web.Request) -> web.Response:
        return web.Response(text="hi", headers={REQUEST_ID: "0" * 16})

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    await runner.cleanup()


async def test_an_origins_own_field_is_replaced(proxy, forging_origin):
    response = await request(proxy.addresses["proxy"], get(f"{forging_origin}/"))
    assert response.status == 200 and response.body == b"hi"
    assert response.all(REQUEST_ID) == [proxy.stats.history[-1].id] != ["0" * 16]


async def test_never_on_a_connect_tunnel_nor_on_the_proxys_own_answers(proxy, origin):
    connection = await RawConnection.open(proxy.addresses["proxy"])
    try:
        await connection.send(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        established = await connection.response(head_request=True)
        assert established.status == 200 and established.header(REQUEST_ID) is None
        await connection.send(b"GET /bytes/10 HTTP/1.1\r\nHost: x\r\n\r\n")
        inner = await connection.response()  # the origin's, through the tunnel: nothing added
        assert inner.body == body_bytes(10) and inner.header(REQUEST_ID) is None
    finally:
        await connection.close()
    unreachable = await request(proxy.addresses["proxy"], get("http://127.0.0.1:1/"))
    assert unreachable.status == 502 and unreachable.header(REQUEST_ID) is None
    status = await admin_get(proxy, "/_swarm/status")
    assert status.status == 200 and status.header(REQUEST_ID) is None


async def test_unknown_and_expired_ids_are_404(tmp_path, origin):
    server = ProxyServer(proxy_config(tmp_path, request_history="2"))
    await server.start()
    try:
        ids = [(await request(server.addresses["proxy"], get(f"{origin.url}/bytes/{n}"))).header(REQUEST_ID)
               for n in (1, 2, 3)]
        assert (await record_of(server, ids[2]))["bytes"] == 3
        for gone in (ids[0], "nope", "", "x" * 500, "0" * 16):
            response = await admin_get(server, f"/_swarm/requests/{gone}")
            assert response.status == 404, gone
            assert "--request-history" in json.loads(response.body)["error"] and len(response.body) < 400
    finally:
        await server.stop()


async def test_ids_tell_nothing_and_name_nothing_after_a_restart(tmp_path, origin):
    """Random ids: no count of the proxy's requests, nothing two sites could link; none outlives its run."""
    ids = []
    for run in ("a", "b"):
        server = ProxyServer(proxy_config(tmp_path / run))
        await server.start()
        try:
            for _ in range(3):
                response = await request(server.addresses["proxy"], get(f"{origin.url}/bytes/1"))
                ids.append(response.header(REQUEST_ID))
            assert (await admin_get(server, f"/_swarm/requests/{ids[0]}")).status == (200 if run == "a" else 404)
        finally:
            await server.stop()
    assert len(set(ids)) == 6 and all(ID.fullmatch(i) for i in ids)
    assert len({i[:4] for i in ids}) > 1  # no common prefix (a per-run tag) to link them by


async def test_a_signed_urls_credentials_are_redacted(proxy, origin):
    url = f"{origin.url}/bytes/4?md5=AUEnXC7T&expires=2147483647&lang=en"
    response = await request(proxy.addresses["proxy"], get(url))
    record = await record_of(proxy, response.header(REQUEST_ID))
    assert record["url"] == f"{origin.url}/bytes/4?md5=REDACTED&expires=REDACTED&lang=en"


@pytest.mark.parametrize("fields,status", [
    ((), 200),
    (("Via: 1.1 elsewhere",), 403),  # through another proxy
    # A web page that learned an id (a same-origin response of its own, through the proxy) cannot ask for it...
    (("Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors"), 403),
    (("Origin: http://localhost:5555", "Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: cors"), 403),
    # ...while the extension can (Chromium; Firefox says same-origin).
    (("Sec-Fetch-Site: none", "Sec-Fetch-Mode: cors", "Sec-Fetch-Dest: empty"), 200),
    (("Sec-Fetch-Site: same-origin", "Sec-Fetch-Mode: cors", "Sec-Fetch-Dest: empty"), 200),
])
async def test_the_admin_apis_checks_apply(proxy, origin, fields, status):
    record_id = (await request(proxy.addresses["proxy"], get(f"{origin.url}/bytes/1"))).header(REQUEST_ID)
    response = await admin_get(proxy, f"/_swarm/requests/{record_id}", *fields)
    assert response.status == status
    assert (record_id.encode() in response.body) is (status == 200)


async def test_a_host_that_is_not_this_machine_is_refused(proxy, origin):
    record_id = (await request(proxy.addresses["proxy"], get(f"{origin.url}/bytes/1"))).header(REQUEST_ID)
    rebound = await request(proxy.addresses["proxy"],
                            f"GET /_swarm/requests/{record_id} HTTP/1.1\r\nHost: evil.example\r\n\r\n".encode())
    assert rebound.status == 421 and record_id.encode() not in rebound.body
