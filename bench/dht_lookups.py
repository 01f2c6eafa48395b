"""One network size of bench/dht.py: N real nodes in this event loop, their lookups, and the figures.

`run_size` starts the nodes, bootstraps and settles them, announces, measures the idle baseline, runs the
open-loop lookups and turns what was measured into the JSON document's summary and details (the method is in
bench/dht.py's docstring). `BenchNode` traces the hops of each lookup (instrumentation only).
"""

from __future__ import annotations

import asyncio
import contextvars
import cProfile
import gc
import math
import os
import random
import resource
import time
from array import array
from dataclasses import dataclass, field

from bench.dht_delay import DelayedTransport, DelayEmulator
from bench.dht_meters import GcPauses, LoopLagMonitor, cpu_seconds, log, percentile, r, system_busy_jiffies
from dht.identity import NodeIdentity
from dht.node import DhtConfig, DhtNode

LOOPBACK = "127.0.0.1"
TARGETS = {"nodes": 1000, "delay_ms": 50, "success_rate_min": 0.995, "p50_s_max": 0.5, "p99_s_max": 1.5}


# ----------------------------------------------------------------------------------------------- hop tracing


@dataclass
class Trace:
    hops: dict = field(default_factory=dict)  # node id -> hop at which the lookup learned it
    lookup: object = None
    last_hop: int | None = None  # hop of the node whose reply is being processed right now
    max_hop: int = 0
    replies: int = 0


_TRACE: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("dht_bench_trace", default=None)


class BenchNode(DhtNode):
    """A `DhtNode` whose lookup driver reports hops (instrumentation only; behaviour unchanged)."""

    async def _drive(self, lookup, make_request):
        trace = _TRACE.get()
        if trace is None:
            async for item in super()._drive(lookup, make_request):
                yield item
            return
        trace.lookup = lookup
        hops = trace.hops
        for node_id in lookup._candidates:  # the seeds, from our own routing table
            hops.setdefault(node_id, 1)
        async for contact, reply in super()._drive(lookup, make_request):
            hop = hops.get(contact.node_id, 1)
            trace.replies += 1
            trace.last_hop = hop
            if hop > trace.max_hop:
                trace.max_hop = hop
            for learned in reply.contacts:
                hops.setdefault(learned.node_id, hop + 1)
            yield contact, reply


# ------------------------------------------------------------------------------------------------- one run


def bench_config() -> DhtConfig:
    return DhtConfig(rate_limit_by="address", routing_contacts_per_ip=None, lan_discovery=False)


@dataclass
class LookupResult:
    start: float
    first_s: float | None = None
    done_s: float | None = None
    hops_to_first: int | None = None
    hops_max: int = 0
    rpcs: int = 0
    rpcs_to_first: int | None = None
    replies: int = 0
    error: str | None = None


async def one_lookup(node: BenchNode, root: bytes, expected_port: int, timeout_s: float) -> LookupResult:
    loop = asyncio.get_running_loop()
    trace = Trace()
    _TRACE.set(trace)  # this task's context: seen by find_records and _drive, which run in it
    result = LookupResult(start=loop.time())

    async def consume():
        async for record in node.find_providers(root):
            if result.first_s is None and record.port == expected_port:
                result.first_s = loop.time() - result.start
                result.hops_to_first = trace.last_hop or 0
                result.rpcs_to_first = trace.lookup.queries_sent if trace.lookup is not None else 0

    try:
        await asyncio.wait_for(consume(), timeout_s)
    except TimeoutError:
        result.error = "timeout"
    except Exception as exc:  # noqa: BLE001 - a failed lookup is a data point, not a crash of the bench
        result.error = repr(exc)
    result.done_s = loop.time() - result.start
    result.hops_max = trace.max_hop
    result.replies = trace.replies
    result.rpcs = trace.lookup.queries_sent if trace.lookup is not None else 0
    return result


