"""A fast local origin for benchmarks, run as its own process.

    python bench/local_origin.py --ready-file F [--tls-cert PEM --tls-key PEM]

Routes: /mem/SIZE (SIZE bytes from a 1 MiB buffer in memory), /file/SIZE (the same bytes from a file
via sendfile, so the origin costs almost no CPU; with an ETag, so a proxy may swarm it), /small (1 KiB). Over
TLS with --tls-cert/--tls-key (bench/https_fetch.py). Writes {"origin": "127.0.0.1:PORT"} to the ready file once
listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import resource
import ssl
import tempfile

from aiohttp import web

CHUNK = bytes(range(256)) * 4096  # 1 MiB
SMALL = b"x" * 1024


async def mem(request: web.Request) -> web.StreamResponse:
    size = int(request.match_info["size"])
    response = web.StreamResponse(headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"})
    await response.prepare(request)
    view = memoryview(CHUNK)
    while size > 0:
        piece = view[: min(size, len(CHUNK))]
        await response.write(piece)
        size -= len(piece)
    await response.write_eof()
    return response


def make_file_route(directory: pathlib.Path):
    async def file(request: web.Request) -> web.StreamResponse:
        size = int(request.match_info["size"])
        path = directory / f"{size}.bin"
        if not path.exists():
            with open(path, "wb") as handle:
                left = size
                while left > 0:
                    handle.write(CHUNK[: min(left, len(CHUNK))])
                    left -= len(CHUNK)
        return web.FileResponse(path)

    return file


async def small(request: web.Request) -> web.StreamResponse:
    return web.Response(body=SMALL, content_type="application/octet-stream")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ready-file", required=True)
    parser.add_argument("--tls-cert", default=None, help="PEM certificate chain: serve HTTPS")
    parser.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    args = parser.parse_args()
    context = None
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    directory = pathlib.Path(tempfile.mkdtemp(prefix="swarmproxy-bench-"))
    app = web.Application()
    app.router.add_get("/mem/{size}", mem)
    app.router.add_get("/file/{size}", make_file_route(directory))
    app.router.add_get("/small", small)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=2048, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    tmp = args.ready_file + ".tmp"
    pathlib.Path(tmp).write_text(json.dumps({"origin": f"127.0.0.1:{port}"}))
    os.replace(tmp, args.ready_file)
    try:
        await asyncio.Future()
    finally:
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
