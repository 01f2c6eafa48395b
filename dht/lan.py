"""LAN discovery: find DHT nodes on the local network by UDP multicast, with no bootstrap node at all.

Every node periodically multicasts a 28-byte beacon — ``b"SPLAN\\x01"`` + node id (20) + DHT port (u16) — to
`DEFAULT_GROUP`:`DEFAULT_PORT` with TTL 1 (never routed off the link). A node hearing a beacon from an unknown
node pings ``(beacon source IP, DHT port)``; the ping itself puts each node into the other's routing table (a
request teaches the receiver, the reply teaches the sender). Beacons are not trusted for anything else: the id
only enters a routing table once a node with that id answered at that address, exactly as for any DHT contact.

Beacons are per-source rate limited and each (address, id) is pinged at most once per `repeat_ping_after_s`, so
a noisy or hostile LAN host cannot make us ping-flood anyone. Failure to open the multicast socket (no multicast
route, port taken) disables LAN discovery with a warning; it never stops the DHT node.

The group and port are our own, not BitTorrent's BEP 14 ``239.192.152.143:6771``, so our beacons never confuse a
BitTorrent client listening there (and theirs are rejected by our magic).

`interface` is the IPv4 address of the one interface beacons go out of and are heard on (IP_MULTICAST_IF and
IP_ADD_MEMBERSHIP); "0.0.0.0" lets the kernel pick it from the route to the group (the default route: a user's
LAN). ``127.0.0.1`` keeps discovery on loopback, which is what the tests and the lab use: nodes on one host find
each other and not one packet reaches a real network. Linux (checked on 6.18) delivers multicast on ``lo`` even
though ``lo`` lacks the MULTICAST flag, since the socket names the interface itself. A loopback LAN also ignores
beacons from any other address, so it never pings off the machine whatever it hears.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import sys
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable

import addresses
from dht.admission import RateLimiter
from dht.identity import NODE_ID_BYTES

log = logging.getLogger(__name__)

DEFAULT_GROUP = "239.192.152.144"
DEFAULT_PORT = 6779
_MAGIC = b"SPLAN\x01"
# Linux's IP_MULTICAST_ALL (not in Python 3.11's socket module): 0 = only the groups this socket joined, on the
# interface it joined them on.
_IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
_BEACON = struct.Struct(f">6s{NODE_ID_BYTES}sH")


def encode_beacon(node_id: bytes, dht_port: int) -> bytes:
    return _BEACON.pack(_MAGIC, node_id, dht_port)


def decode_beacon(data: bytes) -> tuple[bytes, int] | None:
    """(node id, DHT port) from a beacon, or None for anything else."""
    if len(data) != _BEACON.size:
        return None
    magic, node_id, port = _BEACON.unpack(data)
    if magic != _MAGIC or port == 0:
        return None
    return node_id, port


class BeaconFilter:
    """Decides which heard beacons deserve a ping. Pure; time is `now`."""

    def __init__(self, own_id: bytes, repeat_ping_after_s: float = 300.0, max_remembered: int = 1024) -> None:
        self.own_id = own_id
        self.repeat_ping_after_s = repeat_ping_after_s
        self.max_remembered = max_remembered
        self.limiter = RateLimiter(rate=1.0, burst=5.0, max_sources=max_remembered)
        self._pinged: OrderedDict[tuple[str, int, bytes], float] = OrderedDict()

    def should_ping(self, source_ip: str, node_id: bytes, dht_port: int, now: float) -> bool:
        if node_id == self.own_id:
            return False
        if not self.limiter.allow(source_ip, now):
            return False
        key = (source_ip, dht_port, node_id)
        last = self._pinged.get(key)
        if last is not None and now - last < self.repeat_ping_after_s:
            return False
        self._pinged[key] = now
        self._pinged.move_to_end(key)
        while len(self._pinged) > self.max_remembered:
            self._pinged.popitem(last=False)
        return True


class LanDiscovery(asyncio.DatagramProtocol):
    """Multicast beacons out, pings to whoever beacons in. Knows nothing of `DhtNode` but two callables."""

    def __init__(
        self,
        node_id: bytes,
        dht_port: int,
        ping: Callable[[tuple[str, int]], Awaitable[object]],
        *,
        group: str = DEFAULT_GROUP,
        port: int = DEFAULT_PORT,
        interface: str = "0.0.0.0",
        interval_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self.dht_port = dht_port
        self.ping = ping
        self.group = group
        self.port = port
        self.interface = interface
        self.interval_s = interval_s
        self.monotonic = monotonic
        self.filter = BeaconFilter(node_id)
        self.loopback = addresses.is_loopback(interface)
        self.counters: Counter[str] = Counter()
        self.transport: asyncio.DatagramTransport | None = None
        self._beacon_task: asyncio.Task | None = None
        self._pings: set[asyncio.Task] = set()

    async def start(self) -> bool:
        """Open the multicast socket and start beaconing. False (and a warning) if the LAN is unusable."""
        try:
            sock = self._open_socket()
        except OSError as exc:
            log.warning("DHT: LAN discovery disabled (%s:%d on %s): %s", self.group, self.port, self.interface, exc)
            self.counters["start_failed"] += 1
            return False
        loop = asyncio.get_running_loop()
        self.transport, _ = await loop.create_datagram_endpoint(lambda: self, sock=sock)
        self._beacon_task = asyncio.create_task(self._beacon_loop())
        return True

    def _open_socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            # Several nodes on one host (several users, tests) share the group port.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            # Bound to the group address, not 0.0.0.0: we receive this group's traffic only.
            sock.bind((self.group, self.port))
            membership = socket.inet_aton(self.group) + socket.inet_aton(self.interface)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
            if sys.platform == "linux":
                # By default Linux hands a socket bound to the group every datagram of that group that any socket
                # of the host joined, on any interface: a node on lo would hear (and ping) a real LAN's beacons.
                sock.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)  # nodes on this same host too
            if self.interface != "0.0.0.0":
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.interface))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    async def stop(self) -> None:
        if self._beacon_task is not None:
            self._beacon_task.cancel()
            try:
                await self._beacon_task
            except asyncio.CancelledError:
                pass
            self._beacon_task = None
        for task in list(self._pings):
            task.cancel()
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    @property
    def running(self) -> bool:
        return self.transport is not None

    def send_beacon(self) -> None:
        if self.transport is None:
            return
        try:
            self.transport.sendto(encode_beacon(self.node_id, self.dht_port), (self.group, self.port))
            self.counters["beacons_sent"] += 1
        except OSError as exc:
            self.counters["send_errors"] += 1
            log.debug("DHT: LAN beacon not sent: %s", exc)

    async def _beacon_loop(self) -> None:
        while True:
            self.send_beacon()
            await asyncio.sleep(self.interval_s)  # the beacon period: a timer, not synchronisation

    def error_received(self, exc: Exception) -> None:
        self.counters["socket_errors"] += 1

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        try:
            beacon = decode_beacon(data)
            if beacon is None:
                self.counters["dropped_malformed"] += 1
                return
            node_id, dht_port = beacon
            if node_id == self.node_id:
                return  # our own beacon, looped back
            if self.loopback and not addresses.is_loopback(addr[0]):
                self.counters["dropped_off_link"] += 1  # a loopback LAN talks to this machine only
                return
            self.counters["beacons_heard"] += 1
            if not self.filter.should_ping(addr[0], node_id, dht_port, self.monotonic()):
                return
            if len(self._pings) >= 64:
                self.counters["dropped_busy"] += 1
                return
            task = asyncio.get_running_loop().create_task(self._ping(addr[0], dht_port))
            self._pings.add(task)
            task.add_done_callback(self._pings.discard)
        except Exception:  # noqa: BLE001 - a datagram handler must never raise
            self.counters["handler_errors"] += 1
            log.exception("DHT: error handling a LAN beacon from %s", addr)

    async def _ping(self, host: str, port: int) -> None:
        try:
            if await self.ping((host, port)) is not None:
                self.counters["peers_found"] += 1
        except Exception:  # noqa: BLE001 - detached task
            self.counters["ping_errors"] += 1
            log.debug("DHT: LAN ping to %s:%d failed", host, port, exc_info=True)

    def stats(self) -> dict:
        return {"running": self.running, "group": f"{self.group}:{self.port}", "interface": self.interface,
                **self.counters}
