"""Judging a run spread over processes: the worst process decides."""

import pytest

from bench.lab.honesty import Sampler, combine


def _verdict(lags_ms: list[float], busy: list[float]) -> dict:
    sampler = Sampler.from_samples({"interval": 0.1, "lags": [x / 1000 for x in lags_ms], "loop_busy": busy,
                                    "machine_busy": [0.5], "process_cpu": 1.0})
    return sampler.verdict(0.025)


def test_samples_survive_the_trip_to_another_process():
    sampler = Sampler()
    sampler.lags, sampler.loop_busy, sampler.machine_busy, sampler.process_cpu = [0.001, 0.002], [0.3], [0.4], 2.5
    sampler.network = [1e6, 3e6]
    again = Sampler.from_samples(sampler.samples())
    assert again.verdict(0.025) == {**sampler.verdict(0.025)}
    verdict = again.verdict(0.025)
    assert verdict["network_bytes_per_s_mean"] == 2_000_000 and verdict["network_bytes_per_s_max"] == 3_000_000
    assert verdict["network_bytes_per_s"] == [1_000_000, 3_000_000]


def _carrying(mean: float) -> dict:
    sampler = Sampler()
    sampler.network = [mean]
    return sampler.verdict(0.025)


def test_the_crowds_processes_add_their_bandwidth_up_and_the_later_libtorrent_half_stays_apart():
    combined = combine({"main": _carrying(1e6), "worker 0": _carrying(2e6), "worker 1": _carrying(3e6),
                        "libtorrent": _carrying(50e6)})
    assert combined["network_bytes_per_s_mean"] == 6_000_000
    assert combined["loops"]["libtorrent"]["network_bytes_per_s_mean"] == 50_000_000
    assert combine({"main": _verdict([1], [0.1]), "worker 0": _carrying(2e6)})["network_bytes_per_s_mean"] is None


@pytest.mark.parametrize("name,main,worker,valid,reasons", [
    ("all had slack", ([1] * 100, [0.2]), ([2] * 100, [0.4]), True, 0),
    ("one worker ran timers late", ([1] * 100, [0.2]), ([80] * 100, [0.5]), False, 1),
    ("one worker saturated", ([1] * 100, [0.95]), ([2] * 100, [0.4]), False, 1),
])
def test_combine_keeps_the_worst(name, main, worker, valid, reasons):
    parts = {"main": _verdict(*main), "worker 0": _verdict(*worker)}
    combined = combine(parts)
    assert combined["valid"] is valid
    assert len(combined["cpu_bound_reasons"]) == reasons
    assert all(r.startswith(("main: ", "worker 0: ")) for r in combined["cpu_bound_reasons"])
    assert combined["lag_p99_ms"] == max(p["lag_p99_ms"] for p in parts.values())
    assert combined["loop_busy_mean"] == max(p["loop_busy_mean"] for p in parts.values())
    assert combined["process_cpu_s"] == pytest.approx(2.0)
    assert combined["loops"] == parts


def test_one_process_is_its_own_verdict():
    alone = _verdict([1] * 10, [0.1])
    assert combine({"main": alone}) == alone


async def test_a_second_stop_changes_nothing():
    # The crowd stops its sampler when the swarmproxy half ends and again on the way out: the verdict must
    # describe the first span, not grow to cover the direct half's tail.
    sampler = Sampler()
    sampler.start()
    await sampler.stop()
    lags, cpu = list(sampler.lags), sampler.process_cpu
    sum(i * i for i in range(200_000))  # CPU spent after the stop
    await sampler.stop()
    assert sampler.lags == lags and sampler.process_cpu == cpu
