"""DHT lookup benchmark (issue 4): latency, hops, success and CPU per lookup at 100 / 500 / 1,000 nodes.

    python bench/dht.py [--nodes 100,500,1000] [--delay-ms 50] [--rate 25] [--lookups 1000] [--json OUT]
                        [--arrivals poisson|fixed] [--loop uvloop|asyncio] [--seed 1] [--profile OUT.pstats]

For every N (each in a fresh event loop, one process, all nodes in it):

1. start N real `DhtNode`s on 127.0.0.1, port 0 (real UDP over loopback; nothing leaves 127.0.0.0/8), with
   `DhtConfig` defaults except the three settings many nodes on one IP need (rate limits and store quotas per
   IP:port, no per-IP routing cap, no LAN multicast) — the same as tests/dht;
2. bootstrap each from up to 3 random earlier nodes, then one self-lookup by every node (the settle step; bounded
   by `--settle-timeout-s`); both with the delay switched off, because only the routing tables they build matter;
3. switch the delay on; a random 10 % of the nodes each announce a provider record for a random root;
4. measure the idle CPU rate for `--idle-s` seconds (baseline);
5. lookups: `find_providers(root)` for a random announced root from a random node other than its announcer,
   started open-loop at `--rate` per second (Poisson arrivals by default), `--lookups` of them. Each runs to
   completion (Kademlia termination or the 5 s deadline); we record the time to the FIRST provider (what a
   downloader waits for) and to completion.

Delay emulation: every node's datagram transport is wrapped; `sendto` does not send but arms
``loop.call_at(now + delay, real_sendto)``, so every datagram (requests and replies) reaches the kernel one
one-way delay late; a request/response round trip costs 2 x delay. Root-free, no tc/netns. The emulation shares
the event loop with the nodes, so its accuracy is measured: the lateness of every delayed send against its due
time, and the loop lag (a 10 ms ticker's actual vs scheduled time). A run whose loop lag p99 exceeds 10 % of the
one-way delay, or whose process used more than 90 % of a core during the lookup phase, is marked invalid.

Hops: the lookup state machine does not expose them, so the bench subclasses `DhtNode._drive` (instrumentation
only) and tracks which contact introduced which: the seeds from the node's own table are hop 1, a contact first
learned from a hop-h reply is hop h+1. `hops_to_first` is the hop of the node whose reply carried the first
provider (0 when the asking node stored the record itself); `hops_max` is the deepest node that replied in the
whole lookup. RPCs per lookup are the lookup's queries sent (`Lookup.queries_sent`).

Garbage collection (`--gc`): the cyclic GC's pauses grow with the number of live objects in the heap, and here
one heap holds 1,000 nodes (~240,000 objects after setup, plus every node's routing-table churn and in-flight
state during the phase). Measured at 1,000 nodes with the GC on: full collections stall the shared loop for
0.1-0.3 s, gen-1 ones for 30-60 ms, and they found no cyclic garbage at all (everything is freed by reference
counting). A one-node process does not have that heap. So by default (`freeze-off`) the bench runs gc.collect()
+ gc.freeze() after setup, disables the cyclic GC during the lookup phase, and runs one gc.collect() at its
end, inside the measured CPU time, reporting what it found. `freeze` only freezes; `on` leaves the GC alone.
GC pauses during the phase are reported in every mode.

CPU per lookup: process CPU time (user+sys, all N nodes and the emulation together: the asker's and every
answering node's work) over the lookup phase, minus the idle baseline rate times the phase length, / lookups.

Prints progress on stderr and one JSON document on stdout (and to --json OUT). This file is the command;
dht_lookups.py runs one network size, dht_delay.py is the emulated delay, dht_meters.py the CPU, lag and
GC instruments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import resource
import sys
import time

# Run as a script (`python bench/dht.py`), bench/ is sys.path[0]: the tree above it must come first, so that
# `dht` is the package and `bench.dht_lookups` is found.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench.dht_lookups import TARGETS, bench_config, run_size  # noqa: E402
from bench.dht_meters import log  # noqa: E402


def machine_description(loop_name: str) -> dict:
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            mem_kb = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = None
    import cryptography

    info = {
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "mem_gb": round(mem_kb / 1024 / 1024, 1) if mem_kb else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "event_loop": loop_name,
        "cryptography": cryptography.__version__,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    if loop_name == "uvloop":
        import uvloop

        info["uvloop"] = uvloop.__version__
    return info


def run_in_loop(loop_name: str, coroutine):
    if loop_name == "uvloop":
        import uvloop

        return uvloop.run(coroutine)
    return asyncio.run(coroutine)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="100,500,1000", help="comma-separated network sizes")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="emulated one-way delay per datagram")
    parser.add_argument("--rate", type=float, default=25.0, help="lookups started per second (open loop)")
    parser.add_argument("--lookups", type=int, default=1000, help="lookups per network size")
    parser.add_argument("--arrivals", choices=("poisson", "fixed"), default="poisson")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="event loop (the proxy uses uvloop when installed)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--idle-s", type=float, default=3.0, help="idle CPU baseline duration")
    parser.add_argument("--settle-timeout-s", type=float, default=120.0)
    parser.add_argument("--lookup-timeout-s", type=float, default=15.0, help="safety net; the DHT deadline is 5 s")
    parser.add_argument("--gc", choices=("freeze-off", "freeze", "on"), default="freeze-off",
                        help="cyclic GC during the lookup phase (see the module docstring)")
    parser.add_argument("--profile", help="write a cProfile of each lookup phase to PROFILE.<N>")
    parser.add_argument("--json", help="also write the JSON document here")
    args = parser.parse_args(argv)
    if args.loop == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            log("uvloop not installed: using asyncio's default loop")
            args.loop = "asyncio"
    sizes = [int(x) for x in args.nodes.split(",") if x.strip()]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(sizes) + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))

    document = {
        "benchmark": "dht lookups (issue 4)",
        "command": " ".join(["python", *sys.argv]) if argv is None else " ".join(["python", "bench/dht.py", *argv]),
        "machine": machine_description(args.loop),
        "parameters": {k: v for k, v in vars(args).items() if k not in ("json", "profile")},
        "config": {k: v for k, v in vars(bench_config()).items() if k != "store_limits"},
        "targets": TARGETS,
        "measured": (
            "latency = time from find_providers() to the first provider record of the looked-up root (the "
            "announcer's); success = that provider found before the lookup ended (5 s deadline); p50/p99 over "
            "successful lookups (p99_all_s counts failures as infinite); hops = depth of the reply that carried "
            "the first provider (seeds from the own table = 1, 0 = stored locally); rpcs = queries sent by the "
            "whole lookup (run to completion); cpu = process CPU of all nodes during the lookup phase minus the "
            "idle baseline, per lookup"
        ),
        "process_model": (
            "one process, one event loop holding all N nodes (each with its own UDP socket); multiprocessing was "
            "not needed: see details.cpu.process_cores_used (must stay <= 0.9 for a valid run)"
        ),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": {},
    }
    for n in sizes:
        log(f"--- N={n}, delay {args.delay_ms} ms one-way, {args.rate}/s, {args.lookups} lookups, {args.loop}")
        document["results"][str(n)] = run_in_loop(args.loop, run_size(n, args))
    document["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    text = json.dumps(document, indent=2)
    print(text)
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
