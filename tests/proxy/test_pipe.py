"""The protocol-level byte pipe of CONNECT tunnels and upgrades (proxy/pipe.py): backpressure that keeps a slow
reader's bytes out of the proxy's memory, half-closes, resets, what the origin or the client says before the
tunnel is up. The pipe alone between real loopback connections, then through the proxy."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import struct
import time

import aiohttp
import pytest
from aiohttp import web

from proxy.pipe import Pipe
from proxy.relay import BODY_PIPE_MIN
from proxy.server import ProxyServer
from proxy.stats import RequestRecord

from .conftest import body_bytes, proxy_config
from .rawhttp import RawConnection

READ_MAX = 256 * 1024  # the most one read hands a protocol: uvloop's 250 kB, asyncio's 256 KiB
BULK = 48 * 1024 * 1024  # well past what loopback's socket buffers take (a few MiB each way)


class _Accepted(asyncio.Protocol):
    """What aiohttp's server protocol is to the pipe: holds the accepted connection, hands over what it read past
    the head (`tail`), is told when the connection is lost."""

    def __init__(self, accepted: asyncio.Future, tail: bytes) -> None:
        self.accepted, self.tail = accepted, tail
        self.transport: asyncio.BaseTransport | None = None
        self.writing_paused = False
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.accepted.set_result(self)

    def set_parser(self, feed) -> None:
        if self.tail:
            feed.feed_data(self.tail)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost.set_result(exc)


class Piped:
    """An origin app and a client app with the pipe between them, each end a real loopback connection."""

    async def start(self, serve, *, idle: float | None = None, tail: bytes = b"") -> Piped:
        loop = asyncio.get_running_loop()
        self.served = loop.create_future()  # the origin app's (reader, writer)

        async def origin_app(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.served.set_result((reader, writer))
            await serve(reader, writer)

        self.origin_server = await asyncio.start_server(origin_app, "127.0.0.1", 0)
        accepted: asyncio.Future = loop.create_future()
        self.listener = await loop.create_server(lambda: _Accepted(accepted, tail), "127.0.0.1", 0)
        self.record = RequestRecord(method="CONNECT", url="x", client="-", started=time.time())
        self.pipe = Pipe(self.record, idle)
        await loop.create_connection(self.pipe.origin_protocol, "127.0.0.1",
                                     self.origin_server.sockets[0].getsockname()[1])
        self.reader, self.writer = await asyncio.open_connection(
            "127.0.0.1", self.listener.sockets[0].getsockname()[1], limit=1 << 20)
        self.aiohttp_side = await accepted
        self.pipe.client.adopt(self.aiohttp_side, self.aiohttp_side.transport, self.aiohttp_side.set_parser)
        self.run = asyncio.ensure_future(self.pipe.run())
        return self

    async def stop(self) -> None:
        self.pipe.close()
        if self.pipe.client.transport is not None:
            self.pipe.client.transport.close()  # what aiohttp's server does once the handler returned
        self.writer.close()
        for server in (self.origin_server, self.listener):
            server.close()
            await server.wait_closed()
        await asyncio.wait_for(self.run, 30)


async def _until(condition) -> None:
    """Let the loop run (bytes move, callbacks fire) until `condition()` holds: no clock, only the loop's turns."""
    while not condition():
        await asyncio.sleep(0)


async def _forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # an origin app that never says a word


async def test_bytes_pass_both_ways_and_what_the_client_got_is_counted():
    async def echo_twice(reader, writer):
        while data := await reader.read(65536):
            writer.write(data * 2)
            await writer.drain()
        writer.close()

    piped = await Piped().start(echo_twice)
    try:
        piped.writer.write(b"ping")
        assert await piped.reader.readexactly(8) == b"pingping"
        assert piped.record.bytes_origin == 8
    finally:
        await piped.stop()


