"""`swarmproxy lab cluster-tekel|cluster-shared|cluster-late` (issue 40, scenarios 1-3): the lab's stage switch and
the pure parts of the scenarios, then one small smoke run of each in network namespaces, which skips, saying why,
without root, `ip`, `tc`, namespaces, tbf or redis-server.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.cluster_netns import netns_missing
from bench.lab.cluster_links import RESERVE_GOAL, reserve_kept
from bench.lab.cluster_tekel import LINK, RACK_SIZES, tekel_bound, topology_for
from bench.lab.cluster_tekel import main as tekel_main
from cluster.errors import ConfigError
from cluster.lab_stage import LAB_STAGE_ENV, STAGES, Stage, stage
from cluster.throttle import RESERVE


def test_stages_switch_features_on_in_tekel_order(monkeypatch):
    monkeypatch.delenv(LAB_STAGE_ENV, raising=False)
    product = stage()
    assert (product.name, product.overlay, product.division, product.stealing) == ("stealing", True, True, True)
    switched = [(s.overlay, s.division, s.stealing) for s in map(Stage, STAGES)]
    assert switched == [(False, False, False), (True, False, False), (True, True, False), (True, True, True)]
    monkeypatch.setenv(LAB_STAGE_ENV, "overlay")
    assert stage().name == "overlay"
    with pytest.raises(ConfigError, match="expected one of"):
        Stage("everything")


def test_tekel_bound_is_one_copy_over_a_10_mbit_link_plus_the_pipeline():
    bound = tekel_bound(32 << 20, LINK, 256 << 10)
    assert bound["terms"]["seeder upload"] == pytest.approx((32 << 20) / LINK, abs=1e-3)
    assert bound["pipeline_s"] == pytest.approx(4.087 * (256 << 10) / LINK, rel=1e-3)  # log2(17) blocks
    assert sum(RACK_SIZES) == 17


@pytest.mark.parametrize("mtu", ["1279", "65536", "0"])
def test_tekel_refuses_an_mtu_no_link_can_have(mtu):
    with pytest.raises(SystemExit, match="--mtu must be from 1280 to 65535"):
        tekel_main(["--mtu", mtu])


def test_tekel_topology_takes_the_mtu():
    assert topology_for(LINK, mtu=9000).mtu == 9000 and topology_for(LINK).mtu is None


class Flow:
    def __init__(self, samples):
        self.samples = samples

    def received_at(self, at):
        return max((n for t, n in self.samples if t <= at), default=0)


def test_reserve_counts_only_intervals_where_the_push_sent_and_the_link_was_full():
    rate = 1000.0
    # Per second: full link, flow 300 (push 700); full, flow 100 (push 900); link half idle, flow 0 (push 500).
    link = [(0.0, 0), (1.0, 1000), (2.0, 2000), (3.0, 2500)]
    flow = Flow([(0.0, 0), (1.0, 300), (2.0, 400), (3.0, 400)])
    kept = reserve_kept(link, flow, rate, start=0.0, end=3.0)
    assert kept["full_s"] == 2.0 and kept["busy_s"] == 3.0
    assert kept["background_share_full"] == pytest.approx(0.2)
    assert kept["kept_of_reserve"] == pytest.approx(0.2 / RESERVE)
    assert kept["met"] is (0.2 >= RESERVE_GOAL * RESERVE)


def lab(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bench.lab.cli", *args, "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a goal's run INVALID (a busy machine), still drawn
    assert {p.name for p in out.iterdir()} >= {"report.json", "summary.txt", "figure.png"}
    return done, json.loads((out / "report.json").read_text())


netns = pytest.mark.skipif(netns_missing() is not None, reason=str(netns_missing()))


@pytest.mark.e2e
@netns
def test_tekel_quick_runs_the_product_and_libtorrent_on_figure_8(tmp_path):
    done, report = lab(tmp_path, "cluster-tekel", "--size", "2Mi", "--stages", "stealing", "--mtu", "9000")
    assert "stealing run 1/1" in done.stdout and "libtorrent run 1" in done.stdout
    assert report["mtu"] == 9000 and "MTU 9000" in report["what"]
    product, torrent = report["runs"][0], report["libtorrent"][0]
    assert product["agents"] == torrent["agents"] == 17
    assert not [p for p in product["problems"] + torrent["problems"] if "CPU" not in p]  # every host byte-exact
    assert product["seeder_ratio"] <= 1.10  # the full product: the seeder sends about one copy
    assert report["bound"]["seconds"] > 0 and report["goals"]["bound_note"].startswith("1 runs")


@pytest.mark.e2e
@netns
def test_shared_quick_measures_both_links(tmp_path):
    _, report = lab(tmp_path, "cluster-shared")
    links = report["runs"][0]["links"]
    assert set(links) == {"rack", "dc"}
    assert all(link["busy_s"] > 0 for link in links.values()), links  # the push crossed both shaped links


@pytest.mark.e2e
@netns
def test_late_quick_measures_the_late_rack_from_its_start(tmp_path):
    _, report = lab(tmp_path, "cluster-late")
    run = report["runs"][0]
    assert run["late_rack_joined_s"] >= report["late_by_s"]
    assert run["late_rack_time_s"] > 0 and run["others_makespan_s"] > 0
