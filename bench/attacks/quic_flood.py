"""QUIC handshake-state flood (issue 35, item 5), measured against a real node in its own process.

A fresh node (`bench/attacks/peer_node.py`, QUIC, seeding one 4 MiB file on a port-0 listener; its code from
`--tree`, default this checkout) is sent `--megabytes` of valid QUIC Initials from one UDP socket on loopback.
Each Initial is the first flight of a fresh aioquic client connection (its own connection ids and key share, so
each one asks the node for a connection of its own), and the attacker never goes on with the handshake. By
default it does answer a Retry, as any client whose source address is real would (`--ignore-retry`: it does
not); a connection the node admits gets nothing more from it.

Printed, as JSON: the node's RSS (VmRSS from /proc) before, at its peak during the flood (sampled every 50 ms),
when the flood ends, and after `--idle` seconds of quiet; how many Initials (and Retry answers) were sent and what
the node sent back (Retry packets and other datagrams); and whether a real client from another loopback address
(127.0.0.2) could connect while the flood ran (`--probe`, on by default), with its connect time.

With `--sources N` the Initials go round N sockets on N loopback addresses (127.0.4.1, 127.0.4.2, ...), each its
own network: what a source with many addresses can make the node hold.

    python -m bench.attacks.quic_flood [--megabytes 28] [--rate 20] [--idle 60] [--ignore-retry] [--sources 1]
                                       [--tree DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import pathlib
import socket
import ssl
import time

from aioquic.buffer import Buffer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import QuicPacketType, pull_quic_header

from bench.attacks.peer_node import THIS_TREE, Target, rss_kib
from swarm.errors import ConnectFailed
from swarm.net.quic import ALPN, QuicTransport

MiB = 1024 * 1024


class _Flood(asyncio.DatagramProtocol):
    """One UDP socket: sends the Initials, counts what comes back, answers Retry packets (unless told not to)."""

    def __init__(self, answer_retry: bool) -> None:
        self.answer_retry = answer_retry
        self.transport: asyncio.DatagramTransport | None = None
        self.clients: dict[bytes, QuicConnection] = {}  # our connection id → the client that still awaits a Retry
        self.sent_bytes = self.initials = self.retry_answers = 0
        self.retries = self.other = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, client: QuicConnection, now: float) -> None:
        assert self.transport is not None
        for data, address in client.datagrams_to_send(now):
            self.transport.sendto(data, address)
            self.sent_bytes += len(data)

    def datagram_received(self, data: bytes, addr) -> None:
        try:
            header = pull_quic_header(Buffer(data=data), host_cid_length=8)
        except ValueError:
            self.other += 1
            return
        if header.packet_type != QuicPacketType.RETRY:
            self.other += 1
            return
        self.retries += 1
        client = self.clients.pop(header.destination_cid, None)
        if client is not None and self.answer_retry:  # the same client again, now with the token
            now = time.monotonic()
            client.receive_datagram(data, addr, now)
            self.retry_answers += 1
            self.send(client, now)


async def _probe(address, started: asyncio.Event, results: dict) -> None:
    """A real client from another loopback address, connecting while the flood runs."""
    await started.wait()
    await asyncio.sleep(1.0)
    transport = QuicTransport()
    transport.listen_host = "127.0.0.2"  # (connect() binds its socket to the listen host's address)
    began = time.monotonic()
    try:
        connection = await transport.connect(address, timeout=10.0)
    except ConnectFailed as exc:
        results["probe"] = {"connected": False, "why": str(exc), "seconds": round(time.monotonic() - began, 2)}
        return
    results["probe"] = {"connected": True, "seconds": round(time.monotonic() - began, 2)}
    connection.abort("probe done")


async def _sample(pid: int, peak: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_kib(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)


async def run(args: argparse.Namespace) -> dict:
    configuration = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], verify_mode=ssl.CERT_NONE,
                                      server_name="swarmproxy")
    async with Target(args.tree, "quic") as target:
        await asyncio.sleep(1.0)
        before = rss_kib(target.pid)
        loop = asyncio.get_running_loop()
        floods = []
        for index in range(args.sources):
            source = "127.0.0.1" if args.sources == 1 else f"127.0.4.{index + 1}"
            _, flood = await loop.create_datagram_endpoint(lambda: _Flood(not args.ignore_retry),
                                                           local_addr=(source, 0), family=socket.AF_INET)
            assert isinstance(flood, _Flood) and flood.transport is not None
            flood.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MiB)
            floods.append(flood)
        peak, stop, started, results = [before], asyncio.Event(), asyncio.Event(), {}
        sampler = asyncio.ensure_future(_sample(target.pid, peak, stop))
        probe = asyncio.ensure_future(_probe(target.address, started, results)) if args.probe else None
        budget = int(args.megabytes * MiB)
        began = time.monotonic()
        started.set()
        sent = initials = 0
        while sent < budget:
            flood = floods[initials % len(floods)]
            now = time.monotonic()
            client = QuicConnection(configuration=configuration)
            client.connect(target.address, now=now)
            flood.clients[client.host_cid] = client
            flood.send(client, now)
            flood.initials += 1
            initials += 1
            sent = sum(flood.sent_bytes for flood in floods)
            if initials % 64 == 0:  # pace at --rate MB/s, and let the node's replies in
                ahead = sent / (args.rate * MiB) - (time.monotonic() - began)
                await asyncio.sleep(max(0.0, ahead))
        flood_seconds = time.monotonic() - began
        if probe is not None:
            await probe
        await asyncio.sleep(1.0)
        at_end = rss_kib(target.pid)
        for flood in floods:
            flood.clients.clear()
        await asyncio.sleep(args.idle)
        stop.set()
        await sampler
        after = rss_kib(target.pid)
        for flood in floods:
            flood.transport.close()
        return {
            "tree": str(args.tree), "answer_retry": not args.ignore_retry, "sources": args.sources,
            "initials_sent": initials, "retry_answers_sent": sum(flood.retry_answers for flood in floods),
            "megabytes_sent": round(sent / MiB, 1), "flood_seconds": round(flood_seconds, 1),
            "retry_packets_received": sum(flood.retries for flood in floods),
            "other_datagrams_received": sum(flood.other for flood in floods),
            "rss_before_mib": round(before / 1024, 1),
            "rss_peak_mib": round(peak[0] / 1024, 1),
            "rss_peak_growth_mib": round((peak[0] - before) / 1024, 1),
            "rss_at_flood_end_mib": round(at_end / 1024, 1),
            f"rss_after_{args.idle:g}s_idle_mib": round(after / 1024, 1),
            "rss_kept_after_idle_mib": round((after - before) / 1024, 1),
            **results,
        }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.attacks.quic_flood", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=pathlib.Path, default=THIS_TREE,
                        help="the swarmproxy checkout whose node is attacked (default: this one)")
    parser.add_argument("--megabytes", type=float, default=28.0, help="MiB of Initials to send (default: 28)")
    parser.add_argument("--rate", type=float, default=20.0, help="MiB/s to send them at, at most (default: 20)")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of quiet after the flood (default: 60)")
    parser.add_argument("--ignore-retry", action="store_true", help="never answer a Retry (a spoofed source)")
    parser.add_argument("--sources", type=int, default=1,
                        help="loopback addresses the Initials are sent from, in turn (default: 1)")
    parser.add_argument("--no-probe", dest="probe", action="store_false",
                        help="no real client connecting from 127.0.0.2 during the flood")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
