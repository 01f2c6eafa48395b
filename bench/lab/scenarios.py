"""The lab's scenarios (Pack's chapter 4): what each one runs, summarises and draws.

Each scenario is a list of crowd runs (one per load or per swept value) plus a headline `summary`:

- flashcrowd: figs. 4.1/4.2 — 100 KB, load 1..20 clients/s, direct vs swarmproxy;
- sweep:      figs. 4.3/4.4/4.5/4.8/4.9/4.11 — one parameter varied, swarmproxy only;
- page:       figs. 4.6/4.7 — one 100 KB object, then ten 10 KB objects in parallel;
- largefile:  table 4.1 — 30 MB, 100 clients at 1/s, swarmproxy vs libtorrent with a BEP 19 web seed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import tempfile
from collections.abc import Callable

from bench.crowd_inputs import content
from proxy.demo.slow_origin import SlowOrigin
from swarm.content.sizes import parse_size

from . import report as rep
from .crowd import CrowdRun
from .crowd_nodes import DIRECT_ORIGIN, SWARM_ORIGIN, CrowdParams, host
from .honesty import Sampler, combine
from .netem import EmulatedLoop, LinkModel, SharedLinks, kernel_netem_available

Say = Callable[[str], None]
LIBTORRENT_ORIGIN = "127.0.0.4"


@dataclasses.dataclass
class Plan:
    scenario: str
    base: CrowdParams
    runs: list[tuple[str, CrowdParams]]  # (label, params)
    swept: str | None = None


def emulation(delay: float) -> dict:
    usable, why = kernel_netem_available()
    # The kernel path is not built: the lab's nodes share one process, which one network namespace per
    # node cannot hold. Say plainly which emulation ran and why.
    return {"method": "transport", "kernel_netem": usable, "kernel_netem_note": why,
            "delay_s": delay, "note": "delay and per-host rate caps injected at the transport (bench/lab/netem.py)"}


def execute(plan: Plan, say: Say) -> dict:
    """Run every crowd of the plan, each on a fresh emulated network, and build the report."""
    runs = []
    for index, (label, params) in enumerate(plan.runs):
        say(f"\n[{index + 1}/{len(plan.runs)}] {label}: {params.clients} clients at {params.rate:g}/s, "
            f"{params.size + sum(params.objects):,} bytes each")
        runs.append(_one_run(label, params, say, plan.scenario))
    worst = min((r["honesty"] for r in runs), key=lambda h: (h["valid"], -h["loop_busy_mean"]))
    report = {"scenario": plan.scenario, "command": rep.command_line(), "machine": rep.machine(),
              "emulation": emulation(plan.base.delay), "honesty": worst, "swept": plan.swept, "runs": runs}
    report["summary"] = _summary(plan, report)
    return report


def _one_run(label: str, params: CrowdParams, say: Say, plan_scenario: str = "") -> dict:
    model = LinkModel(params.delay, params.node_up, params.node_down)
    # The origins' links are SlowOrigin's business (256 KB/s shared); the model adds only the delay.
    for origin in (DIRECT_ORIGIN, SWARM_ORIGIN):
        model.limit(origin, None, None)
    with tempfile.TemporaryDirectory(prefix="swarmproxy-lab-") as tmp:
        links = SharedLinks.create(pathlib.Path(tmp), model) if params.workers else None
        loop_model = links.attach() if links is not None else model
        sampler = Sampler(carried=lambda: loop_model.bytes_carried)
        try:
            with asyncio.Runner(loop_factory=lambda: EmulatedLoop(loop_model)) as runner:
                raw = runner.run(CrowdRun(params, pathlib.Path(tmp), say, sampler, links).run())
        finally:
            if links is not None:
                loop_model.close()
        loops = {"main": sampler.verdict(params.delay)}
        loops.update({f"worker {k}": v for k, v in enumerate(raw["workers"] or [])})
        if plan_scenario == "largefile":
            raw["libtorrent"] = _libtorrent_half(params, raw["arrivals"], pathlib.Path(tmp), say)
            loops["libtorrent"] = raw["libtorrent"]["honesty"]
        honesty = combine(loops)
        if params.workers and raw["workers"] is None:
            honesty = {**honesty, "valid": False,
                       "cpu_bound_reasons": [*honesty["cpu_bound_reasons"], "a worker process gave no honesty samples"]}
    bytes_per_client = params.size + sum(params.objects)
    run = {"label": label, "params": {**dataclasses.asdict(params), "bytes_per_client": bytes_per_client},
           "honesty": honesty, "arrivals": raw["arrivals"]}
    for side in ("direct", "swarmproxy", "libtorrent"):
        if raw.get(side) is None:
            run[side] = None
            continue
        records = sorted(raw[side]["clients"], key=lambda r: r["client"])
        run[side] = {"records": records, "summary": rep.half(records, raw[side]["origin_bytes"])}
    _say_run(run, say)
    return run


def _libtorrent_half(params: CrowdParams, arrivals: list[float], workdir: pathlib.Path, say: Say) -> dict:
    """The same arrivals, network and origin limits, served by libtorrent with the origin as web seed."""
    from .bittorrent import run_bittorrent

    model = LinkModel(params.delay, params.node_up, params.node_down)
    model.limit(LIBTORRENT_ORIGIN, None, None)
    data = content("main", params.size)

    async def main() -> dict:
        origin = SlowOrigin(rate=params.origin_rate, max_connections=params.origin_connections,
                            host=LIBTORRENT_ORIGIN)
        await origin.start()
        sampler.start()
        try:
            say("libtorrent: the same arrivals, with the origin as a BEP 19 web seed and an ideal tracker")
            result = await run_bittorrent(
                data=data, url=origin.add("/main.bin", data), origin_host=LIBTORRENT_ORIGIN, arrivals=arrivals,
                hosts=[host(3, i) for i in range(len(arrivals))], model=model, piece_size=parse_size(params.block_size),
                linger=params.linger, workdir=workdir / "libtorrent", progress=say, timeout=params.client_timeout)
        finally:
            await sampler.stop()
            await origin.stop()
        records = [{"client": c.index, "host": c.host, "arrival": round(c.arrival, 4),
                    "duration_s": None if c.duration is None else round(c.duration, 4),
                    "bytes": params.size if c.file_ok else 0, "exact": c.file_ok and c.error is None,
                    "error": c.error, "web_seed_bytes": c.from_web_seed, "peer_bytes": c.from_peers}
                   for c in result.clients]
        return {"clients": records, "origin_bytes": origin.bytes_sent, "honesty": sampler.verdict(params.delay)}

    # The relay carrying libtorrent's traffic is Python on this loop: a starved loop would slow libtorrent,
    # not swarmproxy, so this half is judged too.
    sampler = Sampler(carried=lambda: model.bytes_carried)
    with asyncio.Runner(loop_factory=lambda: EmulatedLoop(model)) as runner:
        return runner.run(main())


def _say_run(run: dict, say: Say) -> None:
    for side in ("direct", "swarmproxy", "libtorrent"):
        if run.get(side):
            s = run[side]["summary"]
            t = s["times_s"]
            say(f"  {side:10s} median {t['p50']} s, p99 {t['p99']} s, {s['finished']}/{s['clients']} exact, "
                f"origin served {s['origin_bytes']:,} B, from peers {s['peer_share']:.0%}, causes {s['causes']}")
    if not run["honesty"]["valid"]:
        say("  *** this run was CPU-bound: " + "; ".join(run["honesty"]["cpu_bound_reasons"]))


def _summary(plan: Plan, report: dict) -> dict:
    runs = report["runs"]
    # The parameters of the headline run, and what varied between the runs.
    params = {k: v for k, v in runs[-1]["params"].items() if k not in ("rate", "clients")} if runs else {}
    params["runs"] = [{"label": r["label"], "rate": r["params"]["rate"], "clients": r["params"]["clients"]}
                      for r in runs]
    summary: dict = {"valid": all(r["honesty"]["valid"] for r in runs), "params": params,
                     "emulation": report["emulation"]["method"]}
    table = []
    for run in runs:
        row = {"label": run["label"]}
        for side in ("direct", "swarmproxy"):
            if run.get(side):
                s = run[side]["summary"]
                row[f"{side}_median_s"] = s["times_s"]["p50"]
                row[f"{side}_p99_s"] = s["times_s"]["p99"]
                row[f"{side}_origin_bytes"] = s["origin_bytes"]
        if run.get("libtorrent"):
            s = run["libtorrent"]["summary"]
            row["libtorrent_median_s"] = s["times_s"]["p50"]
            row["libtorrent_p99_s"] = s["times_s"]["p99"]
            row["libtorrent_origin_bytes"] = s["origin_bytes"]
            row["ratio_median_vs_libtorrent"] = rep.ratio(row["swarmproxy_median_s"], row["libtorrent_median_s"])
            row["ratio_p99_vs_libtorrent"] = rep.ratio(row["swarmproxy_p99_s"], row["libtorrent_p99_s"])
            row["percentiles"] = {"swarmproxy": run["swarmproxy"]["summary"]["times_s"], "libtorrent": s["times_s"]}
        if run.get("direct"):
            row["speedup_median"] = rep.ratio(row["direct_median_s"], row["swarmproxy_median_s"])
            row["origin_bytes_ratio"] = rep.ratio(row["swarmproxy_origin_bytes"], row["direct_origin_bytes"])
        row["peer_share"] = run["swarmproxy"]["summary"]["peer_share"]
        row["causes"] = run["swarmproxy"]["summary"]["causes"]
        table.append(row)
    summary["runs"] = table
    # The headline: the heaviest load (flashcrowd/page), as the targets are stated for it.
    head = table[-1]
    for name in ("speedup_median", "origin_bytes_ratio", "swarmproxy_median_s", "swarmproxy_p99_s",
                 "direct_median_s", "ratio_median_vs_libtorrent", "ratio_p99_vs_libtorrent", "libtorrent_median_s",
                 "libtorrent_p99_s", "percentiles"):
        if name in head:
            summary[name] = head[name]
    summary["headline_run"] = head["label"]
    return summary


def text(report: dict) -> str:
    s = report["summary"]
    lines = [f"swarmproxy lab {report['scenario']} — {report['command']}",
             f"machine: {report['machine']['cpus']} CPUs, {report['machine']['memory_gib']} GiB, "
             f"Python {report['machine']['python']}",
             f"network: {report['emulation']['method']} emulation, one-way delay "
             f"{report['emulation']['delay_s'] * 1000:g} ms ({report['emulation']['kernel_netem_note']})",
             _origin_line(s["params"]), rep.honesty_banner(report), ""]
    header = f"{'run':>14} {'direct p50':>11} {'swarm p50':>10} {'swarm p99':>10} {'speedup':>8} " \
             f"{'origin B':>9} {'peers':>6}  causes"
    lines.append(header)
    for row in s["runs"]:
        lines.append(f"{row['label']:>14} {_fmt(row.get('direct_median_s')):>11} "
                     f"{_fmt(row.get('swarmproxy_median_s')):>10} {_fmt(row.get('swarmproxy_p99_s')):>10} "
                     f"{_fmt(row.get('speedup_median'), 'x'):>8} {_fmt(row.get('origin_bytes_ratio')):>9} "
                     f"{row['peer_share']:>6.0%}  {row['causes']}")
    for row, run in zip(s["runs"], report["runs"]):
        if "percentiles" in row:
            lines.append(f"\n{row['label']}: download time percentiles (s), same arrivals, network and origin; "
                         "- = among clients that never finished")
            lines.append(f"{'':>12}" + "".join(f"{q:>9}" for q in row["percentiles"]["swarmproxy"]) + "  finished")
            for side, values in row["percentiles"].items():
                done = run[side]["summary"]
                lines.append(f"{side:>12}" + "".join(f"{_fmt(v):>9}" for v in values.values())
                             + f"  {done['finished']}/{done['clients']}")
            lines.append(f"median swarmproxy / libtorrent = {_fmt(row['ratio_median_vs_libtorrent'])} "
                         f"(target <= 0.8), p99 ratio = {_fmt(row['ratio_p99_vs_libtorrent'])} (target <= 1)")
    lines.append("")
    lines.append("speedup = median(direct) / median(swarmproxy); origin B = origin bytes served, swarmproxy / direct")
    return "\n".join(lines) + "\n"


def _draw_times(axes, report: dict, xs, labels: list[str]) -> None:
    """Median and p99 download time per run, per side (a gap where a percentile fell on unfinished clients)."""
    for side, style in (("direct", "s-"), ("swarmproxy", "o-"), ("libtorrent", "d-")):
        medians = [row.get(f"{side}_median_s") for row in report["summary"]["runs"]]
        p99 = [row.get(f"{side}_p99_s") for row in report["summary"]["runs"]]
        if any(m is not None for m in medians):
            axes.plot(xs, medians, style, label=f"{side} median")
            axes.plot(xs, p99, style, alpha=0.4, label=f"{side} p99")
    axes.set_yscale("log")
    axes.set_xticks(list(xs), labels, rotation=20)
    axes.set_ylabel("download time (s)")
    axes.set_title(f"{report['scenario']}: download time")


def _draw_finished(axes, report: dict) -> None:
    """Table 4.1 as a curve: the share of clients finished by each time, per side, for the (first) run; a
    side whose clients did not all finish stays below 1, which a percentile table can only show as gaps."""
    run = report["runs"][0]
    timeout = report["summary"]["params"].get("client_timeout")
    for side, style in (("swarmproxy", "-"), ("libtorrent", "--")):
        if not run.get(side):
            continue
        records = run[side]["records"]
        times = sorted(r["duration_s"] for r in records if r.get("exact"))
        shares = [i / max(1, len(records)) for i in range(len(times) + 1)]
        end = max([timeout or 0.0, *times])  # drawn on to the timeout: a flat line is the finding
        axes.step([0.0, *times, end], [*shares, shares[-1]], style, where="post", linewidth=2,
                  label=f"{side}: {len(times)}/{len(records)} finished")
    if timeout:
        axes.axvline(timeout, color="grey", linestyle=":", label=f"client timeout {timeout:g} s")
    axes.set_ylim(0, 1.05)
    axes.set_xlabel("download time (s)")
    axes.set_ylabel("share of clients finished")
    axes.set_title(f"largefile, {run['label']}: who finished when")


def _origin_line(params: dict) -> str:
    """How the origin behaved: Pack's plain origin, or one running server_plugin (which changes what is compared)."""
    line = f"origin: {params['origin_rate']:,.0f} B/s in total, {params['origin_connections']} connections; "
    if params.get("origin_plugin"):
        return line + (f"server_plugin ON: it publishes manifests and sends Swarm-Hint from "
                       f"{params['origin_busy']} GETs in flight")
    return line + "no server_plugin (Pack's setup: the origin gives no help)"


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{unit}"


def draw(pyplot, report: dict):
    s = report["summary"]
    labels = [row["label"] for row in s["runs"]]
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    xs = range(len(labels))
    if report["scenario"] == "largefile":
        _draw_finished(left, report)
    else:
        _draw_times(left, report, xs, labels)
    left.legend(fontsize=8)
    causes = sorted({c for row in s["runs"] for c in row["causes"]})
    bottom = [0.0] * len(labels)
    for cause in causes:
        share = [row["causes"].get(cause, 0) / max(1, sum(row["causes"].values())) for row in s["runs"]]
        right.bar(xs, share, bottom=bottom, label=cause)
        bottom = [b + v for b, v in zip(bottom, share)]
    right.plot(xs, [row["peer_share"] for row in s["runs"]], "k^--", label="bytes from peers")
    right.set_xticks(list(xs), labels, rotation=20)
    right.set_ylim(0, 1.05)
    right.set_title("swarmproxy: cause of transition, share of bytes from peers")
    right.legend(fontsize=8)
    if not s["valid"]:
        figure.suptitle("INVALID: the emulation was CPU-bound", color="red")
    return figure
