"""The lab's BitTorrent baseline (issue 6): Pack's flash crowd served by libtorrent instead of swarmproxy.

Each client is its own libtorrent session for its own 127.0.x.y host: TCP only (no uTP, DHT, LSD, UPnP,
NAT-PMP) and no libtorrent rate limits, because the lab's `LinkModel` does the shaping. The torrent carries
the origin's URL as a BEP 19 web seed, so the only source at first is the same throttled SlowOrigin the
swarmproxy runs use; there is no BitTorrent seed. The tracker is ideal: a client that arrives is handed
every live client's address at once (`connect_peer`), and nothing else. Each session keeps at most 50
connections, the web seed's included, as real clients cap a torrent's peers (see SETTINGS): uncapped, 100
clients formed a full mesh whose descriptors, four per connection in this one process, reached the limit.

libtorrent's sockets are its own, not the event loop's, so `EmulatedLoop` cannot delay them; `Relay` is
their network instead, much like a NAT. Each session lives at a hidden address (its host + 0.64.0.0) and
binds everything there, listening and connecting. Every address a client can dial is a listener of the
relay: a client's public address `host:P` leads to its session's socket at `hidden:P` (the same port, so
the port libtorrent advertises is the public one), and the web seed URL points at the origin's host
through the relay. The relay knows the caller by its hidden source address and the callee by the
listener, forwards with the caller's public address as the source, and applies the model to each
direction. No peer ever learns a hidden address, so nothing bypasses the relay.

(A SOCKS5 proxy would have been the natural interface, but libtorrent 2.x accepts no incoming connections
at all once peer connections are proxied, and web seeds count as peer connections.)

    run = await run_bittorrent(data=data, url=origin.url + "/file.bin", origin_host="127.0.0.1",
                               arrivals=[0.0, 1.3, ...], hosts=["127.0.1.1", ...], model=model,
                               piece_size=256 * 1024, linger=0.0, workdir=tmp)

A quick figure (JSON on stdout, progress on stderr):

    python -m bench.lab.bittorrent --clients 20 --per-second 1 --size-mib 4 --origin-rate 256000 --delay 0.025

and the libtorrent half of `swarmproxy lab largefile` (30 MB, 100 clients; 12-15 minutes):

    python -m bench.lab.bittorrent --clients 100 --size-mib 28.6102294921875 --node-rate 1250000
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import ipaddress
import pathlib
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from .. import extra
from .netem import MAX_QUEUED, EmulatedLoop, LinkModel

# From the lab extra: without it, importing this module says what to install (callers import it when needed).
lt = extra.require("libtorrent", who="bench.lab.bittorrent")

CHUNK = 64 * 1024  # the relay's read size
POLL = 0.05  # how often libtorrent's alerts are read: the resolution of start and finish times
BLOCK = 16 * 1024  # libtorrent's request size, the unit of block_finished_alert
HIDDEN_OFFSET = 64 << 16  # a client's real sockets live at its host + this: 127.0.x.y -> 127.64.x.y

# libtorrent's settings for every client.
SETTINGS: dict[str, Any] = {
    "enable_dht": False, "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False,
    "enable_outgoing_utp": False, "enable_incoming_utp": False,
    "allow_multiple_connections_per_ip": True,
    # Transmission's and uTorrent's default peer limit per torrent (libtorrent's 200 is for a session of many
    # torrents). A connection holds four descriptors here, both ends' sockets and the relay's two. Uncapped,
    # 100 clients connected all to all (one connection per pair, ~4,700 at once) and hit the lab machine's
    # hard limit of 20,000; capped, ~2,500 connections and ~11,000 descriptors (a session's own take about
    # eight more: epoll, eventfd, timerfd, TCP and UDP listeners, netlink, the file, the relay's listener).
    # 50 of 99 neighbours are still far more than the 8 a session uploads to at once (unchoke_slots_limit).
    "connections_limit": 50,
    "out_enc_policy": 2, "in_enc_policy": 2,  # plaintext: RC4 costs CPU that 100 sessions on 2 cores lack
    "aio_threads": 2, "hashing_threads": 1,  # 10 disk threads per session would be 1,000 threads at 100 clients
    "alert_queue_size": 100_000,  # block alerts attribute the bytes to sources: none may be dropped
    "alert_mask": int(lt.alert_category.error | lt.alert_category.status | lt.alert_category.block_progress),
}


@dataclasses.dataclass
class BitTorrentClient:
    index: int
    host: str
    arrival: float  # seconds after the run started, as scheduled
    started: float | None = None  # when the torrent was added (seconds after the run started)
    finished: float | None = None  # when libtorrent reported it finished
    payload_downloaded: int = 0  # torrent_status.total_payload_download (counts redundant bytes too)
    payload_uploaded: int = 0
    from_web_seed: int = 0  # payload of the blocks libtorrent got from the web seed (see _Client.sources)
    from_peers: int = 0  # ... and from other clients
    wire_from_web_seed: int = 0  # what the relay delivered to this client from the origin (HTTP included)
    wire_from_peers: int = 0  # ... and from other clients (BitTorrent protocol included)
    file_ok: bool = False  # the file written is byte-identical to the data (sha256)
    error: str | None = None

    @property
    def duration(self) -> float | None:
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started

    @property
    def web_seed_share(self) -> float:
        total = self.from_web_seed + self.from_peers
        return self.from_web_seed / total if total else 0.0


@dataclasses.dataclass
class BitTorrentRun:
    clients: list[BitTorrentClient]
    seconds: float  # from the run's start until the last torrent was removed
    web_seed_bytes: int  # libtorrent's view: the clients' from_web_seed, summed (the origin also sends
    # ranges that are cut off when a client finishes: compare SlowOrigin.bytes_sent)
    relay_bytes: int  # bytes the relay carried (payload and protocol), both directions, all connections
    relay_connections: int
    relay_leftover: int  # relay connections still open 5 s after every session had closed: 0 unless it leaks

    @property
    def durations(self) -> list[float]:
        return [c.duration for c in self.clients if c.duration is not None]

    @property
    def ok(self) -> bool:
        return all(c.error is None and c.file_ok for c in self.clients)


def _unshaped(loop: asyncio.AbstractEventLoop, name: str) -> Callable:
    """loop.create_server/create_connection without the EmulatedLoop's delay: the relay applies the model."""
    return getattr(loop, f"raw_{name}", None) or getattr(loop, name)


