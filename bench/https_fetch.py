"""What HTTPS through swarmproxy costs, measured side by side in one run (issue 23's figures).

    python bench/https_fetch.py [--size-mb 1000] [--rounds 3] [--requests 300]

1. Throughput of one large HTTPS download from a fast local TLS origin (bench/local_origin.py, a file with an
   ETag, so the proxy spools, hashes and stores it as it would share it): curl straight to the origin against
   `swarmproxy get` through a running proxy (its /_swarm/fetch: the proxy is the TLS client). Rounds alternate;
   the median round is reported. Goal: get >= 0.8 x curl.
2. Added latency of a request through a --mitm-hosts tunnel with a cached leaf: sequential small GETs, each on a
   new connection and TLS handshake, straight to the origin and through the proxy's CONNECT (answered with the
   local CA's leaf); p50 of each and the difference. Goal: added p50 <= 5 ms.

The origin's certificate comes from a throwaway CA (trustme, the test extra); nothing leaves this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def _wait_ready(process: subprocess.Popen, ready: pathlib.Path, log: pathlib.Path) -> dict:
    deadline = time.monotonic() + 60
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{process.args[:3]} did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)  # a benchmark harness waiting for another process's file: no event to wait on
    return json.loads(ready.read_text())


def _download_seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "no_proxy": "*"})
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({result.returncode}): {result.stderr[-500:]}")
    return elapsed


def _one_request(connect: callable, context: ssl.SSLContext, host: str) -> float:
    started = time.perf_counter()
    raw = connect()
    with context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(f"GET /small HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        while tls.recv(65536):
            pass
    return time.perf_counter() - started


def _via_connect(proxy: tuple[str, int], target: str) -> socket.socket:
    sock = socket.create_connection(proxy)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit("the proxy closed the CONNECT")
        head += chunk
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"CONNECT refused: {head[:200]!r}")
    return sock


def main() -> int:
    import trustme

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="swarmproxy-https-bench-"))
    ca = trustme.CA()
    leaf = ca.issue_cert("localhost", "127.0.0.1")
    ca_pem, cert_pem, key_pem = work / "ca.pem", work / "cert.pem", work / "key.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    leaf.cert_chain_pems[0].write_to_path(str(cert_pem))
    leaf.private_key_pem.write_to_path(str(key_pem))
    processes = []
    try:
        origin = subprocess.Popen([PYTHON, str(ROOT / "bench/local_origin.py"), "--ready-file", str(work / "o.json"),
                                   "--tls-cert", str(cert_pem), "--tls-key", str(key_pem)],
                                  stdout=open(work / "origin.log", "wb"), stderr=subprocess.STDOUT)
        processes.append(origin)
        port = int(_wait_ready(origin, work / "o.json", work / "origin.log")["origin"].rsplit(":", 1)[1])
        proxy = subprocess.Popen(
            [PYTHON, "-m", "proxy.cli", "run", "--data-dir", str(work / "data"), "--ready-file", str(work / "p.json"),
             "--listen", "127.0.0.1:0", "--dht-listen", "off", "--ca-file", str(ca_pem), "--mitm-hosts", "localhost",
             "--connect-ports", "*", "--log-level", "warning", "--store-size", f"{3 * args.size_mb}Mi"],
            stdout=open(work / "proxy.log", "wb"), stderr=subprocess.STDOUT, cwd=ROOT)
        processes.append(proxy)
        proxy_address = _wait_ready(proxy, work / "p.json", work / "proxy.log")["proxy"]
        size = args.size_mb * 1024 * 1024
        url = f"https://localhost:{port}/file/{size}"
        curl = ["curl", "-sS", "--cacert", str(ca_pem), "-o", "/dev/null", url]

        def get(target: str) -> list[str]:
            return [PYTHON, "-m", "proxy.cli", "get", target, "-q", "-o", "/dev/null", "--proxy", proxy_address]

        _download_seconds(curl)  # warm-up: the origin writes its file, caches fill
        times: dict[str, list[float]] = {"curl": [], "swarmproxy get": []}
        for _ in range(args.rounds):
            times["curl"].append(_download_seconds(curl))
            # each round a fresh URL for the proxy (a query it ignores would be a new representation): the
            # same URL again would be served from its own store, which is not what is measured here
            times["swarmproxy get"].append(_download_seconds(get(f"{url}?round={len(times['swarmproxy get'])}")))
        speeds = {name: round(size / statistics.median(values) / 1e6, 1) for name, values in times.items()}

        context = ssl.create_default_context(cafile=str(ca_pem))
        local_ca = ssl.create_default_context(cafile=str(work / "data" / "ca" / "ca.pem"))
        host, proxy_port = proxy_address.rsplit(":", 1)
        target = f"localhost:{port}"
        _one_request(lambda: _via_connect((host, int(proxy_port)), target), local_ca, "localhost")  # leaf made
        direct, mitm = [], []
        for _ in range(args.requests):
            direct.append(_one_request(lambda: socket.create_connection(("127.0.0.1", port)), context, "localhost"))
            mitm.append(_one_request(lambda: _via_connect((host, int(proxy_port)), target), local_ca, "localhost"))
        report = {
            "size_mb": args.size_mb, "rounds": args.rounds,
            "throughput_mb_per_s": speeds,
            "get_vs_curl": round(speeds["swarmproxy get"] / speeds["curl"], 2),
            "requests": args.requests,
            "direct_p50_ms": round(1000 * statistics.median(direct), 2),
            "mitm_p50_ms": round(1000 * statistics.median(mitm), 2),
            "mitm_added_p50_ms": round(1000 * (statistics.median(mitm) - statistics.median(direct)), 2),
        }
        print(json.dumps(report, indent=1))
        return 0
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
