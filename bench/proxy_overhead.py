"""What the proxy costs, measured side by side in one run on this machine.

    python -m bench.proxy_overhead [--size-mb 1000] [--rounds 3] [--latency-requests 2000] [--concurrent 1000]

1. Throughput of one large download (curl to /dev/null) direct from a local origin, through
   swarmproxy and through tinyproxy (Debian package, for reference), from two origins: an aiohttp
   origin writing from memory, and one using sendfile, and through a CONNECT tunnel (curl --proxytunnel)
   to the sendfile origin (the origin costs almost nothing, so the client
   and proxy are the whole cost). Rounds alternate between the paths so drift hits all alike; the
   median round is reported, with the proxy's CPU seconds per GB.
2. Added latency for 1 KiB responses: sequential keep-alive requests direct and through swarmproxy,
   p50/p99 of each and the difference.
3. N concurrent client connections through swarmproxy, each fetching 64 KiB: errors must be 0.
4. Memory: --memory-clients concurrent 2 MB downloads through swarmproxy (all at once, read as fast as the clients
   can): the proxy's peak RSS per download above where it started (issue 41's goal: <= 256 KiB), and its RSS after
   --idle seconds without a client (goal: within 100 MB of where it started).

Targets (issue 2): throughput >= 0.5 x direct and >= 2 x tinyproxy; added p50 <= 1 ms; 0 errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script too

from bench import stay_private  # noqa: E402


def start(argv: list[str], ready: pathlib.Path, log: pathlib.Path, key: str,
          cwd: pathlib.Path = ROOT) -> tuple[subprocess.Popen, str]:
    """Run `argv` in `cwd` (another tree's `python -m proxy.cli` runs that tree's proxy); its address under `key`
    in the ready file."""
    process = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, cwd=cwd)
    deadline = time.monotonic() + 30
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{argv[0]} did not start: {log.read_text()}")
        time.sleep(0.05)
    return process, json.loads(ready.read_text())[key]


def start_tinyproxy(workdir: pathlib.Path) -> tuple[subprocess.Popen, str] | None:
    binary = shutil.which("tinyproxy")
    if not binary:
        print("tinyproxy not installed (apt-get install -y tinyproxy): its column is skipped", file=sys.stderr)
        return None
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = workdir / "tinyproxy.conf"
    config.write_text(f"Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 2000\nAllow 127.0.0.1\n"
                      f"LogLevel Critical\nPidFile \"{workdir}/tinyproxy.pid\"\nViaProxyName \"tinyproxy\"\n"
                      "DisableViaHeader No\n")
    process = subprocess.Popen([binary, "-d", "-c", str(config)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"127.0.0.1:{port}"
        time.sleep(0.05)
    raise SystemExit("tinyproxy did not start")


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def curl_speed(url: str, proxy: str | None, tunnel: bool = False) -> float:
    argv = ["curl", "--silent", "--show-error", "--output", "/dev/null", "--write-out", "%{speed_download}"]
    if proxy:
        argv += ["--proxy", f"http://{proxy}"] + (["--proxytunnel"] if tunnel else [])  # CONNECT, then the GET
    result = subprocess.run(argv + [url], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    if result.returncode != 0:
        raise SystemExit(f"curl failed ({result.returncode}) for {url} via {proxy}: {result.stderr}")
    return float(result.stdout)


def throughput(origin: str, proxies: dict[str, str | None], pids: dict[str, int], size: int, rounds: int,
               route: str, tunnel: bool = False) -> dict[str, dict[str, float]]:
    url = f"http://{origin}/{route}/{size}"
    curl_speed(url, None)  # warm-up: creates the sendfile source, fills caches
    speeds: dict[str, list[float]] = {name: [] for name in proxies}
    cpu: dict[str, list[float]] = {name: [] for name in proxies}
    for _ in range(rounds):
        for name, proxy in proxies.items():
            before = cpu_seconds(pids[name]) if name in pids else 0.0
            speeds[name].append(curl_speed(url, proxy, tunnel))
            if name in pids:
                cpu[name].append((cpu_seconds(pids[name]) - before) / (size / 1e9))
    return {
        name: {
            "gb_per_s": round(statistics.median(values) / 1e9, 3),
            "rounds_gb_per_s": [round(v / 1e9, 3) for v in values],
            **({"proxy_cpu_s_per_gb": round(statistics.median(cpu[name]), 3)} if cpu[name] else {}),
        }
        for name, values in speeds.items()
    }


async def keepalive_latencies(address: str, target: str, count: int) -> list[float]:
    """`count` GETs of `target` one after another on one new keep-alive connection to `address`: seconds from
    each request's write to its whole body read."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    request = f"GET {target} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        samples.append(time.perf_counter() - started)
    writer.close()
    return samples


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def latency(origin: str, proxy: str, count: int) -> dict[str, float]:
    await keepalive_latencies(origin, "/small", 200)  # warm-up both paths (pool, caches)
    await keepalive_latencies(proxy, f"http://{origin}/small", 200)
    direct, proxied = [], []
    for _ in range(4):  # interleave blocks so drift hits both paths alike
        direct += await keepalive_latencies(origin, "/small", count // 4)
        proxied += await keepalive_latencies(proxy, f"http://{origin}/small", count // 4)
    ms = 1000
    return {
        "direct_p50_ms": round(percentile(direct, 0.5) * ms, 3),
        "direct_p99_ms": round(percentile(direct, 0.99) * ms, 3),
        "proxy_p50_ms": round(percentile(proxied, 0.5) * ms, 3),
        "proxy_p99_ms": round(percentile(proxied, 0.99) * ms, 3),
        "added_p50_ms": round((percentile(proxied, 0.5) - percentile(direct, 0.5)) * ms, 3),
        "added_p99_ms": round((percentile(proxied, 0.99) - percentile(direct, 0.99)) * ms, 3),
    }


async def concurrency(origin: str, proxy: str, clients: int) -> dict[str, object]:
    host, port = proxy.rsplit(":", 1)
    opened = asyncio.Event()
    connected = 0
    errors: list[str] = []

    async def one() -> None:
        nonlocal connected
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError as exc:
            errors.append(f"connect: {exc}")
            return
        connected += 1
        if connected == clients:
            opened.set()
        try:
            await opened.wait()  # all connections are open at once before any request is sent
            writer.write(f"GET http://{origin}/mem/65536 HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(head.split(b"\r\n")[0].decode())
                return
            await reader.readexactly(65536)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            writer.close()

    started = time.perf_counter()
    async with asyncio.timeout(120):
        await asyncio.gather(*(one() for _ in range(clients)))
    return {"clients": clients, "errors": len(errors), "first_errors": errors[:5],
            "seconds": round(time.perf_counter() - started, 3)}


def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def downloads_at_once(origin: str, proxy: str, pid: int, clients: int, *,
                            tunnel: bool = False) -> tuple[int, float, float]:
    """`clients` downloads of about 2 MB, each of its own URL (nothing shared between them), all at once and read
    as fast as the clients can, through the proxy (through a CONNECT tunnel to the origin with `tunnel`), the
    proxy's RSS sampled meanwhile: (downloads complete, RSS at the start, peak RSS), in MiB."""
    host, port = proxy.rsplit(":", 1)
    size = 2_000_000
    start = peak = rss_mib(pid)

    async def one(i: int) -> bool:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            if tunnel:
                writer.write(f"CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n".encode())
                await reader.readuntil(b"\r\n\r\n")
            target = f"/mem/{size + i}" if tunnel else f"http://{origin}/mem/{size + i}"
            writer.write(f"GET {target} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
            await reader.readuntil(b"\r\n\r\n")
            got = 0
            while got < size + i and (chunk := await reader.read(1 << 16)):
                got += len(chunk)
            return got == size + i
        finally:
            writer.close()

    tasks = [asyncio.ensure_future(one(i)) for i in range(clients)]
    while not all(task.done() for task in tasks):
        peak = max(peak, rss_mib(pid))
        await asyncio.sleep(0.05)  # the sampling period: nothing to wait for but time
    return sum(1 for task in tasks if not task.exception() and task.result()), start, peak


async def memory(origin: str, proxy: str, pid: int, clients: int, idle: float) -> dict[str, object]:
    complete, start, peak = await downloads_at_once(origin, proxy, pid, clients)
    after_load = rss_mib(pid)
    await asyncio.sleep(idle)  # what the goal measures: the proxy left idle this long
    return {"clients": clients, "complete": complete, "rss_start_mib": round(start, 1),
            "rss_peak_mib": round(peak, 1), "peak_kib_per_download": round((peak - start) * 1024 / clients),
            "rss_after_load_mib": round(after_load, 1), f"rss_after_{idle:g}s_idle_mib": round(rss_mib(pid), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1000, help="download size in MB (default 1000 = 1 GB)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per path, median reported (default 3)")
    parser.add_argument("--latency-requests", type=int, default=2000, help="1 KiB requests per path (default 2000)")
    parser.add_argument("--concurrent", type=int, default=1000, help="concurrent client connections (default 1000)")
    parser.add_argument("--memory-clients", type=int, default=1000,
                        help="concurrent 2 MB downloads for the memory figures (default 1000; 0 skips them)")
    parser.add_argument("--idle", type=float, default=60.0, help="idle seconds before the last RSS (default 60)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = parser.parse_args()
    stay_private()  # also when run as a script (`python bench/proxy_overhead.py`), which skips bench/__init__
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="swarmproxy-bench-"))
    processes: list[subprocess.Popen] = []
    try:
        origin_proc, origin = start([sys.executable, "bench/local_origin.py", "--ready-file", str(workdir / "o.json")],
                                    workdir / "o.json", workdir / "origin.log", "origin")
        processes.append(origin_proc)
        # The default node (DHT, block engine, LAN discovery) but on loopback: with the default 0.0.0.0 its LAN
        # beacons went onto this machine's real network. Bound to 127.0.0.1, discovery beacons on lo.
        proxy_proc, proxy = start([sys.executable, "-m", "proxy.cli", "run", "--listen", "127.0.0.1:0",
                                   "--dht-listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0",
                                   "--data-dir", str(workdir / "data"), "--ready-file", str(workdir / "p.json"),
                                   "--connect-ports", "*"],  # CONNECT to the local origin's port (the tunnel)
                                  workdir / "p.json", workdir / "proxy.log", "proxy")
        processes.append(proxy_proc)
        proxies: dict[str, str | None] = {"direct": None, "swarmproxy": proxy}
        pids = {"swarmproxy": proxy_proc.pid}
        tiny = start_tinyproxy(workdir)
        if tiny:
            processes.append(tiny[0])
            proxies["tinyproxy"] = tiny[1]
            pids["tinyproxy"] = tiny[0].pid

        size = args.size_mb * 1000 * 1000
        results: dict[str, object] = {
            "command": "python " + " ".join(sys.argv),
            "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
                       f"Python {platform.python_version()}",
        }
        for route, label, tunnel in (("mem", "aiohttp_origin_from_memory", False), ("file", "sendfile_origin", False),
                                     ("file", "connect_tunnel_sendfile_origin", True)):
            print(f"throughput, {args.size_mb} MB, {label} ...", file=sys.stderr)
            result = throughput(origin, proxies, pids, size, args.rounds, route, tunnel)
            direct = result["direct"]["gb_per_s"]
            ratios = {"swarmproxy_vs_direct": round(result["swarmproxy"]["gb_per_s"] / direct, 3)}
            if "tinyproxy" in result:
                ratios["swarmproxy_vs_tinyproxy"] = round(
                    result["swarmproxy"]["gb_per_s"] / result["tinyproxy"]["gb_per_s"], 3)
            results[f"throughput_{label}"] = {**result, "ratios": ratios}
        print("latency, 1 KiB responses ...", file=sys.stderr)
        results["latency_1kib"] = asyncio.run(latency(origin, proxy, args.latency_requests))
        print(f"{args.concurrent} concurrent connections ...", file=sys.stderr)
        results["concurrency"] = asyncio.run(concurrency(origin, proxy, args.concurrent))
        if args.memory_clients:
            print(f"memory, {args.memory_clients} concurrent 2 MB downloads, then {args.idle:g} s idle ...",
                  file=sys.stderr)
            results["memory"] = asyncio.run(memory(origin, proxy, proxy_proc.pid, args.memory_clients, args.idle))
        report(results, args.json)
    finally:
        stop(processes, workdir)


def report(results: dict, path: pathlib.Path | None) -> None:
    """Print a proxy bench's results as JSON, and write them to `path` too when given."""
    text = json.dumps(results, indent=2)
    print(text)
    if path:
        path.write_text(text + "\n")


def stop(processes: list, workdir: pathlib.Path) -> None:
    """End a proxy bench: its processes (origin, proxies) and its scratch directory."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
