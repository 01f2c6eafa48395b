"""A small simulated push end to end (2 racks x 4 agents) and the lab scenario's report: behaviour, never timing."""

import json
import math

import pytest

from bench.sim import lab
from bench.sim.engine import Simulation
from bench.sim.topology import Setup, bound

MB = 1_000_000


def _run(setup: Setup):
    sim = Simulation(setup)
    return sim, sim.run(max_virtual=600)


@pytest.fixture(scope="module")
def small():
    return _run(Setup(8 * MB, racks=2, per_rack=4, host_up=10 * MB, host_down=10 * MB, rack_up=20 * MB,
                      rack_down=20 * MB, seeder_up=10 * MB, block_size=64 * 1024))


def test_every_agent_gets_every_block(small):
    sim, result = small
    assert all(math.isfinite(t) for t in result.finish)
    assert result.held_bytes == [8 * MB] * 8  # conservation: each agent verified the whole file, once
    assert all(sum(r.values()) >= 8 * MB for r in result.received)


def test_roles_follow_the_overlay(small):
    _, result = small
    assert result.roles.count("rack") + result.roles.count("dc") == 4  # two representants per rack
    assert result.roles.count("dc") == 4  # every rack representant of the DC (fewer than DC_REPS = 5)


def test_each_rack_uplink_carries_about_one_copy(small):
    _, result = small
    for entered in result.rack_in:
        assert 1.0 <= entered / (8 * MB) <= 1.1
    assert result.seeder_sent / (8 * MB) <= 1.05


def test_the_makespan_is_not_below_the_bound(small):
    sim, result = small
    assert max(result.finish) >= bound(sim.setup)["seconds"]


def test_a_shaped_rack_downlink_sets_the_pace():
    """bench.cluster_netns's topology in small: rack 0's links at 1 MB/s, hosts at 20 MB/s; the push cannot end
    before one copy has crossed it, and the rack's agents take (about) one copy through it."""
    setup = Setup(4 * MB, racks=2, per_rack=3, host_up=20 * MB, host_down=20 * MB,
                  rack_links={0: (1 * MB, 1 * MB)}, block_size=32 * 1024)
    _, result = _run(setup)
    assert all(math.isfinite(t) for t in result.finish)
    assert max(result.finish) >= 4.0  # F / C
    assert result.rack_in[0] / (4 * MB) <= 1.1
    assert result.links["rack 0 down"] == result.rack_in[0]


def test_the_same_seed_gives_the_same_push():
    setup = Setup(2 * MB, racks=2, per_rack=2, host_up=5 * MB, host_down=5 * MB, seeder_up=5 * MB,
                  block_size=32 * 1024, seed=7)
    assert _run(setup)[1].finish == _run(setup)[1].finish


def test_the_lab_scenario_writes_its_report(tmp_path):
    out = tmp_path / "out"
    code = lab.main(["--agents", "8", "--per-rack", "4", "--size", "4M", "--cap", "10M", "--block-size", "64Ki",
                     "--out", str(out)])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    (point,) = report["points"]
    assert point["valid"] and point["complete"] and point["verified_bytes"] == 8 * 4 * MB
    assert point["makespan_s"] >= point["bound"]["seconds"]
    assert (out / "summary.txt").read_text().count("VALID") == 1
    assert (out / "figure.png").stat().st_size > 0


def test_setups_read_the_command_line():
    args = lab.build_parser().parse_args(["--agents", "100,200", "--cap", "300M"])
    points = lab.setups(args)
    assert [p.agents for p in points] == [100, 200]
    assert points[0].block == 2 * 1024 * 1024  # the product's block size for 3 GB
    assert points[0].host_up == 300 * MB and points[0].seeder_up == 300 * MB
    cross = lab.setups(lab.build_parser().parse_args(["--crosscheck"]))[0]
    assert (cross.racks, cross.per_rack, cross.size) == (3, 4, 32 << 20)
    assert cross.rack_rates(0) == (2 * MB, 2 * MB) and cross.rack_rates(1) == (None, None)


