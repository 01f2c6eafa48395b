"""Attacks on the proxy's client edge, against `swarmproxy run` as a real process (issue 19, item 5).

    python bench/attacks/edge.py [--tree DIR] [--max-connections 100] [--slowloris 200] [--hold 15]
                                 [--over 200] [--json FILE] [-- EXTRA SWARMPROXY FLAGS]

1. slowloris: opens --slowloris connections that each send a request head one header line per --drip
   seconds and never finish it. Reports how many the proxy answered at once (503 over --max-connections),
   how many are still open after --hold seconds, and whether one normal client (a GET through the proxy to
   a local origin) is served while they hold the slots (t = 1 s) and after --hold seconds.
2. over the limit: fills --max-connections with kept-alive connections (each has had one answer, so each is
   counted), then opens --over more, each sending a request at once, and counts what they get: a 503, a
   reset, a close without an answer, or anything else. The proxy's log is searched for tracebacks.

--tree picks the source tree whose proxy runs (default: this checkout), so the same script measures a
worktree of an older commit: `git worktree add /tmp/base HEAD~1; python bench/attacks/edge.py --tree /tmp/base`.
Prints JSON (also written to --json) and the command that produced it. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.server
import json
import os
import pathlib
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time

from bittorrent.settings import PRIVATE_NETWORK_ENV

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONNECT_TIMEOUT_S = 5.0  # one client's connect + answer; far beyond a loopback round trip


class _Origin(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def start_origin() -> tuple[http.server.ThreadingHTTPServer, int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def start_proxy(tree: pathlib.Path, workdir: pathlib.Path,
                args: argparse.Namespace) -> tuple[subprocess.Popen, str, list[str]]:
    ready = workdir / "ready.json"
    argv = [args.python, "-m", "proxy.cli", "run", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
            "--data-dir", str(workdir / "data"), "--dht-listen", "off", "--peer-listen", "off",
            "--no-lan-discovery", "--max-connections", str(args.max_connections), *args.extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMPROXY_") or k == PRIVATE_NETWORK_ENV}
    env["PYTHONPATH"] = str(tree)
    process = subprocess.Popen(argv, cwd=tree, env=env, stdout=open(workdir / "proxy.log", "wb"),
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not ready.exists():  # the proxy writes it once it listens
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"swarmproxy did not start: {(workdir / 'proxy.log').read_text()}")
        time.sleep(0.05)
    return process, json.loads(ready.read_text())["proxy"], argv


async def normal_client(proxy: str, origin_port: int) -> str:
    """What one ordinary client gets: 'served' (200), 'HTTP <status>', 'reset', 'closed' or 'timeout'."""
    host, port = proxy.rsplit(":", 1)
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(f"GET http://127.0.0.1:{origin_port}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             "Connection: close\r\n\r\n".encode())
                await writer.drain()
                line = await reader.readline()
            finally:
                writer.close()
    except TimeoutError:
        return "timeout"
    except ConnectionError:
        return "reset"
    return _classify(line)


def _classify(line: bytes) -> str:
    if not line:
        return "closed"
    parts = line.split()
    if len(parts) >= 2 and parts[1] == b"200":
        return "served"
    return "HTTP " + (parts[1].decode("latin-1") if len(parts) >= 2 else repr(line[:40]))


class Slowloris:
    """One connection sending a request head one line at a time, never the blank line that ends it."""

    def __init__(self) -> None:
        self.outcome: str | None = None  # None while the connection is open
        self.closed_at: float | None = None

    async def run(self, proxy: str, origin_port: int, drip: float, started: float) -> None:
        host, port = proxy.rsplit(":", 1)
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError as exc:
            self.outcome, self.closed_at = f"connect failed: {exc.strerror}", 0.0
            return
        writer.write(f"GET http://127.0.0.1:{origin_port}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())

        async def drip_lines() -> None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                while True:
                    await asyncio.sleep(drip)
                    writer.write(b"X-Slow: 1\r\n")
                    await writer.drain()

        dripping = asyncio.create_task(drip_lines())
        try:
            line = await reader.readline()  # returns when the proxy answers or closes
            self.outcome = _classify(line) if line else "closed"
        except ConnectionError:
            self.outcome = "reset"
        finally:
            self.closed_at = time.monotonic() - started
            dripping.cancel()
            writer.close()


async def slowloris(proxy: str, origin_port: int, args: argparse.Namespace) -> dict:
    started = time.monotonic()
    attackers = [Slowloris() for _ in range(args.slowloris)]
    tasks = [asyncio.create_task(a.run(proxy, origin_port, args.drip, started)) for a in attackers]
    await asyncio.sleep(1.0)
    open_at_1s = sum(a.outcome is None for a in attackers)
    during = await normal_client(proxy, origin_port)
    await asyncio.sleep(max(0.0, args.hold - (time.monotonic() - started)))
    open_after_hold = sum(a.outcome is None for a in attackers)
    after = await normal_client(proxy, origin_port)
    outcomes: dict[str, int] = {}
    ended_at: dict[str, list[float]] = {}  # per outcome: when the proxy answered or closed, s after the start
    for attacker in attackers:
        key = attacker.outcome or "still open"
        outcomes[key] = outcomes.get(key, 0) + 1
        if attacker.closed_at is not None:
            ended_at.setdefault(key, []).append(attacker.closed_at)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "connections": args.slowloris, "open_after_1s": open_at_1s, "hold_s": args.hold,
        f"open_after_{args.hold:g}s": open_after_hold, "outcomes": outcomes,
        "ended_at_s": {key: {"first": round(min(times), 2), "last": round(max(times), 2)}
                       for key, times in ended_at.items()},
        "normal_client_at_1s": during, f"normal_client_at_{args.hold:g}s": after,
    }


async def over_limit(proxy: str, origin_port: int, args: argparse.Namespace) -> dict:
    host, port = proxy.rsplit(":", 1)
    holders = []
    for _ in range(args.max_connections):  # each answered once, so the proxy counts it before we go on
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"GET http://127.0.0.1:{origin_port}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await writer.drain()
        await reader.readuntil(b"ok\n")
        holders.append(writer)
    results = await asyncio.gather(*(normal_client(proxy, origin_port) for _ in range(args.over)))
    for writer in holders:
        writer.close()
    counts: dict[str, int] = {}
    for result in results:
        key = "503" if result == "HTTP 503" else result
        counts[key] = counts.get(key, 0) + 1
    return {"held": args.max_connections, "over_limit_clients": args.over, "got": counts}


async def measure(proxy: str, origin_port: int, args: argparse.Namespace) -> dict:
    return {"slowloris": await slowloris(proxy, origin_port, args),
            "over_limit": await over_limit(proxy, origin_port, args)}


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=pathlib.Path, default=ROOT, help="source tree to run (default: this one)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the proxy (default: this one)")
    parser.add_argument("--max-connections", type=int, default=100, help="the proxy's --max-connections (100)")
    parser.add_argument("--slowloris", type=int, default=200, help="slowloris connections (200)")
    parser.add_argument("--drip", type=float, default=1.0, help="seconds between a slowloris's header lines (1)")
    parser.add_argument("--hold", type=float, default=15.0,
                        help="seconds after which open slowloris connections are counted (15; the proxy's "
                             "--header-timeout defaults to 10)")
    parser.add_argument("--over", type=int, default=200, help="clients sent over the limit (200)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    parser.add_argument("extra", nargs="*", help="more flags for swarmproxy run (after --)")
    args = parser.parse_args(argv)
    _raise_fd_limit()
    origin, origin_port = start_origin()
    with tempfile.TemporaryDirectory(prefix="edge-attack-") as tmp:
        workdir = pathlib.Path(tmp)
        process, proxy, proxy_argv = start_proxy(args.tree.resolve(), workdir, args)
        try:
            results = asyncio.run(measure(proxy, origin_port, args))
        finally:
            process.terminate()
            process.wait(timeout=30)
            origin.shutdown()
        log = (workdir / "proxy.log").read_text(errors="replace")
    git = subprocess.run(["git", "-C", str(args.tree), "describe", "--always", "--dirty"],
                         capture_output=True, text=True)
    results.update(
        tree=str(args.tree.resolve()), commit=git.stdout.strip() or None,
        proxy_log={"tracebacks": log.count("Traceback"), "header_timeouts_logged": log.count("--header-timeout")},
        command=" ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        proxy_command=" ".join(shlex.quote(a) for a in proxy_argv),
    )
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
