"""The client edge (issue 19, item 5): who the admin API answers, the proxy never forwarding to itself,
redacted URLs, the request-head and idle clocks, 503 over the limit on uvloop, and HTTP/1.1 status lines.

No test sleeps: a clock is shown to have run out by what the proxy does when it does (a 408, a close), and a
tunnel or download is shown to outlive the clocks by a "witness" connection opened after it, whose own clock
(the same length) must run out first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.http import SERVER_SOFTWARE

from proxy import edge
from proxy.server import ProxyServer

from .conftest import body_bytes, proxy_config
from .rawhttp import RawConnection, request

CLOCK = "0.5"  # seconds: --header-timeout / --idle-timeout where a test waits for one to run out
LONG = "30"  # a clock that must not be the one that acts in a test (its pytest timeout comes first)
SECRET = "c2VjcmV0LXNpZ25hdHVyZQ"  # a signature value that must never be shown


@pytest.fixture
async def edge_proxy(tmp_path, request):
    """The proxy with the clocks a test asks for (`@pytest.mark.parametrize('edge_proxy', [...], indirect=True)`
    or both short by default)."""
    overrides = {"header_timeout": CLOCK, "idle_timeout": CLOCK, "connect_ports": "*", **getattr(request, "param", {})}
    server = ProxyServer(proxy_config(tmp_path, **overrides))
    await server.start()
    yield server
    await server.stop()


def addr(server: ProxyServer) -> str:
    return server.addresses["proxy"]


def port(server: ProxyServer) -> int:
    return int(addr(server).rsplit(":", 1)[1])


async def clocks_ran_out(server: ProxyServer) -> None:
    """Return once a connection opened now has been timed out by the proxy (408): every clock of a connection
    opened earlier, at most as long (the fixture sets both to CLOCK), has run out by then too."""
    witness = await RawConnection.open(addr(server))
    await witness.send(b"G")
    assert (await witness.response()).status == 408
    assert await witness.closed_by_peer()
    await witness.close()


# --- the admin API: loopback names in Host, no proxy in between, nothing through the proxy itself ---

async def admin(server: ProxyServer, path: str, host: str | None, *extra: str, version: str = "1.1"):
    fields = ([f"Host: {host}"] if host is not None else []) + list(extra)
    head = f"GET {path} HTTP/{version}\r\n" + "".join(f"{f}\r\n" for f in fields) + "\r\n"
    return await request(addr(server), head.encode())


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:{port}", "localhost.:{port}", "127.0.0.1", "127.0.0.1:{port}",
                                  "127.8.9.10:{port}", "[::1]", "[::1]:{port}", "[::ffff:127.0.0.1]:{port}"])
async def test_admin_answers_loopback_names(edge_proxy, host):
    response = await admin(edge_proxy, "/_swarm/status", host.format(port=port(edge_proxy)))
    assert response.status == 200, response.body
    assert json.loads(response.body)["listen"]["proxy"] == addr(edge_proxy)


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "localhost:{other}", "127.0.0.1:{other}",
                                  "127.0.0.1.evil.example:{port}", "localhost.evil.example", "2130706433:{port}",
                                  "[::2]:{port}", "::1", "localhost:", "", None])
async def test_admin_refuses_other_hosts_421_dns_rebinding(edge_proxy, origin, host):
    """A page whose name was rebound to 127.0.0.1 reaches the proxy from loopback with its own name as Host."""
    await request(addr(edge_proxy), f"GET {origin.url}/bytes/3?sig={SECRET} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    host = None if host is None else host.format(port=port(edge_proxy), other=port(edge_proxy) + 1)
    for path in ("/_swarm/requests", "/_swarm/status", "/metrics"):
        response = await admin(edge_proxy, path, host, version="1.1" if host is not None else "1.0")
        assert response.status == 421, (host, response.status)
        assert b"localhost, 127.0.0.1 or [::1]" in response.body
        assert b"/bytes/3" not in response.body


async def test_admin_refuses_requests_that_came_through_a_proxy(edge_proxy):
    response = await admin(edge_proxy, "/_swarm/requests", "127.0.0.1", "Via: 1.1 swarmproxy")
    assert response.status == 403 and b"came through a proxy" in response.body


@pytest.mark.parametrize("target", [
    "http://127.0.0.1:{port}/_swarm/requests", "http://localhost:{port}/_swarm/requests",
    "http://LocalHost.:{port}/_swarm/requests", "http://0.0.0.0:{port}/_swarm/requests",
    "http://[::ffff:127.0.0.1]:{port}/_swarm/requests", "http://[::]:{port}/metrics",
])
async def test_proxy_refuses_to_forward_to_itself(edge_proxy, origin, target):
    await request(addr(edge_proxy), f"GET {origin.url}/bytes/3?sig={SECRET} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    target = target.format(port=port(edge_proxy))
    response = await request(addr(edge_proxy), f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert response.status == 403 and b"is this proxy itself" in response.body
    assert b"/bytes/3" not in response.body
    connect = await request(addr(edge_proxy),
                            f"CONNECT 127.0.0.1:{port(edge_proxy)} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert connect.status == 403 and b"is this proxy itself" in connect.body


class _ReboundDns(AbstractResolver):
    """A rebinding attacker's DNS: its name resolves to 127.0.0.1."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[ResolveResult]:
        assert host == "rebound.example", host
        return [ResolveResult(hostname=host, host="127.0.0.1", port=port, family=socket.AF_INET, proto=0,
                              flags=socket.AI_NUMERICHOST)]

    async def close(self) -> None:
        pass


