"""Vectors of the segment-by-segment walk (`proxy.download.segments.SegmentedFetch`), as data, and a driver that
plays one against today's class.

A vector says what the world does and what a download of bytes `start..end` of a file must then do. The world:
what each lookup of a segment answers, call after call (`answers[index]` for the walk's lookups, `tail` for those
of the prefetch of the last segment, which ask for the segment's own fetchers only), how long each lookup takes,
which fetches from peers or the origin fail after how many bytes, how long a block takes, the parking settings,
the origin's rate and the jitter. What it must do (`Outcome`): where each segment came from, every fetch asked of
peers or the origin and the fake time it began, how many lookups each segment cost, the request's events, the
body's provenance, when its last byte was delivered, and the error it ended with. Nothing here depends on how the
walk is built: a sans-I/O core gets a driver of its own that plays the same `Scenario`s and returns an `Outcome`.

Today's driver runs the walk on an event loop whose clock jumps to the next timer whenever every task waits
(`VirtualLoop`): the walk's own sleeps, the lookups' durations and the blocks' transfer times are timers, so the
lookahead and the tail's prefetch run concurrently with the walk as they would for real, and no test sleeps.
The segments are 64 KiB (4 blocks of 16 KiB); peers send upper-case letters and the origin lower-case ones of
the same text, so the body tells which byte came from where, and that every byte is the file's own.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import selectors
from types import SimpleNamespace
from typing import NamedTuple
from unittest import mock

from proxy.download.parking import ParkingSettings
from proxy.download.segments import SegmentedFetch, SegmentLookup
from swarm.content import segments as content_segments
from swarm.content.segments import Segments
from swarm.errors import FetchFailed, OriginSourceError

BLOCK = 16 * 1024
L = 4 * BLOCK  # a segment (`SEGMENT_TARGET` while a vector plays)


# -- the world -----------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Answer:
    """One lookup's answer (a `SegmentLookup`) and how long the lookup took."""

    trusted: bool = False  # a quorum vouched for the segment and someone holds it
    others: int = 0
    reason: str = "below-quorum"
    enough: int | None = None
    took: float = 1.0

    def lookup(self, index: int) -> SegmentLookup:
        found = SimpleNamespace(index=index, providers=["holder"]) if self.trusted else None
        return SegmentLookup(found, self.others, self.reason, self.enough)


def T(others: int = 0, took: float = 1.0) -> Answer:  # trusted, with `others` still fetching it
    return Answer(True, others, "ok", took=took)


def N(others: int, reason: str = "below-quorum", took: float = 1.0) -> Answer:  # not trusted yet
    return Answer(False, others, reason, took=took)


def NP(others: int, took: float = 1.0) -> Answer:  # trusted, but no provider (its vouchers left)
    return Answer(False, others, "no-provider", enough=1, took=took)


def FAILED(took: float = 5.0) -> Answer:  # a lookup that timed out (LOOKUP_TIMEOUT: 5 s)
    return Answer(False, 0, "lookup-failed", took=took)


def parked(wait: float = 60.0, *, poll: float = 0.5, shortest: float | None = None) -> ParkingSettings:
    """Parking for `after` = 2 others; the budget is `wait` s (the origin's rate makes no difference) unless
    `shortest` is given: then it is the rest at the origin's rate, within [shortest, wait]."""
    return ParkingSettings(after=2, poll=poll, shortest=wait if shortest is None else shortest, longest=wait)


PARKED = parked()


@dataclasses.dataclass(frozen=True)
class Scenario:
    answers: dict  # segment index -> the walk's lookups' answers, in call order; the last one repeats
    size: int = 2 * L
    start: int = 0
    end: int | None = None  # None: to the end of the file
    tail: tuple = ()  # the prefetch's lookups' answers (the last repeats); a prefetch with none fails the vector
    fails: dict = dataclasses.field(default_factory=dict)  # ("peers" | "origin", index) -> bytes sent before each
    # of the first calls fails (FetchFailed from peers, OriginSourceError from the origin); later calls succeed
    block_seconds: dict = dataclasses.field(default_factory=dict)  # "peers" | "origin" -> seconds for each block
    parking: ParkingSettings = PARKED
    rate: float = 1e9  # the origin's rate, which `parking.wait` makes the budget of
    jitter: float = 0.5  # what `random.random` returns: 0.5 makes the polls' spread factor exactly 1


