"""The close while the early lookup runs, on the crowd simulator (`bench.crowd_sim.close_for_lookup`): with it the
origin sends fewer bytes and every client still gets its file (a seeded, deterministic crowd); the script prints
both arms."""

from __future__ import annotations

import dataclasses

from bench.crowd_sim.close_for_lookup import figures, main
from bench.crowd_sim.world import SimParams


def test_closing_while_the_early_lookup_runs_sends_fewer_origin_bytes_and_every_client_gets_its_file():
    on = SimParams(clients=80, seed=3)
    off, closing = figures(dataclasses.replace(on, close_for_lookup=0.0)), figures(on)
    assert off["exact"] and closing["exact"]
    assert closing["origin"] < off["origin"]


def test_the_script_prints_both_arms_per_seed(capsys):
    assert main(["--clients", "40", "--seeds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines[1:3]] == ["off", "on"]
