"""A quick throughput probe of the peer transports (not a test, not the full benchmark).

    python bench/transport_probe.py [--size-mb 200] [--only tcp,tcp-file,quic,bare-quic] [--loop uvloop|asyncio]
                                    [--outstanding 4] [--block-mb 4 | --block-kib 16]
                                    [--datagram-size 1200]

One seed process serves SIZE MiB as 4 MiB BLOCKs; this process is the leecher: it keeps OUTSTANDING requests in
flight over one connection and counts the bytes. Cases:

* `tcp`       — swarm.net.tcp, blocks sent from memory (bytes);
* `tcp-file`  — the same, blocks sent from a file range (sendfile in a worker thread);
* `quic`      — swarm.net.quic, one stream per request;
* `bare-quic` — the reference: aioquic alone, one stream, SIZE MiB handed to it at once, no framing.

Prints MB/s (1 MB = 10^6 bytes) and the CPU seconds per GB of each side.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import pathlib
import resource
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

MiB = 1024 * 1024


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _run(loop_name: str, coroutine_factory, *args):
    if loop_name == "uvloop":
        import uvloop

        return uvloop.run(coroutine_factory(*args))
    return asyncio.run(coroutine_factory(*args))


# --- seed (child process) -------------------------------------------------------------------------------------


def _make_transport(case: str, datagram_size: int | None):
    if case.startswith("tcp"):
        from swarm.net.tcp import TcpTransport

        return TcpTransport()
    from swarm.net.quic import QuicTransport

    return QuicTransport(max_datagram_size=datagram_size)


async def _seed(case: str, block_size: int, path: str, datagram_size: int | None, pipe) -> None:
    from swarm.net.wire import Request
    from swarm.store.interface import BlockLocation

    payload = pathlib.Path(path).read_bytes()[:block_size]
    transport = _make_transport(case, datagram_size)
    listener = await transport.listen("127.0.0.1", 0)
    pipe.send(listener.address)
    connection = await listener.accept()
    cpu = _cpu_seconds()
    async for message in connection:
        if isinstance(message, Request):
            if case == "tcp-file":
                source = BlockLocation(path, message.block * block_size, message.length)
            else:
                source = memoryview(payload)[: message.length]
            await connection.send_block(message.block, message.offset, source)
    pipe.send(_cpu_seconds() - cpu)
    await listener.aclose()


async def _bare_seed(total: int, datagram_size: int | None, pipe) -> None:
    from aioquic.asyncio import QuicConnectionProtocol, serve

    from swarm.net.quic import QuicTransport

    configuration = QuicTransport(max_datagram_size=datagram_size)._configuration(is_client=False)
    done = asyncio.get_running_loop().create_future()

    class Sink(QuicConnectionProtocol):
        received = 0

        def quic_event_received(self, event) -> None:
            from aioquic.quic.events import StreamDataReceived

            if isinstance(event, StreamDataReceived):
                Sink.received += len(event.data)
                if event.end_stream and not done.done():
                    done.set_result(None)

    server = await serve("127.0.0.1", 0, configuration=configuration, create_protocol=Sink)
    pipe.send(server._transport.get_extra_info("sockname")[:2])
    await done
    pipe.send(Sink.received)
    server.close()


def _seed_main(case, block_size, path, total, datagram_size, loop_name, pipe) -> None:
    if case == "bare-quic":
        cpu = _cpu_seconds()
        _run(loop_name, _bare_seed, total, datagram_size, pipe)
        pipe.send(_cpu_seconds() - cpu)
    else:
        _run(loop_name, _seed, case, block_size, path, datagram_size, pipe)


# --- leecher (this process) -----------------------------------------------------------------------------------


async def _leech(case: str, address, total: int, block_size: int, outstanding: int, datagram_size) -> tuple:
    from swarm.net.wire import Block, Request

    connection = await _make_transport(case, datagram_size).connect(tuple(address))
    blocks = total // block_size
    started = time.perf_counter()
    cpu = _cpu_seconds()
    next_block = 0
    received = 0
    while next_block < min(outstanding, blocks):
        connection.send_nowait(Request(next_block, 0, block_size))
        next_block += 1
    async for message in connection:
        assert isinstance(message, Block), message
        received += len(message.data)
        if next_block < blocks:
            connection.send_nowait(Request(next_block, 0, block_size))
            next_block += 1
        if received >= blocks * block_size:
            break
    elapsed = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu
    await connection.aclose()
    return received, elapsed, cpu


async def _bare_leech(address, total: int, datagram_size) -> tuple:
    import ssl

    from aioquic.asyncio import connect
    from aioquic.quic.configuration import QuicConfiguration

    from swarm.net.quic import ALPN

    configuration = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], verify_mode=ssl.CERT_NONE)
    if datagram_size:
        configuration.max_datagram_size = datagram_size
    async with connect(address[0], address[1], configuration=configuration) as client:
        started = time.perf_counter()
        cpu = _cpu_seconds()
        stream_id = client._quic.get_next_available_stream_id()
        client._quic.send_stream_data(stream_id, bytes(total), end_stream=True)
        client.transmit()
        # Done when everything is acknowledged, or the seed, having received it all, closed the connection.
        stream = client._quic._streams[stream_id]
        while stream.sender._buffer and not client._closed.is_set():
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - started
        return total, elapsed, _cpu_seconds() - cpu


def measure(case: str, args) -> dict:
    total = args.size_mb * MiB
    block_size = args.block_kib * 1024 if args.block_kib else args.block_mb * MiB
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "content")
        with open(path, "wb") as file:
            chunk = os.urandom(MiB)
            for _ in range(args.size_mb):
                file.write(chunk)
        parent, child = context.Pipe()
        seed = context.Process(
            target=_seed_main,
            args=(case, block_size, path, total, args.datagram_size, args.loop, child),
        )
        seed.start()
        address = parent.recv()
        if case == "bare-quic":
            received, elapsed, cpu = _run(args.loop, _bare_leech, address, total, args.datagram_size)
            parent.recv()  # bytes the seed counted
        else:
            received, elapsed, cpu = _run(
                args.loop, _leech, case, address, total, block_size, args.outstanding, args.datagram_size
            )
        seed_cpu = parent.recv()
        seed.join(30)
    rate = received / elapsed / 1e6
    gb = received / 1e9
    result = {
        "case": case,
        "MB/s": round(rate, 1),
        "seconds": round(elapsed, 2),
        "sender CPU s/GB" if case == "bare-quic" else "leecher CPU s/GB": round(cpu / gb, 2),
        "receiver CPU s/GB" if case == "bare-quic" else "seed CPU s/GB": round(seed_cpu / gb, 2),
    }
    print(result, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--block-mb", type=int, default=4)
    parser.add_argument("--block-kib", type=int, default=None, help="block size in KiB instead (e.g. 16: the cluster "
                        "lab's 32 MiB file; small blocks are where per-block costs show)")
    parser.add_argument("--outstanding", type=int, default=4)
    parser.add_argument("--only", default="tcp,tcp-file,quic,bare-quic")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--datagram-size", type=int, default=None, help="QUIC max datagram size (default 1200)")
    args = parser.parse_args()
    block = f"{args.block_kib} KiB" if args.block_kib else f"{args.block_mb} MiB"
    print(f"# {' '.join(sys.argv)}  (loop={args.loop}, {args.size_mb} MiB, {block} blocks)")
    for case in args.only.split(","):
        measure(case, args)


if __name__ == "__main__":
    main()
