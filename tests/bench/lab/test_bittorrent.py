"""The lab's BitTorrent baseline: libtorrent clients behind the emulated network, a web-seeded file."""

from __future__ import annotations

import asyncio
import os
import random
import threading

import pytest

from bench.lab.bittorrent import Relay, Route, run_bittorrent
from bench.lab.netem import EmulatedLoop, LinkModel
from proxy.slow_origin import SlowOrigin

MIB = 1 << 20


def native_threads() -> int:
    """Threads Python did not start (libtorrent's): the OS's count minus the ones `threading` knows."""
    return len(os.listdir("/proc/self/task")) - threading.active_count()


def run_emulated(model: LinkModel, scenario):
    with asyncio.Runner(loop_factory=lambda: EmulatedLoop(model)) as runner:
        return runner.run(scenario())


def test_four_clients_share_what_the_web_seed_serves(tmp_path):
    # Client 0 gets the file from the origin alone (about 2 s) and seeds it for 2 s; the others arrive then
    # and get most of it from the swarm. (Clients that all start at once would each fetch most of a 2 MiB
    # file from the web seed: libtorrent asks a web seed for at least 1 MiB per request, asks no peer for
    # those blocks until the end game, and does not cancel a range that peers deliver meanwhile.)
    model = LinkModel(delay=0.005)
    data = random.Random(6).randbytes(2 * MIB)
    messages: list[str] = []

    async def scenario():
        origin = SlowOrigin(rate=1_000_000)
        origin.add("/file.bin", data)
        url = await origin.start()
        threads = native_threads()
        try:
            run = await run_bittorrent(data=data, url=url + "/file.bin", origin_host="127.0.0.1",
                                       arrivals=[0.0, 2.2, 2.3, 2.4], hosts=[f"127.0.6.{i}" for i in range(1, 5)],
                                       model=model, piece_size=256 * 1024, linger=2.0, workdir=tmp_path,
                                       progress=messages.append, timeout=25.0)
        finally:
            await origin.stop()
        leftover = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        return run, origin.bytes_sent, leftover, native_threads() - threads

    run, served, leftover, leaked_threads = run_emulated(model, scenario)
    assert leaked_threads == 0  # every session has shut down
    for client in run.clients:
        assert client.error is None, (client, messages)
        assert client.file_ok
        assert client.started >= client.arrival and client.duration > 0
        assert client.from_web_seed + client.from_peers == len(data)  # every block attributed to a source
        assert client.payload_downloaded >= len(data)
    assert sum(c.from_peers for c in run.clients) > 0  # the swarm shared
    assert sum(c.wire_from_peers for c in run.clients) > 0  # ... over the relay, as the network saw it
    assert served < len(run.clients) * len(data)
    assert run.web_seed_bytes <= served
    assert run.relay_bytes >= served
    assert not leftover


def test_relay_delays_both_directions_and_shows_the_callers_public_address():
    model = LinkModel(delay=0.05)

    async def scenario():
        loop = asyncio.get_running_loop()
        seen: list[str] = []

        async def echo(reader, writer):
            seen.append(writer.get_extra_info("peername")[0])
            writer.write(await reader.readexactly(5))
            await writer.drain()
            writer.close()

        server = await loop.raw_create_server(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), echo), "127.0.7.2", 0)
        relay = Relay(model)
        relay.public["127.64.7.1"] = "127.0.7.1"  # the caller's hidden address and its public one
        try:
            route: Route = await relay.route("127.0.7.2")
            route.target = ("127.0.7.2", server.sockets[0].getsockname()[1])
            protocol = asyncio.StreamReaderProtocol(reader := asyncio.StreamReader())
            began = loop.time()
            transport, _ = await loop.raw_create_connection(lambda: protocol, route.host, route.port,
                                                            local_addr=("127.64.7.1", 0))
            transport.write(b"hello")
            answer = await reader.readexactly(5)
            elapsed = loop.time() - began
            transport.close()
        finally:
            await relay.close()
            server.close()
            await server.wait_closed()
        return answer, elapsed, seen, model.bytes_carried

    answer, elapsed, seen, carried = run_emulated(model, scenario)
    assert answer == b"hello"
    assert seen == ["127.0.7.1"]
    assert elapsed >= 4 * model.delay  # the handshake's round trip, then the request and the reply
    assert carried == 10


def test_bad_arguments_fail_before_any_session_starts(tmp_path):
    common = dict(data=b"x" * MIB, url="http://127.0.0.1:9/file.bin", origin_host="127.0.0.1",
                  model=LinkModel(delay=0.0), linger=0.0, workdir=tmp_path)
    with pytest.raises(ValueError, match="distinct hosts"):
        asyncio.run(run_bittorrent(arrivals=[0.0, 1.0], hosts=["127.0.8.1", "127.0.8.1"], piece_size=256 * 1024,
                                   **common))
    with pytest.raises(ValueError, match="piece_size"):
        asyncio.run(run_bittorrent(arrivals=[0.0], hosts=["127.0.8.1"], piece_size=1000, **common))
