"""`swarmproxy lab`: what each command line plans, and a real --quick run's report (structure, never timing)."""

import argparse
import json
import os
import pathlib
import subprocess
import sys

import pytest

from bench.lab import cli
from bench.lab.report import check_report
from proxy.errors import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


PLANS = [
    # argv, scenario, [(label, rate, clients)], direct half?
    (["flashcrowd"], "flashcrowd", [("1/s", 1, 10), ("2/s", 2, 20), ("5/s", 5, 50)], True),
    (["flashcrowd", "--loads", "1,5,10,20", "--duration", "50"], "flashcrowd",  # Pack's full scale
     [("1/s", 1, 50), ("5/s", 5, 250), ("10/s", 10, 500), ("20/s", 20, 1000)], True),
    (["sweep", "--param", "linger"], "sweep", [(f"linger={v}", 5, 50) for v in ("0", "1", "2", "4", "20", "160")],
     False),
    (["page"], "page", [("1/s", 1, 4), ("2/s", 2, 8), ("3/s", 3, 12)], True),
    (["flashcrowd", "--quick"], "flashcrowd", [("5/s", 5, 20)], True),
    (["flashcrowd", "--loads", "2,4", "--clients", "7"], "flashcrowd", [("2/s", 2, 7), ("4/s", 4, 7)], True),
    (["page", "--quick"], "page", [("5/s", 5, 20)], True),
    (["sweep", "--param", "W", "--values", "0.5,4", "--rate", "2", "--duration", "10"], "sweep",
     [("W=0.5", 2, 20), ("W=4", 2, 20)], False),
    (["largefile", "--quick"], "largefile", [("6 clients", 1, 6)], False),
]


@pytest.mark.parametrize("argv,scenario,runs,direct", PLANS, ids=[" ".join(p[0]) for p in PLANS])
def test_plans(argv, scenario, runs, direct):
    plan = cli.plan(_args(*argv))
    assert plan.scenario == scenario
    assert [(label, p.rate, p.clients) for label, p in plan.runs] == runs
    assert all(p.direct == direct for _, p in plan.runs)


def test_plan_details():
    page = cli.plan(_args("page", "--quick")).runs[0][1]
    assert page.size == 100_000 and page.objects == [10_000] * 10
    sweep = cli.plan(_args("sweep", "--param", "W", "--values", "0.5,4")).runs
    assert [p.rate_window for _, p in sweep] == [0.5, 4.0]
    large = cli.plan(_args("largefile")).runs[0][1]
    assert (large.size, large.clients, large.rate, large.origin_rate) == (30_000_000, 100, 1.0, 256_000)
    assert cli.plan(_args("largefile", "--workers", "3")).runs[0][1].workers == 3
    assert cli.plan(_args("largefile")).runs[0][1].workers == (os.cpu_count() or 1)
    assert cli.plan(_args("largefile", "--quick")).runs[0][1].workers == 0
    assert cli.plan(_args("largefile", "--workers", "0")).runs[0][1].workers == 0
    assert cli.plan(_args("flashcrowd")).runs[0][1].workers == 0
    discover = cli.plan(_args("sweep", "--param", "discover")).runs
    assert [(label, p.discover_size) for label, p in discover] == [("discover=16Mi", "16777216"), ("discover=0", "0")]
    assert cli.plan(_args("flashcrowd")).runs[0][1].discover_size == "16777216"  # the proxy's own default
    custom = cli.plan(_args("flashcrowd", "--delay", "10", "--node-rate", "2M", "--origin-rate", "100k")).base
    assert (custom.delay, custom.node_up, custom.node_down, custom.origin_rate) == (0.01, 2e6, 2e6, 100e3)


@pytest.mark.parametrize("argv", [["flashcrowd", "--loads", "0"], ["flashcrowd", "--loads", "x"],
                                  ["sweep", "--param", "T", "--values", "soon"], ["flashcrowd", "--size", "big"],
                                  ["sweep", "--param", "discover", "--values", "lots"],
                                  ["flashcrowd", "--clients", "0"], ["flashcrowd", "--workers", "-1"]])
def test_bad_plans_are_clear_errors(argv):
    with pytest.raises(ConfigError):
        cli.plan(_args(*argv))


@pytest.mark.e2e
@pytest.mark.parametrize("scenario,extra", [("flashcrowd", []), ("page", []), ("flashcrowd", ["--workers", "2"])],
                         ids=["flashcrowd", "page", "flashcrowd in 2 workers"])
def test_quick_run_writes_a_consistent_report(tmp_path, scenario, extra):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", "from proxy.cli import main; raise SystemExit(main())",
                           "lab", scenario, "--quick", "--out", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "finished:" in done.stdout or "all up" in done.stdout  # progress while running
    report = json.loads((out / "report.json").read_text())
    assert check_report(report) == []
    summary = report["summary"]
    assert isinstance(summary["valid"], bool) and summary["valid"] == report["honesty"]["valid"]
    assert summary["params"]["size"] == 100_000
    assert report["emulation"]["method"] in ("transport", "netem")
    run = report["runs"][0]
    clients = run["params"]["clients"]
    for side in ("direct", "swarmproxy"):
        s = run[side]["summary"]
        assert s["finished"] == clients, (side, s)  # every client got every byte, byte-exact
        assert s["bytes_delivered"] == clients * run["params"]["bytes_per_client"]
    # The direct half takes every byte from its origin.
    assert run["direct"]["summary"]["origin_bytes"] == clients * run["params"]["bytes_per_client"]
    expected = run["direct"]["summary"]["times_s"]["p50"] / run["swarmproxy"]["summary"]["times_s"]["p50"]
    assert summary["speedup_median"] == pytest.approx(expected, rel=1e-2)
    assert (out / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "speedup" in (out / "summary.txt").read_text()
    if extra:  # every process judged: the main one and both workers, each client served by one of them
        assert set(run["honesty"]["loops"]) == {"main", "worker 0", "worker 1"}
        assert run["params"]["workers"] == 2
        assert sorted(r["client"] for r in run["swarmproxy"]["records"]) == list(range(clients))


@pytest.mark.e2e
def test_quick_largefile_puts_swarmproxy_and_libtorrent_side_by_side(tmp_path):
    # A small file and three clients: the point is the report, not the figure.
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", "from proxy.cli import main; raise SystemExit(main())",
                           "lab", "largefile", "--quick", "--clients", "3", "--size", "600k", "--rate", "2",
                           "--origin-rate", "1M", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert check_report(report) == []
    run = report["runs"][0]
    assert run["direct"] is None
    for side in ("swarmproxy", "libtorrent"):
        s = run[side]["summary"]
        assert s["clients"] == 3 and s["finished"] == 3, (side, s)  # every client has the exact file
    summary = report["summary"]
    expected = run["swarmproxy"]["summary"]["times_s"]["p50"] / run["libtorrent"]["summary"]["times_s"]["p50"]
    assert summary["ratio_median_vs_libtorrent"] == pytest.approx(expected, rel=1e-2)
    assert set(summary["percentiles"]) == {"swarmproxy", "libtorrent"}
    assert set(run["honesty"]["loops"]) == {"main", "libtorrent"}  # libtorrent's relay loop is judged too
    assert "libtorrent" in (out / "summary.txt").read_text()
