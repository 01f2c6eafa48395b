"""Bad networks on the test internet (issue 39): downloads through `swarmproxy run` nodes behind NATs whose WAN links
lose packets and add delay (`bench.impair`), while a peer vanishes mid-block (kill -9) and the routers' NAT
mappings expire (their conntrack flushed), beside the same downloads straight from the origin over the same links.
The steps are shared with `tests/bench/test_bad_networks_netns.py`; the lab is

    python -m bench.bad_networks [--downloads N] [--loss P] [--delay S] [--size BYTES] [--rate B/S] [--json FILE]

A public machine runs the origin (`bench.internet_lab`'s, throttled on demand); two seeds (a full-cone home and a
upnp home with `--map-ports`) fetch N files while the origin is fast; then, the origin slow, a port-restricted
home fetches each file twice in turn: straight from the origin (curl, the direct arm) and through its node (the
swarmproxy arm). During the swarmproxy arm's downloads, every third one sees every router's conntrack flushed
once the seeds have served it some bytes, and the last one sees the seed serving it killed (kill -9), if either
served, mid-transfer. Per arm: median, worst, failures (a status other than 200 or a digest other than the
file's). Needs root (network namespaces), like `bench.internet_netns`; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.impair import Impairment, flush_conntrack
from bench.internet_lab import Origin, payload
from bench.internet_netns import Machine, Node, Topology, netns_missing

# The flags of every node here: our own DHT off (the Mainline DHT alone); a download under 160 kB/s is slow; it asks
# for peers at once and announces whatever its size. `--trust any`: one seed is one network to the quorum, which
# needs two (`swarm/trust/quorum.py`); the counting has tests of its own, these show the bytes travel.
NODE_ARGS = ("--trust", "any", "--min-rate", "160k", "--rate-window", "0.5", "--first-byte-timeout", "0.5",
             "--early-lookup", "0", "--discover-size", "0")
CURL_TIMEOUT = 300  # s for one download at most (curl's --max-time)


def until(check: Callable[[], Any], what: str, timeout: float = 30.0, nodes: tuple[Node, ...] = (),
          period: float = 0.2) -> Any:
    """Ask until `check()` gives something true (a real process cannot push the answer to us); that value. Fails
    at once if one of `nodes` exited."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        for node in nodes:
            if node.process.poll() is not None:
                raise AssertionError(f"{node.machine.name}'s node exited waiting for {what}: {node.log()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" +
                                 "".join(f"\n{n.machine.name}: {n.log()[-2000:]}" for n in nodes))
        time.sleep(period)  # the period of a poll of another process's state
    return value


def start_node(topology: Topology, machine: Machine, directory: pathlib.Path, *extra: str) -> Node:
    """A node with `NODE_ARGS` (and `--map-ports` behind miniupnpd), once it has Mainline DHT nodes."""
    ports = ("--map-ports",) if machine.kind == "upnp" else ()
    node = topology.start_node(machine, directory, *NODE_ARGS, *ports, *extra)
    until(lambda: (node.admin("/_swarm/discovery")["mainline"].get("nodes") or 0) > 0,
          f"{machine.name}'s node to join the Mainline DHT", nodes=(node,))
    return node


def curl(topology: Topology, machine: Machine, url: str, out: pathlib.Path, node: Node | None) -> subprocess.Popen:
    """A download in `machine`'s namespace, through `node`'s proxy (None: straight to the origin), started."""
    via = ["--proxy", f"http://{node.ready['proxy']}"] if node is not None else ["--noproxy", "*"]
    return topology.spawn(machine, ["curl", "-sS", "--max-time", str(CURL_TIMEOUT), "-o", str(out),
                                    "-w", "%{http_code}", *via, url],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen, out: pathlib.Path, want: bytes) -> dict:
    """Wait for a `curl` and check what it wrote: its status, size, and whether it is the file, byte for byte."""
    stdout, stderr = process.communicate(timeout=CURL_TIMEOUT + 30)
    data = out.read_bytes() if out.exists() else b""
    return {"status": stdout.strip(), "bytes": len(data), "error": stderr.strip()[:300],
            "exact": stdout.strip() == "200" and hashlib.sha256(data).digest() == hashlib.sha256(want).digest()}


