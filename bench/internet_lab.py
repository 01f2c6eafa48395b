"""The Internet mode's lab on the test internet (`bench/internet_netns.py`): what the Mainline DHT does for a crowd
behind NATs, how its lookups compare with our own DHT's, and what it costs a node. Run on purpose, never by the
test suite; needs root (network namespaces), like `bench.internet_netns`.

    python -m bench.internet_lab --scenario crowd|lookups|cost [--quick] [--json FILE]

- `crowd`: a throttled origin (`proxy.demo.slow_origin.SlowOrigin`) on a public machine; N homes behind full-cone,
  upnp (`--map-ports`) and port-restricted NATs, each with one `swarmproxy run` node (our own DHT off, the Mainline
  DHT through the stock nodes, the default trust). The same N downloads (curl, in each home) arrive as a flash
  crowd twice: straight to the origin (direct arm), then through each home's node (swarmproxy arm). Per arm: median
  and p99 time, speedup, the origin's share of the bytes, the transitions, and which NAT kinds served peers.
- `lookups` (`bench.internet_lookups`): provider lookups over the stock Mainline nodes (libtorrent `get_peers`)
  beside our own DHT (`dht.node.DhtNode`), one process per machine for each, on the same namespaces; a few
  announce one key, fresh lookers look it up; then 20 % of the DHT nodes are killed and the lookups run again.
- `cost`: the UDP datagrams and bytes a node's Mainline session sends and receives, idle and while downloading,
  counted by nft on the node's namespace filtered by the session's UDP port.

Nothing leaves the machine: the topology is `bench.internet_netns.Topology`, whose `assert_isolated` runs before
anything starts inside; this process keeps SWARMPROXY_PRIVATE_NETWORK, the processes inside run without it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from bench.dht_meters import percentile

ORIGIN_PORT = 8000
COST_FILES = 40


def payload(size: int, index: int | None = None) -> bytes:
    """The origin's file: deterministic, so that every process can check what it got."""
    seed = hashlib.sha256(b"internet lab" + (b"" if index is None else str(index).encode())).digest()
    return (seed * (size // len(seed) + 1))[:size]


# -- the origin, as its own process in a public machine's namespace ----------------------------------------------


def serve_origin(host: str, rate: float, size: int) -> int:
    """`--serve-origin`: SlowOrigin on host:ORIGIN_PORT with /file.bin; prints its URL, then answers each line of
    standard input with its counters (JSON), until the input closes; a line `rate R` first sets its rate to R B/s
    (0: unlimited)."""
    from proxy.demo.slow_origin import SlowOrigin

    async def run() -> None:
        origin = SlowOrigin(rate=rate, host=host)
        await origin.start(ORIGIN_PORT)
        origin.add("/file.bin", payload(size))
        for index in range(COST_FILES):  # the cost scenario's downloads, each its own content
            origin.add(f"/f{index}.bin", payload(size, index))
        print(origin.url, flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.startswith("rate "):
                origin.set_rate(float(line.split()[1]) or None)
            print(json.dumps({"bytes_sent": origin.bytes_sent, "requests": len(origin.requests)}), flush=True)
        await origin.stop()

    asyncio.run(run())
    return 0


class Origin:
    def __init__(self, topology, machine, rate: float, size: int) -> None:
        self.process = topology.spawn(machine, [sys.executable, "-m", "bench.internet_lab", "--serve-origin",
                                                machine.address, "--rate", str(rate), "--size", str(size)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip() + "/file.bin"
        if not self.url.startswith("http://"):
            raise RuntimeError(f"the origin did not start ({self.process.poll()})")

    def counters(self, command: str = "") -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def set_rate(self, rate: float | None) -> dict:
        """Throttle the origin to `rate` B/s (None: unlimited) from now on; its counters."""
        return self.counters(f"rate {rate or 0}")


# -- curl in a namespace -------------------------------------------------------------------------------------------


def curl(topology, machine, url: str, out: pathlib.Path, proxy: str | None, start_at: float) -> dict:
    """One download with curl in `machine`'s namespace, started at `start_at` (monotonic): its time and check."""
    delay = start_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    argv = ["curl", "-sS", "--max-time", "600", "-o", str(out), "-w", "%{http_code} %{time_total}"]
    if proxy is not None:
        argv += ["--proxy", f"http://{proxy}"]
    else:
        argv += ["--noproxy", "*"]
    started = time.monotonic()
    process = topology.spawn(machine, [*argv, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=660)
    took = time.monotonic() - started
    code = stdout.split()[0] if stdout.split() else "000"
    data = out.read_bytes() if out.exists() else b""
    return {"machine": machine.name, "kind": machine.kind, "status": code, "duration_s": round(took, 3),
            "bytes": len(data), "digest": hashlib.sha256(data).hexdigest(), "error": stderr.strip()[:300]}


def crowd_arm(topology, hosts, url: str, scratch: pathlib.Path, proxies: dict | None, stagger: float,
              want: str) -> list[dict]:
    t0 = time.monotonic() + 0.5
    with ThreadPoolExecutor(len(hosts)) as pool:
        futures = [pool.submit(curl, topology, host, url, scratch / f"{host.name}-{'proxy' if proxies else 'direct'}",
                               proxies[host.name] if proxies else None, t0 + i * stagger)
                   for i, host in enumerate(hosts)]
        records = [f.result() for f in futures]
    for record in records:
        record["exact"] = record["digest"] == want and record["status"] == "200"
    return records


def summarise(records: list[dict]) -> dict:
    done = [r["duration_s"] for r in records if r["exact"]]
    everyone = done + [float("inf")] * (len(records) - len(done))

    def cut(q: float) -> float | None:
        value = percentile(everyone, q)
        return None if value is None or value == float("inf") else round(value, 2)

    return {"clients": len(records), "finished": len(done), "p50_s": cut(50), "p99_s": cut(99),
            "max_s": cut(100)}


def wait_until(check, what: str, timeout: float, period: float = 0.5):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(period)
    return value


def scenario_crowd(args, say) -> dict:
    from bench.internet_netns import Topology

    kinds = ("full-cone", "upnp", "port-restricted")
    homes = tuple(kinds[i % len(kinds)] for i in range(args.nodes))
    report: dict = {"scenario": "crowd", "nodes": args.nodes, "homes": homes, "size": args.size, "rate": args.rate,
                    "stagger_s": args.stagger, "dht_nodes": args.dht_nodes}
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="internet-lab-"))
    with Topology(dht_nodes=args.dht_nodes, publics=1, homes=homes) as topology:
        origin = Origin(topology, topology.public[0], args.rate, args.size)
        report["origin_url"] = origin.url
        want = hashlib.sha256(payload(args.size)).hexdigest()
        hosts = topology.hosts
        say(f"origin {origin.url}, {args.rate:.0f} B/s; direct arm: {len(hosts)} curls")
        before = origin.counters()["bytes_sent"]
        direct = crowd_arm(topology, hosts, origin.url, scratch, None, args.stagger, want)
        direct_origin = origin.counters()["bytes_sent"] - before
        say(f"direct: {summarise(direct)}; starting {len(hosts)} nodes")
        nodes = {}
        for host in hosts:
            extra = ["--map-ports"] if host.kind == "upnp" else []
            nodes[host.name] = topology.start_node(host, scratch / f"node-{host.name}", *extra, *args.node_args)
        wait_until(lambda: all((n.admin("/_swarm/discovery")["mainline"].get("nodes") or 0) > 0
                               for n in nodes.values()), "every node to join the Mainline DHT", 60)
        if any(h.kind == "upnp" for h in hosts):
            wait_until(lambda: all(n.admin("/_swarm/status")["network"]["nat"]["port_mapping"]
                                   for n in nodes.values() if n.machine.kind == "upnp"), "upnp mappings", 60)
        time.sleep(args.settle)
        before = origin.counters()["bytes_sent"]
        say("swarmproxy arm")
        proxied = crowd_arm(topology, hosts, origin.url, scratch, {k: n.ready["proxy"] for k, n in nodes.items()},
                            args.stagger, want)
        time.sleep(2)  # the request records close after the last byte
        swarm_origin = origin.counters()["bytes_sent"] - before
        for record in proxied:
            node = nodes[record["machine"]]
            mine = [r for r in node.admin("/_swarm/requests") if r.get("url") == origin.url or
                    str(r.get("url", "")).endswith("/file.bin")]
            last = mine[-1] if mine else {}
            record.update({key: last.get(key) for key in ("bytes_origin", "bytes_peers", "transition", "events")})
            status = node.admin("/_swarm/status")
            record["node_status"] = {k: status.get(k) for k in ("swarm", "peers") if k in status}
            record["discovery"] = {k: v for k, v in node.admin("/_swarm/discovery").items()
                                   if k in ("mainline", "mainline-claims")}
        for node in nodes.values():
            node.stop()
        report["logs_tail"] = {name: node.log()[-1500:] for name, node in nodes.items()}
    total = args.size * len(hosts)
    report["direct"] = {**summarise(direct), "origin_bytes": direct_origin, "origin_share": round(direct_origin / total,
                                                                                                  3)}
    node_origin = sum(r.get("bytes_origin") or 0 for r in proxied)
    node_peers = sum(r.get("bytes_peers") or 0 for r in proxied)
    transitions: dict[str, int] = {}
    for r in proxied:
        transitions[str(r.get("transition"))] = transitions.get(str(r.get("transition")), 0) + 1
    report["swarmproxy"] = {**summarise(proxied), "origin_bytes": swarm_origin,
                            "origin_share": round(swarm_origin / total, 3),
                            "records_origin_share": round(node_origin / total, 3),
                            "records_peer_share": round(node_peers / total, 3), "transitions": transitions}
    d, s = report["direct"]["p50_s"], report["swarmproxy"]["p50_s"]
    report["speedup_p50"] = round(d / s, 2) if d and s else None
    report["records"] = {"direct": direct, "swarmproxy": proxied}
    return report


def format_crowd(report: dict) -> str:
    lines = [f"crowd: {report['nodes']} homes {','.join(report['homes'])}; file {report['size']} B, origin "
             f"{report['rate']:.0f} B/s shared; {report['dht_nodes']} stock DHT nodes; stagger {report['stagger_s']} s",
             f"{'arm':<11} {'done':>5} {'p50 s':>7} {'p99 s':>7} {'origin share':>13}  transitions"]
    for arm in ("direct", "swarmproxy"):
        a = report[arm]
        lines.append(f"{arm:<11} {a['finished']:>2}/{a['clients']:<2} {a['p50_s']!s:>7} {a['p99_s']!s:>7} "
                     f"{a['origin_share']:>13}  {a.get('transitions', '-')}")
    lines.append(f"speedup (median direct / median swarmproxy): {report['speedup_p50']}")
    lines.append(f"records: origin share {report['swarmproxy']['records_origin_share']}, peers share "
                 f"{report['swarmproxy']['records_peer_share']}")
    served: dict[str, int] = {}
    for r in report["records"]["swarmproxy"]:
        uploaded = ((r.get("node_status") or {}).get("swarm") or {}).get("bytes_uploaded") or 0
        served[r["kind"]] = served.get(r["kind"], 0) + uploaded
    lines.append(f"bytes served to peers, by the NAT of the serving node: {served}")
    lines.append("per download (swarmproxy arm): machine kind time bytes_origin bytes_peers transition uploaded")
    for r in report["records"]["swarmproxy"]:
        uploaded = ((r.get("node_status") or {}).get("swarm") or {}).get("bytes_uploaded")
        lines.append(f"  {r['machine']:<4} {r['kind']:<16} {r['duration_s']:>7} {r.get('bytes_origin')!s:>9} "
                     f"{r.get('bytes_peers')!s:>9} {r.get('transition')!s:>3} {uploaded!s:>9}")
    return "\n".join(lines)



# -- cost: the Mainline traffic of one node -------------------------------------------------------------------------

COUNTERS = """table inet internetlab {{
    chain input {{
        type filter hook input priority -300; policy accept;
        udp dport {port} counter
    }}
    chain output {{
        type filter hook output priority -300; policy accept;
        udp sport {port} counter
    }}
}}
"""


def read_counters(ns: str) -> dict:
    from bench.internet_netns import _in

    table = json.loads(_in(ns, "nft", "-j", "list", "table", "inet", "internetlab"))
    out = {}
    for item in table["nftables"]:
        rule = item.get("rule")
        if rule is None:
            continue
        counter = next(e["counter"] for e in rule["expr"] if "counter" in e)
        out[rule["chain"]] = {"packets": counter["packets"], "bytes": counter["bytes"]}
    return {"in": out["input"], "out": out["output"]}


def per_minute(before: dict, after: dict, seconds: float) -> dict:
    return {way: {unit: round((after[way][unit] - before[way][unit]) * 60 / seconds, 1)
                  for unit in ("packets", "bytes")} for way in ("in", "out")}


def scenario_cost(args, say) -> dict:
    from bench.internet_netns import Topology, _in

    dht_nodes = 6 if args.quick else args.lookup_dht_nodes
    window = 15.0 if args.quick else args.window
    # Each download slow enough (under the default --min-rate, 160 kB/s) to be looked up and announced: a fast one
    # under --discover-size (16 MiB) tells the DHT nothing.
    rate, size = 64_000.0, 300_000
    report: dict = {"scenario": "cost", "dht_nodes": dht_nodes, "window_s": window, "origin_rate": rate,
                    "size": size}
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="internet-lab-cost-"))
    with Topology(dht_nodes=dht_nodes, publics=1, homes=("full-cone",)) as topology:
        origin = Origin(topology, topology.public[0], rate, size)
        host = topology.hosts[0]
        node = topology.start_node(host, scratch / "node", *args.node_args)
        wait_until(lambda: (node.admin("/_swarm/discovery")["mainline"].get("nodes") or 0) > 0, "the DHT", 60)
        listen = node.admin("/_swarm/status")["listen"]
        port = int(str(listen["bittorrent"]).rpartition(":")[2])
        report["session_port"] = port
        _in(host.ns, "nft", "-f", "-", stdin=COUNTERS.format(port=port))
        say(f"node in {host.name} ({host.kind}), session UDP port {port}; joined; settling {args.settle:g} s")
        time.sleep(args.settle)
        before, t0 = read_counters(host.ns), time.monotonic()
        time.sleep(window)
        after, t1 = read_counters(host.ns), time.monotonic()
        report["idle"] = {"seconds": round(t1 - t0, 1), "per_minute": per_minute(before, after, t1 - t0),
                          "raw": [before, after]}
        report["idle_routing_nodes"] = node.admin("/_swarm/discovery")["mainline"].get("nodes")
        say(f"idle: {report['idle']['per_minute']}")
        base = origin.url.rpartition("/")[0]
        before, t0 = read_counters(host.ns), time.monotonic()
        downloads = 0
        while time.monotonic() - t0 < window and downloads < COST_FILES:
            record = curl(topology, host, f"{base}/f{downloads}.bin", scratch / f"f{downloads}", node.ready["proxy"],
                          0.0)
            downloads += 1
            if record["status"] != "200":
                say(f"download {downloads}: {record}")
        after, t1 = read_counters(host.ns), time.monotonic()
        report["downloading"] = {"seconds": round(t1 - t0, 1), "downloads": downloads,
                                 "per_minute": per_minute(before, after, t1 - t0), "raw": [before, after]}
        report["discovery"] = node.admin("/_swarm/discovery")
        say(f"downloading: {report['downloading']['per_minute']}")
        node.stop()
    return report


def format_cost(report: dict) -> str:
    lines = [f"cost: one node behind a full-cone NAT on a test DHT of {report['dht_nodes']} stock nodes; UDP on the "
             f"session's port {report['session_port']} counted by nft in the node's namespace; downloads of "
             f"{report['size']} B files one after the other from an origin at {report['origin_rate']:.0f} B/s",
             f"{'state':<12} {'window s':>8} {'in dgrams/min':>14} {'in bytes/min':>13} {'out dgrams/min':>15} "
             f"{'out bytes/min':>14}"]
    for state in ("idle", "downloading"):
        s = report[state]
        m = s["per_minute"]
        label = state if state == "idle" else f"{state} ({s['downloads']} files)"
        lines.append(f"{label:<12} {s['seconds']:>8} {m['in']['packets']:>14} {m['in']['bytes']:>13} "
                     f"{m['out']['packets']:>15} {m['out']['bytes']:>14}")
    mainline = report["discovery"].get("mainline", {})
    lines.append(f"Mainline routing table: {mainline.get('nodes')} nodes; lookups {mainline.get('lookups')}, "
                 f"providers found {mainline.get('providers_found')}; "
                 f"claims {report['discovery'].get('mainline-claims')}")
    return "\n".join(lines)


# -- the command ----------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("crowd", "lookups", "cost"), default="crowd")
    parser.add_argument("--quick", action="store_true", help="a small, short run of the scenario")
    parser.add_argument("--nodes", type=int, default=9, help="crowd: homes, each with one node (default 9)")
    parser.add_argument("--dht-nodes", type=int, default=8, help="stock Mainline DHT nodes (default 8)")
    parser.add_argument("--size", type=int, default=1_000_000, help="crowd: the file's size, bytes (default 1 MB)")
    parser.add_argument("--rate", type=float, default=256_000.0, help="crowd: the origin's rate, B/s, shared")
    parser.add_argument("--stagger", type=float, default=0.0, help="crowd: seconds between two arrivals (0: flash)")
    parser.add_argument("--settle", type=float, default=5.0, help="crowd: seconds between the joins and the crowd")
    parser.add_argument("--node-arg", dest="node_args", action="append", default=[],
                        help="one more flag for every `swarmproxy run` (repeatable), e.g. --node-arg=--trust=any")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the whole report here")
    parser.add_argument("--lookup-dht-nodes", type=int, default=24, help="lookups: DHT nodes of each kind (24)")
    parser.add_argument("--rounds", type=int, default=5, help="lookups: lookups per looker per phase (5)")
    parser.add_argument("--lookup-timeout", type=float, default=30.0, help="lookups: seconds at most per lookup")
    parser.add_argument("--window", type=float, default=90.0, help="cost: seconds of each window (idle, downloading)")
    parser.add_argument("--serve-origin", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_origin is not None:
        return serve_origin(args.serve_origin, args.rate, args.size)
    from bench.internet_netns import netns_missing

    if (why := netns_missing()) is not None:
        print(f"internet_lab: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.quick and args.scenario == "crowd":
        args.nodes, args.dht_nodes, args.settle = min(args.nodes, 3), min(args.dht_nodes, 3), 2.0
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    command = "python -m bench.internet_lab " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.scenario == "crowd":
        report = scenario_crowd(args, say)
        text = format_crowd(report)
    elif args.scenario == "lookups":
        from bench.internet_lookups import format_lookups, scenario_lookups

        report = scenario_lookups(args, say)
        text = format_lookups(report)
    else:
        report = scenario_cost(args, say)
        text = format_cost(report)
    report["command"] = command
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    print(command)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
