"""`swarmproxy lab crowd-scale`: Pack's flash crowd at internet scale, simulated around the real download cores.

One run per DHT model asked for (`--dht ours|mainline|both`): the swarm half (`world.World`: every client's node
drives the real `DownloadCore`, `FetchCore` and trust judge) and the direct half (`world.run_direct`: the same
crowd straight to the same origin model), then an idle origin's time (one client alone). Reported per run: p50 and
p99 through swarmproxy against direct, the origin's share (origin bytes sent to the swarm half / to the direct
half: the goal is <= 0.1 % at 100,000 clients), the offload (bytes clients got from peers / bytes delivered:
NetSession's 70-80 % is the anchor) and the p99 against twice the idle origin's time.

Honesty checks (a run failing one is marked INCONSISTENT): conservation (every client got exactly `size`
bytes, byte for byte, and its origin and peer bytes add up to them), the origin's bytes accounted for (what the
swarm half's clients got from the origin is at most what the origin sent; the direct origin sent exactly
clients x size), nobody left unfinished; and the wall time and events of the simulation itself.

`--origin-plugin`: the origin runs server_plugin, as the lab's does (`--origin-busy`, 2 by default): every head
carries its manifest, and `Swarm-Hint: swarm` from that many GETs in flight (`node`, `models.Origin`).

`--cross-check`: the lab's own crowd (1,000 clients at 20/s, seed 1: the same arrival times as `swarmproxy lab
flashcrowd --loads 20 --duration 50`), our DHT, against the recorded real runs `REAL_RUNS` of the same crowd with
the origin plugin or without, as asked (their p50, p99 and origin share, each run's and the median of them; within
15 % or not) and their timelines (when a quorum was first found, how long a parked client took from its quorum to
its last byte).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import statistics
import time
from collections.abc import Callable

from proxy.errors import ConfigError
from swarm.content.sizes import parse_rate

from ..lab import report as rep
from ..lab.honesty import percentile
from ..lab.sweeps import amount
from .world import SimParams, World, idle_origin_time, run_direct

Say = Callable[[str], None]
ROOT = pathlib.Path(__file__).resolve().parent.parent
# The recorded real runs of `swarmproxy lab flashcrowd --loads 20 --duration 50 --[no-]origin-plugin --workers 2`
# compared against (bench/README.md): with the plugin, three of the tree whose plugin lists the clients it hinted
# before (`Swarm-Peers`, as the model's origin does); without it, two of the tree before that (whose crowd without
# the plugin it does not change: no origin hints, so none lists).
REAL_RUNS = {True: tuple(f"flashcrowd-20-plugin-peers{run}" for run in ("", "-b", "-c")),
             False: tuple(f"flashcrowd-20-no-plugin-hold{run}" for run in ("", "-b"))}
TOLERANCE = 0.15
RECORDS_KEPT = 5000  # per half in report.json: a sample, evenly spread, beyond this (100,000 would be ~50 MB)
QUORUM_EVENT = re.compile(r"^\+([0-9.]+)s lookup: a quorum manifest")


def params_of(args: argparse.Namespace, dht: str) -> SimParams:
    if args.quick:
        clients, rate = args.clients or 200, args.rate or 20.0
    elif args.cross_check:
        clients, rate = args.clients or 1000, args.rate or 20.0
    else:
        clients, rate = args.clients or 100_000, args.rate or 1000.0
    return SimParams(clients=clients, rate=rate, dht=dht, seed=args.seed, fetch_peers=args.fetch_peers or 16,
                     delay=args.delay / 1000, origin_connections=args.origin_connections,
                     origin_rate=amount(parse_rate, "--origin-rate", args.origin_rate),
                     node_up=amount(parse_rate, "--node-rate", args.node_rate),
                     node_down=amount(parse_rate, "--node-rate", args.node_rate),
                     origin_plugin=bool(args.origin_plugin), origin_busy=args.origin_busy)


def run(args: argparse.Namespace, say: Say) -> int:
    dhts = ["ours"] if args.cross_check else (["ours", "mainline"] if args.dht == "both" else [args.dht or "ours"])
    runs = []
    for index, dht in enumerate(dhts):
        try:
            params = params_of(args, dht)
        except ConfigError as exc:
            say(f"swarmproxy lab crowd-scale: {exc}")
            return 2
        say(f"\n[{index + 1}/{len(dhts)}] {params.clients:,} clients at {params.rate:g}/s, {params.size:,} bytes "
            f"each, DHT model: {dht}")
        runs.append(one_run(params, say))
    report: dict[str, object] = {"scenario": "crowd-scale", "command": rep.command_line(), "machine": rep.machine(),
              "model": "bench/crowd_sim: real DownloadCore, FetchCore and swarm.trust.judge per client; origin, "
                       "links and DHT modelled (see the package docstring)", "runs": runs}
    if args.cross_check:
        report["cross_check"] = cross_check(runs[0], plugin=bool(args.origin_plugin))
    report["consistent"] = all(not r["problems"] for r in runs)
    text = summary(report)
    out = args.out or pathlib.Path("lab-crowd-scale")
    paths = rep.write(out, report, text, draw)
    say("\n" + text)
    say("wrote " + ", ".join(str(p) for p in paths))
    return 0 if report["consistent"] else 1


def one_run(params: SimParams, say: Say) -> dict:
    started = time.monotonic()
    world = World(params, say)
    swarm = world.run(progress_every=max(5.0, params.clients / params.rate / 10))
    say(f"  swarm half: {sum(1 for c in swarm['clients'] if c['exact'])}/{params.clients} exact, "
        f"{swarm['virtual_s']:.0f} s simulated in {swarm['wall_s']:.0f} s ({swarm['events']:,} events)")
    direct = run_direct(params, say)
    idle = idle_origin_time(params)
    swarm_half, direct_half = (rep.half(swarm["clients"], swarm["origin_bytes"]),
                               rep.half(direct["clients"], direct["origin_bytes"]))
    p99, idle2 = swarm_half["times_s"]["p99"], 2 * idle
    figures = {
        "swarm_p50_s": swarm_half["times_s"]["p50"], "swarm_p99_s": p99,
        "direct_p50_s": direct_half["times_s"]["p50"], "direct_p99_s": direct_half["times_s"]["p99"],
        "speedup_p50": rep.ratio(direct_half["times_s"]["p50"], swarm_half["times_s"]["p50"]),
        "origin_share": round(swarm["origin_bytes"] / direct["origin_bytes"], 5) if direct["origin_bytes"] else None,
        "offload": swarm_half["peer_share"], "idle_origin_s": idle,
        "p99_over_idle": round(p99 / idle, 2) if p99 is not None and idle else None,
        "goal_origin_share_0.1%": bool(direct["origin_bytes"]) and swarm["origin_bytes"] <= 0.001 * direct[
            "origin_bytes"],
        "goal_p99_2x_idle": p99 is not None and p99 <= idle2,
        "first_quorum_s": first_quorum(swarm["clients"]),
    }
    problems = honesty(params, swarm, direct)
    for problem in problems:
        say(f"  INCONSISTENT: {problem}")
    plugin = ", plugin" if params.origin_plugin else ""
    return {"label": f"{params.clients} clients at {params.rate:g}/s, DHT {params.dht}{plugin}",
            "params": dataclasses.asdict(params), "figures": figures, "problems": problems,
            "simulation": {"wall_s": round(time.monotonic() - started, 1), "swarm_wall_s": swarm["wall_s"],
                           "direct_wall_s": direct["wall_s"], "events": swarm["events"],
                           "virtual_s": swarm["virtual_s"], "dht_lookups": swarm["dht_lookups"],
                           "dht_puts": swarm["dht_puts"], "providers": swarm["providers"],
                           "vouch_times_s": swarm["vouch_times"][:20], "origin_requests": swarm["origin_requests"],
                           "origin_held": swarm["origin_held"], "origin_left_in_hold": swarm["origin_left_in_hold"]},
            "swarmproxy": {"summary": swarm_half, **sample(swarm["clients"])},
            "direct": {"summary": direct_half, **sample(direct["clients"])}}


def sample(records: list[dict]) -> dict:
    """The records, or every k-th of them beyond RECORDS_KEPT (the summary is computed over all)."""
    step = -(-len(records) // RECORDS_KEPT)
    return {"records": records[::step], "records_every": step}


def honesty(params: SimParams, swarm: dict, direct: dict) -> list[str]:
    """What must hold of any run, or the figures mean nothing (see the module docstring)."""
    problems = []
    size = params.size
    for name, half in (("swarm", swarm), ("direct", direct)):
        records = half["clients"]
        if len(records) != params.clients:
            problems.append(f"{name}: {len(records)} records for {params.clients} clients")
        wrong = [r["client"] for r in records if not r["exact"] or r["bytes"] != size]
        if wrong:
            problems.append(f"{name}: {len(wrong)} clients did not get exactly {size} bytes (first {wrong[:5]})")
    split = [r["client"] for r in swarm["clients"] if r["bytes_origin"] + r["bytes_peers"] != r["bytes"]]
    if split:
        problems.append(f"swarm: {len(split)} clients' origin and peer bytes do not add up (first {split[:5]})")
    got = sum(r["bytes_origin"] for r in swarm["clients"])
    if got > swarm["origin_bytes"]:
        problems.append(f"swarm: clients got {got} origin bytes, the origin sent {swarm['origin_bytes']}")
    if direct["origin_bytes"] != params.clients * size:
        problems.append(f"direct: the origin sent {direct['origin_bytes']} bytes for {params.clients} x {size}")
    return problems


def first_quorum(records: list[dict]) -> float | None:
    """When a lookup first found a quorum manifest, in s after the crowd began (the records that kept events)."""
    times = [r["arrival"] + t for r in records for t in quorum_times(r)]
    return round(min(times), 3) if times else None


def quorum_times(record: dict) -> list[float]:
    return [float(m.group(1)) for request in record.get("events") or [] for line in request
            if (m := QUORUM_EVENT.match(line))]


def timeline(records: list[dict]) -> dict:
    """A run's shape, the same for a real run's records and the simulator's: p50/p99, the first quorum, and how long
    parked clients (cause `fetching`) took from their quorum to their last byte."""
    parked = [r["duration_s"] - q[0] for r in records if r.get("causes") == ["fetching"] and r.get("exact")
              and (q := quorum_times(r))]
    done = sorted(r["duration_s"] for r in records if r.get("exact"))
    return {"p50_s": _r(percentile(done, 50)), "p90_s": _r(percentile(done, 90)), "p99_s": _r(percentile(done, 99)),
            "first_quorum_s": first_quorum(records), "parked": len(parked),
            "parked_after_quorum_p50_s": _r(percentile(parked, 50)),
            "parked_after_quorum_p90_s": _r(percentile(parked, 90))}


def cross_check(sim: dict, *, plugin: bool = False) -> dict:
    """The simulator's 1,000 clients at 20/s against the recorded real runs of the same crowd (the origin running
    server_plugin or not, as the simulated one did)."""
    real = {}
    flag = "--origin-plugin" if plugin else "--no-origin-plugin"
    for name in REAL_RUNS[plugin]:
        path = ROOT / "results" / "lab" / name / "report.json"
        if not path.exists():
            continue
        recorded = json.loads(path.read_text())["runs"][0]
        half = recorded["swarmproxy"]
        direct_bytes = recorded["direct"]["summary"]["origin_bytes"]
        real[name] = {**timeline(half["records"]), "origin_share": round(half["summary"]["origin_bytes"] /
                                                                             direct_bytes, 4),
                      "valid": recorded["honesty"]["valid"],
                      "command": f"swarmproxy lab flashcrowd --loads 20 --duration 50 {flag} --workers 2"}
    mine = {**timeline(sim["swarmproxy"]["records"]), "origin_share": sim["figures"]["origin_share"]}
    # Compared unrounded: an origin share is a small fraction, and three decimals of it are 0.1 % of the bytes.
    median = {key: statistics.median(v[key] for v in real.values()) for key in ("p50_s", "p99_s", "origin_share")
              } if real else {}
    within = {key: abs(mine[key] - value) <= TOLERANCE * value for key, value in median.items()
              if mine.get(key) is not None and value}
    shown = {key: round(value, 5) for key, value in median.items()}
    return {"real_runs": real, "real_median": shown, "simulated": mine, "within_15_percent": within}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def summary(report: dict) -> str:
    lines = [f"swarmproxy lab crowd-scale — {report['command']}",
             "model: " + report["model"],
             "goal (issue 40): origin <= 0.1 % of direct, p99 <= 2 x an idle origin's; NetSession's offload 70-80 %",
             "", f"{'run':>42}  {'direct p50':>10}  {'swarm p50':>9}  {'swarm p99':>9}  {'p99/idle':>8}  "
                 f"{'origin':>8}  {'offload':>7}  causes"]
    for r in report["runs"]:
        f, causes = r["figures"], r["swarmproxy"]["summary"]["causes"]
        lines.append(f"{r['label']:>42}  {_s(f['direct_p50_s']):>10}  {_s(f['swarm_p50_s']):>9}  "
                     f"{_s(f['swarm_p99_s']):>9}  {_x(f['p99_over_idle']):>8}  {_pct(f['origin_share']):>8}  "
                     f"{_pct(f['offload']):>7}  {causes}")
    lines.append("")
    for r in report["runs"]:
        f, s = r["figures"], r["simulation"]
        lines.append(f"{r['label']}: direct p99 {_s(f['direct_p99_s'])}, idle origin {f['idle_origin_s']:.3f} s, "
                     f"first quorum at {_s(f['first_quorum_s'])}; origin <= 0.1 %: {f['goal_origin_share_0.1%']}, "
                     f"p99 <= 2 x idle: {f['goal_p99_2x_idle']}; simulated {s['virtual_s']:.0f} s in "
                     f"{s['wall_s']:.0f} s of wall time ({s['events']:,} events)")
        lines.append("  honesty: " + ("every client got exactly its bytes; origin bytes accounted"
                                      if not r["problems"] else "INCONSISTENT: " + "; ".join(r["problems"])))
    if (check := report.get("cross_check")) is not None:
        commands = {v["command"] for v in check["real_runs"].values()}
        lines += ["", "cross-check against recorded real runs (" + (" ".join(commands) or "none found") + "):",
            f"{'':>30}  {'p50':>6}  {'p90':>6}  {'p99':>6}  {'origin':>7}  {'1st quorum':>10}  "
            f"{'parked after quorum p50/p90':>28}"]
        rows = [*[(name + (" (VALID)" if v["valid"] else " (INVALID)"), v) for name, v in check["real_runs"].items()],
                ("simulated", check["simulated"])]
        for name, v in rows:
            lines.append(f"{name:>30}  {_s(v['p50_s']):>6}  {_s(v['p90_s']):>6}  {_s(v['p99_s']):>6}  "
                         f"{_pct(v['origin_share']):>7}  {_s(v['first_quorum_s']):>10}  "
                         f"{_s(v['parked_after_quorum_p50_s'])} / {_s(v['parked_after_quorum_p90_s'])} "
                         f"({v['parked']} parked)")
        m = check["real_median"]
        lines.append(f"{'median of the real runs':>30}  {_s(m.get('p50_s')):>6}  {'':>6}  {_s(m.get('p99_s')):>6}  "
                     f"{_pct(m.get('origin_share')):>7}")
        lines.append("within 15 % of the real median: " + ", ".join(f"{k} {'yes' if v else 'no'}"
                                                                 for k, v in check["within_15_percent"].items()))
    return "\n".join(lines) + "\n"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} s"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.3g} %"


def draw(pyplot, report: dict):
    """Left: the download times' distribution, swarm and direct per run (and the real runs when cross-checked),
    with the idle origin's time and twice it. Right: each swarm client's time against its arrival."""
    figure, (cdf, scatter) = pyplot.subplots(1, 2, figsize=(13, 5))
    for r in report["runs"]:
        for half, style in (("swarmproxy", "-"), ("direct", "--")):
            times = sorted(c["duration_s"] for c in r[half]["records"] if c.get("exact"))
            cdf.plot(times, [(i + 1) / len(times) for i in range(len(times))], style,
                     label=f"{half}, DHT {r['params']['dht']}")
        idle = r["figures"]["idle_origin_s"]
    for name in (report.get("cross_check") or {}).get("real_runs", {}):
        path = ROOT / "results" / "lab" / name / "report.json"
        records = json.loads(path.read_text())["runs"][0]["swarmproxy"]["records"]
        times = sorted(c["duration_s"] for c in records if c.get("exact"))
        cdf.plot(times, [(i + 1) / len(times) for i in range(len(times))], ":", label=f"real: {name}")
    cdf.axvline(idle, color="grey", linewidth=0.8)
    cdf.axvline(2 * idle, color="grey", linewidth=0.8, linestyle="--")
    cdf.set_xscale("log")
    cdf.set_xlabel("download time (s); grey: idle origin, dashed: twice it")
    cdf.set_ylabel("fraction of clients")
    cdf.legend(fontsize=7)
    for r in report["runs"]:
        records = r["swarmproxy"]["records"]
        step = max(1, len(records) // 20000)  # a readable cloud, not 100,000 points
        shown = [c for c in records[::step] if c.get("exact")]
        scatter.scatter([c["arrival"] for c in shown], [c["duration_s"] for c in shown], s=2,
                        label=f"DHT {r['params']['dht']}")
    scatter.set_yscale("log")
    scatter.set_xlabel("arrival (s)")
    scatter.set_ylabel("download time through swarmproxy (s)")
    scatter.legend(fontsize=7)
    figure.suptitle("swarmproxy lab crowd-scale (simulated: real download, fetch and trust cores)")
    return figure