async def test_proxy_reached_again_under_a_rebound_name_is_still_refused(edge_proxy, origin, monkeypatch):
    """A name the proxy cannot see through before connecting: the request goes out, comes back to the proxy,
    and the admin API refuses it (our Via on it, and a Host that is no loopback name)."""
    monkeypatch.setattr(edge_proxy._session.connector, "_resolver", _ReboundDns())
    await request(addr(edge_proxy), f"GET {origin.url}/bytes/3?sig={SECRET} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    target = f"http://rebound.example:{port(edge_proxy)}/_swarm/requests"
    response = await request(addr(edge_proxy), f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert response.status == 403 and b"came through a proxy" in response.body
    assert b"/bytes/3" not in response.body


async def test_request_history_and_access_log_redact_credentials(edge_proxy, origin, caplog):
    caplog.set_level(logging.INFO, logger="swarmproxy.access")
    url = f"{origin.url}/bytes/5?X-Amz-Signature={SECRET}&token={SECRET}"
    response = await request(addr(edge_proxy), f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert response.status == 200 and response.body == body_bytes(5)
    await edge_proxy.stats.wait_for_requests(1)
    shown = (await admin(edge_proxy, "/_swarm/requests", "localhost")).body.decode()
    assert SECRET not in shown and "REDACTED" in shown and f"{origin.url}/bytes/5?" in shown
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "swarmproxy.access")
    assert "/bytes/5?" in logged and SECRET not in logged


# --- status lines: HTTP/1.1, and 505 for versions other than 1.0 and 1.1 ---

@pytest.mark.parametrize("head,status", [
    (b"GET /\r\n\r\n", 505),  # HTTP/0.9: no version at all
    (b"GET http://127.0.0.1:1/ HTTP/0.9\r\n\r\n", 505),
    (b"GET /_swarm/status HTTP/2.0\r\nHost: localhost\r\n\r\n", 505),
    (b"GET http://127.0.0.1:1/ HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET / HTTP/1.2\r\nHost: localhost\r\n\r\n", 505),
    (b"GET / HTTP/3.0\r\nHost: localhost\r\n\r\n", 505),
    (b"NOT HTTP AT ALL\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
    (b"GET / HTTP/1.1\r\nBad Header Line\r\n\r\n", 400),
])
async def test_answers_say_http_1_1(edge_proxy, head, status):
    connection = await RawConnection.open(addr(edge_proxy))
    await connection.send(head)
    response = await connection.response()
    assert (response.version, response.status) == ("HTTP/1.1", status), response.body
    if status == 505:
        assert b"HTTP/1.1 and HTTP/1.0" in response.body
    assert await connection.closed_by_peer()
    await connection.close()


# --- our own words for what was wrong (issue 23 §3), and no aiohttp Server field on our own answers ---

@pytest.mark.parametrize("head,status,says", [
    (b"GET http://127.0.0.1:99999/x HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n\r\n", 400,
     b"invalid URL http://127.0.0.1:99999/x: port out of range 0-65535"),
    (b"CONNECT nohostport HTTP/1.1\r\n\r\n", 400, b"a CONNECT target is always host:port"),
    (b"CONNECT nohostport HTTP/1.1\r\nHost: nohostport\r\n\r\n", 400, b"'nohostport' is not host:port"),
    (b"GET http://example.com/a b HTTP/1.1\r\nHost: example.com\r\n\r\n", 400,
     b"malformed request line: expected 'METHOD TARGET HTTP/1.1'"),
    (b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n", 502, b"connection refused"),
    (b"GET /_swarm/status HTTP/1.1\r\nHost: localhost\r\n\r\n", 200, b'"version"'),
])
async def test_own_answers_say_why_and_name_no_server(edge_proxy, head, status, says):
    connection = await RawConnection.open(addr(edge_proxy))
    await connection.send(head)
    response = await connection.response()
    assert response.status == status, response.body
    assert says in response.body
    assert b"aiohttp" not in response.body and b"Bad status line" not in response.body
    assert response.header("Server") is None
    await connection.close()


async def test_relayed_answers_keep_the_origins_server_field(edge_proxy, origin):
    host = origin.url.removeprefix("http://")
    response = await request(addr(edge_proxy), f"GET {origin.url}/bytes/10 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    assert response.status == 200
    assert response.header("Server") == SERVER_SOFTWARE  # the (aiohttp) origin's own


# --- the request-head clock and the idle clock ---

@pytest.mark.timeout(20)
@pytest.mark.parametrize("edge_proxy", [{"idle_timeout": LONG}], indirect=True)
async def test_late_request_head_is_answered_408_and_closed(edge_proxy):
    slow = await RawConnection.open(addr(edge_proxy))
    await slow.send(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")  # never finished
    response = await slow.response()
    assert (response.version, response.status) == ("HTTP/1.1", 408) and b"--header-timeout" in response.body
    assert await slow.closed_by_peer()
    assert edge_proxy.stats.snapshot()["header_timeouts"] == 1


@pytest.mark.timeout(20)
@pytest.mark.parametrize("edge_proxy", [{"idle_timeout": LONG}], indirect=True)
async def test_connection_that_sends_nothing_is_closed_after_the_header_timeout(edge_proxy):
    silent = await RawConnection.open(addr(edge_proxy))
    assert await silent.reader.read() == b""  # closed, and nothing said to a client that asked nothing


@pytest.mark.timeout(20)
@pytest.mark.parametrize("edge_proxy", [{"header_timeout": LONG}], indirect=True)
async def test_idle_kept_alive_connection_is_closed(edge_proxy):
    connection = await RawConnection.open(addr(edge_proxy))
    await connection.send(b"GET /_swarm/status HTTP/1.1\r\nHost: localhost\r\n\r\n")
    response = await connection.response()
    assert response.status == 200 and response.header("Connection") != "close"
    assert await connection.reader.read() == b""


@pytest.mark.timeout(20)
@pytest.mark.parametrize("edge_proxy", [{"idle_timeout": LONG}], indirect=True)
async def test_next_head_on_a_kept_alive_connection_is_timed_from_its_first_byte(edge_proxy):
    connection = await RawConnection.open(addr(edge_proxy))
    await connection.send(b"GET /_swarm/status HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert (await connection.response()).status == 200
    await connection.send(b"GET /_swarm/status HTTP/1.1\r\n")
    assert (await connection.response()).status == 408
    assert await connection.closed_by_peer()


@pytest.mark.timeout(20)
async def test_connect_tunnel_outlives_the_clocks(edge_proxy, origin):
    tunnel = await RawConnection.open(addr(edge_proxy))
    await tunnel.send(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert (await tunnel.response(head_request=True)).status == 200
    await clocks_ran_out(edge_proxy)
    await tunnel.send(b"GET /bytes/1000 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await tunnel.response()).body == body_bytes(1000)
    await tunnel.close()


@pytest.mark.timeout(20)
async def test_download_that_pauses_outlives_the_clocks(edge_proxy, origin):
    size = 100_000
    download = await RawConnection.open(addr(edge_proxy))
    await download.send(f"GET {origin.url}/pause/{size} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await origin.paused.wait()
    await clocks_ran_out(edge_proxy)
    origin.resume.set()
    response = await download.response()
    assert response.complete and response.body == body_bytes(size)
    await download.close()


@pytest.mark.timeout(20)
async def test_slow_upload_body_is_not_timed_as_a_head(edge_proxy, origin):
    upload = await RawConnection.open(addr(edge_proxy))
    await upload.send(f"POST {origin.url}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello".encode())
    await clocks_ran_out(edge_proxy)
    await upload.send(b"world")
    response = await upload.response()
    assert response.status == 200 and json.loads(response.body)["body_size"] == 10
    await upload.close()


# --- over --max-connections, on the loop that ships ---

@pytest.mark.timeout(20)
async def test_over_the_limit_is_503_on_uvloop_not_a_reset(tmp_path, caplog):
    import uvloop

    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)  # tests/proxy/conftest.py runs tests on uvloop
    server = ProxyServer(proxy_config(tmp_path, max_connections="2"))
    await server.start()
    held = [await RawConnection.open(addr(server)) for _ in range(2)]
    try:
        for connection in held:  # both answered: both are counted before the next one arrives
            await connection.send(b"GET /_swarm/status HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert (await connection.response()).status == 200
        for _ in range(3):  # each one asks at once: the 503 must survive the request it did not read
            refused = await RawConnection.open(addr(server))
            await refused.send(b"GET /_swarm/status HTTP/1.1\r\nHost: localhost\r\n\r\n")
            response = await refused.response()
            assert (response.version, response.status) == ("HTTP/1.1", 503)
            assert b"--max-connections" in response.body and response.header("Retry-After") == "1"
            assert await refused.closed_by_peer()
            await refused.close()
        assert server.stats.snapshot()["connections_refused"] == 3
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        for connection in held:
            await connection.close()
        await server.stop()


# --- the pure decisions ---

@pytest.mark.parametrize("value,expected", [
    ("localhost", ("localhost", None)), ("localhost:8080", ("localhost", 8080)), ("[::1]:80", ("::1", 80)),
    ("[::1]", ("::1", None)), ("127.0.0.1:08080", ("127.0.0.1", 8080)), ("::1", None), ("[::1", None),
    ("[::1]x", None), ("host:", None), (":80", None), ("", None), ("host:8o", None), ("a:1:2", None),
    ("host:٣", None),
])
def test_split_host(value, expected):
    assert edge.split_host(value) == expected


@pytest.mark.parametrize("host,via,expected", [
    ("localhost:8080", None, None), ("127.0.0.1", None, None), ("[::1]:8080", None, None),
    ("evil.example:8080", None, 421), ("localhost:8081", None, 421), (None, None, 421),
    ("localhost", "1.1 swarmproxy", 403), ("localhost", "", 403),
])
def test_admin_refusal(host, via, expected):
    refusal = edge.admin_refusal(host, via, 8080)
    assert (refusal and refusal[0]) == expected


@pytest.mark.parametrize("host,port,listen,expected", [
    ("127.0.0.1", 8080, "127.0.0.1", True), ("localhost", 8080, "127.0.0.1", True),
    ("0.0.0.0", 8080, "127.0.0.1", True), ("::", 8080, "127.0.0.1", True), ("[::1]", 8080, "::1", True),
    ("::ffff:127.0.0.1", 8080, "127.0.0.1", True), ("127.0.0.2", 8080, "0.0.0.0", True), ("::1", 8080, "0.0.0.0", True),
    ("192.168.1.5", 8080, "192.168.1.5", True), ("127.0.0.1", 8081, "127.0.0.1", False),
    ("127.0.0.2", 8080, "127.0.0.1", False), ("example.com", 8080, "127.0.0.1", False),
    ("192.168.1.5", 8080, "0.0.0.0", False), ("127.0.0.1", None, "127.0.0.1", False),
])
def test_reaches_listener(host, port, listen, expected):
    assert edge.reaches_listener(host, port, listen, 8080) is expected


@pytest.mark.parametrize("version,refused", [((1, 1), False), ((1, 0), False), ((0, 9), True), ((2, 0), True),
                                             (None, True)])
def test_version_refusal(version, refused):
    assert (edge.version_refusal(version) is not None) is refused


def test_closing_response_is_whole_http_1_1():
    raw = edge.closing_response(408, "too late", extra=(("Retry-After", "1"),))
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 408 Request Timeout" and body == b"too late\n"
    assert b"Connection: close" in lines and b"Retry-After: 1" in lines and b"Content-Length: 9" in lines


def test_parse_error_summary_drops_the_quoted_request():
    text = "Bad status line:\n  Invalid HTTP version:\n\n  b'GET /?sig=secret HTTP/1.2'\n        ^"
    assert edge.parse_error_summary(text) == "Bad status line: Invalid HTTP version"