class _Link:
    """One direction of a relayed connection: bytes read from `reader` are written when the model says they
    arrive. Reading stops while more than MAX_QUEUED bytes are in flight, so the sender backs up as behind a
    slow link (the same rule as the loop's emulation)."""

    def __init__(self, relay: Relay, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 src: str, dst: str, shaped: bool) -> None:
        self.relay, self.reader, self.writer = relay, reader, writer
        self.src, self.dst, self.shaped = src, dst, shaped
        self.chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self.queued = 0
        self.room = asyncio.Event()

    async def receive(self) -> None:
        loop = asyncio.get_running_loop()
        last = 0.0
        while data := await self.reader.read(CHUNK):
            now = loop.time()
            at = self.relay.model.deliver_at(self.src, self.dst, len(data), now) if self.shaped else now
            last = max(last, at)  # a stream stays in order
            self.relay.bytes_carried += len(data)
            self.relay.carried[self.src, self.dst] += len(data)
            self.queued += len(data)
            self.chunks.put_nowait((last, data))
            if self.queued > MAX_QUEUED:
                self.room.clear()
                await self.room.wait()
        self.chunks.put_nowait((last, b""))  # the EOF travels behind the data

    async def send(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            at, data = await self.chunks.get()
            if at > loop.time():
                await asyncio.sleep(at - loop.time())  # the emulated link's transit time
            if not data:
                if self.writer.can_write_eof() and not self.writer.is_closing():
                    self.writer.write_eof()  # a half-close, as TCP would pass it on
                return
            self.writer.write(data)
            await self.writer.drain()
            self.queued -= len(data)
            if self.queued <= MAX_QUEUED // 2:
                self.room.set()


@dataclasses.dataclass
class Route:
    """A public address `host:port` of the emulated network and the real socket it leads to."""
    host: str
    port: int
    target: tuple[str, int] | None = None  # None: not (yet) reachable, connections are refused
    target_shapes: bool = False  # the target applies the model to what it receives (a server on this EmulatedLoop)


class Relay:
    """The emulated network for sockets the event loop does not own.

    `route(host)` listens at a public address; each connection to it is carried to the route's target as
    traffic between the caller's host and `host`, each direction delayed per the `LinkModel`. The caller's
    host is its source address, translated through `public` (hidden address -> host); the relay's
    connection to the target is bound to that host, so the target sees who called."""

    def __init__(self, model: LinkModel) -> None:
        self.model = model
        self.public: dict[str, str] = {}
        self.bytes_carried = 0
        self.carried: collections.Counter[tuple[str, str]] = collections.Counter()  # (src, dst) -> bytes
        self.connections = 0
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task] = set()

    async def route(self, host: str, port: int = 0) -> Route:
        loop = asyncio.get_running_loop()
        route = Route(host, port)

        def protocol() -> asyncio.StreamReaderProtocol:
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=CHUNK),
                                                lambda reader, writer: self._carry(route, reader, writer))

        server = await _unshaped(loop, "create_server")(protocol, host, port)
        self._servers.append(server)
        route.port = server.sockets[0].getsockname()[1]
        return route

    async def close(self, grace: float = 0.0) -> int:
        """Stop listening, give the connections still carried `grace` seconds to end by themselves, then cut
        the rest; how many were cut. (A connection ends once both of its sides have closed: with every
        endpoint gone, one still open after a grace period is a leak.)"""
        for server in self._servers:
            server.close()
        if self._tasks and grace > 0:
            await asyncio.wait(set(self._tasks), timeout=grace)
        cut = list(self._tasks)
        for task in cut:
            task.cancel()
        await asyncio.gather(*cut, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        return len(cut)

    async def _carry(self, route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One accepted connection, from start to close (its own task, which close() cancels)."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._forward(route, reader, writer)
        except (OSError, asyncio.CancelledError):
            # A refused target, or no descriptor left for the connection to it (EMFILE): the caller sees its
            # connection closed, as if refused, and may retry. Or close(): ended quietly (the stream protocol
            # logs a cancelled task).
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _forward(self, route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if route.target is None:
            return
        address = writer.get_extra_info("peername")[0]
        source = self.public.get(address, address)
        if source != route.host and self.model.delay:
            # TCP's handshake: a round trip before the caller's first byte may leave (as EmulatedLoop does).
            await asyncio.sleep(2 * self.model.delay)
        up_reader, upstream = await self._connect(route.target, source)
        self.connections += 1
        links = (_Link(self, reader, upstream, source, route.host, shaped=not route.target_shapes),
                 _Link(self, up_reader, writer, route.host, source, shaped=True))
        try:
            async with asyncio.TaskGroup() as group:
                for link in links:
                    group.create_task(link.receive())
                    group.create_task(link.send())
        except* OSError:
            pass  # a reset on either side ends both directions
        finally:
            upstream.close()

    async def _connect(self, target: tuple[str, int],
                       source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=CHUNK)
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await _unshaped(loop, "create_connection")(lambda: protocol, *target,
                                                                  local_addr=(source, 0))
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


def make_torrent(data: bytes, url: str, piece_size: int) -> lt.torrent_info:
    """A v1 torrent of `data` (one file, named after the URL's path) with `url` as its BEP 19 web seed."""
    if piece_size <= 0 or piece_size % BLOCK:
        raise ValueError(f"piece_size must be a positive multiple of {BLOCK}, got {piece_size}")
    name = pathlib.PurePosixPath(urllib.parse.urlsplit(url).path).name or "file"
    creator = lt.create_torrent([lt.create_file_entry(name, len(data))], piece_size, lt.create_torrent.v1_only)
    for piece in range(creator.num_pieces()):
        creator.set_hash(piece, hashlib.sha1(data[piece * piece_size:(piece + 1) * piece_size]).digest())
    creator.add_url_seed(url)  # the full file URL: libtorrent appends the name only to URLs ending in "/"
    return lt.torrent_info(creator.generate())


def hidden_address(host: str) -> str:
    hidden = ipaddress.ip_address(host) + HIDDEN_OFFSET
    if not hidden.is_loopback:
        raise ValueError(f"client hosts must be 127.0.x.y addresses, got {host}")
    return str(hidden)


class _Client:
    """One libtorrent session and what is known about its download."""

    def __init__(self, result: BitTorrentClient, relay: Relay, route: Route, directory: pathlib.Path,
                 settings: dict[str, Any]) -> None:
        self.result, self.route, self.directory = result, route, directory
        hidden = hidden_address(result.host)
        # Incoming connections must arrive at an address among outgoing_interfaces, or libtorrent blocks them
        # (invalid_local_interface): the session listens and connects at its hidden address alike.
        self.session = lt.session({**settings, "listen_interfaces": f"{hidden}:{route.port}",
                                   "outgoing_interfaces": hidden})
        if self.session.listen_port() != route.port:
            raise RuntimeError(f"libtorrent could not listen on {hidden}:{route.port}")
        # libtorrent puts peers on 127.0.0.0/8 in its "local" class, which bypasses the unchoke slots; the lab
        # stands for the Internet, so every address gets the global class only.
        everyone = lt.ip_filter()
        everyone.add_rule("0.0.0.0", "255.255.255.255", 1 << lt.session.global_peer_class_id)
        self.session.set_peer_class_filter(everyone)
        route.target = (hidden, route.port)
        relay.public[hidden] = result.host
        self.handle: lt.torrent_handle | None = None
        self.removed = False
        # (piece, block) -> whether it came from the web seed. libtorrent does not post block_finished_alert
        # for every block (it skips the last piece's at times), so a block's source is the last peer it was
        # requested from (block_downloading_alert), corrected by block_finished_alert where there is one.
        self.sources: dict[tuple[int, int], bool] = {}

    @property
    def live(self) -> bool:
        return self.handle is not None and not self.removed

    def start(self, info: lt.torrent_info, now: float, peers: list[tuple[str, int]]) -> None:
        params = lt.add_torrent_params()
        params.ti = info
        params.save_path = str(self.directory)
        # Not auto-managed and not paused: the queue would start the torrent only on its next tick.
        params.flags &= ~(lt.torrent_flags.auto_managed | lt.torrent_flags.paused)
        self.handle = self.session.add_torrent(params)
        self.result.started = now
        for peer in peers:
            self.handle.connect_peer(peer)

    def remove(self, info: lt.torrent_info) -> None:
        assert self.handle is not None
        status = self.handle.status()
        self.result.payload_downloaded = status.total_payload_download
        self.result.payload_uploaded = status.total_payload_upload
        for (piece, block), web_seed in self.sources.items():
            size = min(BLOCK, info.piece_size(piece) - block * BLOCK)
            if web_seed:
                self.result.from_web_seed += size
            else:
                self.result.from_peers += size
        self.session.remove_torrent(self.handle)
        self.removed = True


class _Swarm:
    def __init__(self, info: lt.torrent_info, web_seed: tuple[str, int], say: Callable[[str], None]) -> None:
        self.info, self.web_seed, self.say = info, web_seed, say
        self.clients: list[_Client] = []

    def read_alerts(self, client: _Client, now: float) -> None:
        result = client.result
        for alert in client.session.pop_alerts():
            if isinstance(alert, (lt.block_downloading_alert, lt.block_finished_alert)):
                client.sources[alert.piece_index, alert.block_index] = tuple(alert.ip) == self.web_seed
            elif isinstance(alert, lt.torrent_finished_alert) and result.finished is None:
                result.finished = now
                self.say(f"client {result.index} finished in {result.duration:.1f}s")
            elif isinstance(alert, lt.alerts_dropped_alert):
                result.error = "libtorrent dropped alerts: the byte counts are incomplete"
            elif isinstance(alert, (lt.torrent_error_alert, lt.file_error_alert)) and result.error is None:
                result.error = alert.message()
                self.say(f"client {result.index}: {alert.message()}")
            elif isinstance(alert, lt.url_seed_alert):
                self.say(f"client {result.index}: web seed: {alert.message()}")

    def remove(self, client: _Client) -> None:
        client.remove(self.info)
        result = client.result
        self.say(f"client {result.index} left: " + (result.error or f"{result.duration:.1f}s, "
                 f"{result.web_seed_share:.0%} from the web seed"))

    async def run(self, linger: float, timeout: float) -> float:
        """Start each client at its arrival, remove it `linger` s after it finished; the run's length."""
        loop = asyncio.get_running_loop()
        begin = loop.time()
        while True:
            now = loop.time() - begin
            for client in self.clients:
                result = client.result
                if client.handle is None and now >= result.arrival:
                    peers = [(c.route.host, c.route.port) for c in self.clients if c.live]
                    client.start(self.info, now, peers)
                    self.say(f"client {result.index} started at {now:.1f}s with {len(peers)} peers")
                if client.live:
                    self.read_alerts(client, now)
                    if result.error is not None or (result.finished is not None
                                                    and now >= result.finished + linger):
                        self.remove(client)
            waiting = [c for c in self.clients if not c.removed]
            if not waiting:
                return now
            if now >= timeout:
                for client in waiting:
                    result = client.result
                    result.error = result.error or (f"did not finish within {timeout:g}s" if client.handle
                                                    else f"not started within {timeout:g}s")
                    if client.live:
                        self.remove(client)
                return now
            next_arrival = min((c.result.arrival for c in waiting if c.handle is None), default=now + POLL)
            await asyncio.sleep(max(0.0, min(POLL, next_arrival - now)))  # libtorrent is driven by polling


def _close_sessions(clients: list[_Client]) -> None:
    """Runs in a thread: a session's destructor blocks until its threads have ended."""
    for client in clients:
        del client.session


def _file_ok(path: pathlib.Path, digest: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").digest() == digest
    except FileNotFoundError:
        return False


async def run_bittorrent(*, data: bytes, url: str, origin_host: str, arrivals: list[float], hosts: list[str],
                         model: LinkModel, piece_size: int, linger: float, workdir: pathlib.Path,
                         progress: Callable[[str], None] | None = None, timeout: float = 1800.0,
                         settings: dict[str, Any] | None = None) -> BitTorrentRun:
    """Download `data` with one libtorrent client per arrival (client i at `hosts[i]`, starting `arrivals[i]`
    seconds into the run) from the web seed `url` (the caller's SlowOrigin, at `origin_host` in the model)
    and from each other.

    `timeout` bounds the run from its start; clients unfinished by then carry an error. `settings` overrides
    libtorrent settings for every session. Raises only for set-up failures (bad arguments, a session that
    cannot listen)."""
    hosts = hosts[:len(arrivals)]
    if len(hosts) < len(arrivals) or len(set(hosts)) < len(hosts):
        raise ValueError(f"{len(arrivals)} arrivals need as many distinct hosts, got {len(set(hosts))}")
    if {hidden_address(host) for host in hosts} & {*hosts, origin_host}:
        raise ValueError("a host is another client's hidden address (host + 0.64.0.0): use 127.0.x.y hosts")
    say = progress or (lambda _message: None)
    loop = asyncio.get_running_loop()
    parts = urllib.parse.urlsplit(url)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"the origin URL needs an explicit host and port, got {url}")
    relay = Relay(model)
    clients: list[_Client] = []
    started = time.monotonic()
    try:
        # The web seed is the origin seen through the relay. On an EmulatedLoop the SlowOrigin's own server
        # already delays the requests it receives, so the relay shapes only its replies.
        origin = await relay.route(origin_host)
        origin.target = (parts.hostname, parts.port)
        origin.target_shapes = isinstance(loop, EmulatedLoop)
        info = make_torrent(data, parts._replace(netloc=f"{origin.host}:{origin.port}").geturl(), piece_size)
        swarm = _Swarm(info, (origin.host, origin.port), say)
        # libtorrent asks a web seed for 16 MiB per request by default and asks no peer for a block the web seed
        # is fetching, so with a slow shared origin nearly every byte would come from it. Ask for as little as
        # libtorrent allows: one piece, which it raises to its floor of 1 MiB (web_peer_connection.cpp).
        session_settings = {**SETTINGS, "urlseed_max_request_bytes": piece_size, **(settings or {})}
        for index, (arrival, host) in enumerate(zip(arrivals, hosts)):
            route = await relay.route(host)
            clients.append(_Client(BitTorrentClient(index=index, host=host, arrival=arrival), relay, route,
                                   workdir / f"client{index:03d}", session_settings))
        swarm.clients = clients
        say(f"{len(clients)} sessions ready in {time.monotonic() - started:.1f}s")
        seconds = await swarm.run(linger, timeout)
    finally:
        await asyncio.to_thread(_close_sessions, clients)
        leftover = await relay.close(grace=5.0)
    digest = hashlib.sha256(data).digest()
    for client in clients:
        result = client.result
        result.wire_from_web_seed = relay.carried[origin.host, result.host]
        result.wire_from_peers = sum(n for (src, dst), n in relay.carried.items()
                                     if dst == result.host and src != origin.host)
        if result.finished is not None:
            result.file_ok = _file_ok(client.directory / info.name(), digest)
            if not result.file_ok and result.error is None:
                result.error = "the file written differs from the data"
    results = [client.result for client in clients]
    return BitTorrentRun(clients=results, seconds=seconds, web_seed_bytes=sum(r.from_web_seed for r in results),
                         relay_bytes=relay.bytes_carried, relay_connections=relay.connections,
                         relay_leftover=leftover)


def main() -> None:
    """A quick figure: Poisson arrivals, one file, the throttled origin; prints JSON."""
    import argparse
    import json
    import os
    import random
    import resource
    import statistics
    import sys
    import tempfile

    from proxy.demo.slow_origin import SlowOrigin

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--per-second", type=float, default=1.0, help="mean arrival rate (Poisson)")
    parser.add_argument("--size-mib", type=float, default=4.0)
    parser.add_argument("--origin-rate", type=float, default=256_000, help="the origin's bytes/s, shared")
    parser.add_argument("--delay", type=float, default=0.025, help="one-way delay between hosts, s")
    parser.add_argument("--node-rate", type=float, default=0, help="each client's upload and download cap, bytes/s "
                        "(default none; the lab's largefile uses 1250000)")
    parser.add_argument("--piece-kib", type=int, default=256)
    parser.add_argument("--linger", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a libtorrent setting for every session (repeatable), e.g. strict_end_game_mode=0")
    args = parser.parse_args()
    overrides = {name: int(value) if value.lstrip("-").isdigit() else value
                 for name, value in (item.split("=", 1) for item in args.set)}
    rng = random.Random(args.seed)
    data = rng.randbytes(int(args.size_mib * (1 << 20)))
    arrivals = [0.0]
    while len(arrivals) < args.clients:
        arrivals.append(arrivals[-1] + rng.expovariate(args.per_second))
    hosts = [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(args.clients)]
    model = LinkModel(args.delay, args.node_rate, args.node_rate)
    peak = 0

    async def count_descriptors() -> None:
        nonlocal peak
        while True:
            try:
                peak = max(peak, len(os.listdir("/proc/self/fd")))
            except OSError:  # none left to list them with: the limit itself
                peak = max(peak, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
            await asyncio.sleep(1.0)

    async def figure() -> dict[str, Any]:
        origin = SlowOrigin(rate=args.origin_rate)
        model.limit(origin.host, None, None)  # its own throttle is its link
        origin.add("/file.bin", data)
        url = await origin.start()
        counting = asyncio.create_task(count_descriptors())
        try:
            with tempfile.TemporaryDirectory(prefix="swarmlab-bt-") as tmp:
                run = await run_bittorrent(data=data, url=url + "/file.bin", origin_host=origin.host,
                                           arrivals=arrivals, hosts=hosts, model=model,
                                           piece_size=args.piece_kib * 1024, linger=args.linger,
                                           workdir=pathlib.Path(tmp), settings=overrides,
                                           progress=lambda m: print(m, file=sys.stderr))
        finally:
            counting.cancel()
            await origin.stop()
        cuts = statistics.quantiles(run.durations, n=100, method="inclusive") if len(run.durations) > 1 else []
        shares = [c.web_seed_share for c in run.clients]
        return {
            "command": "python -m bench.lab.bittorrent " + " ".join(sys.argv[1:]),
            "ok": run.ok, "errors": [c.error for c in run.clients if c.error],
            "download_s": {f"p{p}": round(cuts[p - 1], 1) for p in (1, 25, 50, 75, 99)} if cuts else {},
            "web_seed_share": {"median": round(statistics.median(shares), 3),
                               "overall": round(run.web_seed_bytes / (len(data) * len(run.clients)), 3)},
            "origin_bytes_sent": origin.bytes_sent,
            "file_copies_from_origin": round(origin.bytes_sent / len(data), 2),
            "relay_bytes": run.relay_bytes, "relay_connections": run.relay_connections,
            "relay_leftover": run.relay_leftover, "descriptors_peak": peak, "run_s": round(run.seconds, 1),
        }

    with asyncio.Runner(loop_factory=lambda: EmulatedLoop(model)) as runner:
        print(json.dumps(runner.run(figure()), indent=2))


if __name__ == "__main__":
    main()
