"""bench.link_meters: what the cluster labs read off a shaped link's counters, as pure functions of the samples."""

from __future__ import annotations

import pytest

from bench.link_meters import counts_per_second, link_phases, share_between

# (monotonic time, counter): a link that carried 1,000 bytes a second for two seconds, then nothing
SAMPLES = [(10.0, 500), (10.5, 1000), (11.0, 1500), (11.5, 2000), (12.0, 2500), (12.5, 2500), (13.0, 2500)]


@pytest.mark.parametrize(("start", "end", "expected"), [
    (10.0, 12.0, (2000, 2.0)),  # first reading at or after start, last at or before end
    (10.2, 11.9, (1000, 1.0)),  # 10.5 .. 11.5
    (12.0, 13.0, (0, 1.0)),
    (12.6, 12.9, (0, 0.0)),  # no reading inside: nothing measured
])
def test_share_between_takes_the_readings_inside_the_window(start, end, expected) -> None:
    assert share_between(SAMPLES, start, end) == expected


def test_link_phases_gives_first_and_last_byte_and_the_use_second_by_second() -> None:
    phases = link_phases(SAMPLES, start=10.0, end=13.0, size=2000, rate=1000.0)
    assert phases["first_byte_s"] == 0.5
    assert phases["last_byte_s"] == 2.0
    assert phases["wire_copies"] == 1.0
    assert phases["use_per_second"] == [1.0, 1.0, 0.0, None]  # the last second has one reading only


@pytest.mark.parametrize(("samples", "expected"), [
    ([(0.0, 0), (0.5, 3), (1.0, 5), (1.5, 9), (2.0, 10)], [5, 5, 0]),
    ([(0.0, 7), (1.0, 7), (2.0, 7)], [0, 0, 0]),  # a queue that dropped nothing
    ([(0.0, 7)], []),  # one reading: no growth to tell
])
def test_counts_per_second_is_the_growth_of_a_counter_each_second(samples, expected) -> None:
    assert counts_per_second(samples, start=0.0, end=2.0) == expected