async def run_size(n: int, args) -> dict:
    loop = asyncio.get_running_loop()
    rng = random.Random(args.seed * 1_000_003 + n)
    config = bench_config()
    emulator = DelayEmulator(args.delay_ms / 1000.0)
    lag = LoopLagMonitor(loop)
    lag.start()
    phases = {}

    # 1. start
    t0 = time.monotonic()
    nodes: list[BenchNode] = []
    for _ in range(n):
        node = BenchNode(NodeIdentity.generate(), config)
        await node.start(LOOPBACK, 0, maintenance=False)
        node._protocol.transport = DelayedTransport(node._protocol.transport, emulator, loop)
        nodes.append(node)
    phases["start_s"] = time.monotonic() - t0
    log(f"N={n}: {n} nodes started in {phases['start_s']:.1f}s")

    try:
        # 2. bootstrap (delay off), then settle with one self-lookup each
        t0 = time.monotonic()
        for index, node in enumerate(nodes[1:], start=1):
            contacts = [nodes[j].address for j in rng.sample(range(index), min(3, index))]
            await node.bootstrap(contacts)
            if index % 200 == 0:
                log(f"N={n}: bootstrapped {index}/{n}")
        phases["bootstrap_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        gate = asyncio.Semaphore(50)

        async def settle(node):
            async with gate:
                await node.find_node(node.node_id)

        settle_tasks = [asyncio.ensure_future(settle(node)) for node in nodes]
        done, pending = await asyncio.wait(settle_tasks, timeout=args.settle_timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        phases["settle_s"] = time.monotonic() - t0
        phases["settle_complete"] = not pending
        table_sizes = [len(node.routing) for node in nodes]
        log(f"N={n}: bootstrap {phases['bootstrap_s']:.1f}s, settle {phases['settle_s']:.1f}s"
            f" ({len(pending)} cut off); routing table min/median/max "
            f"{min(table_sizes)}/{sorted(table_sizes)[n // 2]}/{max(table_sizes)}")

        # 3. delay on; 10 % announce
        emulator.active = True
        t0 = time.monotonic()
        announcer_count = max(1, n // 10)
        announcers = rng.sample(range(n), announcer_count)
        roots = []  # (root, announcer index, port)
        gate = asyncio.Semaphore(25)

        async def announce(index, port):
            root = os.urandom(32)
            async with gate:
                stored = await nodes[index].announce(root, LOOPBACK, port)
            roots.append((root, index, port))
            return stored

        stored = await asyncio.gather(*(announce(i, 40_000 + k) for k, i in enumerate(announcers)))
        phases["announce_s"] = time.monotonic() - t0
        log(f"N={n}: {announcer_count} roots announced in {phases['announce_s']:.1f}s "
            f"(replicas accepted min/mean {min(stored)}/{sum(stored) / len(stored):.1f})")

        # 4. idle baseline (delay on, nothing to do). First move everything set up so far out of the cyclic GC's
        # reach: 1,000 nodes in one heap make a full collection stall the shared loop for ~0.1-0.3 s, an artifact
        # of the emulation (a real node's process holds one node's objects).
        if args.gc in ("freeze", "freeze-off"):
            gc.collect()
            gc.freeze()
        gc_pauses = GcPauses()
        gc.callbacks.append(gc_pauses)
        await asyncio.sleep(0.5)
        lag.recording = True
        c0, w0 = cpu_seconds(), time.monotonic()
        await asyncio.sleep(args.idle_s)
        idle_cpu_rate = (cpu_seconds() - c0) / (time.monotonic() - w0)
        idle_lags = list(lag.lags)
        lag.lags = array("d")

        # 5. lookups, open loop
        def counter_sum(name):
            return sum(node._protocol.counters[name] for node in nodes if node._protocol is not None)

        timeouts0, datagrams0 = counter_sum("request_timeouts"), counter_sum("datagrams_out")
        plan = []
        for _ in range(args.lookups):
            root, announcer, port = roots[rng.randrange(len(roots))]
            asker = rng.randrange(n - 1)
            asker = asker + 1 if asker >= announcer else asker
            plan.append((asker, root, port))
        if args.arrivals == "poisson":
            offsets, t = [], 0.0
            for _ in plan:
                t += rng.expovariate(args.rate)
                offsets.append(t)
        else:
            offsets = [(i + 1) / args.rate for i in range(len(plan))]

        profiler = cProfile.Profile() if args.profile else None
        tasks: list[asyncio.Task] = []
        start_lateness = []
        emulator.recording = True
        gc_pauses.recording = True
        if args.gc == "freeze-off":
            gc.disable()
        jiffies0 = system_busy_jiffies()
        c0, w0 = cpu_seconds(), time.monotonic()
        if profiler:
            profiler.enable()
        base = loop.time() + 0.05
        next_report = 10.0
        for (asker, root, port), offset in zip(plan, offsets):
            due = base + offset
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            start_lateness.append(loop.time() - due)
            tasks.append(asyncio.ensure_future(one_lookup(nodes[asker], root, port, args.lookup_timeout_s)))
            if offset >= next_report:
                finished = [t.result() for t in tasks if t.done()]
                ok = sum(1 for x in finished if x.first_s is not None)
                log(f"N={n}: {offset:.0f}s, {len(tasks)} lookups started, {len(finished)} done, {ok} found")
                next_report += 10.0
        results: list[LookupResult] = await asyncio.gather(*tasks)
        if profiler:
            profiler.disable()
        gc_after = None
        if args.gc == "freeze-off":
            # The collection skipped during the phase, charged to the phase: what it found says whether skipping
            # it mattered (cyclic garbage left for later), how long it took is CPU the phase would have spent.
            gc.enable()
            t_gc = time.perf_counter()
            collected = gc.collect()
            gc_after = {"collected_objects": collected, "duration_ms": r((time.perf_counter() - t_gc) * 1000, 2)}
        wall = time.monotonic() - w0
        cpu = cpu_seconds() - c0
        jiffies1 = system_busy_jiffies()
        emulator.recording = False
        lag.recording = False
        gc_pauses.recording = False
        timeouts = counter_sum("request_timeouts") - timeouts0
        datagrams = counter_sum("datagrams_out") - datagrams0
        if profiler:
            path = f"{args.profile}.{n}"
            profiler.dump_stats(path)
            log(f"N={n}: profile of the lookup phase written to {path}")
    finally:
        lag.stop()
        for callback in list(gc.callbacks):
            if isinstance(callback, GcPauses):
                gc.callbacks.remove(callback)
        gc.enable()
        gc.unfreeze()
        await asyncio.gather(*(node.stop(save=False) for node in nodes), return_exceptions=True)

    # ------------------------------------------------------------------------------------------- figures
    count = len(results)
    found = [x for x in results if x.first_s is not None]
    first = [x.first_s for x in found]
    done = [x.done_s for x in results]
    local = [x for x in found if x.hops_to_first == 0]
    remote_first = [x.first_s for x in found if x.hops_to_first != 0]
    first_all = first + [math.inf] * (count - len(found))  # failures as infinitely slow
    lags_ms = [v * 1000 for v in lag.lags]
    late_ms = [v * 1000 for v in emulator.lateness]
    cpu_net = max(0.0, cpu - idle_cpu_rate * wall)
    busy = jiffies1[0] - jiffies0[0]
    total = jiffies1[1] - jiffies0[1]
    ncpu = os.cpu_count() or 1
    machine_busy_cores = busy / total * ncpu if total else None
    our_cores = cpu / wall
    lag_p99 = percentile(lags_ms, 99)
    lag_limit_ms = 0.1 * args.delay_ms
    invalid = []
    if lag_p99 is not None and lag_p99 > lag_limit_ms:
        invalid.append(f"event-loop lag p99 {lag_p99:.1f} ms > {lag_limit_ms:.1f} ms (10% of the one-way delay)")
    if our_cores > 0.9:
        invalid.append(f"bench process used {our_cores:.2f} cores during the lookup phase (> 0.9): CPU-bound")
    p99_all = percentile(first_all, 99)
    summary = {
        "nodes": n,
        "lookups": count,
        "p50_s": r(percentile(first, 50)),
        "p99_s": r(percentile(first, 99)),
        "p99_all_s": None if p99_all is None or math.isinf(p99_all) else r(p99_all),
        "success_rate": r(len(found) / count, 5) if count else None,
        "mean_hops": r(sum(x.hops_to_first for x in found) / len(found), 3) if found else None,
        "mean_hops_max": r(sum(x.hops_max for x in results) / count, 3) if count else None,
        "rpcs_per_lookup": r(sum(x.rpcs for x in results) / count, 2) if count else None,
        "rpcs_to_first_provider": r(sum(x.rpcs_to_first for x in found) / len(found), 2) if found else None,
        "completion_p50_s": r(percentile(done, 50)),
        "completion_p99_s": r(percentile(done, 99)),
        "cpu_ms_per_lookup": r(cpu_net / count * 1000, 3) if count else None,
        "valid": not invalid,
        "invalid_reasons": invalid,
        "loop_lag_p99_ms": r(lag_p99, 3),
        "delay_emulation": (
            f"{args.delay_ms} ms one-way on every datagram (requests and replies; RTT {2 * args.delay_ms} ms): each "
            "node's UDP transport is wrapped so sendto() arms loop.call_at(now + delay, real sendto); all nodes "
            f"in one process and one {args.loop} event loop on 127.0.0.1 (real UDP over loopback)"
        ),
    }
    details = {
        "targets_apply": n == TARGETS["nodes"] and args.delay_ms == TARGETS["delay_ms"],
        "meets_targets": None,
        "rate_per_s": args.rate,
        "arrivals": args.arrivals,
        "lookup_phase_wall_s": r(wall, 2),
        "achieved_rate_per_s": r(count / max(offsets) if offsets else 0, 2),
        "arrival_start_lateness_ms_p99": r(percentile([v * 1000 for v in start_lateness], 99), 3),
        "failures": count - len(found),
        "errors": sorted({x.error for x in results if x.error}),
        "local_hits": len(local),
        "local_hit_rate": r(len(local) / count, 4) if count else None,
        "p50_s_remote_only": r(percentile(remote_first, 50)),
        "p99_s_remote_only": r(percentile(remote_first, 99)),
        "p90_s": r(percentile(first, 90)),
        "max_s": r(max(first) if first else None),
        "hops_to_first_histogram": _histogram(x.hops_to_first for x in found),
        "hops_max_histogram": _histogram(x.hops_max for x in results),
        "mean_replies_per_lookup": r(sum(x.replies for x in results) / count, 2) if count else None,
        "rpc_timeouts_during_lookups": timeouts,
        "datagrams_sent_per_lookup": r(datagrams / count, 2) if count else None,
        "cpu": {
            "process_cpu_s": r(cpu, 3),
            "idle_cpu_rate_cores": r(idle_cpu_rate, 4),
            "net_cpu_s": r(cpu_net, 3),
            "process_cores_used": r(our_cores, 3),
            "machine_busy_cores_during_phase": r(machine_busy_cores, 3),
            "other_processes_cores_approx": r(machine_busy_cores - our_cores, 3) if machine_busy_cores else None,
            "machine_cores": ncpu,
        },
        "emulation": {
            "delayed_datagrams": emulator.delayed,
            "lateness_ms_p50": r(percentile(late_ms, 50), 3),
            "lateness_ms_p99": r(percentile(late_ms, 99), 3),
            "lateness_ms_max": r(max(late_ms) if late_ms else None, 3),
            "loop_lag_ms_p50": r(percentile(lags_ms, 50), 3),
            "loop_lag_ms_p99": r(lag_p99, 3),
            "loop_lag_ms_max": r(max(lags_ms) if lags_ms else None, 3),
            "idle_loop_lag_ms_p99": r(percentile([v * 1000 for v in idle_lags], 99), 3),
            "gc_mode": args.gc,
            "gc_pauses_during_lookups": gc_pauses.summary(),
            "gc_collect_after_lookups": gc_after,
            "max_rss_mb": r(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "validity_rule": "valid iff loop-lag p99 <= 10% of the one-way delay and the process used <= 0.9 cores",
        },
        "setup": {
            **{k: (r(v, 2) if isinstance(v, float) else v) for k, v in phases.items()},
            "routing_table_min": min(table_sizes),
            "routing_table_median": sorted(table_sizes)[n // 2],
            "routing_table_max": max(table_sizes),
            "announcers": announcer_count,
            "replicas_accepted_min": min(stored),
            "replicas_accepted_mean": r(sum(stored) / len(stored), 2),
        },
    }
    if details["targets_apply"]:
        details["meets_targets"] = bool(
            summary["success_rate"] is not None
            and summary["success_rate"] >= TARGETS["success_rate_min"]
            and summary["p50_s"] is not None and summary["p50_s"] <= TARGETS["p50_s_max"]
            and summary["p99_s"] is not None and summary["p99_s"] <= TARGETS["p99_s_max"]
        )
    log(f"N={n}: success {summary['success_rate']}, first provider p50 {summary['p50_s']}s p99 {summary['p99_s']}s, "
        f"hops {summary['mean_hops']}, rpcs {summary['rpcs_per_lookup']}, "
        f"cpu {summary['cpu_ms_per_lookup']} ms/lookup, "
        f"loop lag p99 {summary['loop_lag_p99_ms']} ms, process {our_cores:.2f} cores, "
        f"machine {machine_busy_cores if machine_busy_cores is None else round(machine_busy_cores, 2)} cores busy"
        + ("" if not invalid else f" -- INVALID: {'; '.join(invalid)}"))
    return {"summary": summary, "details": details}


def _histogram(values) -> dict:
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return {str(k): counts[k] for k in sorted(counts)}
