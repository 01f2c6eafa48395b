"""Work stealing's signals: a member without progress (`StallWatch`), one waiting on stopped sources (`stranded_by`)."""

from dataclasses import dataclass

import pytest

from cluster.stalls import STRANDED_KEPT, Joined, StallWatch, stranded_by


def test_stall_watch():
    watch = StallWatch(after=10.0)
    watch.observe("a", 5, 100, 0.0)
    watch.observe("b", 5, 100, 0.0)
    watch.observe("done", 100, 100, 0.0)
    watch.observe("a", 6, 100, 8.0)  # progress
    watch.observe("b", 5, 100, 8.0)  # none
    assert watch.stalled(9.9) == frozenset()
    assert watch.stalled(10.0) == {"b"}
    assert watch.stalled(18.0) == {"a", "b"}
    watch.observe("b", 100, 100, 19.0)  # finished: never stalled
    assert watch.stalled(30.0) == {"a"}


def test_waiting_for_priority_is_no_stall():
    watch = StallWatch(after=10.0)
    watch.observe("a", 5, 100, 0.0)
    watch.observe("a", 5, 100, 9.0, fetching=False)
    assert watch.stalled(15.0) == frozenset()
    assert watch.stalled(19.0) == {"a"}


def test_waiting_to_become_a_representant_is_no_stall():
    """A late rack whose slots are not free yet (redis recovering from a restart) makes no progress: once a
    member stands, its clock starts again, or every node would show it everything at once."""
    watch = StallWatch(after=10.0)
    watch.observe("a", 0, 100, 0.0, role="peer")
    watch.observe("a", 0, 100, 12.0, role="peer")
    assert watch.stalled(12.0) == {"a"}
    watch.observe("a", 0, 100, 15.0, role="rack")  # a representant now
    assert watch.stalled(20.0) == frozenset()
    watch.observe("a", 0, 100, 21.0, role="dc")
    assert watch.stalled(30.0) == frozenset()
    assert watch.stalled(31.0) == {"a"}


@dataclass
class Record:
    verified: int
    blocks: int = 100
    fetching: bool = True
    role: str = "rack"


def test_a_member_not_read_this_round_is_not_judged():
    """Redis restarted empty: the clocks stood still while it was away, and a member's record is missing until the
    member writes it again. Who was not read is no stall; who was read and made no progress still is."""
    watch = StallWatch(after=10.0)
    assert watch.observe_round({"a": Record(5), "b": Record(5)}, 0.0) == frozenset()
    # redis away from 1 s to 12 s: nothing read; back empty, only b has written its record again (no progress)
    assert watch.observe_round({}, 12.0) == frozenset()
    assert watch.observe_round({"b": Record(5)}, 13.0) == {"b"}
    assert watch.stalled(13.0) == {"a", "b"}  # what the clocks alone would say
    # a writes its record again, with the progress it made meanwhile: no stall
    assert watch.observe_round({"a": Record(9), "b": Record(6)}, 14.0) == frozenset()
    assert watch.observe_round({"a": Record(9), "b": Record(6)}, 24.0) == {"a", "b"}


@dataclass
class Named:
    stranded: object


MEMBERS = {"a", "b", "c", "d", "e", "f", "g"}


@pytest.mark.parametrize("records, expected", [
    ({"a": Named(["b"])}, {"a": {"b"}}),
    ({"a": Named(("b", "c"))}, {"a": {"b", "c"}}),
    ({"a": Named([])}, {}),
    ({"a": Named(["a"])}, {}),  # itself: nobody
    ({"a": Named(["stranger"])}, {}),  # not a member of the view
    ({"a": Named("bc")}, {}),  # not a list
    ({"a": Named([["b"], 3, None, "c"])}, {"a": {"c"}}),  # only strings count
    ({"a": Named(["x1", "x2", "x3", "x4", "b"])}, {}),  # only the first STRANDED_KEPT are read
    ({"a": Named(["b", "c", "d", "e", "f", "g"])}, {"a": set("bcde")}),
])
def test_stranded_by_counts_only_members_other_than_itself_among_the_first_few(records, expected):
    assert STRANDED_KEPT == 4
    assert stranded_by(records, MEMBERS) == {node: frozenset(s) for node, s in expected.items()}


def test_joined_holds_what_any_part_holds():
    joined = Joined([frozenset({1, 2}), range(5, 7)])
    assert [b for b in range(8) if b in joined] == [1, 2, 5, 6]
    assert 1 not in Joined([])
