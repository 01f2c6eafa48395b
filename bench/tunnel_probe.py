"""How fast a CONNECT tunnel could be on this machine: two bare relays beside the direct download, side by side.

    python -m bench.tunnel_probe [--size-mb 500] [--rounds 3]

curl --proxytunnel downloads from the sendfile origin (bench/local_origin.py) directly, through a relay that copies
with recv_into/sendall on a reused 256 KiB buffer (one thread per direction), and through one that moves the bytes
with splice(2) through a pipe, never into user space. swarmproxy's own tunnel is measured by bench.proxy_overhead
(its connect_tunnel section): this probe says what a tunnel without asyncio's and aiohttp's machinery reaches, the
ceiling for issue 41's goal (0.9 of direct). The relays are probes, not proxies: no limits, no error handling.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pathlib
import socket
import statistics
import sys
import tempfile
import threading

from bench.proxy_overhead import curl_speed, start

F_SETPIPE_SZ = 1031  # fcntl: a 1 MiB pipe moves more per splice call


def pump_copy(src: socket.socket, dst: socket.socket) -> None:
    buffer = bytearray(256 * 1024)
    view = memoryview(buffer)
    while count := src.recv_into(buffer):
        dst.sendall(view[:count])
    _half_close(dst)


def pump_splice(src: socket.socket, dst: socket.socket) -> None:
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass  # the default 64 KiB pipe still works
    try:
        while count := os.splice(src.fileno(), write_end, 1 << 20):
            while count:
                count -= os.splice(read_end, dst.fileno(), count)
    finally:
        os.close(read_end)
        os.close(write_end)
    _half_close(dst)


def _half_close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def serve(pump, origin: tuple[str, int]) -> str:
    """A CONNECT relay on a free loopback port that pumps both directions with `pump`; its address."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def handle(client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += client.recv(4096)
        upstream = socket.create_connection(origin)  # whatever the CONNECT named: a probe has one origin
        client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        if rest := head.split(b"\r\n\r\n", 1)[1]:
            upstream.sendall(rest)
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        pump(upstream, client)
        client.close()
        upstream.close()

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            threading.Thread(target=handle, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="swarmproxy-tunnel-probe-"))
    process, origin = start([sys.executable, "bench/local_origin.py", "--ready-file", str(workdir / "o.json")],
                            workdir / "o.json", workdir / "origin.log", "origin")
    try:
        host, port = origin.rsplit(":", 1)
        relays = {"copy": serve(pump_copy, (host, int(port))), "splice": serve(pump_splice, (host, int(port)))}
        url = f"http://{origin}/file/{args.size_mb * 1_000_000}"
        curl_speed(url, None)  # warm-up: makes the sendfile source
        speeds: dict[str, list[float]] = {"direct": [], **{name: [] for name in relays}}
        for _ in range(args.rounds):  # alternating, so drift hits all alike
            speeds["direct"].append(curl_speed(url, None))
            for name, relay in relays.items():
                speeds[name].append(curl_speed(url, relay, tunnel=True))
        direct = statistics.median(speeds["direct"])
        for name, values in speeds.items():
            median = statistics.median(values)
            print(f"{name:>7}: {median / 1e9:.3f} GB/s ({median / direct:.2f} of direct), rounds "
                  f"{[round(v / 1e9, 2) for v in values]}")
    finally:
        process.terminate()
        process.wait(timeout=10)


if __name__ == "__main__":
    main()
