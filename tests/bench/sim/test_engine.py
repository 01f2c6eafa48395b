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


@pytest.mark.parametrize(("sizes", "rack", "members"), [
    ((5, 4, 7, 1), 0, range(0, 5)),
    ((5, 4, 7, 1), 1, range(5, 9)),
    ((5, 4, 7, 1), 3, range(16, 17)),
    ((), 2, range(8, 12)),  # racks of per_rack = 4
])
def test_racks_of_different_sizes_number_their_agents_in_order(sizes, rack, members):
    setup = Setup(MB, racks=4, per_rack=max(sizes or (4,)), rack_sizes=sizes)
    assert setup.members(rack) == members
    assert setup.agents == (sum(sizes) if sizes else 16)


@pytest.mark.parametrize("bad", [
    dict(racks=3, per_rack=7, rack_sizes=(5, 4, 7, 1)),  # racks is not their number
    dict(racks=4, per_rack=5, rack_sizes=(5, 4, 7, 1)),  # per_rack is not the largest
    dict(racks=2, per_rack=2, seeder_rack=2),  # no such rack
])
def test_a_setup_that_contradicts_itself_is_refused(bad):
    with pytest.raises(ValueError):
        Setup(MB, **bad)


@pytest.mark.parametrize(("sizes", "said"), [
    ((3, 2, 3, 1), True),  # the other racks' representants (2 + 2 + 1) fill the DC's five slots
    ((3, 2, 1), False),  # they do not (2 + 1): the seeder's rack takes part as any rack (`cluster.push.site_to_say`)
])
def test_a_seeder_in_a_rack_sends_through_its_uplink_and_the_bound_counts_it(sizes, said):
    """Tekel's figure 8 in small: the seeder sits in rack 1; its bytes to the other racks cross rack 1's uplink
    (never a rack downlink), its rack mates take theirs inside; it says its rack when `site_to_say` would; the
    bound has rack 1's uplink carry one copy out and rack 1's downlink none."""
    link = 1 * MB
    setup = Setup(2 * MB, racks=len(sizes), per_rack=3, host_up=link, host_down=link, rack_up=link, rack_down=link,
                  seeder_up=link, rack_sizes=sizes, seeder_rack=1, block_size=16 * 1024)
    sim, result = _run(setup)
    assert all(math.isfinite(t) for t in result.finish)
    seeder, names = sim.seeder, sim.net.names
    routes = {receiver: {names[k] for k in sim.net.routes[sim.conns[(seeder, receiver)].flow]}
              for receiver in range(sim.n) if (seeder, receiver) in sim.conns}
    assert routes  # the root members
    for receiver, route in routes.items():
        outside = sim.rack_of[receiver] != 1
        assert ("rack 1 up" in route) == outside
        assert (f"rack {sim.rack_of[receiver]} down" in route) == outside
    rack1 = sim.locations[setup.members(1)[0]]
    assert sim.view.seeder_racks() == ({rack1} if said else set())
    if said:  # rack 1 is no block's home
        assert not any(sim.roles[i] == "dc" for i in setup.members(1))
    terms = bound(setup)["terms"]
    assert "rack 1 uplink" in terms and "rack 1 downlink" not in terms
    assert {f"rack {r} downlink" for r in range(len(sizes)) if r != 1} <= set(terms)
    assert max(result.finish) >= bound(setup)["seconds"]


def test_tekel_reads_the_lab_topology():
    args = lab.build_parser().parse_args(["--tekel"])
    (setup,) = lab.setups(args)
    assert setup.sizes == (5, 4, 7, 1) and setup.seeder_rack == 1 and setup.size == 32 << 20
    assert setup.host_up == setup.rack_up == setup.seeder_up == 1_250_000
    half = lab.setups(lab.build_parser().parse_args(["--tekel", "--link", "625K", "--size", "16Mi"]))[0]
    assert (half.host_down, half.rack_down, half.size) == (625_000, 625_000, 16 << 20)
    assert setup.wire == 1514 / 1448  # the lab's links carry headers (MTU 1500); the scale points leave them out
    runs = lab.setups(lab.build_parser().parse_args(["--tekel", "--runs", "3", "--seed", "4", "--wire", "1"]))
    assert [p.seed for p in runs] == [4, 5, 6] and {p.wire for p in runs} == {1.0}
    assert lab.setups(lab.build_parser().parse_args(["--agents", "100"]))[0].wire == 1.0
    with pytest.raises(SystemExit, match="below 1"):  # a clear error, not a traceback
        lab.setups(lab.build_parser().parse_args(["--tekel", "--wire", "0.5"]))


def test_headers_slow_every_link_by_the_wire_factor():
    """`Setup.wire`: a link of rate R carries payload at R / wire; the bound still counts the whole rate."""
    base = dict(racks=1, per_rack=1, host_up=1 * MB, host_down=1 * MB, seeder_up=1 * MB, block_size=16 * 1024,
                formation=0.0)
    bare = _run(Setup(1 * MB, **base))[1]
    headed = _run(Setup(1 * MB, wire=1.25, **base))[1]
    assert max(headed.finish) == pytest.approx(1.25 * max(bare.finish), rel=0.02)
    assert bound(Setup(1 * MB, wire=1.25, **base)) == bound(Setup(1 * MB, **base))


def test_the_tekel_crosscheck_gives_the_median_of_its_runs(tmp_path):
    out = tmp_path / "out"
    assert lab.main(["--tekel", "--size", "256Ki", "--runs", "3", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    makespans = sorted(p["makespan_s"] for p in report["points"])
    assert [p["setup"]["seed"] for p in report["points"]] == [1, 2, 3]
    assert report["goals"]["makespan_median_s"] == makespans[1]
    assert "rate_2600_over_100" not in report["goals"]  # no scale point: no scale goal
