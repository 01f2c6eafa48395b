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
    again = Sampler.from_samples(sampler.samples())
    assert again.verdict(0.025) == {**sampler.verdict(0.025)}


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
