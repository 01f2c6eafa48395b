"""The parallel-Ranges experiment on the crowd simulator (`bench.crowd_sim.parallel_ranges`): it runs, every client
still gets its file, the first-hand fetchers' copies come sooner (a seeded, deterministic crowd), and it undoes its
wrapping."""

from __future__ import annotations

from bench.crowd_sim import models
from bench.crowd_sim import node as node_module
from bench.crowd_sim.close_for_lookup import figures
from bench.crowd_sim.parallel_ranges import main, parallel_ranges
from bench.crowd_sim.world import SimParams


def test_first_hand_fetchers_reading_by_ranges_vouch_sooner_and_every_client_gets_its_file():
    params = SimParams(clients=80, seed=1)
    one = figures(params)
    counts = {"parallel": 0}
    before = (node_module.Node._lookup_done, models.Origin.close)
    with parallel_ranges(4, counts):
        ranges = figures(params)
    assert (node_module.Node._lookup_done, models.Origin.close) == before  # unwrapped after
    assert one["exact"] and ranges["exact"]
    assert counts["parallel"] > 0
    assert ranges["vouches"][1] < one["vouches"][1]  # the second first-hand copy, the one the crowd waits for


def test_the_script_prints_both_arms_per_seed(capsys):
    assert main(["--clients", "40", "--seeds", "1", "--ranges", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [" ".join(line.split()[1:3]) for line in lines[1:3]] == ["1 stream", "2 ranges"]
