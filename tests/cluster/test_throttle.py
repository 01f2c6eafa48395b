"""Throttle groups: capacity minus reserve, highest level first, the CPU rule, measured rates."""

import pytest

from cluster.overlay import Level
from cluster.throttle import (
    MIN_SHARE,
    Capacities,
    Planner,
    RateMeter,
    cpu_factor,
    cpu_idle_between,
    parse_proc_stat,
    upload_limits,
)

M = 1_000_000


@pytest.mark.parametrize("idle, factor", [
    (None, 1.0), (0.9, 1.0), (0.2, 1.0), (0.1, 0.5), (0.05, 0.25), (0.0, MIN_SHARE),
])
def test_cpu_factor(idle, factor):
    assert cpu_factor(idle) == pytest.approx(factor)


def test_each_level_gets_capacity_minus_reserve():
    limits = upload_limits(Capacities(rack=100 * M, dc=50 * M, outside=10 * M), reserve=0.2)
    assert limits == {Level.RACK: 80 * M, Level.DC: 40 * M, Level.OUTSIDE: 8 * M}


def test_unlimited_stays_unlimited_even_when_cpu_busy():
    assert upload_limits(Capacities(), cpu_idle=0.01) == {level: None for level in Level}


@pytest.mark.parametrize("measured, expected", [
    # The host's 100 M (80 after the reserve) go to the outside first, then the DC, then the rack.
    ({}, {Level.OUTSIDE: 8 * M, Level.DC: 40 * M, Level.RACK: 80 * M}),
    ({Level.OUTSIDE: 8 * M, Level.DC: 40 * M}, {Level.OUTSIDE: 8 * M, Level.DC: 40 * M, Level.RACK: 32 * M}),
    ({Level.OUTSIDE: 2 * M}, {Level.OUTSIDE: 8 * M, Level.DC: 40 * M, Level.RACK: 78 * M}),
    # Everything used above: the rack keeps a floor, never 0 (which a token bucket reads as unlimited).
    ({Level.OUTSIDE: 8 * M, Level.DC: 40 * M, Level.RACK: 0}, {Level.OUTSIDE: 8 * M, Level.DC: 40 * M,
                                                              Level.RACK: 32 * M}),
])
def test_highest_level_first(measured, expected):
    caps = Capacities(rack=200 * M, dc=50 * M, outside=10 * M, host=100 * M)
    assert upload_limits(caps, reserve=0.2, measured=measured) == pytest.approx(expected)


def test_floor_when_the_host_is_used_up():
    caps = Capacities(dc=100 * M, outside=100 * M, host=100 * M)
    limits = upload_limits(caps, reserve=0.2, measured={Level.OUTSIDE: 80 * M})
    assert limits[Level.DC] == pytest.approx(80 * M * MIN_SHARE)


def test_cpu_rule_scales_every_limit():
    caps = Capacities(rack=100 * M, dc=100 * M, outside=100 * M)
    assert upload_limits(caps, reserve=0.2, cpu_idle=0.1) == pytest.approx({level: 40 * M for level in Level})


def test_reserve_must_leave_something():
    with pytest.raises(ValueError):
        upload_limits(Capacities(rack=M), reserve=1.0)


def test_rate_meter_over_window():
    meter = RateMeter(window=4.0)
    meter.rates(0.0)
    meter.on_bytes(Level.RACK, 4 * M)
    assert meter.rates(2.0)[Level.RACK] == pytest.approx(2 * M)
    meter.on_bytes(Level.DC, M)
    rates = meter.rates(4.0)
    assert rates[Level.RACK] == pytest.approx(M) and rates[Level.DC] == pytest.approx(M / 4)


def test_planner_recomputes_from_measured_rates():
    planner = Planner(Capacities(dc=10 * M, outside=10 * M, host=10 * M), reserve=0.0, every=2.0)
    assert planner.due(0.0)
    planner.plan(0.0)
    assert not planner.due(1.0) and planner.due(2.0)
    planner.meter.on_bytes(Level.OUTSIDE, 20 * M)
    limits = planner.plan(2.0)
    assert limits[Level.OUTSIDE] == pytest.approx(10 * M)
    assert limits[Level.DC] == pytest.approx(10 * M * MIN_SHARE)  # the outside took the host's whole budget


def test_proc_stat():
    before = parse_proc_stat("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    after = parse_proc_stat("cpu  190 0 190 820 0 0 0 0 0 0\n")
    assert before == (800, 1000) and after == (820, 1200)
    assert cpu_idle_between(before, after) == pytest.approx(0.1)
    assert parse_proc_stat("garbage") is None
