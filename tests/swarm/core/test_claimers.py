"""`ClaimerBook`: the other claimers a node passes on, with its bounds (fake clock, table-driven)."""

from __future__ import annotations

import pytest

from swarm.core import claimers as book_module
from swarm.core.claimers import CLAIMER_LIFE, PASSED_ON, ClaimerBook

K1, K2 = b"\x01" * 32, b"\x02" * 32
TCP = 1


def hosts(book: ClaimerBook, key: bytes, asker: str, now: float) -> list[str]:
    return [c.host for c in book.others(key, asker, now)]


# (heard: (key, host, port, now) in order), then others(K1, asker, at) → hosts, the first heard of first
SCENARIOS = {
    "nobody": ([], "9.0.0.1", 0.0, []),
    "one": ([(K1, "7.1.0.1", 4000, 0.0)], "9.0.0.1", 1.0, ["7.1.0.1"]),
    "not the asker itself": ([(K1, "7.1.0.1", 4000, 0.0)], "7.1.0.1", 1.0, []),
    "the first first": ([(K1, "7.1.0.1", 4000, 0.0), (K1, "7.2.0.1", 4000, 1.0)], "9.0.0.1", 2.0,
                        ["7.1.0.1", "7.2.0.1"]),
    "heard again keeps its place": ([(K1, "7.1.0.1", 4000, 0.0), (K1, "7.2.0.1", 4000, 1.0),
                                     (K1, "7.1.0.1", 4001, 2.0)], "9.0.0.1", 3.0, ["7.1.0.1", "7.2.0.1"]),
    "another key": ([(K2, "7.1.0.1", 4000, 0.0)], "9.0.0.1", 1.0, []),
    "gone after its life": ([(K1, "7.1.0.1", 4000, 0.0)], "9.0.0.1", CLAIMER_LIFE, []),
    "kept alive by saying it again": ([(K1, "7.1.0.1", 4000, 0.0), (K1, "7.1.0.1", 4000, 100.0)], "9.0.0.1",
                                      CLAIMER_LIFE + 1, ["7.1.0.1"]),
    # One network (a /24) counts PER_NETWORK hosts: a third address of it is not kept.
    "two per network": ([(K1, "7.1.0.1", 4000, 0.0), (K1, "7.1.0.2", 4000, 0.0), (K1, "7.1.0.3", 4000, 0.0)],
                        "9.0.0.1", 1.0, ["7.1.0.1", "7.1.0.2"]),
    "port 0 says it claims nothing": ([(K1, "7.1.0.1", 0, 0.0)], "9.0.0.1", 1.0, []),
}


@pytest.mark.parametrize("heard,asker,at,expected", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_others_are_the_live_claimers_but_the_asker_newest_first(heard, asker, at, expected):
    book = ClaimerBook()
    for key, host, port, now in heard:
        book.heard(key, host, port, TCP, now)
    assert hosts(book, K1, asker, at) == expected


def test_a_claimer_keeps_the_port_and_transports_it_last_said():
    book = ClaimerBook()
    book.heard(K1, "7.1.0.1", 4000, TCP, 0.0)
    book.heard(K1, "7.1.0.1", 4001, 3, 1.0)
    (claimer,) = book.others(K1, "9.0.0.1", 2.0)
    assert (claimer.port, claimer.transports) == (4001, 3)


def test_no_transports_is_not_kept():
    book = ClaimerBook()
    assert not book.heard(K1, "7.1.0.1", 4000, 0, 0.0)
    assert book.others(K1, "9.0.0.1", 1.0) == []


def test_one_party_with_many_networks_fills_a_key_only_to_its_bound_and_an_answer_to_passed_on():
    book = ClaimerBook()
    kept = [book.heard(K1, f"7.{i}.0.1", 4000, TCP, 0.0) for i in range(100)]
    assert sum(kept) == book_module.PER_KEY  # the first PER_KEY stay; the rest are refused, not evicting them
    assert hosts(book, K1, "9.0.0.1", 1.0) == [f"7.{i}.0.1" for i in range(PASSED_ON)]
    # Once the first ones' life is over, newcomers are kept again.
    assert book.heard(K1, "8.0.0.1", 4000, TCP, CLAIMER_LIFE)
    assert hosts(book, K1, "9.0.0.1", CLAIMER_LIFE) == ["8.0.0.1"]


def test_keys_are_bounded_the_least_lately_heard_dropped_first(monkeypatch):
    monkeypatch.setattr(book_module, "MAX_KEYS", 3)
    book = ClaimerBook()
    for i in range(5):
        book.heard(bytes([i]) * 32, "7.1.0.1", 4000, TCP, float(i))
    assert len(book) == 3
    assert book.others(bytes([0]) * 32, "9.0.0.1", 5.0) == []
    assert hosts(book, bytes([4]) * 32, "9.0.0.1", 5.0) == ["7.1.0.1"]
