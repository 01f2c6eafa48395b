"""This tree's proxy against another tree's, side by side in one run: what a change to the relay or the tunnel costs.

    mkdir /tmp/base && git archive main | tar -x -C /tmp/base
    python -m bench.proxy_compare --base /tmp/base [--size-mb 500] [--rounds 5] [--memory-rounds 2]
    python -m bench.proxy_compare --base /tmp/base --sections latency --memory-rounds 0 [--latency-requests 1000]

One local origin (bench/local_origin.py) and one proxy of each tree, run as `bench.proxy_overhead` runs its node
(DHT and peer port on loopback, `--private-network`). Throughput: curl downloads of --size-mb direct, through the
base proxy, through this tree's, and, for the CONNECT tunnel, through the bare buffer-copy relay of
`bench.tunnel_probe` (the ceiling on this machine), for the plain relay from memory (`mem`) and from the sendfile
origin (`file`) and the tunnel (`tunnel`, curl --proxytunnel to the sendfile origin). Each round goes through every
path, in reverse order every other round, so that drift hits all alike; medians are reported, with the ratio of
each proxy to direct, this tree's over the base's pair by pair, and each proxy's CPU seconds per GB. Memory:
--memory-clients concurrent 2 MB downloads through a fresh proxy of each tree in turn (`bench.proxy_overhead`'s
memory section, and the same downloads each through a CONNECT tunnel), peak KiB a download. Latency (`latency`):
sequential keep-alive GETs of small responses (--latency-sizes, from memory) direct, through the base proxy and
through this tree's, --latency-requests a path each round in the same alternating order; p50 and p99 of each path
over every round, what each proxy adds to direct's (issue 41: p50 <= 0.5 ms, p99 <= 1.5 ms), this tree's added p50
over the base's (pooled, and the median of the rounds' ratios), and each proxy's CPU a request.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import subprocess
import sys
import tempfile

from bench.proxy_overhead import (
    ROOT,
    cpu_seconds,
    curl_speed,
    downloads_at_once,
    keepalive_latencies,
    memory,
    percentile,
    report,
    start,
    stop,
)
from bench.tunnel_probe import pump_copy, serve

SECTIONS = {"mem": ("mem", False), "file": ("file", False), "tunnel": ("file", True)}
LATENCY = "latency"
# Requests a path before the latency rounds: the proxies' pooled connections to the origin opened, caches warm.
LATENCY_WARM_UP = 200


def start_proxy(tree: pathlib.Path, workdir: pathlib.Path, name: str) -> tuple[subprocess.Popen, str]:
    """`proxy.cli run` of `tree` (its own `proxy` package first on the path: run from there)."""
    ready = workdir / f"{name}.json"
    argv = [sys.executable, "-m", "proxy.cli", "run", "--listen", "127.0.0.1:0", "--dht-listen", "127.0.0.1:0",
            "--peer-listen", "127.0.0.1:0", "--private-network", "--data-dir", str(workdir / name),
            "--ready-file", str(ready), "--connect-ports", "*"]
    return start(argv, ready, workdir / f"{name}.log", "proxy", cwd=tree)


def throughput(origin: str, proxies: dict[str, tuple[subprocess.Popen, str]], bare: str, size: int, rounds: int,
               section: str) -> dict[str, object]:
    route, tunnel = SECTIONS[section]
    url = f"http://{origin}/{route}/{size}"
    paths: dict[str, str | None] = {"direct": None, **{name: address for name, (_, address) in proxies.items()}}
    if tunnel:
        paths["bare_copy_relay"] = bare
    curl_speed(url, None)  # warm-up: creates the sendfile source, fills caches
    speeds: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, list[float]] = {name: [] for name in proxies}
    for index in range(rounds):
        order = list(paths.items())
        for name, address in order if index % 2 == 0 else reversed(order):
            before = cpu_seconds(proxies[name][0].pid) if name in proxies else 0.0
            speeds[name].append(curl_speed(url, address, tunnel))
            if name in proxies:
                cpu[name].append((cpu_seconds(proxies[name][0].pid) - before) / (size / 1e9))
    direct = statistics.median(speeds["direct"])
    result: dict[str, object] = {
        name: {"gb_per_s": round(statistics.median(values) / 1e9, 3),
               "vs_direct": round(statistics.median(values) / direct, 3),
               "rounds_gb_per_s": [round(v / 1e9, 3) for v in values],
               **({"cpu_s_per_gb": round(statistics.median(cpu[name]), 3)} if name in cpu else {})}
        for name, values in speeds.items()}
    pairs = [new / old for old, new in zip(speeds["base"], speeds["this_tree"])]
    result["this_tree_over_base"] = {"median": round(statistics.median(pairs), 3),
                                     "rounds": [round(p, 3) for p in pairs]}
    return result


async def latency(origin: str, proxies: dict[str, tuple[subprocess.Popen, str]], size: int, rounds: int,
                  count: int) -> dict[str, object]:
    """Sequential keep-alive GETs of `size` bytes from memory, `count` a path each round (a fresh client connection
    each), direct and through each proxy in alternating order: p50 and p99 of each path over all rounds, and what
    each proxy adds to direct's, over all rounds and round by round."""
    paths: dict[str, tuple[str, str]] = {"direct": (origin, f"/mem/{size}")}
    paths.update({name: (address, f"http://{origin}/mem/{size}") for name, (_, address) in proxies.items()})
    for address, target in paths.values():
        await keepalive_latencies(address, target, LATENCY_WARM_UP)
    samples: dict[str, list[list[float]]] = {name: [] for name in paths}
    cpu: dict[str, float] = dict.fromkeys(proxies, 0.0)
    for index in range(rounds):
        order = list(paths.items())
        for name, (address, target) in order if index % 2 == 0 else reversed(order):
            before = cpu_seconds(proxies[name][0].pid) if name in proxies else 0.0
            samples[name].append(await keepalive_latencies(address, target, count))
            if name in proxies:
                cpu[name] += cpu_seconds(proxies[name][0].pid) - before
    ms = 1000

    def at(values: list[float], q: float) -> float:
        return round(percentile(values, q) * ms, 3)

    every = {name: [v for block in blocks for v in block] for name, blocks in samples.items()}
    result: dict[str, object] = {"size": size, "requests_a_path": count * rounds}
    for name, values in every.items():
        entry: dict[str, object] = {"p50_ms": at(values, 0.5), "p99_ms": at(values, 0.99)}
        if name != "direct":
            entry["cpu_us_per_request"] = round(cpu[name] / len(values) * 1e6)
            entry["added_p50_ms"] = round(at(values, 0.5) - at(every["direct"], 0.5), 3)
            entry["added_p99_ms"] = round(at(values, 0.99) - at(every["direct"], 0.99), 3)
            entry["rounds_added_p50_ms"] = [round(at(mine, 0.5) - at(direct, 0.5), 3)
                                            for mine, direct in zip(samples[name], samples["direct"])]
            entry["rounds_added_p99_ms"] = [round(at(mine, 0.99) - at(direct, 0.99), 3)
                                            for mine, direct in zip(samples[name], samples["direct"])]
        result[name] = entry
    base, mine = result["base"], result["this_tree"]
    assert isinstance(base, dict) and isinstance(mine, dict)
    pairs = [new / old for old, new in zip(base["rounds_added_p50_ms"], mine["rounds_added_p50_ms"]) if old > 0]
    result["this_tree_over_base_added"] = {
        "p50": round(mine["added_p50_ms"] / base["added_p50_ms"], 3) if base["added_p50_ms"] > 0 else None,
        "p99": round(mine["added_p99_ms"] / base["added_p99_ms"], 3) if base["added_p99_ms"] > 0 else None,
        "p50_round_by_round_median": round(statistics.median(pairs), 3) if pairs else None}
    return result


