"""Turning a run's raw records into the report: percentiles, causes, byte accounting, the text summary.

A report is a JSON object with stable top-level names: `scenario`, `command`, `machine`, `emulation`,
`honesty` (see honesty.py), `runs` (one per load or swept value, each with per-client records) and `summary`
(the headline figures, always with `valid` and `params`). `check_report` states the internal consistency
the CI smoke test relies on.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import platform
import sys

from .. import extra
from .honesty import percentile

PERCENTILES = (1, 25, 50, 75, 99)


def machine() -> dict:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            mem_kib = int(meminfo.readline().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kib = 0
    return {"cpus": os.cpu_count(), "memory_gib": round(mem_kib / 2**20, 1), "python": platform.python_version(),
            "platform": platform.platform(), "processor": platform.processor() or platform.machine()}


def command_line() -> str:
    return "swarmproxy lab " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 and sys.argv[1] == "lab" \
        else " ".join(sys.argv)


def times(records: list[dict]) -> dict:
    """Download-time percentiles (s) over all clients. One that did not finish byte-exact counts as slower than
    any that did, so a percentile that falls among those is None ("did not finish"): taking the finished ones
    alone would make a run where most clients time out look fast."""
    finished = [r["duration_s"] for r in records if r.get("exact")]
    everyone = finished + [math.inf] * (len(records) - len(finished))
    cuts = {f"p{q}": percentile(everyone, q) for q in PERCENTILES}
    return {name: None if value is None or math.isinf(value) else _round(value) for name, value in cuts.items()}


def half(records: list[dict], origin_bytes: int) -> dict:
    """One side (direct, swarmproxy or libtorrent) of a run, summarised."""
    finished = [r for r in records if r.get("exact")]
    delivered = sum(r.get("bytes", 0) for r in finished)
    from_peers = sum(r.get("bytes_peers", r.get("peer_bytes", 0)) for r in finished)
    causes: dict[str, int] = {}
    for r in records:
        cause = "died" if not r.get("exact") else _cause(r.get("causes", ["origin"]))
        causes[cause] = causes.get(cause, 0) + 1
    return {"clients": len(records), "finished": len(finished), "failed": len(records) - len(finished),
            "times_s": times(records), "origin_bytes": origin_bytes, "bytes_delivered": delivered,
            "peer_share": round(from_peers / delivered, 4) if delivered else 0.0, "causes": causes}


def _cause(causes: list[str]) -> str:
    # A page is one download of several objects; it counts as the first cause that left the origin.
    return next((c for c in causes if c != "origin"), "origin")


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def check_report(report: dict) -> list[str]:
    """Internal consistency: every client accounted for, bytes add up. Returns the problems found."""
    problems = []
    for run in report.get("runs", []):
        label = run.get("label", "?")
        for side in ("direct", "swarmproxy", "libtorrent"):
            if run.get(side) is None:
                continue
            records, summary = run[side]["records"], run[side]["summary"]
            expected = run["params"]["clients"]
            if len(records) != expected or sorted(r["client"] for r in records) != list(range(expected)):
                problems.append(f"{label} {side}: {len(records)} client records for {expected} clients")
            if summary["finished"] + summary["failed"] != expected:
                problems.append(f"{label} {side}: finished + failed != clients")
            if sum(summary["causes"].values()) != expected:
                problems.append(f"{label} {side}: causes do not add up to the clients")
            per_client = run["params"]["bytes_per_client"]
            for r in records:
                if r.get("exact") and r.get("bytes") != per_client:
                    problems.append(f"{label} {side} client {r['client']}: {r.get('bytes')} bytes, "
                                    f"expected {per_client}")
                # (libtorrent's own split counts redundant blocks too: it is reported, not checked)
                if side != "libtorrent" and r.get("exact") \
                        and r.get("bytes_origin", 0) + r.get("bytes_peers", 0) != r.get("bytes"):
                    problems.append(f"{label} {side} client {r['client']}: origin + peer bytes "
                                    f"{r.get('bytes_origin', 0)} + {r.get('bytes_peers', 0)} != {r.get('bytes')}")
    summary = report.get("summary", {})
    for name in ("valid", "params"):
        if name not in summary:
            problems.append(f"summary lacks {name!r}")
    return problems


def write(out: pathlib.Path, report: dict, text: str, draw) -> list[pathlib.Path]:
    """report.json, summary.txt and figure.png into `out`; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "summary.txt", out / "figure.png"]
    paths[0].write_text(json.dumps(report, indent=1) + "\n")
    paths[1].write_text(text)
    matplotlib = extra.require("matplotlib")  # the lab extra; `swarmproxy lab` has checked for it already
    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    figure = draw(pyplot, report)
    figure.savefig(paths[2], dpi=110, bbox_inches="tight")
    pyplot.close(figure)
    return paths


def honesty_banner(report: dict) -> str:
    h = report["honesty"]
    where = f" in every loop ({', '.join(h['loops'])}; the worst shown)" if h.get("loops") else ""
    if h["valid"]:
        network = h.get("network_bytes_per_s_mean")
        carried = f", the emulated network carried {network / 1e6:.1f} MB/s on average" if network else ""
        return (f"VALID: the emulation had slack{where} (event loop busy {h['loop_busy_mean']:.0%} on average, "
                f"timer lag p99 {h['lag_p99_ms']:.0f} ms{carried})")
    return ("*** INVALID: the emulation was CPU-bound; these times describe this machine, not swarmproxy ***\n"
            + "\n".join("    " + reason for reason in h["cpu_bound_reasons"])
            + "\n    Scale the scenario down (fewer --clients, lower --rate) and run it again.")
