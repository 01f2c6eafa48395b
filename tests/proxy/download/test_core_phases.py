"""The download core's phase changes (`proxy.download.state.NEXT`): every change goes through `DownloadCore._enter`,
which allows exactly the changes listed here and raises `PhaseError` on any other.

The list is what the core's code does (docs/ARCHITECTURE.md, "The download"); the core's vectors take every one of
these changes (those of test_core*.py all but HEAD -> WAIT, which test_privacy.py takes: a local name). A change
the code starts making must be added to both tables, on purpose.
"""

from __future__ import annotations

import itertools

import pytest

from proxy.download.core import DownloadCore
from proxy.download.state import NEXT, Phase, PhaseError, checked

from .download_vectors import SETTINGS

HEAD, HEADLESS, WAIT, STREAM, SWITCHED, MERGE, DONE = (Phase.HEAD, Phase.HEADLESS, Phase.WAIT, Phase.STREAM,
                                                       Phase.SWITCHED, Phase.MERGE, Phase.DONE)

ALLOWED = [
    (HEAD, STREAM),  # the origin's head
    (HEAD, HEADLESS),  # no first byte in T: a lookup races a HEAD
    (HEAD, WAIT),  # ... for a name that may be private
    (HEAD, DONE),  # relayed as is, the origin unreachable, or the client left
    (HEADLESS, MERGE),  # found, and the HEAD agrees: our own head
    (HEADLESS, WAIT),  # nothing usable
    (HEADLESS, STREAM),  # the origin answered first
    (HEADLESS, DONE),  # 416, an empty representation, or nothing found and the origin failed
    (WAIT, STREAM),  # the origin's head at last
    (WAIT, DONE),  # ... or its failure
    (STREAM, SWITCHED),  # T, R, crowd, the origin's hint, the body broke off, parked
    (STREAM, DONE),  # the origin finished
    (SWITCHED, MERGE),  # found, or parked segment by segment
    (SWITCHED, DONE),  # the origin finished, or broke off with nothing found (cut)
    (MERGE, DONE),  # the last byte, or neither producer can go on (cut)
]
FORBIDDEN = [pair for pair in itertools.product(Phase, repeat=2) if pair not in ALLOWED]


def test_the_table_is_this_list():
    assert {(a, b) for a, targets in NEXT.items() for b in targets} == set(ALLOWED)
    assert set(NEXT) == set(Phase)


def _core_in(phase: Phase) -> DownloadCore:
    core = DownloadCore(SETTINGS)
    core.phase = phase  # (put there directly: only the change under test goes through `_enter`)
    return core


@pytest.mark.parametrize(("current", "new"), ALLOWED, ids=lambda p: p.name)
def test_an_allowed_change_is_made(current, new):
    core = _core_in(current)
    core._enter(new)
    assert core.phase is new and checked(current, new) is new


@pytest.mark.parametrize(("current", "new"), FORBIDDEN, ids=lambda p: p.name)
def test_any_other_change_raises(current, new):
    core = _core_in(current)
    with pytest.raises(PhaseError, match=f"from {current.name} to {new.name}") as raised:
        core._enter(new)
    assert core.phase is current and (raised.value.current, raised.value.new) == (current, new)


def test_done_is_final_and_says_so():
    with pytest.raises(PhaseError, match=r"cannot go from DONE to STREAM \(allowed: nothing\)"):
        checked(DONE, STREAM)


def test_abort_once_done_changes_nothing():
    """The shell aborts every core when it leaves, done or not: a done core stays done, without a change."""
    core = _core_in(DONE)
    assert core.abort() == [] and core.done
