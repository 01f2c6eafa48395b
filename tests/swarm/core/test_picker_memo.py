"""The picker's "nothing for you" memo (`swarm.core.picker`): after a pick found nothing for a source, its next
pick looks only at the blocks it announced since, unless a block became pickable again, `skip` changed version,
or it announced more than FRESH_KEPT; and it answers what the full walk would."""

from __future__ import annotations

import random

import pytest

from swarm.core import picker as picker_module
from swarm.core.picker import FRESH_KEPT, Picker


def _no_walk(*_args, **_kwargs):
    raise AssertionError("walked every block the source holds")


def _busy_picker() -> Picker:
    """200 blocks; "a" holds 0..9 and has asked for all of them, so its next pick finds nothing."""
    picker = Picker(200, rng=random.Random(5))
    picker.add_source("a", [1] * 10 + [0] * 190)
    picker.add_source("b", [0] * 100 + [1] * 100)
    picker.add_source("c", [0] * 150 + [1] * 50)
    assert len(picker.pick("a", 10)) == 10
    assert picker.pick("a", 4) == []  # the memo is set
    return picker


def test_a_pick_after_a_few_announcements_looks_at_them_alone_in_the_usual_order(monkeypatch) -> None:
    picker = _busy_picker()
    for block in (120, 60, 170):  # availability 1 (b), 0, 2 (b and c)
        assert picker.have("a", block) is True
    monkeypatch.setattr(Picker, "_pick_held", _no_walk)
    monkeypatch.setattr(Picker, "_pick_from_lists", _no_walk)
    assert picker.pick("a", 2) == [60, 120]  # rarest first, as the walk orders them
    monkeypatch.undo()  # it found something: no memo, the next pick walks
    assert picker.pick("a", 2) == [170]
    assert picker.pick("a", 2) == []


def test_announced_blocks_not_pickable_or_skipped_are_not_taken(monkeypatch) -> None:
    picker = _busy_picker()
    picker.pick("b", 1)  # one of b's blocks is requested: not pickable any more
    taken = next(iter(picker.requests_of("b")))
    skip = {150}  # held back (a nearer peer fetches it), under a version that stays the same
    assert picker.pick("a", 4, skip=skip, skip_version=1) == []
    picker.have("a", taken)
    picker.have("a", 150)
    monkeypatch.setattr(Picker, "_pick_held", _no_walk)
    assert picker.pick("a", 4, skip=skip, skip_version=1) == []
    picker.have("a", 151)
    assert picker.pick("a", 4, skip=skip, skip_version=1) == [151]


@pytest.mark.parametrize("change", ["returned", "skip version", "many announced"])
def test_the_full_walk_runs_when_the_memo_no_longer_holds(change: str, monkeypatch) -> None:
    picker = _busy_picker()
    walks: list[int] = []
    full = Picker._pick_held

    def counted(self, *args, **kwargs):
        walks.append(1)
        return full(self, *args, **kwargs)

    monkeypatch.setattr(Picker, "_pick_held", counted)
    skip: set[int] = set()
    version = 1
    assert picker.pick("a", 4, skip=skip, skip_version=version) == []
    walks.clear()
    if change == "returned":
        picker.abort("a", 3)  # a block became pickable again: the announced ones are not the only candidates
        picker.have("a", 100)
        expected = {3, 100}
    elif change == "skip version":
        version = 2  # `skip` may have shrunk
        picker.have("a", 100)
        expected = {100}
    else:
        for block in range(100, 101 + FRESH_KEPT):
            picker.have("a", block)
        expected = set(range(100, 101 + FRESH_KEPT))
    chosen = picker.pick("a", 100, skip=skip, skip_version=version)
    assert walks == [1] and set(chosen) == expected


def test_without_the_shortcut_the_same_picks(monkeypatch) -> None:
    """A random run of announcements and picks, with and without looking at the announced blocks alone."""

    def run() -> list[list[int]]:
        draw = random.Random(11)
        picker = Picker(300, rng=random.Random(2))
        for name in "abcd":
            picker.add_source(name, [int(draw.random() < 0.1) for _ in range(300)])
        answers = []
        for _ in range(3000):
            source = draw.choice("abcd")
            roll = draw.random()
            if roll < 0.6:
                picker.have(source, draw.randrange(300))
            elif roll < 0.9:
                answers.append(picker.pick(source, draw.randint(1, 3), skip={7, 8}, skip_version=0))
            elif picker.requests_of(source):
                picker.abort(source, min(picker.requests_of(source)))
        return answers

    shortcut = run()
    monkeypatch.setattr(picker_module, "FRESH_KEPT", -1)  # never keeps a list: every pick walks
    assert run() == shortcut
    assert sum(map(len, shortcut)) > 100