@pytest.mark.parametrize("slow", ["client", "origin"])
async def test_a_reader_that_takes_nothing_holds_the_sender_and_the_proxy_keeps_little(slow):
    """The side that reads nothing fills the sockets' buffers (made small here), then its transport's, which stops
    the pipe reading the other side: the proxy holds at most a high-water mark plus one read however much the
    sender has, takes no more from the sender than the buffers on the way hold, and every byte arrives once the
    reader reads."""
    sent = body_bytes(BULK)
    digest = hashlib.sha256(sent).digest()
    origin_app: list[asyncio.StreamWriter] = []
    go = asyncio.Event()  # once every buffer on the way is small

    async def serve(reader, writer):
        origin_app.append(writer)
        _small_buffers(writer)
        await go.wait()
        if slow == "origin":
            writer.transport.pause_reading()  # an origin that takes nothing until the test says
            got = hashlib.sha256(await reader.readexactly(1))  # resumed: it reads everything, says what it got
            left = BULK - 1
            while left:
                chunk = await reader.read(min(left, 1 << 20))
                got.update(chunk)
                left -= len(chunk)
            writer.write(got.digest())
            await writer.drain()
        else:
            writer.write(sent)
            await writer.drain()

    piped = await Piped().start(serve)
    try:
        towards_reader = piped.pipe.client if slow == "client" else piped.pipe.origin
        sender = piped.pipe.origin if slow == "client" else piped.pipe.client
        # What the proxy may hold towards a reader that takes nothing: its transport's high-water mark, and the
        # read that took it past the mark.
        bound = towards_reader.transport.get_write_buffer_limits()[1] + READ_MAX
        for end in (piped.writer, piped.pipe.client.transport, piped.pipe.origin.transport):
            _small_buffers(end)
        if slow == "client":
            piped.writer.transport.pause_reading()  # a client that takes nothing
        await _until(lambda: origin_app)
        go.set()
        if slow == "origin":
            piped.writer.write(sent)  # the client app's own buffer takes what the sockets do not
        # What left the sender: all but what its own transport still holds.
        taken = (lambda: BULK - origin_app[0].transport.get_write_buffer_size()) if slow == "client" else (
            lambda: BULK - piped.writer.transport.get_write_buffer_size())
        await _until(lambda: not sender.transport.is_reading()
                     or towards_reader.transport.get_write_buffer_size() > bound)
        for _ in range(200):  # while the loop turns, the reader's buffers fill up, and the proxy keeps little
            await asyncio.sleep(0)
            assert towards_reader.transport.get_write_buffer_size() <= bound
        await _until(lambda: not sender.transport.is_reading())
        assert taken() < 4 * 1024 * 1024 < BULK  # the sender is held: most of its bytes are still its own
        if slow == "client":
            piped.writer.transport.resume_reading()
            got, left, most = hashlib.sha256(), BULK, 0
            while left:  # a slow reader: a little at a time, the loop turning between
                chunk = await piped.reader.read(min(left, 1 << 16))
                got.update(chunk)
                left -= len(chunk)
                most = max(most, towards_reader.transport.get_write_buffer_size())
                await asyncio.sleep(0)
            assert got.digest() == digest and most <= bound and piped.record.bytes_origin == BULK
        else:
            origin_app[0].transport.resume_reading()
            assert await asyncio.wait_for(piped.reader.readexactly(32), 60) == digest
    finally:
        await piped.stop()


def _small_buffers(end) -> None:
    """Kernel buffers of 64 KiB on `end`'s socket (Linux doubles it): the pipe's backpressure, not the kernel's
    buffers of several MiB each, is what holds the sender then."""
    sock = end.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)


async def test_the_clients_eof_reaches_the_origin_after_every_byte_and_ends_the_tunnel():
    origin_got = asyncio.get_running_loop().create_future()

    async def read_all(reader, writer):
        origin_got.set_result(await reader.read())  # to EOF
        writer.close()

    piped = await Piped().start(read_all)
    try:
        data = body_bytes(3 * 1024 * 1024)
        piped.writer.write(data)
        piped.writer.write_eof()
        assert await asyncio.wait_for(origin_got, 30) == data
        await asyncio.wait_for(asyncio.shield(piped.run), 30)
        assert await asyncio.wait_for(piped.aiohttp_side.lost, 30) is None  # aiohttp's protocol hears of it
    finally:
        await piped.stop()


async def test_the_origins_eof_ends_the_tunnel_after_every_byte_reached_the_client():
    data = body_bytes(5 * 1024 * 1024 + 3)

    async def send_and_close(reader, writer):
        writer.write(data)
        await writer.drain()
        writer.close()

    piped = await Piped().start(send_and_close)
    try:
        got = await piped.reader.readexactly(len(data))  # read while the origin sends: it is held meanwhile
        await asyncio.wait_for(asyncio.shield(piped.run), 30)
        assert got == data and piped.pipe.ended is None and piped.record.bytes_origin == len(data)
        piped.pipe.client.transport.close()
        assert await piped.reader.read() == b""
    finally:
        await piped.stop()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (RST), not a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def test_an_origin_that_resets_ends_the_tunnel():
    async def reset_after_a_word(reader, writer):
        writer.write(b"hello")
        await writer.drain()
        await reader.readexactly(2)
        _reset(writer)

    piped = await Piped().start(reset_after_a_word)
    try:
        assert await piped.reader.readexactly(5) == b"hello"
        piped.writer.write(b"ok")
        await asyncio.wait_for(asyncio.shield(piped.run), 30)
        assert isinstance(piped.pipe.ended, ConnectionError)
    finally:
        await piped.stop()


