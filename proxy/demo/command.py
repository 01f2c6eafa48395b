"""`swarmproxy demo`: the whole idea on one machine, with no setup.

1. A local origin serves a file. A few background peers (full nodes: proxy + block engine + DHT, each on its own
   127.0.0.x address) fetch it while the origin is still quiet, and so vouch for it and serve it.
2. The origin becomes overloaded: a bandwidth budget far below what a download needs, shared by everyone.
3. One download goes straight to the origin, another through a fresh swarmproxy node, at the same time, with a
   progress line each second while they run. The demo prints both times, what made the proxy switch and the
   share of bytes that came from peers.

Everything binds loopback; nothing leaves this machine; the temporary data dir is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import pathlib
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from bittorrent.settings import PRIVATE_NETWORK_ENV
from swarm.content.sizes import BadSize, parse_rate, parse_size

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("swarmproxy.demo")

PROGRESS_EVERY = 1.0  # seconds between progress lines while the downloads run


def add_command(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="show a slow download become fast, on this machine, with no setup",
        description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--size", default="4Mi", metavar="BYTES",
                      help="size of the demo file (default: 4Mi; k, M: powers of 1024)")
    demo.add_argument("--peers", type=int, default=3, metavar="N",
                      help="background peers that fetched the file earlier (default: 3)")
    demo.add_argument("--origin-rate", default="200k", metavar="BYTES",
                      help="the overloaded origin's total bandwidth in bytes/s (default: 200k; k, M: powers of "
                           "1000, Ki, Mi: of 1024)")
    demo.add_argument("--transport", choices=("tcp", "quic", "both"), default="tcp",
                      help="peer transport of the demo nodes (default: tcp)")


def run(args: argparse.Namespace) -> int:
    os.environ[PRIVATE_NETWORK_ENV] = "1"  # the demo's nodes, and any process they start, stay off the internet
    try:
        size = parse_size(args.size)
        rate = parse_rate(args.origin_rate)
    except BadSize as exc:
        print(f"swarmproxy demo: {exc}", file=sys.stderr)
        return 2
    if not 1 <= args.peers <= 50 or size <= 0 or rate <= 0:
        print("swarmproxy demo: --peers must be 1..50, --size and --origin-rate greater than 0", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return asyncio.run(_demo(size, args.peers, rate, args.transport))
    except OSError as exc:
        print(f"swarmproxy demo: cannot set up the local network: {exc}", file=sys.stderr)
        return 1


def _say(text: str) -> None:
    print(text, flush=True)


class _Progress:
    """Bytes received so far by one download, for the progress line."""

    def __init__(self) -> None:
        self.received = 0
        self.done: float | None = None  # seconds it took, once finished


async def _timed_get(session: aiohttp.ClientSession, url: str, proxy: str | None,
                     progress: _Progress) -> tuple[float, bytes]:
    started = time.monotonic()
    chunks = []
    async with session.get(url, proxy=proxy) as response:
        async for chunk in response.content.iter_any():
            chunks.append(chunk)
            progress.received += len(chunk)
    progress.done = time.monotonic() - started
    return progress.done, b"".join(chunks)


def _progress_text(direct: _Progress, proxied: _Progress, size: int, elapsed: float) -> str:
    def one(p: _Progress) -> str:
        if p.done is not None:
            return f"done in {p.done:.1f} s"
        return f"{p.received:,} of {size:,} bytes, {p.received / max(elapsed, 1e-9) / 1000:,.0f} kB/s"
    return f"  {elapsed:5.1f} s  direct: {one(direct)} | through swarmproxy: {one(proxied)}"


async def _report_progress(direct: _Progress, proxied: _Progress, size: int) -> None:
    """A line a second until both downloads end (the direct one takes about 20 s with the defaults), so the wait
    is not silent: redrawn in place (\\r) on a terminal, one line each otherwise (a log, a pipe). The caller
    cancels it when both are done."""
    tty = sys.stdout.isatty()
    started = time.monotonic()
    try:
        while True:
            await asyncio.sleep(PROGRESS_EVERY)  # a pacing interval, not a wait for some event
            text = _progress_text(direct, proxied, size, time.monotonic() - started)
            if tty:
                print("\r" + text + "\033[K", end="", flush=True)
            else:
                _say(text)
    finally:
        if tty:
            print("\r\033[K", end="", flush=True)  # the summary below replaces the progress line


async def _demo(size: int, peers: int, rate: float, transport: str) -> int:
    from .local_swarm import Cluster
    from .slow_origin import SlowOrigin

    data = (hashlib.sha256(b"swarmproxy demo").digest() * (size // 32 + 1))[:size]
    origin = SlowOrigin()
    await origin.start()
    url = origin.add("/demo.bin", data)
    with tempfile.TemporaryDirectory(prefix="swarmproxy-demo-") as tmp:
        cluster = Cluster(pathlib.Path(tmp), first_host=40, transport=transport, log_level="WARNING")
        try:
            _say(f"origin: {url} ({size:,} bytes), quiet for now")
            _say(f"starting {peers} background peer(s) that fetch the file from the origin first...")
            for index in range(peers):
                node = await cluster.add()
                _, _, body = await cluster.get(node, url)
                if body != data:
                    _say("  a background peer got wrong bytes from the origin; giving up")
                    return 1
                _say(f"  peer {index + 1}: serving it at {node.addresses['peer']}")
            origin.set_rate(rate)
            _say(f"\nthe origin is now overloaded: {rate / 1000:,.0f} kB/s in total, shared by everyone")
            newcomer = await cluster.add()
            _say(f"a new node's proxy listens on {newcomer.url}; downloading through it and directly at once...\n")
            direct_progress, proxied_progress = _Progress(), _Progress()
            reporter = asyncio.create_task(_report_progress(direct_progress, proxied_progress, size))
            try:
                direct, proxied = await asyncio.gather(
                    _timed_get(cluster.client, url, None, direct_progress),
                    _timed_get(cluster.client, url, newcomer.url, proxied_progress))
            finally:
                reporter.cancel()
                await asyncio.gather(reporter, return_exceptions=True)
            record = cluster.last_record(newcomer)
            ok = direct[1] == data and proxied[1] == data
            share = record["bytes_peers"] / size if size else 0.0
            _say(f"  direct to the origin:   {direct[0]:7.2f} s")
            _say(f"  through swarmproxy:     {proxied[0]:7.2f} s  ({direct[0] / max(proxied[0], 1e-9):.1f}x faster)")
            _say(f"  switched to peers:      {_cause(record['transition'])}")
            _say(f"  bytes from peers:       {share:.0%} ({record['bytes_peers']:,} of {size:,}; "
                 f"manifest trusted by {record['manifest_source'] or '-'})")
            _say(f"  both bodies byte-exact: {'yes' if ok else 'NO'}")
            return 0 if ok else 1
        finally:
            await cluster.close()
            await origin.stop()


def _cause(cause: str | None) -> str:
    return {
        "T": "yes, by T (no first byte in time)",
        "R": "yes, by R (the origin's rate fell under the minimum)",
        "crowd": "yes, early: the origin was slow and the swarm had the file",
        "died": "yes, the origin broke off",
        None: "no (the origin was fast enough)",
    }.get(cause, str(cause))