def record(node: Node, url: str) -> dict | None:
    """`node`'s closed request record of `url` (the last), or None while it is open or absent."""
    mine = [r for r in node.admin("/_swarm/requests") if r.get("url") == url]
    return mine[-1] if mine and mine[-1].get("status") == 200 and mine[-1].get("bytes_origin") is not None else None


def seed(topology: Topology, origin: Origin, node: Node, urls: list[str], scratch: pathlib.Path,
         files: list[bytes]) -> None:
    """`node` fetches each of `urls` with the origin unthrottled, and vouches for each (its `published` count)."""
    origin.set_rate(None)
    for index, (url, want) in enumerate(zip(urls, files, strict=True)):
        out = scratch / f"seed-{node.machine.name}-{index}"
        result = finished(curl(topology, node.machine, url, out, node), out, want)
        if not result["exact"]:
            raise AssertionError(f"{node.machine.name} could not seed {url}: {result}")
    until(lambda: node.admin("/_swarm/status")["swarm"]["published"] >= len(urls),
          f"{node.machine.name}'s node to vouch for what it fetched", nodes=(node,))


def uploaded(node: Node) -> int:
    """The bytes `node` has sent peers (BLOCKs written to their connections)."""
    return int(node.admin("/_swarm/status")["swarm"]["bytes_uploaded"])


def stored(node: Node) -> int:
    """The bytes in `node`'s block store: during a download, blocks from peers (the origin's are stored after)."""
    return int(node.admin("/_swarm/status")["swarm"]["stored_bytes"])


# -- the lab -------------------------------------------------------------------------------------------------------


