"""The relay in one event loop with a local origin: methods, headers, bodies, failures as answers."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json

import aiohttp
import pytest
from aiohttp import http_writer

from proxy import relay as relay_module
from proxy.origin_resolver import StaticResolver
from proxy.server import ProxyServer, _ProxyProtocol

from .conftest import body_bytes, proxy_config
from .rawhttp import RawConnection, request


def address(proxy: ProxyServer) -> str:
    return proxy.addresses["proxy"]


def get(url: str, *extra: str) -> bytes:
    lines = [f"GET {url} HTTP/1.1", "Host: ignored.example", *extra, "", ""]
    return "\r\n".join(lines).encode()


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def test_every_method_is_relayed(proxy, origin, method):
    body = b"payload-" + method.encode()
    async with aiohttp.ClientSession() as session:
        async with session.request(method, origin.url + "/echo?q=1", data=body if method != "HEAD" else None,
                                   proxy=proxy.url) as response:
            assert response.status == 200
            if method == "HEAD":
                assert await response.read() == b""
                return
            seen = await response.json()
    assert seen["method"] == method
    assert seen["path"] == "/echo?q=1"
    expected = body if method not in ("HEAD",) else b""
    assert seen["body_sha256"] == hashlib.sha256(expected).hexdigest()


async def test_hop_by_hop_fields_removed_and_via_added_both_ways(proxy, origin):
    response = await request(address(proxy), get(
        origin.url + "/echo", "Connection: keep-alive, X-Secret", "X-Secret: 1", "Keep-Alive: timeout=9",
        "Proxy-Authorization: Basic Zm9vOmJhcg==", "TE: trailers", "X-Keep: yes", "Via: 1.1 browser-cache"))
    seen = json.loads(response.body)
    names = [name.lower() for name, _ in seen["headers"]]
    for hop in ("x-secret", "keep-alive", "proxy-authorization", "te"):
        assert hop not in names
    sent = dict((k.lower(), v) for k, v in seen["headers"] if k.lower() != "via")
    assert sent["x-keep"] == "yes"
    assert sent["host"] == f"127.0.0.1:{origin.port}"  # rebuilt from the URL, not the client's Host
    # Nothing invented: no User-Agent/Accept-Encoding the client did not send.
    assert "user-agent" not in names and "accept-encoding" not in names
    assert [v for k, v in seen["headers"] if k.lower() == "via"] == ["1.1 browser-cache", "1.1 swarmproxy"]
    # Response: the origin's Connection-named X-Hop and Keep-Alive are gone, the rest stays.
    assert response.header("X-Hop") is None and response.header("Keep-Alive") is None
    assert response.header("X-End") == "kept"
    assert response.all("Via") == ["1.1 swarmproxy"]


async def test_content_bytes_untouched(proxy, origin):
    response = await request(address(proxy), get(origin.url + "/gzip", "Accept-Encoding: gzip"))
    assert response.header("Content-Encoding") == "gzip"
    assert gzip.decompress(response.body) == b"hello " * 1000
    assert response.body == gzip.compress(b"hello " * 1000, mtime=0)


async def test_no_content_type_or_server_invented(proxy):
    async def bare_origin(reader, writer):  # aiohttp would add both fields itself, so: raw bytes
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(bare_origin, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        response = await request(address(proxy), get(f"http://127.0.0.1:{port}/"))
    assert response.body == b"hello"
    assert response.header("Content-Type") is None and response.header("Server") is None


async def test_chunked_upload_streams_to_origin_with_100_continue(proxy, origin):
    payload = body_bytes(3 * 1024 * 1024 + 5)
    connection = await RawConnection.open(address(proxy))
    await connection.send((f"POST {origin.url}/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                           "Expect: 100-continue\r\n\r\n").encode())
    interim = await connection.response()
    assert interim.status == 100
    for start in range(0, len(payload), 65536):
        piece = payload[start:start + 65536]
        await connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    await connection.send(b"0\r\n\r\n")
    seen = json.loads((await connection.response()).body)
    await connection.close()
    assert seen["body_size"] == len(payload)
    assert seen["body_sha256"] == hashlib.sha256(payload).hexdigest()
    assert "expect" not in [k.lower() for k, _ in seen["headers"]]


@pytest.mark.parametrize("path,status", [("/redirect", 302), ("/status/404", 404), ("/status/500", 500),
                                         ("/status/204", 204), ("/status/418", 418)])
async def test_status_and_redirects_passed_back(proxy, origin, path, status):
    response = await request(address(proxy), get(origin.url + path))
    assert response.status == status
    if status == 302:
        assert response.header("Location") == "/bytes/10"


async def test_keep_alive_serves_several_requests_on_one_connection(proxy, origin):
    connection = await RawConnection.open(address(proxy))
    for size in (10, 100000, 0, 7):
        await connection.send(get(f"{origin.url}/bytes/{size}"))
        response = await connection.response()
        assert response.status == 200 and response.body == body_bytes(size)
    await connection.close()


async def test_origin_connections_are_pooled_across_clients(proxy, origin):
    ports = set()
    for _ in range(3):  # three client connections in turn, one origin connection
        seen = json.loads((await request(address(proxy), get(origin.url + "/echo"))).body)
        ports.add(seen["peer_port"])
    assert len(ports) == 1


@pytest.mark.parametrize("path", ["/cut/200000", "/cut-chunked"])
async def test_origin_dying_mid_body_is_a_visible_truncation(proxy, origin, path):
    connection = await RawConnection.open(address(proxy))
    await connection.send(get(origin.url + path))
    response = await connection.response()
    assert response.status == 200
    assert not response.complete  # never a clean end for a short body
    assert await connection.closed_by_peer()
    await connection.close()
    assert (await request(address(proxy), get(origin.url + "/bytes/5"))).body == body_bytes(5)
    record = [r for r in proxy.stats.history if r.url.endswith(path)][-1]
    assert record.error.startswith("origin_cut")


async def test_unknown_host_is_502_naming_the_host(tmp_path):
    names = StaticResolver({})  # knows no name, and asks no real DNS
    server = ProxyServer(proxy_config(tmp_path), resolver=names)
    await server.start()
    try:
        response = await request(address(server), get("http://no-such-host.invalid/x"))
    finally:
        await server.stop()
    assert response.status == 502
    assert b"dns: cannot resolve host no-such-host.invalid" in response.body
    assert names.asked == ["no-such-host.invalid"]


async def test_connection_refused_is_502(proxy, unused_tcp_port):
    response = await request(address(proxy), get(f"http://127.0.0.1:{unused_tcp_port}/"))
    assert response.status == 502
    assert b"connection refused" in response.body


async def test_silent_origin_is_504_naming_the_read_timeout(proxy, origin):
    response = await request(address(proxy), get(origin.url + "/silent"))
    assert response.status == 504
    assert b"was silent for 2 s (the proxy's --read-timeout)" in response.body  # the fixture's 2 s
    assert (await request(address(proxy), get(origin.url + "/bytes/3"))).status == 200


@pytest.mark.parametrize("data,status", [
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n", 400),
    (b"GET http://exa mple.com/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET ftp://example.com/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET http:///nohost HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET http://127.0.0.1/ HTTP/1.1\r\nBad Header Line\r\n\r\n", 400),
    (b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431),
])
async def test_malformed_requests_get_an_answer_and_the_proxy_keeps_serving(proxy, origin, data, status):
    connection = await RawConnection.open(address(proxy))
    await connection.send(data)
    response = await connection.response()
    assert response.status == status, response.body
    if status == 431 or data.startswith(b"\x16") or b"Bad Header" in data or b"exa mple" in data:
        assert await connection.closed_by_peer()  # a parse error ends the connection
    await connection.close()
    assert (await request(address(proxy), get(origin.url + "/bytes/4"))).body == body_bytes(4)


async def test_connect_to_a_port_not_allowed_is_403_naming_the_setting(tmp_path, origin):
    server = ProxyServer(proxy_config(tmp_path))  # default --connect-ports 443
    await server.start()
    try:
        response = await request(server.addresses["proxy"],
                                 f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert response.status == 403
        assert b"--connect-ports" in response.body
        after = await request(server.addresses["proxy"], get(origin.url + "/bytes/2"))
        assert after.body == body_bytes(2)
    finally:
        await server.stop()


async def test_connect_tunnels_bytes(proxy, origin):
    connection = await RawConnection.open(address(proxy))
    await connection.send(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    established = await connection.response(head_request=True)
    assert established.status == 200
    assert established.header("Transfer-Encoding") is None and established.header("Content-Length") is None
    # Inside the tunnel: plain HTTP to the origin itself, origin-form.
    await connection.send(b"GET /bytes/1000 HTTP/1.1\r\nHost: x\r\n\r\n")
    inner = await connection.response()
    assert inner.body == body_bytes(1000)
    await connection.close()


async def test_a_tunnel_nobody_uses_is_closed_after_the_tunnel_idle_timeout(tmp_path, origin):
    server = ProxyServer(proxy_config(tmp_path, connect_ports="*", tunnel_idle_timeout="0.3"))
    await server.start()
    try:
        connection = await RawConnection.open(server.addresses["proxy"])
        await connection.send(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await connection.response(head_request=True)).status == 200
        await connection.send(b"GET /bytes/10 HTTP/1.1\r\nHost: x\r\n\r\n")  # used once, then left alone
        assert (await connection.response()).body == body_bytes(10)
        assert await asyncio.wait_for(connection.closed_by_peer(), 30)  # the idle clock, not the origin, ended it
        await connection.close()
    finally:
        await server.stop()


async def test_a_websocket_nobody_uses_is_closed_after_the_tunnel_idle_timeout(tmp_path, origin):
    server = ProxyServer(proxy_config(tmp_path, connect_ports="*", tunnel_idle_timeout="0.3"))
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(origin.url.replace("http", "ws") + "/ws", proxy=f"http://{address(server)}",
                                          autoping=False) as ws:
                await ws.send_str("one")
                assert (await ws.receive(timeout=10)).data == "echo:one"
                message = await ws.receive(timeout=30)  # nothing more is sent either way
                assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)
    finally:
        await server.stop()


async def test_a_tunnel_in_use_outlives_its_idle_timeout(tmp_path, origin):
    """A request sent a byte every 0.05 s (1.85 s in all) through a tunnel with a 1 s idle timeout: it passes and
    is answered, then the quiet ends the tunnel."""
    server = ProxyServer(proxy_config(tmp_path, connect_ports="*", tunnel_idle_timeout="1"))
    await server.start()
    try:
        connection = await RawConnection.open(server.addresses["proxy"])
        await connection.send(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await connection.response(head_request=True)).status == 200
        for byte in b"GET /bytes/1 HTTP/1.1\r\nHost: x\r\n\r\n":
            await asyncio.sleep(0.05)  # the pace of the client's bytes, not a wait for a condition
            await connection.send(bytes([byte]))
        assert (await connection.response()).body == body_bytes(1)
        assert await asyncio.wait_for(connection.closed_by_peer(), 30)  # then the quiet ends it
        await connection.close()
    finally:
        await server.stop()


async def test_websocket_upgrade_through_absolute_form(proxy, origin):
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(origin.url.replace("http", "ws") + "/ws", proxy=proxy.url) as ws:
            for text in ("one", "two" * 10000):
                await ws.send_str(text)
                message = await ws.receive(timeout=10)
                assert message.data == "echo:" + text


async def test_connection_limit_answers_503(tmp_path, origin):
    server = ProxyServer(proxy_config(tmp_path, max_connections="2"))
    await server.start()
    held = [await RawConnection.open(server.addresses["proxy"]) for _ in range(2)]
    try:
        for connection in held:  # make sure both are accepted before the third arrives
            await connection.send(get(origin.url + "/bytes/1"))
            assert (await connection.response()).status == 200
        refused = await RawConnection.open(server.addresses["proxy"])
        response = await refused.response()
        assert response.status == 503 and b"--max-connections" in response.body
        assert await refused.closed_by_peer()
        await refused.close()
        assert server.stats.snapshot()["connections_refused"] == 1
    finally:
        for connection in held:
            await connection.close()
        await server.stop()


async def test_unrelated_origin_form_path_explains_itself(proxy):
    response = await request(address(proxy), b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert response.status == 404
    assert b"forward proxy" in response.body


async def test_client_that_leaves_cancels_the_origin_request(proxy, origin):
    connection = await RawConnection.open(address(proxy))
    await connection.send(get(origin.url + "/silent"))
    await origin.silent_started.wait()  # the request is in flight at the origin
    await connection.close()
    # The proxy drops its origin request instead of keeping it open until the read timeout...
    async with asyncio.timeout(1.5):  # well under the fixture's 2 s read timeout
        await origin.silent_abandoned.wait()
    # ...records it as abandoned, and keeps serving.
    assert any(r.url.endswith("/silent") and r.error.startswith("client_gone") for r in proxy.stats.history)
    assert (await request(address(proxy), get(origin.url + "/bytes/1"))).body == body_bytes(1)


async def test_a_request_cut_by_shutdown_is_not_blamed_on_its_client(tmp_path, origin):
    server = ProxyServer(proxy_config(tmp_path, read_timeout="30"))
    await server.start()
    connection = await RawConnection.open(address(server))
    try:
        await connection.send(get(origin.url + "/silent"))
        await origin.silent_started.wait()  # the request is in flight when the proxy stops
        await server.stop()
    finally:
        await connection.close()
    errors = [r.error for r in server.stats.history if r.url.endswith("/silent")]
    assert errors == ["stopped: swarmproxy shut down"], errors


# The three ways a GET's answer is relayed: the plain relay (no block engine), the fallback download relaying an
# origin it may not share as is, and the fallback streaming one it may share (the tests' origin, listed).
RELAY_PATHS = {"relay": {}, "fallback, not shared": {"peer_listen": "127.0.0.1:0", "share_private_origins": ""},
               "fallback, shared": {"peer_listen": "127.0.0.1:0"}}


@pytest.mark.parametrize("path", RELAY_PATHS)
async def test_a_small_answer_reaches_the_client_in_one_write(tmp_path, origin, monkeypatch, path):
    """Its head waits for the body that came with it: one send to the client instead of two (issue 41's latency).
    Shared, the download's shell feeds the body bytes already read without a turn of the loop (`OriginStream.ready`),
    so they are written in the head's turn too."""
    writes: list[int] = []

    def counted(name: str):
        original = getattr(http_writer.StreamWriter, name)

        def write(self, data):
            if isinstance(self.protocol, _ProxyProtocol):  # the proxy's client, not the origin (in this process)
                writes.append(len(data) if name == "_write" else sum(len(piece) for piece in data))
            return original(self, data)
        return write

    for name in ("_write", "_writelines"):
        monkeypatch.setattr(http_writer.StreamWriter, name, counted(name))
    server = ProxyServer(proxy_config(tmp_path, **RELAY_PATHS[path]))
    await server.start()
    try:
        connection = await RawConnection.open(address(server))
        for size in (1024, 4096, 0):
            writes.clear()
            await connection.send(get(origin.url + f"/bytes/{size}"))
            response = await connection.response()
            assert (response.status, response.body) == (200, body_bytes(size))
            assert len(writes) == 1 and writes[0] > size, writes
        await connection.close()
    finally:
        await server.stop()


@pytest.mark.parametrize("path", RELAY_PATHS)
async def test_a_head_whose_body_has_not_come_goes_out_at_once(tmp_path, path):
    """Holding a head back for its body is only for a body already here: a client of a slow origin sees the head
    as soon as the origin sent it."""
    release = asyncio.Event()

    async def slow_body(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: "5"\r\n\r\n')
        await release.wait()
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    origin = await asyncio.start_server(slow_body, "127.0.0.1", 0)
    port = origin.sockets[0].getsockname()[1]
    server = ProxyServer(proxy_config(tmp_path, **RELAY_PATHS[path]))
    await server.start()
    try:
        connection = await RawConnection.open(address(server))
        await connection.send(get(f"http://127.0.0.1:{port}/slow"))
        async with asyncio.timeout(10):  # the head comes while the origin still holds its body back
            head = await connection.reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        release.set()
        assert await connection.reader.readexactly(5) == b"hello"
        await connection.close()
    finally:
        await server.stop()
        origin.close()
        await origin.wait_closed()


async def test_a_failure_after_a_held_head_ends_the_connection_as_after_a_sent_one(proxy, origin, monkeypatch):
    """The client never gets a 500 in place of the origin's 200 that was prepared: the connection just ends."""
    async def failing_copy(*args, **kwargs):
        raise RuntimeError("a bug while relaying the body")

    monkeypatch.setattr(relay_module, "_copy_body", failing_copy)
    connection = await RawConnection.open(address(proxy))
    await connection.send(get(origin.url + "/bytes/10"))
    async with asyncio.timeout(10):
        seen = await connection.reader.read()  # to the end: the proxy closes the connection
    assert b" 500 " not in seen and seen.count(b"HTTP/1.1 ") <= 1, seen


@pytest.mark.parametrize("path", RELAY_PATHS)
async def test_a_head_whose_body_breaks_off_at_once_still_reaches_the_client(tmp_path, path):
    """The origin sends its head, a little of the body and closes: the client gets that head, then the cut (a head
    held back for its body must not be lost with the body)."""
    async def breaks_off(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\nETag: "cut"\r\n\r\n' + b"x" * 10)
        await writer.drain()
        writer.close()

    origin = await asyncio.start_server(breaks_off, "127.0.0.1", 0)
    port = origin.sockets[0].getsockname()[1]
    server = ProxyServer(proxy_config(tmp_path, **RELAY_PATHS[path]))
    await server.start()
    try:
        connection = await RawConnection.open(address(server))
        await connection.send(get(f"http://127.0.0.1:{port}/cut"))
        async with asyncio.timeout(10):
            seen = await connection.reader.read()  # to the end: the proxy cuts the connection
        assert seen.startswith(b"HTTP/1.1 200 OK\r\n") and len(seen.partition(b"\r\n\r\n")[2]) < 100, seen
        await connection.close()
    finally:
        await server.stop()
        origin.close()
        await origin.wait_closed()
