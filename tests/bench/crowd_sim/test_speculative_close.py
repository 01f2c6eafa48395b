"""The speculative-close experiment on the crowd simulator (`bench.crowd_sim.speculative_close`): it runs, it
undoes its wrapping, and closing at the early point lowers what the origin sends (a seeded, deterministic crowd)."""

from __future__ import annotations

from bench.crowd_sim import node as node_module
from bench.crowd_sim.speculative_close import figures, main, speculative_close
from bench.crowd_sim.world import SimParams


def test_closing_at_the_early_point_sends_fewer_origin_bytes_and_every_client_gets_its_file():
    params = SimParams(clients=80, seed=3)
    today = figures(params)
    counts = {"closed": 0, "reopened": 0}
    before = node_module.Node._start_lookup
    with speculative_close(counts):
        closing = figures(params)
    assert node_module.Node._start_lookup is before  # unwrapped after
    assert today["exact"] and closing["exact"]
    assert counts["closed"] > 0 and counts["reopened"] > 0
    assert closing["origin"] < today["origin"]


def test_the_script_prints_both_arms_per_seed(capsys):
    assert main(["--clients", "40", "--seeds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines[1:3]] == ["today", "close"]
