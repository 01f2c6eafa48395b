"""`bench/internet_lab.py`'s arithmetic and command line, without the test internet (each scenario builds one and
takes a minute or more: run on purpose, `python -m bench.internet_lab --scenario crowd|lookups|cost --quick`)."""

from __future__ import annotations

import hashlib

import pytest

from bench import internet_lab, internet_lookups


def test_the_payload_is_deterministic_and_each_file_differs():
    assert internet_lab.payload(1000) == internet_lab.payload(1000) and len(internet_lab.payload(1000)) == 1000
    assert internet_lab.payload(1000, 0) != internet_lab.payload(1000, 1) != internet_lab.payload(1000)


def test_a_download_that_did_not_finish_counts_as_slower_than_any_that_did():
    want = hashlib.sha256(b"x").hexdigest()
    records = [{"duration_s": d, "exact": True, "digest": want} for d in (1.0, 2.0, 3.0)]
    records.append({"duration_s": 0.5, "exact": False})
    summary = internet_lab.summarise(records)
    assert summary["finished"] == 3 and summary["p50_s"] == 2.0 and summary["p99_s"] is None


def test_lookup_times_are_in_milliseconds_and_hops_of_zero_are_counted_as_own_store():
    results = [{"first_s": 0.001, "end_s": 0.010, "hops_to_first": 1}, {"first_s": 0.0001, "end_s": 0.002,
                                                                         "hops_to_first": 0},
               {"first_s": None, "end_s": None}]
    summary = internet_lookups.summarise_lookups(results)
    assert summary["found"] == 2 and summary["ended"] == 2 and summary["end_p99_ms"] == 10.0
    assert summary["from_own_store"] == 1 and summary["hops_to_first_max"] == 1


def test_counters_become_rates_per_minute():
    before = {"in": {"packets": 10, "bytes": 1000}, "out": {"packets": 5, "bytes": 500}}
    after = {"in": {"packets": 40, "bytes": 4000}, "out": {"packets": 5, "bytes": 800}}
    assert internet_lab.per_minute(before, after, 30.0) == {"in": {"packets": 60.0, "bytes": 6000.0},
                                                            "out": {"packets": 0.0, "bytes": 600.0}}


def test_the_command_line_offers_each_scenario(capsys):
    with pytest.raises(SystemExit) as exit_:
        internet_lab.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "crowd,lookups,cost" in out and "--quick" in out
