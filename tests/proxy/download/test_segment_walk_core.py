"""The segment walk's core alone (`proxy.download.segment_walk`): one step per row, on plain numbers. The walk as
its shell runs it, lookups and fetches included, is pinned by `segment_vectors.py`."""

from __future__ import annotations

import pytest

from proxy.download.parking import ParkingSettings
from proxy.download.segment_walk import PEER_TRIES, Pause, Poll, Segment, SegmentLookup, SegmentWalk, Take

PARKING = ParkingSettings(after=2, poll=0.5)
FOUND = object()  # a trusted answer (its contents are the shell's business)


def walk(*, budget_bytes: int = 600_000, rate: float = 10_000.0, jitter: float = 0.5) -> SegmentWalk:
    w = SegmentWalk(PARKING, origin_rate=rate, now=0.0, jitter=lambda: jitter)
    w.begin(0, budget_bytes)  # 60 s of origin at 10 kB/s: the budget
    return w


ROWS = {
    # name: (lookup, segment's wait so far, walk's waits before, failures, hesitated, expected step)
    "trusted-from-peers": (SegmentLookup(FOUND, 0, "ok"), 3.0, 0.0, 0, False,
                           Take("peers", "segment 0 from peers (ok, 0 others)")),
    "two-fetching-wait-a-poll": (SegmentLookup(None, 2, "no-record"), 1.0, 0.0, 0, False, Poll(1.0 + 0.5)),
    # the polls back off with every wait of the download: 16 s so far -> 2 s, spread by 0.75 + 0.5 * jitter
    "polls-back-off-with-all-waits": (SegmentLookup(None, 2, "no-record"), 6.0, 10.0, 0, False, Poll(6.0 + 2.0)),
    "one-fetching-pause-before-the-origin": (SegmentLookup(None, 1, "no-record"), 1.0, 0.0, 0, False,
                                            Pause(1.0 + 0.5 * 0.5)),
    "after-the-pause-the-origin": (SegmentLookup(None, 1, "no-record"), 2.0, 0.0, 0, True,
                                   Take("origin", "segment 0 from origin (no-record, 1 others)")),
    "budget-spent-the-origin": (SegmentLookup(None, 2, "no-record"), 61.0, 0.0, 0, True,
                                Take("origin", "segment 0 from origin (no-record, 2 others)")),
    "holders-failed-twice-the-origin-at-once": (SegmentLookup(FOUND, 0, "ok"), 0.0, 0.0, PEER_TRIES, False,
                                                Take("origin", "segment 0 from origin (ok, 0 others)")),
    "holders-failed-once-peers-again": (SegmentLookup(FOUND, 0, "ok"), 0.0, 0.0, 1, False,
                                        Take("peers", "segment 0 from peers (ok, 0 others)")),
    "only-a-provider-missing-waits-for-one": (SegmentLookup(None, 1, "no-provider", enough=1), 1.0, 0.0, 0, False,
                                              Poll(1.0 + 0.5)),
}


@pytest.mark.parametrize("name", ROWS)
def test_step(name):
    lookup, segment_waited, waited_before, failures, hesitated, expected = ROWS[name]
    w = walk()
    w.waited_in_all = waited_before
    segment = Segment(0, began=0.0, hesitated=hesitated, failures=failures)
    assert w.step(segment, lookup, segment_waited) == expected


def test_peers_delivering_reset_the_wait_and_the_origin_keeps_it():
    w = walk()
    assert isinstance(w.step(Segment(0, began=0.0), SegmentLookup(FOUND, 0, "ok"), 5.0), Take)
    assert w.waited == 0.0 and w.waited_in_all == 5.0
    assert isinstance(w.step(Segment(1, began=5.0, hesitated=True), SegmentLookup(None, 0, "no-record"), 9.0), Take)
    assert w.waited == 4.0 and w.waited_in_all == 9.0


@pytest.mark.parametrize("answers,expected", [
    # (others seen, at), ...: the count the walk goes by after the last
    ([(2, 0.0), (0, 5.0)], 2),  # fewer, too soon after: a busy DHT's partial answer
    ([(2, 0.0), (0, 25.0)], 0),  # fewer, OTHERS_MEMORY s later: believed
    ([(2, 0.0), (3, 1.0)], 3),  # more: believed at once
])
def test_fewer_others_are_believed_only_after_a_while(answers, expected):
    w = walk()
    for others, at in answers:
        got = w.looked_up(SegmentLookup(None, others, "no-record"), began=at - 1.0, now=at)
    assert got.others == expected and w.lookup_seconds == 1.0


def test_a_failed_lookup_keeps_the_count_and_a_trusted_one_is_not_kept():
    w = walk()
    assert w.looked_up(SegmentLookup(None, 0, "lookup-failed"), began=0.0, now=5.0).others == PARKING.after
    assert w.looked_up(SegmentLookup(FOUND, 0, "ok"), began=5.0, now=6.0).others == 0
    assert w.others_known == PARKING.after