# -- what the download does ------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    sources: list  # per segment taken, where it (or its rest) came from: `SegmentedFetch.sources`
    fetches: list  # (time, "peers" | "origin" [+ " ahead" for the tail's prefetch], index[, start, end]): every
    # fetch asked, when; start..end (of the segment) only when not the whole segment was asked
    lookups: dict  # segment index -> lookups begun, "tail" -> those of the prefetch
    events: list  # `fetch.event`'s texts, in order
    runs: list  # the body as runs of ("peers" | "origin", bytes)
    ends: float | None  # when the last byte was delivered (None: the download failed)
    error: str | None = None  # the exception's class the download ended with


def settled(outcome: Outcome) -> Outcome:
    """Times rounded to microseconds: the expectations are sums of fractions, the clock adds what the timers wait."""
    return dataclasses.replace(outcome, fetches=[(round(f[0], 6), *f[1:]) for f in outcome.fetches],
                               ends=None if outcome.ends is None else round(outcome.ends, 6))


def text(size: int) -> bytes:
    """The file: lower-case letters, different at every offset that matters here."""
    out, counter = bytearray(), 0
    while len(out) < size:
        out += bytes(97 + b % 26 for b in hashlib.sha256(counter.to_bytes(8, "big")).digest())
        counter += 1
    return bytes(out[:size])


def runs(body: bytes) -> list:
    out: list = []
    for byte in body:
        source = "peers" if 65 <= byte <= 90 else "origin"
        if out and out[-1][0] == source:
            out[-1][1] += 1
        else:
            out.append([source, 1])
    return [tuple(run) for run in out]


# -- today's driver ----------------------------------------------------------------------------------------------------

class _Jumps(selectors.DefaultSelector):
    """The loop's selector: nothing is ever ready but the loop's own wake-ups, so a wait for the next timer is
    the clock jumping to it."""

    def __init__(self, loop: VirtualLoop) -> None:
        super().__init__()
        self.loop = loop

    def select(self, timeout=None):
        if timeout is None:
            raise RuntimeError("every task waits and no timer is set: the walk is stuck")
        ready = super().select(0)
        if not ready:
            self.loop.now += timeout
        if self.loop.now > 100_000:
            raise RuntimeError("the walk still runs after 100 000 fake seconds")
        return ready


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_Jumps(self))

    def time(self) -> float:
        return self.now


def play(scenario: Scenario) -> Outcome:
    loop = VirtualLoop()
    try:
        with mock.patch.object(content_segments, "SEGMENT_TARGET", L):
            return loop.run_until_complete(_play(scenario))
    finally:
        loop.close()


async def _play(s: Scenario) -> Outcome:  # the whole world of one walk
    loop = asyncio.get_running_loop()
    cut, data = Segments(s.size, BLOCK), text(s.size)
    end = s.size if s.end is None else s.end
    lookups: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    fetches: list = []

    class Trust:
        async def look_up(self, url_key, cut, index, validator, *, file_fetchers=True, enough=1):
            key = index if file_fetchers else "tail"
            script = s.answers.get(index, ()) if file_fetchers else s.tail
            assert script, f"lookup of segment {index} ({key}) not scripted"
            answer = script[min(lookups[key], len(script) - 1)]
            lookups[key] += 1
            await asyncio.sleep(answer.took)
            return answer.lookup(index)

        def release(self) -> None:
            pass

    def source(kind: str):
        async def fetch(index: int, start: int, stop: int, ahead: bool):
            failing = s.fails.get((kind, index), ())
            fail_after = failing[calls[kind, index]] if calls[kind, index] < len(failing) else None
            calls[kind, index] += 1
            lo, hi = cut.span(index)
            whole = (start, stop) == (0, hi - lo)
            fetches.append((loop.time(), kind + " ahead" * ahead, index, *(() if whole else (start, stop))))
            at = start
            while at < stop:
                if fail_after is not None and at - start >= fail_after:
                    if kind == "peers":
                        raise FetchFailed("no holder sent the block")
                    raise OriginSourceError("the origin reset the connection", permanent=False)
                if s.block_seconds.get(kind):
                    await asyncio.sleep(s.block_seconds[kind])
                step = min(BLOCK - at % BLOCK, stop - at)
                piece = data[lo + at:lo + at + step]
                yield piece.upper() if kind == "peers" else piece
                at += step
        return fetch

    from_peers, from_origin = source("peers"), source("origin")
    session = SimpleNamespace(auto_decompress=False)  # the prefetch makes an OriginRangeSource it never uses
    fetch = SegmentedFetch(SimpleNamespace(session=session), "http://origin.test/f", b"k" * 32, cut,
                           validator='"v"', parking=s.parking, origin_rate=s.rate, clock=loop.time,
                           sleep=asyncio.sleep, jitter=lambda: s.jitter)
    fetch.trust = Trust()
    # The prefetch's fetches are those not `counted` in the request's report.
    fetch._from_peers = lambda found, start, stop, counted=True: from_peers(found.index, start, stop, not counted)
    fetch._from_origin = lambda index, start, stop, origin=None, counted=True: from_origin(index, start, stop,
                                                                                           not counted)
    events: list = []
    fetch.event = events.append
    body, ends, error = bytearray(), None, None
    try:
        async for piece in fetch.chunks(s.start, end):
            body += piece
        ends = loop.time()
    except Exception as exc:  # noqa: BLE001 - the vector names the error the download ends with
        error = type(exc).__name__
    # What the walk left running (a lookahead nobody awaits) runs on, as it would: its lookups count.
    pending = asyncio.all_tasks() - {asyncio.current_task()}
    await asyncio.gather(*pending, return_exceptions=True)
    assert bytes(body).lower() == data[s.start:s.start + len(body)], "bytes not the file's own, or out of place"
    assert error is not None or len(body) == end - s.start, "the body ended early without an error"
    return Outcome(list(fetch.sources), fetches, dict(lookups), events, runs(body), ends, error)


