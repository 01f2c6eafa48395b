"""First-hand fetchers asking their origin again by several Ranges at once, on the crowd simulator
(`bench.crowd_sim.ranges`, `bench.crowd_sim.parallel_ranges`): every client still gets its file, and the copies the
crowd waits for come sooner than with one stream (a seeded, deterministic crowd)."""

from __future__ import annotations

import dataclasses

from bench.crowd_sim.close_for_lookup import figures
from bench.crowd_sim.parallel_ranges import main
from bench.crowd_sim.world import SimParams


def test_first_hand_fetchers_reading_by_ranges_vouch_sooner_and_every_client_gets_its_file():
    params = SimParams(clients=80, seed=1)
    one = figures(dataclasses.replace(params, claim_ranges=1))
    ranges = figures(params)  # the product's default
    assert one["exact"] and ranges["exact"]
    assert ranges["vouches"][1] < one["vouches"][1]  # the second first-hand copy, the one the crowd waits for


def test_the_script_prints_both_arms_per_seed(capsys):
    assert main(["--clients", "40", "--seeds", "1", "--ranges", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [" ".join(line.split()[1:3]) for line in lines[1:3]] == ["1 stream", "2 ranges"]
