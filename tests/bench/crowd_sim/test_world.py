"""A small simulated crowd around the real cores: what must hold of it whatever the models' numbers (no timing)."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

from bench.crowd_sim import lab
from bench.crowd_sim.world import SimParams, World, run_direct
from bench.lab import cli

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def crowd():
    params = SimParams(clients=50, rate=20.0)
    world = World(params)
    return params, world, world.run(), run_direct(params)


def test_every_client_gets_exactly_the_file(crowd):
    params, _, swarm, direct = crowd
    assert not lab.honesty(params, swarm, direct)
    assert all(r["exact"] and r["bytes"] == params.size for r in swarm["clients"])
    assert all(r["bytes_origin"] + r["bytes_peers"] == params.size for r in swarm["clients"])


def test_the_swarm_spares_the_origin_and_the_clients(crowd):
    _, _, swarm, direct = crowd
    assert swarm["origin_bytes"] < direct["origin_bytes"] / 2
    assert sum(r["bytes_peers"] for r in swarm["clients"]) > 0
    median = lambda half: sorted(r["duration_s"] for r in half["clients"])[len(half["clients"]) // 2]  # noqa: E731
    assert median(swarm) < median(direct)


def test_a_quorum_is_found_only_after_two_first_hand_copies_are_visible(crowd):
    params, world, swarm, _ = crowd
    vouchers = [r for r in swarm["clients"] if r["vouched"]]
    assert all(r["bytes_origin"] == params.size for r in vouchers)  # first-hand: every byte from the origin
    second = swarm["vouch_times"][1]  # the trust rule is quorum:2
    assert lab.first_quorum(swarm["clients"]) >= second + world.dht.params.announce_min


def test_the_same_seed_gives_the_same_crowd(crowd):
    params, _, swarm, _ = crowd
    again = World(params).run()
    assert [r["duration_s"] for r in again["clients"]] == [r["duration_s"] for r in swarm["clients"]]


def test_honesty_catches_a_short_body_and_unaccounted_origin_bytes(crowd):
    params, _, swarm, direct = crowd
    broken = {**swarm, "clients": [dict(r) for r in swarm["clients"]], "origin_bytes": 0}
    broken["clients"][3].update(bytes=params.size - 1, exact=False)
    problems = lab.honesty(params, broken, direct)
    assert any("did not get exactly" in p for p in problems)
    assert any("origin bytes" in p for p in problems)


def test_lab_crowd_scale_quick_writes_its_report(tmp_path):
    pytest.importorskip("matplotlib")  # the lab extra draws the figure
    args = cli.build_parser().parse_args(["crowd-scale", "--quick", "--clients", "30", "--dht", "both",
                                          "--out", str(tmp_path)])
    assert lab.run(args, lambda line: None) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["params"]["dht"] for r in report["runs"]] == ["ours", "mainline"]
    assert all(not r["problems"] and r["swarmproxy"]["summary"]["finished"] == 30 for r in report["runs"])
    assert {"origin_share", "offload", "swarm_p99_s", "direct_p50_s", "p99_over_idle"} <= set(
        report["runs"][0]["figures"])
    assert (tmp_path / "figure.png").stat().st_size > 0
    assert "crowd-scale" in (tmp_path / "summary.txt").read_text()


@pytest.fixture(scope="module")
def plugin_crowd():
    params = SimParams(clients=60, rate=20.0, origin_plugin=True)
    world = World(params)
    return params, world, world.run(), run_direct(params)


def test_with_the_origin_plugin_every_client_gets_exactly_the_file(plugin_crowd):
    params, _, swarm, direct = plugin_crowd
    assert not lab.honesty(params, swarm, direct)
    assert all(r["exact"] and r["bytes_origin"] + r["bytes_peers"] == params.size for r in swarm["clients"])


def test_a_hinted_client_trusts_the_origins_manifest_without_a_quorum(plugin_crowd):
    """The origin asks from its second GET in flight on (`origin_busy` 2): the first client reads it alone, the
    others switch at its head and look up providers only; nobody claims, so no quorum is ever looked for."""
    _, world, swarm, _ = plugin_crowd
    records = swarm["clients"]
    assert records[0]["causes"] == ["origin"] and records[0]["bytes_origin"] == world.params.size
    hinted = [r for r in records if r["causes"] == ["hint"]]
    assert len(hinted) >= len(records) - 5
    assert all(any("lookup: a origin manifest" in e for e in r["events"][0]) for r in hinted)
    assert lab.first_quorum(records) is None
    assert sum(r["bytes_peers"] for r in hinted) > 0.9 * len(hinted) * world.params.size


def test_the_first_hinted_client_takes_blocks_from_the_origin_by_range(plugin_crowd):
    """With no provider yet, the origin's inline layer lets the swarm fetch use the origin as its source at once."""
    _, _, swarm, _ = plugin_crowd
    first = next(r for r in swarm["clients"] if r["causes"] == ["hint"])
    assert any("from 0 peers" in e for e in first["events"][0])
    assert first["exact"] and first["bytes_origin"] > 0


