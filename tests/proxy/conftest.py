"""Fixtures for the proxy tests: a scriptable local origin, a TLS origin, the proxy in-process and as a
real process. Everything binds port 0 on 127.0.0.1; nothing touches the internet."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import ipaddress
import json
import os
import pathlib
import ssl
import sys

import pytest
import pytest_asyncio
import uvloop
from aiohttp import web

from bittorrent.settings import PRIVATE_NETWORK_ENV
from proxy.config import Config
from proxy.server import ProxyServer

ROOT = pathlib.Path(__file__).resolve().parents[2]


def pytest_asyncio_loop_factories(config, item):
    """Every async test here runs on uvloop, the loop `swarmproxy run` ships with (proxy/cli.py): its transports
    differ from asyncio's (e.g. they are not `asyncio.Transport` instances), and a test on the other loop would
    miss what breaks in production."""
    return {"uvloop": _uvloop}


def _uvloop() -> asyncio.AbstractEventLoop:
    loop = uvloop.new_event_loop()
    loop.set_exception_handler(_stop_on_timeout)
    return loop


def _stop_on_timeout(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """pytest-timeout fails a hung test from its SIGALRM handler; uvloop runs that handler as a loop callback
    and swallows what it raises, so the test would hang on. Stopping the loop ends the test (as an error:
    'Event loop stopped before Future completed', after the timeout's message in the log)."""
    loop.default_exception_handler(context)
    if isinstance(context.get("exception"), pytest.fail.Exception):
        loop.stop()
BLOCK = hashlib.sha256(b"swarmproxy test data").digest() * 32768  # 1 MiB of fixed bytes


def body_bytes(size: int) -> bytes:
    return (BLOCK * (size // len(BLOCK) + 1))[:size]


def body_sha256(size: int) -> str:
    digest = hashlib.sha256()
    full, rest = divmod(size, len(BLOCK))
    for _ in range(full):
        digest.update(BLOCK)
    digest.update(BLOCK[:rest])
    return digest.hexdigest()


class Origin:
    """A local origin server with handlers for each behaviour the tests need."""

    def __init__(self) -> None:
        self.app = web.Application(client_max_size=1 << 30)
        self.sent = 0  # body bytes written by /stream, to watch backpressure
        self.silent_started = asyncio.Event()
        self.silent_abandoned = asyncio.Event()
        self.paused = asyncio.Event()  # /pause sent its first half...
        self.resume = asyncio.Event()  # ...and sends the rest once a test sets this
        self.requests: list[dict] = []
        r = self.app.router
        r.add_route("*", "/echo", self.echo)
        r.add_get("/bytes/{size}", self.bytes)
        r.add_get("/stream/{size}", self.stream)
        r.add_get("/redirect", self.redirect)
        r.add_get("/cut/{size}", self.cut)
        r.add_get("/cut-chunked", self.cut_chunked)
        r.add_get("/silent", self.silent)
        r.add_get("/pause/{size}", self.pause)
        r.add_get("/gzip", self.gzip)
        r.add_get("/ws", self.websocket)
        r.add_get("/status/{code}", self.status)
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> Origin:
        self.runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.port = port
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self.runner:
            await self.runner.cleanup()

    async def echo(self, request: web.Request) -> web.StreamResponse:
        digest, size = hashlib.sha256(), 0
        async for chunk in request.content.iter_any():
            digest.update(chunk)
            size += len(chunk)
        info = {
            "method": request.method,
            "path": request.raw_path,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.raw_headers],
            "body_sha256": digest.hexdigest(),
            "body_size": size,
            "version": list(request.version),
            "peer_port": request.transport.get_extra_info("peername")[1],
        }
        self.requests.append(info)
        return web.json_response(info, headers={"Connection": "keep-alive, X-Hop", "X-Hop": "secret",
                                                "Keep-Alive": "timeout=5", "X-End": "kept"})

    async def bytes(self, request: web.Request) -> web.StreamResponse:
        size = int(request.match_info["size"])
        return web.Response(body=body_bytes(size), headers={"ETag": f'"{size}"'},
                            content_type="application/octet-stream")

    async def stream(self, request: web.Request) -> web.StreamResponse:
        size = int(request.match_info["size"])
        response = web.StreamResponse(headers={"Content-Length": str(size)})
        await response.prepare(request)
        full, rest = divmod(size, len(BLOCK))
        for chunk in [BLOCK] * full + [BLOCK[:rest]]:
            await response.write(chunk)
            self.sent += len(chunk)
        await response.write_eof()
        return response

    async def redirect(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/bytes/10")

    async def cut(self, request: web.Request) -> web.StreamResponse:
        size = int(request.match_info["size"])
        response = web.StreamResponse(headers={"Content-Length": str(size)})
        await response.prepare(request)
        await response.write(body_bytes(size // 2))
        request.transport.close()  # die mid-body
        return response

    async def cut_chunked(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b"x" * 5000)
        request.transport.close()
        return response

    async def silent(self, request: web.Request) -> web.StreamResponse:
        self.silent_started.set()
        try:
            await asyncio.Future()  # never answers; the proxy's read timeout must fire
        finally:
            self.silent_abandoned.set()  # cancelled: whoever asked closed the connection
        raise AssertionError

    async def pause(self, request: web.Request) -> web.StreamResponse:
        size = int(request.match_info["size"])
        response = web.StreamResponse(headers={"Content-Length": str(size)})
        await response.prepare(request)
        await response.write(body_bytes(size)[:size // 2])
        self.paused.set()
        await self.resume.wait()
        await response.write(body_bytes(size)[size // 2:])
        await response.write_eof()
        return response

    async def gzip(self, request: web.Request) -> web.StreamResponse:
        import gzip

        return web.Response(body=gzip.compress(b"hello " * 1000, mtime=0),
                            headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            await ws.send_str("echo:" + message.data)
        return ws

    async def status(self, request: web.Request) -> web.StreamResponse:
        code = int(request.match_info["code"])
        return web.Response(status=code, text=f"status {code}\n")


@pytest_asyncio.fixture
async def origin():
    server = await Origin().start()
    yield server
    await server.stop()


def make_cert(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A self-signed certificate for 127.0.0.1 and localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest_asyncio.fixture
async def tls_origin(tmp_path):
    cert, key = make_cert(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = await Origin().start(ssl_context=context)
    server.cert = cert
    yield server
    await server.stop()


@pytest_asyncio.fixture
async def slow_origin():
    """`proxy.demo.slow_origin.SlowOrigin`, unthrottled until a test turns its knobs."""
    from proxy.demo.slow_origin import SlowOrigin

    server = SlowOrigin()
    await server.start()
    yield server
    await server.stop()


def proxy_config(tmp_path: pathlib.Path, **overrides) -> Config:
    """Loopback only; no DHT or block engine unless a test asks for one (and then never off loopback)."""
    flags = {"listen": "127.0.0.1:0", "data_dir": str(tmp_path / "data"), "dht_listen": "off",
             "peer_listen": "off", "no_lan_discovery": True,
             "share_private_origins": "127.0.0.1"}  # the tests' origins, listed as a user lists an office mirror
    flags.update({k: (v if isinstance(v, str) else v) for k, v in overrides.items()})
    return Config.load(flags, environ={})


# Shared with tests/test_stays_local.py, which audits this very proxy on the stdlib loop (uvloop is not audited).
PROXY_FIXTURE_FLAGS = {"connect_ports": "*", "read_timeout": "2", "connect_timeout": "2"}


@pytest_asyncio.fixture
async def proxy(tmp_path):
    """The proxy in this event loop; `proxy.url` is its http://host:port."""
    server = ProxyServer(proxy_config(tmp_path, **PROXY_FIXTURE_FLAGS))
    await server.start()
    server.url = "http://" + server.addresses["proxy"]
    yield server
    await server.stop()


class ProxyProcess:
    """`swarmproxy run` as a real process, started with a ready file (never a guessed port)."""

    def __init__(self, process: asyncio.subprocess.Process, ready: dict, log_path: pathlib.Path) -> None:
        self.process = process
        self.ready = ready
        address = ready["proxy"]
        self.address = address
        self.url = f"http://{address}"
        self.log_path = log_path

    def rss_bytes(self) -> int:
        for line in pathlib.Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


async def start_proxy_process(tmp_path: pathlib.Path, *args: str) -> ProxyProcess:
    ready = tmp_path / "ready.json"
    log_path = tmp_path / "proxy.log"
    # No SWARMPROXY_ setting of the suite's reaches the proxy but the guard, which keeps it off the public network.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMPROXY_") or k == PRIVATE_NETWORK_ENV}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", "run", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
        "--dht-listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--no-lan-discovery", *args,
        cwd=ROOT, env=env, stdout=open(log_path, "wb"), stderr=asyncio.subprocess.STDOUT,
    )
    # The ready file appears once the listener is up; the process exiting first is a failure.
    async with asyncio.timeout(30):
        while not ready.exists():
            if process.returncode is not None:
                raise AssertionError(f"proxy exited with {process.returncode}: {log_path.read_text()}")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), 0.05)
    return ProxyProcess(process, json.loads(ready.read_text()), log_path)


@pytest_asyncio.fixture
async def proxy_process(tmp_path):
    proc = await start_proxy_process(tmp_path, "--connect-ports", "*", "--read-timeout", "5")
    yield proc
    if proc.process.returncode is None:
        proc.process.terminate()
        await proc.process.wait()


async def run_tool(*argv: str, timeout: float = 120, stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    """Run curl/wget without blocking the event loop the origin lives in."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()},
    )
    async with asyncio.timeout(timeout):
        out, err = await process.communicate(stdin)
    return process.returncode, out, err
