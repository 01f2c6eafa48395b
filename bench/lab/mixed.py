"""`swarmproxy lab mixed`: adaptive T/R/W against the best fixed T/R/W of `lab sweep`, on a mixed workload, in one
run (issue 21 §3, Pack's chapter 5 future work).

Three kinds of origin, each on an address of its own, so each is a host of its own to the proxies:

- far-fast:   the first byte after `far_delay` (1.2 s, above the default T of 0.75 s), then `fast_rate` (4 MB/s
              shared): far away but not busy, so a switch is rarely worth it;
- overloaded: `overloaded_rate` (64 KB/s shared by every download) after a queueing delay of 0.2 s;
- flapping:   fast (4 MB/s after 50 ms) and overloaded (`slow_rate`, 48 KB/s after 0.3 s) by turns, every
              `flap_period` (6 s).

Each arm has its own nodes (`users` full nodes, each a user with its own proxy) and its own copy of every origin,
and all arms run at once on one emulated network (25 ms one way, 10 Mbit/s per node), with the same arrivals: user
u of every arm fetches the same files at the same times (`downloads` each, Poisson over `duration` s, every file at
most once per user, drawn from `files` files per origin, so crowds form on each file). The arms:

- adaptive:   the proxy's defaults (T 0.75 s, R 160 kB/s, W 2 s) as the starting point, adaptive on;
- adaptive-w: the best fixed setting below as the starting point (--rate-window 0.25), adaptive on;
- best-fixed: the best fixed setting of `lab sweep`, --no-adaptive: W = 0.25 s (with the default T and R) had the
              lowest median of the T, R and W sweeps (1.8 s; bench/results/lab/sweep-{T,R,W}/summary.txt);
- defaults:   T 0.75 s, R 160 kB/s, W 2 s, --no-adaptive (for context).

A switch (cause T, R or crowd) is counted needless, from what the lab knows of its origins, when peers delivered
none of its bytes, or when the origin was in a fast state at the request and alone would have finished sooner
(its first-byte delay, two round trips and the body at the fast rate) than the download did.

Every node's origin requests leave from 127.0.0.1 (the proxy's HTTP client has no source-address option), so that
host's link is left uncapped here: the origins' own budgets are the limit, and the arms do not share a link.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import math
import pathlib
import random
import sys
import tempfile
import time
from collections.abc import Callable

import aiohttp

from bench.crowd_inputs import content
from proxy.demo.slow_origin import SlowOrigin
from proxy.download.transition import DEFAULT_FIRST_BYTE_TIMEOUT, DEFAULT_MIN_RATE, DEFAULT_RATE_WINDOW

from . import report as rep
from .cluster import LocalClientsCluster
from .crowd_nodes import host, no_full_collections
from .honesty import Sampler, percentile
from .netem import EmulatedLoop, LinkModel

Say = Callable[[str], None]
KINDS = ("far-fast", "overloaded", "flapping")
SWITCHES = ("T", "R", "crowd")
MEDIAN_TIE = 0.02  # medians closer than this (relative) are a tie: noise between reruns is of that order
RECORD_WAIT = 10.0  # s a download's record may take to close after its client got the last byte
# The best fixed T/R/W of `lab sweep` (bench/results/lab/sweep-W: W=0.25 had the lowest median of every T, R and W
# value swept, 1.8 s against 1.93-2.04 s for the defaults and the other values).
BEST_FIXED_W = 0.25
ARMS: dict[str, dict[str, str]] = {
    "adaptive": {"no_adaptive": "false"},
    "adaptive-w": {"no_adaptive": "false", "rate_window": str(BEST_FIXED_W)},
    "best-fixed": {"no_adaptive": "true", "rate_window": str(BEST_FIXED_W)},
    "defaults": {"no_adaptive": "true"},
}
ADAPTIVE_ARMS = ("adaptive", "adaptive-w")


@dataclasses.dataclass
class MixedParams:
    users: int = 6  # per arm
    downloads: int = 15  # per user
    duration: float = 40.0  # s of arrivals
    files: int = 6  # per origin
    size: int = 100_000
    delay: float = 0.025
    node_rate: float = 1_250_000.0
    far_delay: float = 1.2
    fast_rate: float = 4_000_000.0
    overloaded_rate: float = 64_000.0
    overloaded_delay: float = 0.2
    slow_rate: float = 48_000.0
    slow_delay: float = 0.3
    flap_period: float = 6.0
    seed: int = 1
    arms: tuple[str, ...] = tuple(ARMS)
    client_timeout: float = 120.0

    def fast_alone(self, kind: str) -> float:
        """How long the origin alone takes in its fast state: first byte, connect and request round trips, body."""
        first = self.far_delay if kind == "far-fast" else 0.05
        return first + 4 * self.delay + self.size / min(self.fast_rate, self.node_rate)


def quick() -> MixedParams:
    return MixedParams(users=4, downloads=8, duration=16.0, files=3, flap_period=4.0)


@dataclasses.dataclass(frozen=True)
class Download:
    user: int
    at: float  # s after the start
    kind: str
    file: int


def schedule(p: MixedParams) -> list[Download]:
    """The arrivals, the same for every arm: per user, Poisson times and distinct files."""
    rng = random.Random(p.seed)
    files = [(kind, i) for kind in KINDS for i in range(p.files)]
    plan = []
    for user in range(p.users):
        at = 0.0
        chosen = rng.sample(files, min(p.downloads, len(files)))
        for kind, index in chosen:
            at += rng.expovariate(p.downloads / p.duration)
            plan.append(Download(user, round(at, 4), kind, index))
    return sorted(plan, key=lambda d: d.at)


def fast_at(p: MixedParams, kind: str, at: float) -> bool:
    """Is the origin of `kind` in its fast state `at` s after the start?"""
    if kind == "far-fast":
        return True
    if kind == "overloaded":
        return False
    return int(at // p.flap_period) % 2 == 0


class Arm:
    """One arm: its origins (one per kind) and its nodes."""

    def __init__(self, name: str, index: int, p: MixedParams, workdir: pathlib.Path) -> None:
        self.name, self.p = name, p
        self.origins = {kind: SlowOrigin(host=f"127.0.0.{10 + 4 * index + k}", max_connections=256)
                        for k, kind in enumerate(KINDS)}
        flags = {"first_byte_timeout": str(DEFAULT_FIRST_BYTE_TIMEOUT), "min_rate": str(DEFAULT_MIN_RATE),
                 "rate_window": str(DEFAULT_RATE_WINDOW), **ARMS[name]}
        listed = ",".join(origin.host for origin in self.origins.values())  # the lab's loopback origins
        self.cluster = LocalClientsCluster(workdir / name, hosts=[host(2, 50 * index + i) for i in range(p.users)],
                                           log_level="ERROR", transport="tcp", read_timeout="60",
                                           share_private_origins=listed, **flags)
        self.urls: dict[tuple[str, int], str] = {}
        self.records: list[dict] = []

    async def start(self) -> None:
        p = self.p
        for kind, origin in self.origins.items():
            self.set_state(kind, fast=fast_at(p, kind, 0.0))
            await origin.start()
            for i in range(p.files):
                self.urls[kind, i] = origin.add(f"/{kind}/{i}.bin", content(f"{kind}{i}", p.size))
        first = await self.cluster.add()
        rest = await asyncio.gather(*(self.cluster.add() for _ in range(p.users - 1)))
        self.nodes = sorted([first, *rest], key=lambda n: n.index)

    def set_state(self, kind: str, *, fast: bool) -> None:
        p, origin = self.p, self.origins[kind]
        if kind == "far-fast":
            origin.first_byte_delay = p.far_delay
            origin.set_rate(p.fast_rate)
        elif kind == "overloaded":
            origin.first_byte_delay = p.overloaded_delay
            origin.set_rate(p.overloaded_rate)
        else:
            origin.first_byte_delay = 0.05 if fast else p.slow_delay
            origin.set_rate(p.fast_rate if fast else p.slow_rate)

    async def download(self, t0: float, d: Download) -> None:
        p, node = self.p, self.nodes[d.user]
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, t0 + d.at - loop.time()))  # the arrival time
        url = self.urls[d.kind, d.file]
        digest = hashlib.sha256(content(f"{d.kind}{d.file}", p.size)).hexdigest()
        started = loop.time()
        row: dict = {"arm": self.name, "user": d.user, "kind": d.kind, "file": d.file, "arrival": d.at,
                     "origin_fast": fast_at(p, d.kind, d.at)}
        try:
            async with asyncio.timeout(p.client_timeout):
                async with self.cluster.client_for(node).get(url, proxy=node.url) as response:
                    body = await response.read()
            row["exact"] = response.status == 200 and hashlib.sha256(body).hexdigest() == digest
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            row.update(exact=False, error=f"{type(exc).__name__}: {exc}")
        row["duration_s"] = round(loop.time() - started, 4)
        # The node closes its record just after the last byte: wait for it (a request that never reached the node
        # has none), then take this URL's (each user fetches a file once).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RECORD_WAIT):
                while not any(r.url == url and r.duration_s is not None for r in node.stats.history):
                    await node.stats.wait_for_requests(node.stats.counters["requests"] + 1)
        record = next((r.as_json() for r in reversed(node.stats.history) if r.url == url), {})
        for name in ("transition", "bytes_origin", "bytes_peers", "first_byte_timeout", "min_rate", "rate_window",
                     "trw_source", "switch_verdict", "error"):
            row.setdefault(name, record.get(name))
        row["needless"] = needless(p, row)
        self.records.append(row)

    async def close(self) -> None:
        await self.cluster.close()
        for origin in self.origins.values():
            await origin.stop()


def needless(p: MixedParams, row: dict) -> str | None:
    """Why a switch was needless (`no-peer-bytes`, `origin-fast-enough`), or None (no switch, or it helped)."""
    if row.get("transition") not in SWITCHES:
        return None
    if not row.get("bytes_peers"):
        return "no-peer-bytes"
    if row["origin_fast"] and row["duration_s"] > p.fast_alone(row["kind"]):
        return "origin-fast-enough"
    return None


async def _flap(arms: list[Arm], p: MixedParams, t0: float) -> None:
    loop = asyncio.get_running_loop()
    phase = 0
    while True:
        phase += 1
        await asyncio.sleep(max(0.0, t0 + phase * p.flap_period - loop.time()))  # the next phase's start
        for arm in arms:
            arm.set_state("flapping", fast=phase % 2 == 0)


async def _run(p: MixedParams, workdir: pathlib.Path, say: Say, sampler: Sampler) -> list[dict]:
    plan = schedule(p)
    arms = [Arm(name, i, p, workdir) for i, name in enumerate(p.arms)]
    try:
        started = time.monotonic()
        for arm in arms:
            await arm.start()
        say(f"  {len(arms)} arms x {p.users} nodes up in {time.monotonic() - started:.1f} s; {len(plan)} downloads "
            f"per arm over ~{plan[-1].at:.0f} s")
        with no_full_collections():
            t0 = asyncio.get_running_loop().time() + 0.5
            sampler.start()
            flapper = asyncio.ensure_future(_flap(arms, p, t0))
            try:
                await asyncio.gather(*(arm.download(t0, d) for arm in arms for d in plan))
            finally:
                flapper.cancel()
                await sampler.stop()
        return [row for arm in arms for row in arm.records]
    finally:
        for arm in arms:
            await arm.close()


def execute(p: MixedParams, say: Say) -> dict:
    model = LinkModel(p.delay, p.node_rate, p.node_rate)
    model.limit("127.0.0.1", None, None)  # every node's origin requests leave from here (see the docstring)
    sampler = Sampler(carried=lambda: model.bytes_carried)
    with tempfile.TemporaryDirectory(prefix="swarmproxy-lab-mixed-") as tmp:
        with asyncio.Runner(loop_factory=lambda: EmulatedLoop(model)) as runner:
            rows = runner.run(_run(p, pathlib.Path(tmp), say, sampler))
    report = {"scenario": "mixed", "command": rep.command_line(), "machine": rep.machine(),
              "emulation": {"method": "transport", "delay_s": p.delay,
                            "note": "delay and per-host rate caps injected at the transport (bench/lab/netem.py)"},
              "honesty": sampler.verdict(p.delay), "params": dataclasses.asdict(p),
              "best_fixed": {"first_byte_timeout": DEFAULT_FIRST_BYTE_TIMEOUT, "min_rate": DEFAULT_MIN_RATE,
                             "rate_window": BEST_FIXED_W, "from": "bench/results/lab/sweep-W (lowest median of the "
                                                                  "T, R and W sweeps)"},
              "records": sorted(rows, key=lambda r: (r["arm"], r["arrival"], r["user"]))}
    report["summary"] = summarise(p, rows)
    return report


def _stats(rows: list[dict]) -> dict:
    finished = [r["duration_s"] for r in rows if r.get("exact")]
    # As the other scenarios do (report.times): a download that did not finish byte-exact is slower than any that
    # did, so a percentile that falls among those is None.
    durations = finished + [math.inf] * (len(rows) - len(finished))
    switched = [r for r in rows if r.get("transition") in SWITCHES]
    reasons: dict[str, int] = {}
    for r in switched:
        if r["needless"]:
            reasons[r["needless"]] = reasons.get(r["needless"], 0) + 1
    causes: dict[str, int] = {}
    for r in rows:
        cause = r.get("transition") or "origin"
        causes[cause] = causes.get(cause, 0) + 1
    delivered = sum((r.get("bytes_origin") or 0) + (r.get("bytes_peers") or 0) for r in rows if r.get("exact"))
    return {"downloads": len(rows), "exact": len(finished),
            "median_s": _round(percentile(durations, 50)), "p90_s": _round(percentile(durations, 90)),
            "p99_s": _round(percentile(durations, 99)),
            "mean_s": _round(sum(finished) / len(finished)) if finished else None,
            "switches": len(switched), "needless": sum(reasons.values()), "needless_by_reason": reasons,
            "causes": causes,
            "peer_share": round(sum((r.get("bytes_peers") or 0) for r in rows if r.get("exact")) / delivered, 4)
            if delivered else 0.0}


def summarise(p: MixedParams, rows: list[dict]) -> dict:
    arms = {}
    for name in p.arms:
        mine = [r for r in rows if r["arm"] == name]
        arms[name] = {**_stats(mine), "by_kind": {kind: _stats([r for r in mine if r["kind"] == kind])
                                                  for kind in KINDS}}
        # Which kind of origin the median download came from: an origin-bound one pins the median whatever T/R/W do.
        ranked = sorted(mine, key=lambda r: r["duration_s"] if r.get("exact") else math.inf)
        arms[name]["median_kind"] = ranked[len(ranked) // 2]["kind"] if ranked else None
    summary: dict = {"arms": arms, "goals": {}}
    b = arms.get("best-fixed")
    for name in ADAPTIVE_ARMS:
        a = arms.get(name)
        if a is not None and b is not None:
            summary["goals"][name] = {"lower_median": _lower(a["median_s"], b["median_s"]),
                                      "fewer_needless_switches": "met" if a["needless"] < b["needless"] else "missed"}
    return summary


def _lower(a: float | None, b: float | None) -> str:
    """`met`, `missed`, or `tie` when the medians are within MEDIAN_TIE of each other: closer than that, reruns of
    the same arm on this machine differ as much (a few ms on ~1.4 s), so neither is lower."""
    if a is None or b is None:
        return "missed"
    if abs(a - b) <= MEDIAN_TIE * b:
        return "tie"
    return "met" if a < b else "missed"


def _goal(verdict: str) -> str:
    return {"met": "met", "missed": "MISSED", "tie": f"MISSED (a tie: within {MEDIAN_TIE:.0%})"}[verdict]


def _round(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else round(value, 3)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


def text(report: dict) -> str:
    p, s, _h = report["params"], report["summary"], report["honesty"]
    lines = [f"swarmproxy lab mixed — {report['command']}",
             f"machine: {report['machine']['cpus']} CPUs, {report['machine']['memory_gib']} GiB, "
             f"Python {report['machine']['python']}",
             f"network: transport emulation, one-way delay {p['delay'] * 1000:g} ms, "
             f"{p['node_rate']:,.0f} B/s per node",
             f"workload: {p['users']} users per arm x {p['downloads']} downloads of {p['size']:,} B over "
             f"{p['duration']:g} s, from {p['files']} files on each of: far-fast (first byte {p['far_delay']:g} s, "
             f"{p['fast_rate']:,.0f} B/s), overloaded ({p['overloaded_rate']:,.0f} B/s shared, first byte "
             f"{p['overloaded_delay']:g} s), flapping (fast / {p['slow_rate']:,.0f} B/s every {p['flap_period']:g} s)",
             f"best fixed (lab sweep): T {report['best_fixed']['first_byte_timeout']:g} s, R "
             f"{report['best_fixed']['min_rate']:,.0f} B/s, W {report['best_fixed']['rate_window']:g} s; "
             "adaptive starts from T 0.75 s, R 160,000 B/s, W 2 s; adaptive-w from the best fixed",
             rep.honesty_banner(report), ""]
    lines.append(f"{'arm':>11} {'exact':>7} {'median':>7} {'p90':>6} {'p99':>6} {'switches':>8} {'needless':>8}  "
                 f"{'peers':>5}  causes; needless by reason")
    for name, a in s["arms"].items():
        lines.append(f"{name:>11} {a['exact']:>3}/{a['downloads']:<3} {_fmt(a['median_s']):>7} {_fmt(a['p90_s']):>6} "
                     f"{_fmt(a['p99_s']):>6} {a['switches']:>8} {a['needless']:>8}  {a['peer_share']:>5.0%}  "
                     f"{a['causes']}; {a['needless_by_reason']}")
    lines.append("the median download's origin: " + ", ".join(f"{name} {a['median_kind']}"
                                                            for name, a in s["arms"].items()))
    lines += ["", "per kind of origin: median s (needless / switches)",
              f"{'arm':>11} " + " ".join(f"{kind:>22}" for kind in KINDS)]
    for name, a in s["arms"].items():
        cells = [f"{_fmt(k['median_s'])} ({k['needless']}/{k['switches']})" for k in a["by_kind"].values()]
        lines.append(f"{name:>11} " + " ".join(f"{c:>22}" for c in cells))
    for name, g in s["goals"].items():
        a, b = s["arms"][name], s["arms"]["best-fixed"]
        lines += ["", f"issue 21 goal, {name} vs best-fixed:",
                  f"  lower median:            {a['median_s']} s vs {b['median_s']} s -> "
                  f"{_goal(g['lower_median'])}",
                  f"  fewer needless switches: {a['needless']} vs {b['needless']} -> "
                  f"{_goal(g['fewer_needless_switches'])}"]
    lines += ["", "needless: a T/R/crowd switch after which peers delivered nothing, or taken while the origin was "
              "fast and would alone have finished sooner"]
    return "\n".join(lines) + "\n"


def draw(pyplot, report: dict):
    s = report["summary"]
    names = list(s["arms"])
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        kinds = s["arms"][name]["by_kind"]
        xs = [k + i * width for k in range(len(KINDS) + 1)]
        medians = [kinds[kind]["median_s"] or 0.0 for kind in KINDS] + [s["arms"][name]["median_s"] or 0.0]
        left.bar(xs, medians, width, label=name)
        right.bar(xs, [kinds[kind]["needless"] for kind in KINDS] + [s["arms"][name]["needless"]], width,
                  label=name)
    for axes, title in ((left, "median download time (s)"), (right, "needless switches")):
        axes.set_xticks([k + width * (len(names) - 1) / 2 for k in range(len(KINDS) + 1)], [*KINDS, "all"])
        axes.set_title(title)
        axes.legend(fontsize=8)
    if not report["honesty"]["valid"]:
        figure.suptitle("INVALID: the emulation was CPU-bound", color="red")
    return figure


def params_from(args) -> MixedParams:
    """The run `swarmproxy lab mixed` asks for: --quick, --clients (users per arm), --duration, --size, --delay,
    --node-rate, --seed."""
    from swarm.content.sizes import parse_rate, parse_size

    from .sweeps import amount

    p = quick() if args.quick else MixedParams()
    if args.clients is not None:
        p.users = args.clients
    if args.duration is not None:
        p.duration = args.duration
    if args.size:
        p.size = amount(parse_size, "--size", args.size)
    p.delay = args.delay / 1000
    p.node_rate = amount(parse_rate, "--node-rate", args.node_rate)
    p.seed = args.seed
    return p


def run(args, say: Say) -> int:
    from proxy.errors import ConfigError

    out = args.out or pathlib.Path("lab-mixed")
    try:
        p = params_from(args)
    except ConfigError as exc:
        print(f"swarmproxy lab: {exc}", file=sys.stderr)
        return 2
    if p.users < 1 or p.duration <= 0 or p.delay < 0:
        print("swarmproxy lab: --clients must be >= 1, --duration > 0 and --delay >= 0", file=sys.stderr)
        return 2
    say(f"mixed: {', '.join(p.arms)}; {p.users} users per arm")
    report = execute(p, say)
    summary = text(report)
    paths = rep.write(out, report, summary, draw)
    print("\n" + summary)
    print("wrote " + ", ".join(str(path) for path in paths))
    return 0