def run_lab(args: argparse.Namespace, say: Callable[[str], None]) -> dict:
    impairment = Impairment(loss=args.loss, delay=args.delay)
    report: dict = {"downloads": args.downloads, "size": args.size, "origin_rate": args.rate,
                    "impairment": impairment.describe(), "homes": ["full-cone", "upnp", "port-restricted"]}
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="bad-networks-"))
    files = [payload(args.size, index) for index in range(args.downloads)]
    with Topology(dht_nodes=args.dht_nodes, publics=1, homes=tuple(report["homes"]), impair=impairment) as topology:
        origin = Origin(topology, topology.public[0], args.rate, args.size)
        base = origin.url.rpartition("/")[0]
        urls = [f"{base}/f{index}.bin" for index in range(args.downloads)]
        cone, upnp, home = topology.hosts
        seeds = [start_node(topology, cone, scratch / "cone"), start_node(topology, upnp, scratch / "upnp")]
        for node in seeds:
            say(f"seeding {args.downloads} files on {node.machine.name} ({node.machine.kind})")
            seed(topology, origin, node, urls, scratch, files)
        downloader = start_node(topology, home, scratch / "home")
        origin.set_rate(args.rate)
        arms: dict[str, list[dict]] = {"direct": [], "swarmproxy": []}
        for index, (url, want) in enumerate(zip(urls, files, strict=True)):
            for arm in ("direct", "swarmproxy"):
                via = downloader if arm == "swarmproxy" else None
                out = scratch / f"{arm}-{index}"
                before = {s.machine.name: _sent(topology, s) for s in seeds if s.process.poll() is None}
                started = time.monotonic()
                process = curl(topology, home, url, out, via)
                event = None
                if via is not None and (index % 3 == 1 or index == args.downloads - 1):
                    event = _chaos(topology, seeds, before, process, kill=index == args.downloads - 1)
                result = finished(process, out, want)
                result.update(arm=arm, file=index, seconds=round(time.monotonic() - started, 3), event=event)
                if via is not None:
                    closed = until(lambda: record(downloader, url), "the request record to close",  # noqa: B023
                                   nodes=(downloader,))
                    result.update({k: closed.get(k) for k in ("bytes_origin", "bytes_peers", "transition")})
                arms[arm].append(result)
                say(f"{arm} {index}: {result}")
        report["relays"] = {k: topology.relay_counters(k) for k in topology.relays}
        for node in (*seeds, downloader):
            node.stop()
    for arm, results in arms.items():
        times = sorted(r["seconds"] for r in results)
        report[arm] = {"median_s": times[len(times) // 2] if len(times) % 2 else
                       round((times[len(times) // 2 - 1] + times[len(times) // 2]) / 2, 3),
                       "max_s": times[-1], "failures": sum(not r["exact"] for r in results), "results": results}
    return report


PEER_BYTES = 100_000  # what a seed's home sends a download before `_chaos` strikes: a few blocks


def _sent(topology: Topology, node: Node) -> int:
    """The bytes that left `node`'s home so far, counted by its link's relay (the home must be impaired)."""
    assert node.machine.home is not None
    return topology.relay_counters(node.machine.home.index)["b_to_a"]["bytes"]


def _chaos(topology: Topology, seeds: list[Node], before: dict[str, int], process: subprocess.Popen,
           kill: bool) -> str:
    """Once a seed's home has sent `PEER_BYTES` since the download started (the seed serving it; its own upload
    counter moves when a block is queued, not when it left), flush every router's conntrack, or kill -9 that seed;
    what was done ("flushed", "killed SEED", or "none: ..." if the download ended first)."""
    def serving() -> Node | None:
        for node in seeds:
            if node.process.poll() is None and _sent(topology, node) - before.get(node.machine.name, 0) >= PEER_BYTES:
                return node
        return None

    deadline = time.monotonic() + 60
    while (node := serving()) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            return "none: no seed served before the download ended"
        time.sleep(0.1)  # polling other processes' counters
    if process.poll() is not None:
        return "none: the download ended first"
    if kill:
        node.process.kill()
        node.process.wait()
        return f"killed {node.machine.name}"
    for home in topology.built_homes:
        flush_conntrack(home.router)
    return "flushed"


def format_lab(report: dict) -> str:
    lines = [f"bad networks: {report['downloads']} files of {report['size']} B, origin {report['origin_rate']:.0f} "
             f"B/s; homes {', '.join(report['homes'])}, every WAN link: {report['impairment']}",
             f"{'arm':<11} {'median s':>9} {'max s':>7} {'failures':>9}"]
    for arm in ("direct", "swarmproxy"):
        a = report[arm]
        lines.append(f"{arm:<11} {a['median_s']:>9} {a['max_s']:>7} {a['failures']:>9}")
    lines.append("per download: file arm seconds exact bytes_origin bytes_peers transition event")
    for d, s in zip(report["direct"]["results"], report["swarmproxy"]["results"], strict=True):
        for r in (d, s):
            lines.append(f"  {r['file']:>2} {r['arm']:<10} {r['seconds']:>7} {r['exact']!s:>5} "
                         f"{r.get('bytes_origin', '-')!s:>9} {r.get('bytes_peers', '-')!s:>9} "
                         f"{r.get('transition', '-')!s:>3} {r.get('event') or ''}")
    lines.append(f"relays (per home, a_to_b: into the home, b_to_a: out): {json.dumps(report['relays'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--downloads", type=int, default=6, help="files, each downloaded once per arm (default 6)")
    parser.add_argument("--loss", type=float, default=0.02, help="loss on every WAN link, each way (default 0.02)")
    parser.add_argument("--delay", type=float, default=0.04, help="seconds added one way on every WAN link (0.04)")
    parser.add_argument("--size", type=int, default=1_000_000, help="each file's size, bytes (default 1 MB)")
    parser.add_argument("--rate", type=float, default=128_000.0, help="the slow origin's rate, B/s (128000)")
    parser.add_argument("--dht-nodes", type=int, default=3, help="stock Mainline DHT nodes (default 3)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the whole report here")
    args = parser.parse_args(argv)
    if (why := netns_missing()) is not None:
        print(f"bad_networks: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    report = run_lab(args, say)
    report["command"] = "python -m bench.bad_networks " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    print(report["command"])
    print(format_lab(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