def test_the_throttle_core_caps_the_agents_uploads():
    """Agents started with a host capacity (`cluster.throttle.Planner`, 20 % reserve) upload at most 80 % of it on
    each level (a link of their upload path), so the push is slower than unthrottled."""
    base = dict(racks=2, per_rack=3, host_up=10 * MB, host_down=10 * MB, seeder_up=10 * MB, block_size=32 * 1024)
    free = _run(Setup(4 * MB, **base))[1]
    sim, held = _run(Setup(4 * MB, throttle_host=5 * MB, **base))
    assert max(held.finish) > max(free.finish)
    limits = [sim.net.capacity[link] for links in sim.throttle_links for link in links.values()]
    assert len(limits) == 6 * 3 and all(0 < limit <= 4 * MB for limit in limits)
    assert all(sim.throttle_links[0][level] in sim.net.routes[sim.conns[(0, j)].flow]
               for j in range(6) if (0, j) in sim.conns for level in [sim.conns[(0, j)].level])


def test_no_entry_gaps_even_past_the_fetch_peer_cap(small):
    """Every rack representant has a server for each block it is to bring in, below 64 candidates and past them:
    with 40 racks of 2 (79 other representants each) the cap of 64 left some without one while a fetch took the
    nearest and then any; it now takes first the peers the entry plan has show it blocks (`provider_order`)."""
    sim, _ = small
    assert sim.entry_gaps()["blocks_without_server"] == 0
    crowded = Simulation(Setup(1 * MB, racks=40, per_rack=2, host_up=10 * MB, host_down=10 * MB,
                               block_size=16 * 1024))
    gaps = crowded.entry_gaps()
    assert gaps["rack_reps"] == 80 and gaps["blocks_to_bring_in"] > 0
    assert max(len(sources) for sources in crowded.sources) == 64  # the cap was reached
    assert gaps["reps_cut_off"] == 0 and gaps["blocks_without_server"] == 0


def test_redraw_recomputes_the_goals_from_the_report(tmp_path):
    out = tmp_path / "out"
    assert lab.main(["--agents", "8", "--per-rack", "4", "--size", "2M", "--cap", "10M", "--block-size", "64Ki",
                     "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    report["points"][0]["agents"] = 100  # as if it were the 100-agent point, and a 1,200 one beside it
    report["points"].append({**report["points"][0], "agents": 1200, "valid": False,
                             "per_host_rate_median": report["points"][0]["per_host_rate_median"] / 2})
    (out / "report.json").write_text(json.dumps(report))
    lab.main(["--redraw", "--out", str(out)])
    summary = (out / "summary.txt").read_text()
    assert "rate_1200_over_100: 0.5" in summary and "rate_1200_met: False" in summary
    assert "rate_1200_valid: False" in summary


def test_a_lagging_root_share_goes_first_and_the_other_racks_do_not_wait_on_it():
    """bench.cluster_netns's 3 x 4 in small: rack 0's uplink at 0.5 MB/s each way, its two DC representants'
    shares from the seeder lag the others' (`cluster.lag`), so their pusher's flow goes first; the other racks,
    which have those shares only through rack 0's uplink, finished 0.9-1.0 s after rack 0 before, now within
    0.35 s of it. Nobody else is found lagging; each link still carries one copy."""
    setup = Setup(4 * MB, racks=3, per_rack=4, host_up=50 * MB, host_down=50 * MB,
                  rack_links={0: (MB // 2, MB // 2)}, block_size=16 * 1024, seed=1)
    sim, result = _run(setup)
    racks = [max(result.finish[r * 4:(r + 1) * 4]) for r in range(3)]
    assert [i for i, lag in enumerate(sim.lags) if lag.lagging] == [i for i in range(4) if sim.roles[i] == "dc"]
    assert max(racks[1:]) - racks[0] < 0.5
    assert result.seeder_sent == 4 * MB and result.rack_in[0] / (4 * MB) <= 1.1