async def test_a_client_that_resets_ends_the_tunnel_and_the_origin_is_closed():
    origin_saw = asyncio.get_running_loop().create_future()

    async def wait_for_the_end(reader, writer):
        try:
            origin_saw.set_result(await reader.read())
        except ConnectionError as exc:
            origin_saw.set_result(exc)

    piped = await Piped().start(wait_for_the_end)
    try:
        piped.writer.write(b"x")
        await piped.writer.drain()
        _reset(piped.writer)
        await asyncio.wait_for(asyncio.shield(piped.run), 30)
        assert isinstance(await asyncio.wait_for(piped.aiohttp_side.lost, 30), ConnectionError)
        piped.pipe.close()  # what the CONNECT handler does on its way out
        assert await asyncio.wait_for(origin_saw, 30) == b"x"
    finally:
        await piped.stop()


async def test_what_either_side_said_before_the_pipe_ran_is_passed_on_first():
    async def speak_first(reader, writer):
        writer.write(b"220 banner\r\n")
        await writer.drain()
        writer.write(await reader.readexactly(11))
        await writer.drain()

    piped = await Piped().start(speak_first, tail=b"ClientHello")
    try:
        assert await piped.reader.readexactly(12 + 11) == b"220 banner\r\nClientHello"
    finally:
        await piped.stop()


async def test_the_idle_limit_ends_a_quiet_pipe_and_bytes_put_it_off():
    piped = await Piped().start(_forever, idle=0.5)
    try:
        started = piped.pipe.moved
        for _ in range(3):  # bytes every 0.3 s: no quiet of 0.5 s while they move
            await asyncio.sleep(0.3)  # the pace of the client's bytes, not a wait for a condition
            piped.writer.write(b".")
            assert not piped.run.done()
        await asyncio.wait_for(asyncio.shield(piped.run), 30)
        assert piped.pipe.ended is None and piped.pipe.moved > started
    finally:
        await piped.stop()


# -- through the proxy -----------------------------------------------------------------------------------------------

async def _connect(address: str, port: int, first: bytes = b"") -> RawConnection:
    connection = await RawConnection.open(address)
    await connection.send(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode() + first)
    assert (await connection.response(head_request=True)).status == 200
    return connection


async def test_through_the_proxy_the_origin_speaks_first_and_the_client_sends_with_its_connect(proxy):
    heard = asyncio.get_running_loop().create_future()

    async def banner(reader, writer):
        writer.write(b"220 hello\r\n")  # before any byte of the client's
        await writer.drain()
        heard.set_result(await reader.readexactly(11))
        writer.write(b"bye")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(banner, "127.0.0.1", 0)
    async with server:
        connection = await _connect(proxy.addresses["proxy"], server.sockets[0].getsockname()[1], b"ClientHello")
        assert await connection.reader.readexactly(11) == b"220 hello\r\n"
        assert await asyncio.wait_for(heard, 30) == b"ClientHello"
        assert await connection.reader.readexactly(3) == b"bye"
        assert await connection.closed_by_peer()  # the origin's close ends the tunnel
        await connection.close()
    record = proxy.stats.history[-1]
    assert record.method == "CONNECT" and record.status == 200 and record.bytes == record.bytes_origin == 14