async def memory_tunnel(origin: str, proxy: str, pid: int, clients: int) -> dict[str, object]:
    """`bench.proxy_overhead.memory`'s downloads (all at once, read as fast as the clients can), each through a
    CONNECT tunnel to the origin: the proxy's peak RSS per download above where it started."""
    complete, start_rss, peak = await downloads_at_once(origin, proxy, pid, clients, tunnel=True)
    return {"clients": clients, "complete": complete, "rss_start_mib": round(start_rss, 1),
            "rss_peak_mib": round(peak, 1), "peak_kib_per_download": round((peak - start_rss) * 1024 / clients)}


def memories(origin: str, trees: dict[str, pathlib.Path], workdir: pathlib.Path, clients: int,
             rounds: int) -> dict[str, dict[str, list[int]]]:
    """Peak KiB a download through a fresh proxy of each tree in turn (relay, then tunnel), `rounds` times."""
    peaks: dict[str, dict[str, list[int]]] = {name: {"relay": [], "tunnel": []} for name in trees}
    for index in range(rounds):
        order = list(trees.items())
        for name, tree in order if index % 2 == 0 else reversed(order):
            for kind in ("relay", "tunnel"):
                process, address = start_proxy(tree, workdir, f"{name}-{kind}-{index}")
                try:
                    if kind == "relay":
                        found = asyncio.run(memory(origin, address, process.pid, clients, 0))
                    else:
                        found = asyncio.run(memory_tunnel(origin, address, process.pid, clients))
                finally:
                    process.terminate()
                    process.wait(timeout=10)
                if found["complete"] != clients:  # a figure of downloads that failed would say nothing
                    raise RuntimeError(f"{name}, {kind}: {found['complete']} of {clients} downloads complete")
                peaks[name][kind].append(int(found["peak_kib_per_download"]))  # type: ignore[call-overload]
    return peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=pathlib.Path, required=True, help="the other tree (e.g. git archive of main)")
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sections", default="tunnel,file,mem,latency",
                        help="of tunnel, file, mem, latency (default: all)")
    parser.add_argument("--latency-sizes", default="1024,4096", help="response sizes of the latency section, bytes")
    parser.add_argument("--latency-requests", type=int, default=1000,
                        help="requests a path each round in the latency section (default 1000)")
    parser.add_argument("--memory-clients", type=int, default=1000)
    parser.add_argument("--memory-rounds", type=int, default=2, help="0 skips the memory figures")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = parser.parse_args()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="swarmproxy-compare-"))
    trees = {"base": args.base.resolve(), "this_tree": ROOT}
    processes: list[subprocess.Popen] = []
    try:
        origin_process, origin = start([sys.executable, "bench/local_origin.py", "--ready-file",
                                        str(workdir / "o.json")], workdir / "o.json", workdir / "origin.log", "origin")
        processes.append(origin_process)
        results: dict[str, object] = {"command": "python " + " ".join(sys.argv), "base": str(trees["base"])}
        host, port = origin.rsplit(":", 1)
        bare = serve(pump_copy, (host, int(port)))
        proxies = {name: start_proxy(tree, workdir, name) for name, tree in trees.items()}
        processes += [process for process, _ in proxies.values()]
        for section in args.sections.split(","):
            if section == LATENCY:
                for size in (int(text) for text in args.latency_sizes.split(",")):
                    print(f"latency, {size} B responses ...", file=sys.stderr)
                    results[f"{LATENCY}_{size}"] = asyncio.run(latency(origin, proxies, size, args.rounds,
                                                                       args.latency_requests))
                continue
            print(f"throughput, {args.size_mb} MB, {section} ...", file=sys.stderr)
            results[section] = throughput(origin, proxies, bare, args.size_mb * 1_000_000, args.rounds, section)
        for process, _ in proxies.values():
            process.terminate()
        if args.memory_rounds:
            print(f"memory, {args.memory_clients} concurrent 2 MB downloads, fresh proxies ...", file=sys.stderr)
            results["memory_peak_kib_per_download"] = memories(origin, trees, workdir, args.memory_clients,
                                                               args.memory_rounds)
        report(results, args.json)
    finally:
        stop(processes, workdir)


if __name__ == "__main__":
    main()