def test_a_hinted_client_fetches_from_the_peers_its_head_listed_without_a_lookup(plugin_crowd):
    """Every hinted head after the first lists the clients hinted before (`Swarm-Peers`): the fetch starts with
    them at the head, no DHT latency between the switch and the lookup's answer."""
    _, _, swarm, _ = plugin_crowd
    hinted = [r for r in swarm["clients"] if r["causes"] == ["hint"]][1:]

    def at(events: list[str], what: str) -> str:
        return next(e.split("s ", 1)[0] for e in events if what in e)
    assert hinted and all(at(r["events"][0], "switch (hint)") == at(r["events"][0], "lookup: a origin manifest")
                          and not any("from 0 peers" in e for e in r["events"][0]) for r in hinted)
    unlisted = World(dataclasses.replace(plugin_crowd[0], clients=10, origin_peers=False)).run()["clients"]
    waited = [r for r in unlisted if r["causes"] == ["hint"]]  # without the list: each waits for its lookup
    assert waited and all(at(r["events"][0], "switch (hint)") != at(r["events"][0], "lookup: a origin manifest")
                          for r in waited)


def test_every_hinted_first_get_is_held_and_left_without_a_body_byte(plugin_crowd):
    """The nodes' first GETs say they leave at the hint (`Swarm-Accept`): the origin holds each hinted body, and
    each client closes at its head, in its hold."""
    _, _, swarm, _ = plugin_crowd
    hinted = sum(1 for r in swarm["clients"] if r["causes"] == ["hint"])
    assert swarm["origin_held"] == swarm["origin_left_in_hold"] == hinted


def test_the_plugin_changes_nothing_when_it_is_off():
    """The origin without `busy_at` never hints, and its heads carry no manifest: the plain crowd's figures."""
    plain = World(SimParams(clients=30, rate=20.0)).run()
    assert all(r["causes"] != ["hint"] for r in plain["clients"])
    assert any(r["vouched"] for r in plain["clients"])


def test_lab_crowd_scale_runs_the_origin_plugin(tmp_path):
    pytest.importorskip("matplotlib")
    args = cli.build_parser().parse_args(["crowd-scale", "--quick", "--clients", "30", "--origin-plugin",
                                          "--out", str(tmp_path)])
    assert lab.run(args, lambda line: None) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    run = report["runs"][0]
    assert run["params"]["origin_plugin"] and run["params"]["origin_busy"] == 2 and run["label"].endswith("plugin")
    assert run["swarmproxy"]["summary"]["causes"].get("hint", 0) >= 25


def test_a_crowd_is_the_same_in_every_process():
    """Peers are walked in insertion order, never by hash: two processes with different string hashes agree."""
    script = ("import json; from bench.crowd_sim.world import World, SimParams; "
              "r = World(SimParams(clients=40, rate=20.0)).run(); "
              "print(json.dumps([c['duration_s'] for c in r['clients']]))")
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert runs[0] == runs[1]