@pytest.mark.parametrize("who", ["origin", "client"])
async def test_through_the_proxy_a_reset_ends_the_tunnel_and_the_proxy_goes_on(proxy, origin, who):
    origin_done = asyncio.get_running_loop().create_future()

    async def talk(reader, writer):
        writer.write(b"hi")
        await writer.drain()
        if who == "origin":
            _reset(writer)
        else:
            try:
                origin_done.set_result(await reader.read())
            except ConnectionError as exc:
                origin_done.set_result(exc)

    server = await asyncio.start_server(talk, "127.0.0.1", 0)
    async with server:
        connection = await _connect(proxy.addresses["proxy"], server.sockets[0].getsockname()[1])
        assert await connection.reader.readexactly(2) == b"hi"
        record = proxy.stats.history[-1]
        if who == "origin":
            assert await asyncio.wait_for(connection.closed_by_peer(), 30)
            assert record.status == 200 and record.bytes_origin == 2  # the tunnel's end, not the proxy's failure
        else:
            _reset(connection.writer)
            outcome = await asyncio.wait_for(origin_done, 30)  # the proxy closed the origin's connection
            assert outcome == b"" or isinstance(outcome, ConnectionError)
            assert record.error == "client_gone: client closed the connection"
        await connection.close()
    after = await _connect(proxy.addresses["proxy"], origin.port)  # the proxy serves on
    await after.send(b"GET /bytes/3 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await after.response()).body == body_bytes(3)
    await after.close()


async def test_through_the_proxy_a_websockets_first_message_sent_with_the_101_arrives(tmp_path):
    async def greet(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str("first")  # most likely in the same segment as the 101: aiohttp's client parser holds it
        async for message in ws:
            await ws.send_str("echo:" + message.data)
        return ws

    app = web.Application()
    app.router.add_get("/ws", greet)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = ProxyServer(proxy_config(tmp_path, tunnel_idle_timeout="30"))
    await server.start()
    try:
        url = f"ws://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/ws"
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(url, proxy=f"http://{server.addresses['proxy']}") as ws:
                assert (await ws.receive(timeout=10)).data == "first"
                await ws.send_str("x" * 300_000)  # several reads each way
                assert (await ws.receive(timeout=10)).data == "echo:" + "x" * 300_000
    finally:
        await server.stop()
        await runner.cleanup()


# -- a large body of known length (proxy.pipe.Body, through the relay) -----------------------------------------------

LARGE = BODY_PIPE_MIN * 4 + 5


async def test_a_large_body_is_relayed_whole_counted_and_the_client_connection_goes_on(proxy, origin):
    connection = await RawConnection.open(proxy.addresses["proxy"])
    try:
        await connection.send(f"GET {origin.url}/stream/{LARGE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        response = await connection.response()
        assert response.status == 200 and response.complete and response.body == body_bytes(LARGE)
        await connection.send(f"GET {origin.url}/bytes/7 HTTP/1.1\r\nHost: x\r\n\r\n".encode())  # kept alive
        assert (await connection.response()).body == body_bytes(7)
    finally:
        await connection.close()
    record = [r for r in proxy.stats.history if r.url.endswith(f"/stream/{LARGE}")][-1]
    assert record.status == 200 and record.error is None and record.bytes_origin == record.bytes == LARGE


@pytest.mark.parametrize("how", ["closes", "falls silent"])
async def test_an_origin_that_stops_mid_large_body_is_a_visible_truncation(tmp_path, origin, how):
    server = ProxyServer(proxy_config(tmp_path, read_timeout="0.5"))
    await server.start()
    path = f"/cut/{LARGE}" if how == "closes" else f"/pause/{LARGE}"
    try:
        connection = await RawConnection.open(server.addresses["proxy"])
        await connection.send(f"GET {origin.url}{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        response = await connection.response()
        assert response.status == 200 and not response.complete and len(response.body) == LARGE // 2
        assert await connection.closed_by_peer()
        await connection.close()
        record = [r for r in server.stats.history if r.url.endswith(path)][-1]
        cause = "ClientPayloadError" if how == "closes" else "SocketTimeoutError"
        assert record.error == f"origin_cut: origin stopped mid-response after {LARGE // 2} bytes: {cause}"
    finally:
        origin.resume.set()
        await server.stop()


async def test_a_client_slower_than_the_read_timeout_is_waited_for_not_blamed_on_the_origin(tmp_path, origin):
    server = ProxyServer(proxy_config(tmp_path, read_timeout="0.5"))
    await server.start()
    size = 32 * 1024 * 1024  # past the sockets' buffers: the proxy holds the origin while the client rests
    try:
        connection = await RawConnection.open(server.addresses["proxy"])
        await connection.send(f"GET {origin.url}/stream/{size} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        head = await connection.reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        got = hashlib.sha256(await connection.reader.readexactly(1 << 20))
        await asyncio.sleep(1.5)  # the client's pace: three read timeouts without reading
        got.update(await connection.reader.readexactly(size - (1 << 20)))
        assert got.digest() == hashlib.sha256(body_bytes(size)).digest()
        await connection.close()
        record = [r for r in server.stats.history if r.url.endswith(f"/stream/{size}")][-1]
        assert record.error is None and record.bytes_origin == size
    finally:
        await server.stop()


async def test_a_client_that_resets_mid_large_body_is_gone_and_the_proxy_goes_on(proxy, origin):
    connection = await RawConnection.open(proxy.addresses["proxy"])
    await connection.send(f"GET {origin.url}/stream/{32 * 1024 * 1024} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await connection.reader.readuntil(b"\r\n\r\n")
    await connection.reader.readexactly(1 << 20)
    _reset(connection.writer)
    record = [r for r in proxy.stats.history if "/stream/" in r.url][-1]
    await _until(lambda: record.error is not None)
    assert record.error.startswith("client_gone")
    after = await _connect(proxy.addresses["proxy"], origin.port)  # the proxy serves on
    await after.close()
