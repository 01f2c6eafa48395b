"""The pusher's root shares lent at the end (`cluster.lending.Lender`)."""

import pytest

from cluster.lending import Lender

# Three root members with shares of 10 blocks each: a 0-9, b 10-19, c 20-29.
OWNERS = ["a"] * 10 + ["b"] * 10 + ["c"] * 10


def ask_all(lender: Lender, member: str, blocks) -> list[int]:
    lent: list[int] = []
    for block in blocks:
        lent += lender.on_asked(member, block)
    return lent


@pytest.mark.parametrize(("asked_before", "expected"), [
    # a asked for 9 of its 10: nothing lent yet (its own share first)
    ({"a": range(9)}, []),
    # a asked for all of its share, b and c for none: two blocks, each from the share with the most left (c by
    # name on a tie, then b), the highest of it
    ({"a": range(10)}, [29, 19]),
    # c asked for 5 of its own: b has more left, so b lends
    ({"c": range(20, 25), "a": range(10)}, [19, 18]),
    # b and c have no more than `ahead` left each: nothing to lend (their own requests in flight cover it)
    ({"b": range(10, 18), "c": range(20, 28), "a": range(10)}, []),
])
def test_a_member_that_asked_for_its_whole_share_borrows_from_the_one_furthest_behind(asked_before, expected):
    lender = Lender(OWNERS, ahead=2)
    lent: list[int] = []
    for member, blocks in asked_before.items():
        lent = ask_all(lender, member, blocks)
    assert lent == expected
    assert lender.lent["a"] == set(expected)


def test_asking_for_a_lent_block_lends_the_next_and_the_owner_never_gets_it_lent_back():
    lender = Lender(OWNERS, ahead=2)
    first = ask_all(lender, "a", range(10))
    more = lender.on_asked("a", first[0])
    assert len(more) == 1 and more[0] not in first  # one asked: one more, so that two stay ahead
    block = more[0]
    assert lender.on_asked(OWNERS[block], block) == []  # the owner's request crossed the borrower's START
    assert lender.duplicates == 0
    lender.on_asked("a", block)
    assert lender.duplicates == 1  # sent twice
    lent = {b for blocks in lender.lent.values() for b in blocks}
    assert all(b not in lent for b in range(10))  # a's own share is never lent


def test_lending_stops_where_the_others_have_no_more_than_their_requests_in_flight():
    lender = Lender(OWNERS, ahead=2)
    ask_all(lender, "a", range(10))
    ask_all(lender, "b", range(10, 20))
    lent_a, lent_b = set(lender.lent["a"]), set(lender.lent["b"])
    for _ in range(20):
        for member, lent in (("a", lent_a), ("b", lent_b)):
            for block in sorted(lent):
                lender.on_asked(member, block)
        lent_a, lent_b = set(lender.lent["a"]), set(lender.lent["b"])
    left = set(range(20, 30)) - lender.lent["a"] - lender.lent["b"]
    assert len(left) == 2  # c keeps `ahead` of its own
    assert lender.lent["a"].isdisjoint(lender.lent["b"])  # each block lent once


def test_a_plan_drawn_again_keeps_what_was_asked_for_and_lent():
    lender = Lender(OWNERS, ahead=2)
    ask_all(lender, "a", range(10))
    # c left: its share went to a and b in the new plan (a: 20-24, b: 25-29)
    new = lender.follow(["a"] * 10 + ["b"] * 10 + ["a"] * 5 + ["b"] * 5)
    assert new.lent["a"] == {19, 29} and new.lent["c"] == set()
    assert new.on_asked("c", 3) == []  # a member no longer in the root borrows nothing
    # a has 20-24 of its own to ask for first; then b, whose 19 and 29 are lent already, lends 28 and 27
    assert ask_all(new, "a", [20, 21, 22, 23]) == []
    assert new.on_asked("a", 24) == [28, 27]


@pytest.mark.parametrize("block", [-1, 30, 10_000])
def test_a_request_outside_the_file_or_from_a_stranger_changes_nothing(block):
    lender = Lender(OWNERS, ahead=2)
    assert lender.on_asked("a", block) == []
    assert lender.on_asked("stranger", 3) == []
    assert ask_all(lender, "a", range(10)) == [29, 19]


def test_ahead_must_be_positive():
    with pytest.raises(ValueError):
        Lender(OWNERS, ahead=0)
