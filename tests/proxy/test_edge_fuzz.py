"""Fuzzing the HTTP edge: generated and mangled request heads, sent to a running proxy, must each get a
well-formed HTTP/1.1 answer or a close, never a traceback in the log, and the proxy must go on serving.

Targets are only ever loopback addresses (a closed port, the proxy itself) or origin-form, so no example
waits on DNS or on a remote connect; a head left unfinished meets the (short) --header-timeout: 408.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.server import ProxyServer

from .conftest import body_bytes, proxy_config
from .rawhttp import request

STATUS_LINE = re.compile(rb"HTTP/1\.([01]) [1-5][0-9][0-9] [^\r\n]*\r\n")
TOKEN = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
CLOSED_PORT = 1  # tcpmux: nothing listens there on a test machine, so a connect is refused at once


def heads(proxy_port: int) -> st.SearchStrategy[bytes]:
    """Request heads mostly close to valid (so that they reach the admin API, the relay and the tunnel), each
    with a few things wrong, and now and then plain garbage."""

    def mostly(common: list[str], rare: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        # About one part in ten is rare, so that a head has about one thing wrong.
        return st.integers(0, 15).flatmap(lambda n: rare if n == 15 else st.sampled_from(common))

    methods = mostly(["GET", "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "CONNECT", "TRACE", "PATCH"],
                     st.sampled_from(["get", "PRI", "", "G T"]) | st.text(TOKEN, max_size=8))
    targets = mostly([
        "/", "*", "/_swarm/status", "/_swarm/requests?limit=1", "/metrics", "/_swarm/dht", "/_swarm/dht/providers/zz",
        f"http://127.0.0.1:{CLOSED_PORT}/x", f"http://127.0.0.1:{proxy_port}/_swarm/requests",
        f"http://localhost:{proxy_port}/", f"http://[::1]:{CLOSED_PORT}/", f"127.0.0.1:{CLOSED_PORT}",
        f"127.0.0.1:{proxy_port}", f"ws://127.0.0.1:{CLOSED_PORT}/",
    ], st.sampled_from(["http://[::bad/", "ftp://127.0.0.1/", "http:///nohost", "[::1]:", "127.0.0.1:99999", "%zz",
                        ""]) | st.builds(lambda base, tail: base + tail,
                                         st.sampled_from(["/", f"http://127.0.0.1:{CLOSED_PORT}/", "/_swarm/"]),
                                         st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), max_size=40)))
    versions = mostly(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"],
                      st.sampled_from(["", "HTTP/0.9", "HTTP/2.0", "HTTP/1.2", "HTTP/9.9", "http/1.1", "HTTP/1.",
                                       "HTTP/11", "HTTP/1.1 x"]))
    fields = mostly([
        "Host: localhost", f"Host: 127.0.0.1:{proxy_port}", "Host: evil.example", "Content-Length: 0",
        "Content-Length: 5", "Transfer-Encoding: chunked", "Connection: close", "Connection: keep-alive",
        "Connection: Upgrade", "Upgrade: websocket", "Expect: 100-continue", "Via: 1.1 swarmproxy",
        "Proxy-Connection: keep-alive", "Accept: */*",
    ], st.builds("{}:{}{}".format,
                 st.sampled_from(["Host", "Content-Length", "Transfer-Encoding", "Connection", "Host ", "X-A",
                                  "TE", "Trailer"]) | st.text(TOKEN, min_size=1, max_size=12),
                 st.sampled_from([" ", "", "\t", "  "]),
                 st.sampled_from(["-1", "1e3", "99999999999999999999", "gzip, chunked", "chunked, gzip", ""]) |
                 st.text(st.characters(min_codepoint=0x00, max_codepoint=0xff), max_size=30)))
    endings = mostly(["\r\n"], st.sampled_from(["\n", "\r", "\r\r\n"]))
    separators = mostly([" "], st.sampled_from(["  ", "\t", ""]))

    @st.composite
    def head(draw) -> bytes:
        line = draw(methods) + draw(separators) + draw(targets)
        version = draw(versions)
        if version:
            line += draw(separators) + version
        # Host first, as a client sends it (its absence and odd values come from `fields` now and then).
        hosts = [] if draw(st.integers(0, 5)) == 5 else [draw(st.sampled_from(["localhost", "127.0.0.1", "x"]))]
        lines = [line] + [f"Host: {host}" for host in hosts] + [draw(fields) for _ in range(draw(st.integers(0, 3)))]
        text = "".join(part + draw(endings) for part in lines)
        if draw(st.integers(0, 9)) < 9:  # mostly finished heads; the rest wait for --header-timeout
            text += "\r\n"
        # Bytes after the head: a body, the start of a pipelined request, or garbage.
        after = st.binary(max_size=32) if draw(st.integers(0, 3)) == 3 else st.sampled_from([b"", b"hello"])
        return text.encode("latin-1") + draw(after)

    return st.integers(0, 9).flatmap(lambda n: st.binary(min_size=1, max_size=200) if n == 9 else head())


def exchange(address: str, data: bytes) -> bytes:
    """Send `data` on a new connection; what came back up to the end of the response head (b'' for a close)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        received = b""
        try:
            sock.sendall(data)
            while b"\r\n\r\n" not in received:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy closed while we sent or read (a reset may take an answer with it): a close
        except TimeoutError:
            raise AssertionError(f"the proxy neither answered nor closed within 10 s: {data[:200]!r}") from None
        return received


@pytest.mark.timeout(120)
async def test_request_heads_get_http_1_1_answers_or_a_close(tmp_path, origin, caplog):
    caplog.set_level(logging.WARNING)
    server = ProxyServer(proxy_config(tmp_path, header_timeout="0.2", idle_timeout="0.2", connect_ports="*",
                                      connect_timeout="2"))
    await server.start()
    address = server.addresses["proxy"]
    proxy_port = int(address.rsplit(":", 1)[1])

    @settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(heads(proxy_port))
    def fuzz(data: bytes) -> None:
        answer = exchange(address, data)
        if not answer:
            return
        match = STATUS_LINE.match(answer)
        assert match, f"{data[:200]!r} got {answer[:200]!r}"
        assert b"\r\n\r\n" in answer, f"{data[:200]!r} got a cut-off head {answer[:200]!r}"
        if match.group(1) == b"0":  # HTTP/1.0 only in answer to a request that said HTTP/1.0
            assert b"HTTP/1.0" in data, f"{data[:200]!r} got {answer[:200]!r}"

    try:
        await asyncio.to_thread(fuzz)
        response = await request(address, f"GET {origin.url}/bytes/100 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert response.status == 200 and response.body == body_bytes(100)
    finally:
        await server.stop()
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not failures, [f"{r.name}: {r.getMessage()}" for r in failures[:5]]
