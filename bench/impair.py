"""Bad networks for the test internet (`bench/internet_netns.py`, issue 39, "Bad networks"): packet loss and added
delay on a home's WAN link, and a NAT mapping that expires, without netem (this kernel has none: `tc qdisc ... netem`
fails; `tbf` works).

- **Delay and loss**: a userspace relay. An impaired home router's WAN link is then not a veth to the internet's
  bridge but two TUN devices, `wan` in the router's namespace and `rK` in the internet namespace, each the end of a
  point-to-point /24 (the router .2, the internet namespace .1, as on the veth). One process (`python -m
  bench.impair relay`, started in the internet namespace; it joins the router's with `setns(2)` through ctypes, as
  Python 3.11 has no `os.setns`) reads every IP packet either end sends and writes it to the other end `delay`
  seconds later, from a delay line (a heap of (due time, sequence, packet)), or drops it with probability `loss`.
  `delay` is one way: a round trip through the link takes 2 x delay more; loss is independent per packet, each
  way. The relay reorders nothing and bounds its line (`LINE_CAP` packets; beyond, it drops, as a full queue
  does). It counts what it moved and dropped each way (`Topology.relay_counters`).
  Probed before it was used (`python -m bench.impair probe --delay 0.05`, one home, UDP echoes and one TCP stream
  to a public machine): the round trip went from 0.03 ms on the veth to 100.97 ms (+100.94 ms for 2 x 50 ms), and
  one TCP stream moved 20.9 MB/s through it at that round trip: it holds up.
  Loss is in the relay and not in an nft or iptables rule on the router because a rule sees the TCP stack's GSO
  super-packets (up to 64 kB) before they are cut into wire packets: dropping 2 % of those is not 2 % loss (a
  probe with such a rule moved 38.7 MB/s at 40 ms and "2 %"). The relay reads the TUN device's wire-sized packets.
- **A mapping that expires**: `flush_conntrack(ns)` deletes every conntrack entry of a router (one ctnetlink
  IPCTNL_MSG_CT_DELETE without attributes, what `conntrack -F` sends; no conntrack-tools needed), so every NAT
  mapping it held is gone at once: the next packet from outside finds none (the router answers it itself: a TCP
  RST, an ICMP port unreachable), and the next from inside gets a new one.

`Topology(..., impair=Impairment(loss=0.02, delay=0.05))` impairs every home's WAN link, `impair={1: ...}` the homes
named by index; `Topology(rate=...)`'s `tbf` shapes the TUN devices as it does the veths. Nothing here reaches
beyond the namespaces: the relay opens no socket, only the two TUN devices the topology made.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import heapq
import json
import os
import random
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from bench.netns import run as _run
from bench.netns import tool as _tool

__all__ = ["Impairment", "conntrack_entries", "flush_conntrack", "shape", "tun_device"]

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
READ_BATCH = 64  # packets read from one end before the line is looked at again
LINE_CAP = 20_000  # packets in the delay line at most (at 1500 B, 30 MB); beyond, a packet is dropped
PACKET_MAX = 65_535
NETLINK_NETFILTER = 12
CT_DELETE = (1 << 8) | 2  # NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2


@dataclass(frozen=True)
class Impairment:
    """What a home's WAN link does to its packets: `loss` the probability that one is dropped, each way; `delay`
    the seconds added one way. Either makes the link a TUN pair through the relay; neither leaves it a veth."""

    loss: float = 0.0
    delay: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.loss < 1.0:
            raise ValueError(f"loss is a probability in [0, 1): {self.loss}")
        if not 0.0 <= self.delay <= 5.0:
            raise ValueError(f"delay is seconds one way in [0, 5]: {self.delay}")

    def __bool__(self) -> bool:
        return self.loss > 0 or self.delay > 0

    def describe(self) -> str:
        return f"loss {self.loss:.1%} each way, delay {self.delay * 1000:g} ms one way"


def _in(ns: str, *argv: str, stdin: str | None = None) -> str:
    return _run("ip", "netns", "exec", ns, _tool(argv[0]) or argv[0], *argv[1:], stdin=stdin)


def shape(ns: str, dev: str, rate: float) -> None:
    """Shape what `dev` in `ns` sends to `rate` bytes/s (`tc tbf`, as `Topology(rate=...)` shapes both ways): e.g. a
    home's upload alone, its router's `wan`, so that serving a peer takes long enough to be cut off mid-block."""
    _run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{int(rate * 8)}bit", "burst",
         str(64 * 1024), "latency", "50ms")


# -- a NAT mapping that expires --------------------------------------------------------------------------------------


def conntrack_entries(ns: str) -> list[str]:
    """The conntrack entries of namespace `ns` (its own /proc/net/nf_conntrack), one line each."""
    return [line for line in _in(ns, "cat", "/proc/net/nf_conntrack").splitlines() if line.strip()]


def flush_conntrack(ns: str) -> None:
    """Delete every conntrack entry of namespace `ns` (its NAT mappings with them), as `conntrack -F` does."""
    _run("ip", "netns", "exec", ns, sys.executable, "-m", "bench.impair", "flush")


def _flush_here() -> None:
    """One ctnetlink delete with no attributes: the kernel deletes every entry of this namespace, IPv4 and IPv6."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as nl:
        nl.bind((0, 0))
        body = struct.pack("!BBH", socket.AF_UNSPEC, 0, 0)  # nfgenmsg: family, version 0, res_id
        nl.send(struct.pack("=IHHII", 16 + len(body), CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, 1, 0) + body)
        answer = nl.recv(65536)
        _, kind, _, _, _ = struct.unpack_from("=IHHII", answer)
        error = struct.unpack_from("=i", answer, 16)[0] if kind == NLMSG_ERROR else 0
        if error != 0:
            raise OSError(-error, f"ctnetlink flush: {os.strerror(-error)}")


