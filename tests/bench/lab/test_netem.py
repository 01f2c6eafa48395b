"""The lab's network model (sans-I/O vectors) and the transport shims that apply it."""

import asyncio

import pytest

from bench.lab import netem
from bench.lab.netem import EmulatedLoop, LinkModel, SharedLinks

# (delay, up, down, sends [(src, dst, nbytes, now)], expected arrival times)
VECTORS = [
    ("delay only", 0.025, None, None, [("a", "b", 1000, 0.0)], [0.025]),
    ("same host is not delayed", 0.025, None, None, [("a", "a", 1000, 1.0)], [1.0]),
    ("uplink serialises back to back", 0.0, 1000.0, None,
     [("a", "b", 500, 0.0), ("a", "c", 500, 0.0)], [0.5, 1.0]),
    ("downlink serialises what arrives together", 0.010, None, 1000.0,
     [("a", "c", 100, 0.0), ("b", "c", 100, 0.0)], [0.110, 0.210]),
    ("a free link does not bank idle time", 0.0, 1000.0, None,
     [("a", "b", 100, 0.0), ("a", "b", 100, 5.0)], [0.1, 5.1]),
    ("the slower of up and down sets the pace", 0.0, 1000.0, 500.0,
     [("a", "b", 100, 0.0), ("a", "b", 100, 0.0)], [0.3, 0.5]),
]


@pytest.mark.parametrize("name,delay,up,down,sends,expected", VECTORS, ids=[v[0] for v in VECTORS])
def test_link_model_vectors(name, delay, up, down, sends, expected):
    model = LinkModel(delay, up, down)
    got = [model.deliver_at(src, dst, n, now) for src, dst, n, now in sends]
    assert got == pytest.approx(expected)


def test_per_host_override_lifts_the_cap():
    model = LinkModel(0.0, 1000.0, 1000.0)
    model.limit("origin", None, None)
    # The origin's uplink is not capped; the receiver's downlink still is.
    assert model.deliver_at("origin", "b", 1000, 0.0) == pytest.approx(1.0)
    assert model.deliver_at("b", "origin", 1000, 0.0) == pytest.approx(1.0)  # b's uplink


def test_processes_attached_to_one_network_share_each_hosts_link(tmp_path):
    # Two attachments stand for two worker processes: what one sees a host send queues behind what the
    # other saw it send, on the uplink and on the receiver's downlink alike.
    shared = SharedLinks.create(tmp_path, LinkModel(0.0, 1000.0, 2000.0))
    first, second = shared.attach(), shared.attach()
    try:
        assert first.deliver_at("127.2.0.1", "127.2.0.2", 500, 10.0) == pytest.approx(10.75)
        assert second.deliver_at("127.2.0.1", "127.2.0.3", 500, 10.0) == pytest.approx(11.25)  # behind the first
        assert second.deliver_at("127.2.0.4", "127.2.0.2", 1000, 10.0) == pytest.approx(11.5)  # .2's downlink
        assert first.deliver_at("127.2.0.5", "127.2.0.5", 1000, 10.0) == 10.0  # same host: not delayed
    finally:
        first.close()
        second.close()


def test_a_lock_left_held_by_a_killed_worker_does_not_hang_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(netem, "LOCK_WAIT", 0.05)
    shared = SharedLinks.create(tmp_path, LinkModel(0.0, 1000.0, None))
    attached = shared.attach()
    shared.lock.acquire()  # as a worker terminated inside deliver_at leaves it
    try:
        assert attached.deliver_at("127.2.0.1", "127.2.0.2", 500, 10.0) == pytest.approx(10.5)
        assert attached.deliver_at("127.2.0.1", "127.2.0.2", 500, 10.0) == pytest.approx(11.0)  # still shaping
    finally:
        shared.lock.release()
        attached.close()


def test_a_shared_network_keeps_the_overrides_and_hosts_outside_its_range(tmp_path):
    model = LinkModel(0.01, 1000.0, 1000.0)
    model.limit("127.0.0.3", None, None)  # an origin, which throttles itself
    shared = SharedLinks.create(tmp_path, model)
    attached = shared.attach()
    try:
        assert attached.deliver_at("127.0.0.3", "127.2.0.1", 1000, 0.0) == pytest.approx(1.01)  # no uplink cap
        # Outside 127.0-3.x.y the queues are this process's own, and still queues.
        assert attached.deliver_at("10.0.0.1", "127.9.0.1", 1000, 0.0) == pytest.approx(2.01)
        assert attached.deliver_at("10.0.0.1", "127.9.0.2", 1000, 0.0) == pytest.approx(3.01)
    finally:
        attached.close()


def test_negative_delay_is_refused():
    with pytest.raises(ValueError):
        LinkModel(-1)


async def _echo_roundtrip(payloads: list[bytes]) -> tuple[bytes, float]:
    loop = asyncio.get_running_loop()
    received = bytearray()

    async def serve(reader, writer):
        while chunk := await reader.read(65536):
            writer.write(chunk)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.21", 0)
    port = server.sockets[0].getsockname()[1]
    started = loop.time()
    reader, writer = await asyncio.open_connection("127.0.0.21", port, local_addr=("127.0.0.22", 0))
    for payload in payloads:
        writer.write(payload)
    writer.write_eof()
    while chunk := await reader.read(65536):
        received += chunk
    elapsed = loop.time() - started
    writer.close()
    server.close()
    await server.wait_closed()
    return bytes(received), elapsed


def test_streams_arrive_whole_in_order_and_late():
    payloads = [bytes([i]) * 70_000 for i in range(8)]  # more than the shim queues before it stops reading
    model = LinkModel(0.02, 4_000_000, 4_000_000)
    with asyncio.Runner(loop_factory=lambda: EmulatedLoop(model)) as runner:
        received, elapsed = runner.run(_echo_roundtrip(payloads))
    assert received == b"".join(payloads)
    # Handshake round trip, then the data there and back: at least 4 one-way delays, whatever the machine.
    assert elapsed >= 4 * 0.02
    assert model.bytes_carried >= 2 * len(received)


def test_datagrams_are_delayed_not_lost():
    model = LinkModel(0.01)

    async def main():
        loop = asyncio.get_running_loop()
        got: asyncio.Queue = asyncio.Queue()

        class Sink(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                got.put_nowait((data, addr, loop.time()))

        sink, protocol = await loop.create_datagram_endpoint(Sink, local_addr=("127.0.0.23", 0))
        assert isinstance(protocol, Sink)  # callers get their own protocol back, not the shim
        sender, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.24", 0))
        sent = loop.time()
        sender.sendto(b"ping", sink.get_extra_info("sockname"))
        data, addr, at = await got.get()
        sink.close()
        sender.close()
        return data, addr, at - sent

    with asyncio.Runner(loop_factory=lambda: EmulatedLoop(model)) as runner:
        data, addr, late = runner.run(main())
    assert data == b"ping" and addr[0] == "127.0.0.24"
    assert late >= 0.01