# -- the vectors -----------------------------------------------------------------------------------------------------
# Defaults: parking after 2 others, poll 0.5 s, a budget of 60 s, jitter 0.5 (so each poll is exactly
# `segment_poll`, the pause before claiming half of `_hesitation`), lookups of 1 s, failed ones of 5 s, blocks
# sent at once. `segment_poll(w)` = min(max(0.5, w/8), 4) with w the download's waits so far; `_hesitation` =
# min(max(poll, 2 × the last lookup's seconds), 2); the prefetch of the last segment waits `next_poll(w)` =
# max(poll, w/8) with w its own wait, without jitter. A lookahead of segment i+1 begins when segment i's first
# piece is out and runs beside it; its answer is used only when trusted, else the segment is looked up again.

class Vector(NamedTuple):
    name: str
    given: Scenario
    expect: Outcome


SEGS4 = {i: [T(2)] for i in range(3)}  # segments 0-2 of a 4-segment file, trusted at once, 2 others still fetching

VECTORS = [
    # Lookup 0 ends at 1: peers; the lookahead of 1 runs 1-2: peers.
    Vector("all-trusted-two-segments", Scenario({0: [T()], 1: [T()]}, jitter=0.0),
           Outcome(["peers", "peers"], [(1.0, "peers", 0), (2.0, "peers", 1)], {0: 1, 1: 1},
                   ["segment 0 from peers (ok, 0 others)", "segment 1 from peers (ok, 0 others)"],
                   [("peers", 2 * L)], 2.0)),
    # 4 segments: the last is prefetched (jitter 0: no pause) beside lookup 0, both end at 1; lookaheads 1-2, 2-3.
    # today's behaviour, questionable: segment 2's lookahead of segment 3 is started although the tail was
    # prefetched, and nobody awaits or cancels it: one more lookup of segment 3 (3-4) after the download ended.
    Vector("all-trusted-four-segments-tail-from-peers",
           Scenario({i: [T()] for i in range(4)}, size=4 * L, tail=(T(),), jitter=0.0),
           Outcome(["peers"] * 4, [(1.0, "peers", 0), (1.0, "peers ahead", 3), (2.0, "peers", 1), (3.0, "peers", 2)],
                   {0: 1, 1: 1, 2: 1, 3: 1, "tail": 1},
                   ["segment 0 from peers (ok, 0 others)", "last segment 3 ahead from peers (ok, 0 others)",
                    "segment 1 from peers (ok, 0 others)", "segment 2 from peers (ok, 0 others)"],
                   [("peers", 4 * L)], 3.0)),
    # Lookups end at 1, 2.5, 4, 5.5, 7.1875 after polls of 0.5, 0.5, max(0.5, 4/8), 5.5/8: peers at 7.1875;
    # segment 1's lookahead 7.1875-8.1875.
    Vector("waiting-then-peers", Scenario({0: [N(2)] * 4 + [T(2)], 1: [T(2)]}),
           Outcome(["peers", "peers"], [(5 * 1 + 3 * 0.5 + 5.5 / 8, "peers", 0),
                                        (7.1875 + 1, "peers", 1)], {0: 5, 1: 1},
                   ["segment 0 from peers (ok, 2 others)", "segment 1 from peers (ok, 2 others)"],
                   [("peers", 2 * L)], 8.1875)),
    # Budget 5: lookups end at 1, 2.5, 4 (polls 0.5), 5.5 >= 5: pause 0.5 × 2 = 1, lookup: origin at 7.5. Segment 1
    # (its waits go on from 7.5): lookahead 7.5-8.5 (untrusted, dropped), lookup to 9.5, pause 1, lookup: 11.5.
    # today's behaviour, questionable: with the budget spent, each later segment still pays the pause and two more
    # lookups before its origin fetch (here 4 s a segment), though only a trusted answer could change its source.
    Vector("budget-runs-out-then-origin", Scenario({0: [N(2)], 1: [N(2)]}, parking=parked(5.0)),
           Outcome(["origin", "origin"], [(5.5 + 1 + 1, "origin", 0), (7.5 + 1 + 1 + 1 + 1, "origin", 1)],
                   {0: 5, 1: 3}, ["segment 0 from origin (below-quorum, 2 others)",
                                  "segment 1 from origin (below-quorum, 2 others)"], [("origin", 2 * L)], 11.5)),
    # Segment 0: lookups end at 1, 2.5, 4 (trusted): peers, waits reset. Segment 1 from 4: lookahead 4-5 (dropped),
    # lookup to 6 (waited 2), poll segment_poll(4+2) = 0.75, lookup to 7.75 (waited 3.75), poll 7.75/8 = 0.96875,
    # lookup to 9.71875 (waited 5.71875 >= 5), pause 1, lookup: origin at 11.71875 (from the start: at 6).
    # today's behaviour, questionable: the lookahead's untrusted answer is dropped even when it is fresh (here it
    # ended when segment 1 began), so the walk looks the segment up twice in a row.
    Vector("budget-counts-from-the-last-segment-from-peers", Scenario({0: [N(2), N(2), T(2)], 1: [N(2)]},
                                                                       parking=parked(5.0)),
           Outcome(["peers", "origin"], [(4.0, "peers", 0), (9.71875 + 1 + 1, "origin", 1)], {0: 3, 1: 5},
                   ["segment 0 from peers (ok, 2 others)", "segment 1 from origin (below-quorum, 2 others)"],
                   [("peers", L), ("origin", L)], 11.71875)),
    # Budget 1; nobody fetching (counted as the 2 parked for: within OTHERS_MEMORY). Lookup to 1: origin, pause
    # 0 × 2, lookup to 2: origin. Segment 1: lookahead 2-3 (dropped), lookup to 4, pause 0, lookup: origin at 5.
    Vector("hesitation-jitter-0", Scenario({0: [N(0, "no-record")], 1: [N(0, "no-record")]}, parking=parked(1.0),
                                           jitter=0.0),
           Outcome(["origin", "origin"], [(2.0, "origin", 0), (5.0, "origin", 1)], {0: 2, 1: 3},
                   ["segment 0 from origin (no-record, 2 others)", "segment 1 from origin (no-record, 2 others)"],
                   [("origin", 2 * L)], 5.0)),
    # Jitter 1, budget 1. Lookups of 1.5 s: pause min(2 × 1.5, 2) = 2: 1.5 + 2 + 1.5 = 5. Lookups of 0.75 s:
    # lookahead 5-5.75 (dropped), lookup to 6.5, pause 2 × 0.75 = 1.5, lookup: 6.5 + 1.5 + 0.75 = 8.75.
    Vector("hesitation-jitter-1-follows-the-lookups-pace",
           Scenario({0: [N(0, "no-record", took=1.5)], 1: [N(0, "no-record", took=0.75)]}, parking=parked(1.0),
                    jitter=1.0),
           Outcome(["origin", "origin"], [(1.5 + 2 + 1.5, "origin", 0), (5 + 0.75 * 2 + 1.5 + 0.75, "origin", 1)],
                   {0: 2, 1: 3},
                   ["segment 0 from origin (no-record, 2 others)", "segment 1 from origin (no-record, 2 others)"],
                   [("origin", 2 * L)], 8.75)),
    # Budget 12. Lookup to 1 sees 3; poll 0.5; failed lookup 1.5-6.5 keeps 3: poll 6.5/8 = 0.8125; failed lookup
    # 7.3125-12.3125 >= 12: pause 0.5 × min(2 × 5, 2) = 1, failed lookup to 18.3125: origin, "3 others".
    Vector("failed-lookups-keep-the-last-count", Scenario({0: [N(3), FAILED()], 1: [T()]}, parking=parked(12.0)),
           Outcome(["origin", "peers"], [(12.3125 + 1 + 5, "origin", 0), (18.3125 + 1, "peers", 1)], {0: 4, 1: 1},
                   ["segment 0 from origin (lookup-failed, 3 others)", "segment 1 from peers (ok, 0 others)"],
                   [("origin", L), ("peers", L)], 19.3125)),
    # Poll 4: every poll is 4 s, the pause 0.5 × 4. Lookup to 1 sees 2; lookups to 6, 11, 16 see 0 but keep 2 (5,
    # 10, 15 s after); the one to 21 is OTHERS_MEMORY (20 s) after: 0 others, origin after a pause of 2 and a
    # lookup: 24. Segment 1: lookahead 24-25 (dropped), lookup to 26, pause 2, lookup: 29.
    Vector("fetchers-missing-from-lookups-are-remembered-for-20-s",
           Scenario({0: [N(2), N(0, "no-record")], 1: [N(0, "no-record")]}, parking=parked(600.0, poll=4.0)),
           Outcome(["origin", "origin"], [(1 + 20 + 2 + 1, "origin", 0), (24 + 1 + 1 + 2 + 1, "origin", 1)],
                   {0: 6, 1: 3},
                   ["segment 0 from origin (no-record, 0 others)", "segment 1 from origin (no-record, 0 others)"],
                   [("origin", 2 * L)], 29.0)),
    # Segment 0 trusted with 0 others at 1: that count is not kept. Segment 1: failed lookahead 1-6, failed lookup
    # 6-11 keeps the 2 parked for (waited 10), poll segment_poll(1 + 10) = 11/8, lookup to 13.375: peers.
    Vector("a-trusted-segments-count-is-not-kept", Scenario({0: [T()], 1: [FAILED(), FAILED(), T()]}),
           Outcome(["peers", "peers"], [(1.0, "peers", 0), (11 + 11 / 8 + 1, "peers", 1)], {0: 1, 1: 3},
                   ["segment 0 from peers (ok, 0 others)", "segment 1 from peers (ok, 0 others)"],
                   [("peers", 2 * L)], 13.375)),
    # Jitter 1: the prefetch pauses 1 × max(poll, 2 × 0) = 0.5, its lookup (this segment's own claimers only: 0)
    # ends at 1.5: origin. The walk: peers at 1, 2, 3; the last (1000 bytes) is the prefetched one.
    Vector("tail-prefetched-from-origin", Scenario({**SEGS4, 3: [T(2)]}, size=3 * L + 1000, tail=(N(0),),
                                                   jitter=1.0),
           Outcome(["peers", "peers", "peers", "origin"],
                   [(1.0, "peers", 0), (0.5 + 1, "origin ahead", 3), (2.0, "peers", 1), (3.0, "peers", 2)],
                   {0: 1, 1: 1, 2: 1, 3: 1, "tail": 1},
                   ["segment 0 from peers (ok, 2 others)", "last segment 3 ahead from origin (below-quorum, 0 others)",
                    "segment 1 from peers (ok, 2 others)", "segment 2 from peers (ok, 2 others)"],
                   [("peers", 3 * L), ("origin", 1000)], 3.0)),
    # The prefetch's peers fail after a block (at 1): its bytes are dropped and no event says so; at segment 3 the
    # walk uses segment 2's lookahead (3-4, trusted) and takes the whole segment from peers at 4.
    Vector("tail-from-peers-fails-then-asked-again",
           Scenario({i: [T()] for i in range(4)}, size=4 * L, tail=(T(),), fails={("peers", 3): (BLOCK,)},
                    jitter=0.0),
           Outcome(["peers"] * 4, [(1.0, "peers", 0), (1.0, "peers ahead", 3), (2.0, "peers", 1), (3.0, "peers", 2),
                                   (4.0, "peers", 3)], {0: 1, 1: 1, 2: 1, 3: 1, "tail": 1},
                   ["segment 0 from peers (ok, 0 others)", "last segment 3 ahead from peers (ok, 0 others)",
                    "segment 1 from peers (ok, 0 others)", "segment 2 from peers (ok, 0 others)",
                    "segment 3 from peers (ok, 0 others)"], [("peers", 4 * L)], 4.0)),
    # The prefetch (pause 0.5 × 0.5, lookup to 1.25) asks the origin, which fails at once. Segment 3 from 3, budget
    # 5: lookahead 3-4 (dropped), lookup to 5 (waited 2), poll segment_poll(3+2) = 0.625, lookup to 6.625, poll
    # 6.625/8 = 0.828125, lookup to 8.453125 (waited 5.45 >= 5), pause 1, lookup: origin at 10.453125.
    Vector("tail-from-origin-fails-then-asked-again",
           Scenario({**SEGS4, 3: [N(2)]}, size=4 * L, tail=(N(0),), fails={("origin", 3): (0,)}, parking=parked(5.0)),
           Outcome(["peers", "peers", "peers", "origin"],
                   [(1.0, "peers", 0), (1.25, "origin ahead", 3), (2.0, "peers", 1), (3.0, "peers", 2),
                    (8.453125 + 1 + 1, "origin", 3)], {0: 1, 1: 1, 2: 1, 3: 5, "tail": 1},
                   ["segment 0 from peers (ok, 2 others)", "last segment 3 ahead from origin (below-quorum, 0 others)",
                    "segment 1 from peers (ok, 2 others)", "segment 2 from peers (ok, 2 others)",
                    "segment 3 from origin (below-quorum, 2 others)"], [("peers", 3 * L), ("origin", L)], 10.453125)),
    # The prefetch begins at 0.25 and waits for the segment's own 2 claimers: lookups end at 1.25, 2.75, 4.25,
    # 5.75 (waited 1, 2.5, 4, 5.5: polls 0.5, 0.5, 0.5, 5.5/8), then 7.4375: peers. The walk waits for it from 3.
    Vector("tail-waits-for-its-own-claimers-then-peers", Scenario({**SEGS4, 3: [T(2)]}, size=4 * L,
                                                                  tail=(N(2),) * 4 + (T(2),)),
           Outcome(["peers"] * 4, [(1.0, "peers", 0), (2.0, "peers", 1), (3.0, "peers", 2),
                                   (5.75 + 5.5 / 8 + 1, "peers ahead", 3)], {0: 1, 1: 1, 2: 1, 3: 1, "tail": 5},
                   ["segment 0 from peers (ok, 2 others)", "segment 1 from peers (ok, 2 others)",
                    "segment 2 from peers (ok, 2 others)", "last segment 3 ahead from peers (ok, 2 others)"],
                   [("peers", 4 * L)], 7.4375)),
    # The prefetch's lookup 0.25-5.25 fails: waited 5, poll 5/8, lookup to 6.875 finds 0 of its own: origin.
    # today's behaviour, questionable: the prefetch counts only the segment's own claimers (the file's fetchers
    # hold it last), but a failed lookup gives it the walk's remembered count, which counts the file's fetchers
    # (here the 2 parked for), so it waits for fetchers it means not to wait for.
    Vector("tail-failed-lookup-takes-the-walks-count", Scenario({**SEGS4, 3: [T(2)]}, size=4 * L,
                                                                tail=(FAILED(), N(0))),
           Outcome(["peers", "peers", "peers", "origin"],
                   [(1.0, "peers", 0), (2.0, "peers", 1), (3.0, "peers", 2), (5.25 + 5 / 8 + 1, "origin ahead", 3)],
                   {0: 1, 1: 1, 2: 1, 3: 1, "tail": 2},
                   ["segment 0 from peers (ok, 2 others)", "segment 1 from peers (ok, 2 others)",
                    "segment 2 from peers (ok, 2 others)", "last segment 3 ahead from origin (below-quorum, 0 others)"],
                   [("peers", 3 * L), ("origin", L)], 6.875)),
    # Holders fail segment 0 after a block at 1; lookup 1-2 (beside segment 1's lookahead): its rest from peers.
    Vector("holders-fail-once-then-the-rest-from-peers",
           Scenario({0: [T(2)], 1: [T(2)]}, fails={("peers", 0): (BLOCK,)}),
           Outcome(["peers", "peers"], [(1.0, "peers", 0), (2.0, "peers", 0, BLOCK, L), (2.0, "peers", 1)],
                   {0: 2, 1: 1},
                   ["segment 0 from peers (ok, 2 others)",
                    "segment 0 from peers failed after byte 16384 (no holder sent the block); asking again",
                    "segment 0 from peers (ok, 2 others)", "segment 1 from peers (ok, 2 others)"],
                   [("peers", 2 * L)], 2.0)),
    # PEER_TRIES (2) failures, at 1 and 2: after lookup 2-3 the rest from the origin, without a pause; the
    # segment counts as "peers+origin" (its first bytes came from the holders: a file assembled with them is never
    # vouched for); segment 1 from peers again (its lookahead ran 1-2).
    Vector("holders-fail-peer-tries-times-then-the-rest-from-origin",
           Scenario({0: [T(2)], 1: [T(2)]}, fails={("peers", 0): (BLOCK, BLOCK)}),
           Outcome(["peers+origin", "peers"], [(1.0, "peers", 0), (2.0, "peers", 0, BLOCK, L),
                                               (3.0, "origin", 0, 2 * BLOCK, L), (3.0, "peers", 1)], {0: 3, 1: 1},
                   ["segment 0 from peers (ok, 2 others)",
                    "segment 0 from peers failed after byte 16384 (no holder sent the block); asking again",
                    "segment 0 from peers (ok, 2 others)",
                    "segment 0 from peers failed after byte 32768 (no holder sent the block); asking again",
                    "segment 0 from origin (ok, 2 others)", "segment 1 from peers (ok, 2 others)"],
                   [("peers", 2 * BLOCK), ("origin", 2 * BLOCK), ("peers", L)], 3.0)),
    # Trusted, no provider: one fetcher left is enough to wait for (lookups to 1, 2.5, then 4: peers). Segment 1:
    # nobody (the 2 remembered do not count here): lookahead 4-5, lookup to 6, pause 1, lookup: origin at 8.
    Vector("no-provider-waits-for-one-fetcher-not-for-none", Scenario({0: [NP(1), NP(1), T(1)], 1: [NP(0)]}),
           Outcome(["peers", "origin"], [(4.0, "peers", 0), (4 + 1 + 1 + 1 + 1, "origin", 1)], {0: 3, 1: 3},
                   ["segment 0 from peers (ok, 1 others)", "segment 1 from origin (no-provider, 0 others)"],
                   [("peers", L), ("origin", L)], 8.0)),
    # Nobody at first (lookup to 1: origin); the pause (1) lets another's claim land: the lookup to 3 sees 2, the
    # walk waits (poll 0.5) and finds the segment trusted at 4.5.
    Vector("hesitation-lets-a-claim-land", Scenario({0: [NP(0), N(2), T(2)], 1: [T(2)]}),
           Outcome(["peers", "peers"], [(1 + 1 + 1 + 0.5 + 1, "peers", 0), (5.5, "peers", 1)], {0: 3, 1: 1},
                   ["segment 0 from peers (ok, 2 others)", "segment 1 from peers (ok, 2 others)"],
                   [("peers", 2 * L)], 5.5)),
    # From byte L + BLOCK to the end (4 segments: 1-3 walked, 3 prefetched): the budget is the rest, 180 224 bytes,
    # at 45 056 B/s: 4 s (the whole file would give 5.8). Prefetch: pause 0.25, lookup to 1.25: peers. Segment 1:
    # lookups end at 1, 2.5, 4 >= 4: pause 1, lookup: origin for its last 3 blocks at 6; segment 2's lookahead
    # 6-7: peers. (Segment 2's lookahead of segment 3 runs 7-8 after the end, as in the 4-segment vector above.)
    Vector("starts-inside-a-segment-budget-from-the-rest",
           Scenario({1: [N(2)], 2: [T(2)], 3: [T(2)]}, size=4 * L, start=L + BLOCK, tail=(T(2),), rate=45056.0,
                    parking=parked(600.0, shortest=1.0)),
           Outcome(["origin", "peers", "peers"], [(1.25, "peers ahead", 3), (4 + 1 + 1, "origin", 1, BLOCK, L),
                                                  (7.0, "peers", 2)], {1: 4, 2: 1, 3: 1, "tail": 1},
                   ["last segment 3 ahead from peers (ok, 2 others)", "segment 1 from origin (below-quorum, 2 others)",
                    "segment 2 from peers (ok, 2 others)"], [("origin", 3 * BLOCK), ("peers", 2 * L)], 7.0)),
    # Bytes L+100 .. 3L+200 of a 5-segment file: segments 1-3 walked, none prefetched (the last is not the file's).
    Vector("starts-and-ends-inside-segments", Scenario({1: [T(2)], 2: [T(2)], 3: [T(2)]}, size=5 * L - 100,
                                                       start=L + 100, end=3 * L + 200),
           Outcome(["peers"] * 3, [(1.0, "peers", 1, 100, L), (2.0, "peers", 2), (3.0, "peers", 3, 0, 200)],
                   {1: 1, 2: 1, 3: 1},
                   ["segment 1 from peers (ok, 2 others)", "segment 2 from peers (ok, 2 others)",
                    "segment 3 from peers (ok, 2 others)"], [("peers", 2 * L + 100)], 3.0)),
    # From inside segment 2 of 4 to the end: two segments walked, none prefetched. Budget 1: segment 3 (lookahead
    # 1-2, lookup to 3, waited 2) from the origin after a pause of 1 and a lookup: 5.
    Vector("two-segments-to-the-end-no-prefetch", Scenario({2: [T()], 3: [N(0, "no-record")]}, size=4 * L - 1000,
                                                           start=2 * L + 300, parking=parked(1.0)),
           Outcome(["peers", "origin"], [(1.0, "peers", 2, 300, L), (3 + 1 + 1, "origin", 3)], {2: 1, 3: 3},
                   ["segment 2 from peers (ok, 0 others)", "segment 3 from origin (no-record, 2 others)"],
                   [("peers", L - 300), ("origin", L - 1000)], 5.0)),
    # Blocks from peers take 0.5 s (a segment 2 s): segment 1's lookahead runs 1.5-2.5 beside segment 0 (1-3), so
    # segment 1 begins at 3; segment 2's lookahead 3.5-4.5 is untrusted: lookup 5-6, peers at 6, done at 8.
    Vector("lookahead-runs-beside-the-delivery", Scenario({0: [T(2)], 1: [T(2)], 2: [N(2), T(2)]}, size=4 * L,
                                                          end=3 * L, block_seconds={"peers": 0.5}),
           Outcome(["peers"] * 3, [(1.0, "peers", 0), (1 + 4 * 0.5, "peers", 1), (3 + 2 + 1, "peers", 2)],
                   {0: 1, 1: 1, 2: 2}, ["segment 0 from peers (ok, 2 others)", "segment 1 from peers (ok, 2 others)",
                                        "segment 2 from peers (ok, 2 others)"], [("peers", 3 * L)], 6 + 2.0)),
    # Origin blocks take 2 s. Segment 0: no provider, nobody: lookup to 1, pause 1, lookup: origin at 3 (waited 3),
    # delivered by 11. Segment 1 (budget 5): lookup 11-12, waited 3 + 1 (the delivery's 8 s do not count): poll
    # 0.5, lookup to 13.5: peers.
    Vector("an-origin-segments-delivery-is-no-wait", Scenario({0: [NP(0)], 1: [N(2), N(2), T(2)]},
                                                              block_seconds={"origin": 2.0}, parking=parked(5.0)),
           Outcome(["origin", "peers"], [(3.0, "origin", 0), (3 + 4 * 2 + 1 + 0.5 + 1, "peers", 1)], {0: 2, 1: 3},
                   ["segment 0 from origin (no-provider, 0 others)", "segment 1 from peers (ok, 2 others)"],
                   [("origin", L), ("peers", L)], 13.5)),
    # The origin fails segment 0 after a block: the walk ends with its error (the download's fallback decides);
    # segment 1's lookahead is cancelled before it began.
    Vector("origin-fails-a-segment", Scenario({0: [NP(0)], 1: [T(2)]}, fails={("origin", 0): (BLOCK,)}),
           Outcome(["origin"], [(3.0, "origin", 0)], {0: 2}, ["segment 0 from origin (no-provider, 0 others)"],
                   [("origin", BLOCK)], None, "OriginSourceError")),
]
