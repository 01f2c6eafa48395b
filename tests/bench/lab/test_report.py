"""The lab report's percentiles: a client that never finished counts, as slower than every one that did."""

import pytest

from bench.lab.report import times


def _records(finished: list[float], failed: int) -> list[dict]:
    done = [{"duration_s": d, "exact": True} for d in finished]
    return done + [{"duration_s": 1800.0, "exact": False, "error": "TimeoutError"}] * failed


TIMES = [
    # finished durations, failed clients, expected p1/p25/p50/p75/p99
    ([1.0, 2.0, 3.0, 4.0, 5.0], 0, (1.04, 2.0, 3.0, 4.0, 4.96)),
    # one of five failed: the top percentiles fall on it (p75 sits exactly on the 4th, the last finished)
    ([1.0, 2.0, 3.0, 4.0], 1, (1.04, 2.0, 3.0, 4.0, None)),
    # most failed: a median over the finished alone would have said 1.5 s
    ([1.0, 2.0], 3, (1.04, 2.0, None, None, None)),
    ([], 4, (None, None, None, None, None)),
    ([], 0, (None, None, None, None, None)),
    # between a finished client and one that never finished lies no finite time; nor is a failed client's
    # own duration (here its timeout) ever taken for a download time
    ([10.0], 1, (None, None, None, None, None)),
]


@pytest.mark.parametrize("finished,failed,expected", TIMES)
def test_unfinished_clients_count_as_slowest(finished, failed, expected):
    cuts = times(_records(finished, failed))
    assert tuple(cuts) == ("p1", "p25", "p50", "p75", "p99")
    for got, want in zip(cuts.values(), expected):
        assert got == (None if want is None else pytest.approx(want))