# -- delay: the TUN link and its relay -------------------------------------------------------------------------------


def tun_device(ns: str, dev: str) -> None:
    """A persistent TUN device `dev` (no packet information) in namespace `ns`, for the relay to open."""
    _run("ip", "-n", ns, "tuntap", "add", "dev", dev, "mode", "tun")


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns {path}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def _open_tun(dev: str) -> int:
    """The TUN device `dev` of this thread's network namespace, opened non-blocking."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", dev.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def relay(a: int, b: int, delay: float, loss: float = 0.0, control: int | None = None) -> None:
    """Shuttle packets between TUN fds `a` and `b`, each `delay` seconds late, dropping each with probability
    `loss`, until `control` (a fd) closes; each line read from `control` is answered on standard output with the
    counters (JSON: per way, packets and bytes moved, packets dropped). Each packet is sent once, in the order read:
    the line is a heap on (due time, sequence)."""
    line: list[tuple[float, int, int, bytes]] = []
    sequence = 0
    other = {a: b, b: a}
    ways = {a: "a_to_b", b: "b_to_a"}
    counters = {way: {"packets": 0, "bytes": 0, "dropped": 0} for way in ways.values()}
    chance = random.Random()
    watched = [a, b] + ([control] if control is not None else [])
    while True:
        timeout = max(0.0, line[0][0] - time.monotonic()) if line else None
        ready, _, _ = select.select(watched, [], [], timeout)
        now = time.monotonic()
        if control is not None and control in ready:
            if not os.read(control, 4096):
                return
            print(json.dumps(counters), flush=True)
        for fd in ready:
            if fd == control:
                continue
            count = counters[ways[fd]]
            for _ in range(READ_BATCH):
                try:
                    packet = os.read(fd, PACKET_MAX)
                except BlockingIOError:
                    break
                if (loss and chance.random() < loss) or len(line) >= LINE_CAP:
                    count["dropped"] += 1
                    continue
                count["packets"] += 1
                count["bytes"] += len(packet)
                heapq.heappush(line, (now + delay, sequence, other[fd], packet))
                sequence += 1
        while line and line[0][0] <= now:
            _, _, fd, packet = heapq.heappop(line)
            try:
                os.write(fd, packet)
            except OSError:  # the device is going away, or its queue is full: the packet is lost, as on a wire
                pass


def _relay_main(net_dev: str, router_ns: str, router_dev: str, delay: float, loss: float) -> int:
    """In the internet namespace: open its end (a), join the router's namespace, open that end (b); say "ready" on
    standard output, then relay until standard input closes."""
    a = _open_tun(net_dev)
    _setns(f"/var/run/netns/{router_ns}")
    b = _open_tun(router_dev)
    print("ready", flush=True)
    relay(a, b, delay, loss, control=sys.stdin.fileno())
    return 0


# -- the probe -------------------------------------------------------------------------------------------------------


def probe(delay: float = 0.05, loss: float = 0.0, seconds: float = 3.0) -> dict:
    """Does the relay hold up? A topology with one home behind the relay and one public machine: the round trip of
    UDP echoes from the home's host to the public machine, and one TCP stream's throughput (host to public machine),
    on a plain veth and through the relay (there is no `ping` here: `bench.impair echo`/`source` measure)."""
    from bench.internet_netns import Topology

    report: dict = {"delay_s": delay, "loss": loss, "seconds": seconds}
    for arm, impair in (("veth", Impairment()), ("relay", Impairment(loss=loss, delay=delay))):
        with Topology(dht_nodes=0, publics=1, homes=("full-cone",), impair=impair) as topology:
            host, public = topology.hosts[0], topology.public[0]
            sink = topology.spawn(public, [sys.executable, "-m", "bench.impair", "sink", public.address],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert sink.stdout is not None
            port = int(sink.stdout.readline())
            report[arm] = json.loads(_run("ip", "netns", "exec", host.ns, sys.executable, "-m", "bench.impair",
                                          "source", public.address, str(port), str(seconds)))
    report["added_rtt_ms"] = round(report["relay"]["rtt_median_ms"] - report["veth"]["rtt_median_ms"], 2)
    return report


def _sink(host: str) -> int:
    """A TCP sink and a UDP echo on one port of `host`; prints the port."""
    server = socket.create_server((host, 0))
    port = server.getsockname()[1]
    echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    echo.bind((host, port))

    def answer() -> None:
        while True:
            data, peer = echo.recvfrom(2048)
            echo.sendto(data, peer)

    threading.Thread(target=answer, daemon=True).start()
    print(port, flush=True)
    while True:
        connection, _ = server.accept()
        with connection:
            while connection.recv(1 << 16):
                pass


def _source(host: str, port: int, seconds: float, pings: int = 20) -> int:
    """`pings` UDP echoes of the sink (their round trips), then one TCP stream to it for `seconds`."""
    rtts = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(2.0)
        for index in range(pings):
            sent_at = time.monotonic()
            udp.sendto(str(index).encode(), (host, port))
            try:
                while udp.recv(2048) != str(index).encode():
                    pass
            except TimeoutError:
                continue  # lost, one way or the other
            rtts.append((time.monotonic() - sent_at) * 1000)
    rtts.sort()
    chunk = b"\0" * (1 << 16)
    sent = 0
    with socket.create_connection((host, port), timeout=30) as connection:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            sent += connection.send(chunk)
        took = time.monotonic() - started
    print(json.dumps({"pings": pings, "answered": len(rtts), "rtt_min_ms": round(rtts[0], 2) if rtts else None,
                      "rtt_median_ms": round(rtts[len(rtts) // 2], 2) if rtts else None,
                      "tcp_MBps": round(sent / took / 1e6, 2)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("relay", help="(started by the topology) relay between two TUN devices")
    r.add_argument("net_dev")
    r.add_argument("router_ns")
    r.add_argument("router_dev")
    r.add_argument("--delay", type=float, default=0.0)
    r.add_argument("--loss", type=float, default=0.0)
    sub.add_parser("flush", help="delete every conntrack entry of this namespace")
    p = sub.add_parser("probe", help="does the relay hold up? ping and TCP throughput through it (root)")
    p.add_argument("--delay", type=float, default=0.05, help="one way, seconds (default 0.05)")
    p.add_argument("--loss", type=float, default=0.0)
    s = sub.add_parser("sink")
    s.add_argument("host")
    o = sub.add_parser("source")
    o.add_argument("host")
    o.add_argument("port", type=int)
    o.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    if args.command == "relay":
        return _relay_main(args.net_dev, args.router_ns, args.router_dev, args.delay, args.loss)
    if args.command == "flush":
        _flush_here()
        return 0
    if args.command == "sink":
        return _sink(args.host)
    if args.command == "source":
        return _source(args.host, args.port, args.seconds)
    print(json.dumps(probe(args.delay, args.loss), indent=2))
    return 0


if __name__ == "__main__":
    from bench.impair import main as _main  # the module's own classes, not __main__'s copies (Topology checks them)

    sys.exit(_main())
