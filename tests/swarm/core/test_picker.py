"""Piece picker: table-driven scenarios in the compact notation of `tests/swarm/core/notation.py`, an oracle-checked
random walk (Hypothesis), and a scale check (100,000 blocks, hundreds of sources)."""

from __future__ import annotations

import random
import time
from bisect import insort
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.core import availability as picker_availability
from swarm.core import picker as picker_module
from swarm.core.picker import ORIGIN, STARTS_KEPT, BadBlockIndex, BlockState, Mode, Picker
from swarm.errors import PeerError
from tests.swarm.core.notation import build, run

# (name, picker kwargs, scenario). Ties go by block index because no rng is injected.
SCENARIOS = [
    (
        "rarest first, ties by index",
        {},
        """
        a: 1111
        b: 0110
        c: 0100
        state: ....
        avail -> 1321
        pick a 4 -> 0 3 2 1
        """,
    ),
    (
        "only blocks the source has and that are missing",
        {"max_duplicates": 1},
        """
        a: 1011
        b: 1111
        state: v.r.
        pick a 4 -> 3
        pick b 4 -> 1
        """,
    ),
    (
        "a failed block is pickable again, like a missing one",
        {},
        """
        a: *
        b: 1000
        state: vx..
        pick a 1 -> 1
        """,
    ),
    (
        "the origin takes the blocks no peer has first",
        {},
        """
        origin: *
        a: 1100
        b: 1110
        state: ....
        pick origin 2 -> 3 2
        """,
    ),
    (
        "seeds add to availability but not to the order; the origin is not counted",
        {},
        """
        a: *
        b: *
        origin: *
        c: 0101
        state: ....
        avail -> 2323
        pick a 4 -> 0 2 1 3
        """,
    ),
    (
        "HAVE makes a block less rare",
        {},
        """
        a: 1111
        b: 0011
        state: ....
        have b 0
        avail -> 2122
        pick a 2 -> 1 0
        """,
    ),
    (
        "a lost source no longer counts",
        {},
        """
        a: 1111
        b: 1100
        c: 1000
        state: ....
        lost c -> -
        avail -> 2211
        pick a 4 -> 2 3 0 1
        """,
    ),
    (
        "streaming window first, rarest beyond it",
        {"window": 2},
        """
        a: 11111
        b: 11110
        state: v....
        pick a 4 -> 1 2 4 3
        """,
    ),
    (
        "the window skips requested blocks and blocks the source lacks",
        {"window": 3},
        """
        a: 10111
        b: 11111
        state: .r...
        pick a 3 -> 0 2 3
        """,
    ),
    (
        "the window follows verification",
        {"window": 2},
        """
        a: *
        b: 000001
        state: ......
        verify 0
        verify 1
        pick a 3 -> 2 3 4
        """,
    ),
    (
        "a client Range start moves the window; blocks before it stay rarest-first",
        {"window": 2},
        """
        a: *
        state: ......
        start 3
        pick a 3 -> 3 4 0
        """,
    ),
    (
        "the delivery point is the first unverified block at or after the start",
        {"window": 1},
        """
        a: *
        state: ..vv..
        start 2
        pick a 1 -> 4
        """,
    ),
    (
        "no endgame while any block is still pickable, nor in a pick that found one",
        {},
        """
        a: 1110
        b: *
        state: rrr.
        pick a 2 -> -
        pick b 2 -> 3
        pick b 2 -> -
        """,
    ),
    (
        "endgame: one block for a source with nothing outstanding, fewest requesters first, losers reported",
        {"max_duplicates": 2},
        """
        a: *
        b: *
        c: *
        state: rr.
        pick a 2 -> 2
        pick b 3 -> 0
        pick b 3 -> -
        pick c 3 -> 1
        recv b 0 -> ~
        pick b 3 -> 2
        recv b 2 -> a
        pick a 3 -> -
        states -> grg
        """,
    ),
    (
        "a small file is asked of the first seed, and of the others one block at a time",
        {"window": 8},
        """
        a: *
        b: *
        state: .......
        pick a 8 -> 0 1 2 3 4 5 6
        pick b 8 -> 0
        pick b 8 -> -
        recv b 0 -> a
        pick b 8 -> 1
        """,
    ),
    (
        "endgame off with max_duplicates 1",
        {"max_duplicates": 1},
        """
        a: *
        state: r.
        pick a 2 -> 1
        """,
    ),
    (
        "a block verified from elsewhere cancels every request for it",
        {},
        """
        a: *
        b: *
        state: r.
        pick a 1 -> 1
        pick b 1 -> 0
        recv a 1 -> -
        verify 0 -> b ~
        states -> vg
        """,
    ),
    (
        "a hash failure sends the block back to be picked again",
        {},
        """
        a: *
        state: ..
        pick a 2 -> 0 1
        recv a 0 -> -
        fail 0
        states -> xr
        pick a 1 -> 0
        """,
    ),
    (
        "an aborted request frees the block only when no other request is left",
        {},
        """
        a: *
        state: r
        pick a 1 -> 0
        abort a 0 -> no
        states -> r
        abort ~ 0 -> yes
        states -> .
        """,
    ),
    (
        "a vanished source's requests become pickable at once",
        {},
        """
        a: *
        b: 11
        state: ..
        pick b 2 -> 0 1
        lost b -> 0 1
        states -> ..
        pick a 1 -> 0
        """,
    ),
    (
        "a copy nobody asked for (a late answer) is still used",
        {},
        """
        a: *
        state: ..
        recv a 1 -> -
        states -> .g
        """,
    ),
    (
        "no block is picked twice before endgame, which starts for a source only once it is idle",
        {},
        """
        a: *
        b: *
        state: ....
        pick a 2 -> 0 1
        pick b 1 -> 2
        pick a 2 -> 3
        recv a 0 -> -
        recv a 1 -> -
        recv a 3 -> -
        pick a 2 -> 2
        """,
    ),
]


@pytest.mark.parametrize("name, kwargs, scenario", SCENARIOS, ids=[case[0] for case in SCENARIOS])
def test_scenarios(name: str, kwargs: dict, scenario: str) -> None:
    picker, commands = build(scenario, **kwargs)
    run(picker, commands)


@contextmanager
def sparse_factor(value: float):
    """Force one of the two pick strategies (walk the lists / walk the source's blocks)."""
    saved = picker_module.SPARSE_SCAN_FACTOR
    picker_module.SPARSE_SCAN_FACTOR = value
    try:
        yield
    finally:
        picker_module.SPARSE_SCAN_FACTOR = saved


@contextmanager
def small_thresholds():
    """Chunks of 2-4 ranks and bulk bitfields from 1 block, so that small walks exercise the code paths
    otherwise reached only with thousands of blocks."""
    saved = picker_availability.SortedInts._LOAD, picker_availability.BULK_BITFIELD_MIN
    picker_availability.SortedInts._LOAD, picker_availability.BULK_BITFIELD_MIN = 2, 1
    try:
        yield
    finally:
        picker_availability.SortedInts._LOAD, picker_availability.BULK_BITFIELD_MIN = saved


@pytest.mark.parametrize("factor", [0.0, 1e12], ids=["walk-lists", "walk-source-blocks"])
def test_both_pick_strategies_give_the_table_answers(factor: float) -> None:
    with sparse_factor(factor):
        for _, kwargs, scenario in SCENARIOS:
            picker, commands = build(scenario, **kwargs)
            run(picker, commands)


def test_rng_decides_ties_and_random_order_reproducibly() -> None:
    def order(mode: Mode, seed: int) -> list[int]:
        picker = Picker(64, mode=mode, rng=random.Random(seed))
        picker.add_source("a", has_all=True)
        return picker.pick("a", 64)

    assert order(Mode.RANDOM, 7) == order(Mode.RANDOM, 7)
    assert order(Mode.RANDOM, 7) != order(Mode.RANDOM, 8)
    assert sorted(order(Mode.RANDOM, 7)) == list(range(64))
    assert order(Mode.RANDOM, 7) != list(range(64))
    assert order(Mode.RAREST_FIRST, 7) != list(range(64))  # ties shuffled too


def test_random_mode_ignores_rarity_and_rarest_does_not() -> None:
    bits = [1] * 32 + [0] * 32
    rarest = Picker(64, rng=random.Random(1))
    randomly = Picker(64, mode=Mode.RANDOM, rng=random.Random(1))
    for picker in (rarest, randomly):
        picker.add_source("a", has_all=True)
        picker.add_source("b", bits)
    assert all(block >= 32 for block in rarest.pick("a", 32))
    assert any(block < 32 for block in randomly.pick("a", 32))


def test_random_mode_needs_an_rng() -> None:
    with pytest.raises(ValueError):
        Picker(4, mode=Mode.RANDOM)


@pytest.mark.parametrize(
    "call",
    [
        lambda p: p.have("a", 4),
        lambda p: p.have("a", -1),
        lambda p: p.add_source("b", [1, 0, 1]),
        lambda p: p.add_source("b", b"\x00\x02\x00\x00"),
        lambda p: p.on_received("a", 9),
    ],
    ids=["have past end", "negative have", "short bitfield", "bitfield byte not 0/1", "block past end"],
)
def test_bad_indexes_from_peers_are_peer_errors(call) -> None:
    picker = Picker(4)
    picker.add_source("a", [0, 0, 0, 0])
    with pytest.raises(BadBlockIndex) as info:
        call(picker)
    assert isinstance(info.value, PeerError)


def test_local_misuse_is_refused() -> None:
    picker = Picker(2)
    with pytest.raises(ValueError):
        picker.pick("nobody", 1)
    picker.add_source("a", has_all=True)
    with pytest.raises(ValueError):
        picker.add_source("a", has_all=True)
    picker.on_verified(0)
    with pytest.raises(ValueError):
        picker.on_received("a", 0)  # already verified: the caller must drop the duplicate
    with pytest.raises(ValueError):
        picker.on_failed(1)  # never received


def test_a_full_bitfield_is_a_seed_and_have_is_idempotent() -> None:
    picker = Picker(3)
    picker.add_source("a", [1, 1, 1])
    picker.add_source("b", [0, 1, 0])
    assert [picker.availability(b) for b in range(3)] == [1, 2, 1]
    assert picker.have("b", 0) is True
    assert picker.have("b", 0) is False
    picker.on_verified(2)
    assert picker.have("b", 2) is False  # announced, but we no longer need it
    assert [picker.availability(b) for b in range(3)] == [2, 2, 2]
    picker.remove_source("a")
    assert [picker.availability(b) for b in range(3)] == [1, 1, 1]


def test_completion_and_endgame_flags() -> None:
    picker, _ = build("a: *\nstate: v.")
    assert not picker.in_endgame and not picker.is_complete
    picker.pick("a", 1)
    assert picker.in_endgame
    picker.on_received("a", 1)
    picker.on_verified(1)
    assert picker.is_complete and not picker.in_endgame
    assert picker.delivery_point == 2


def test_nothing_for_you_memo_forgets_when_blocks_return_or_arrive() -> None:
    picker, _ = build("a: 1100\nb: 0011\nstate: ....")
    assert picker.pick("a", 2) == [0, 1]
    assert picker.pick("a", 2) == []  # memo taken
    picker.abort("a", 0)
    assert picker.pick("a", 2) == [0]  # a block came back
    assert picker.pick("a", 2) == []
    assert picker.have("a", 2) is True
    assert picker.pick("a", 2) == [2]  # the source announced a block


def test_a_versioned_skip_keeps_the_memo_until_its_version_changes() -> None:
    picker, _ = build("a: 1100\nstate: ....")

    class Counting(set):
        looked = 0

        def __contains__(self, block: object) -> bool:
            Counting.looked += 1
            return super().__contains__(block)

    skip = Counting({0, 1})  # a nearer peer fetches both (swarm.core.starts)
    assert picker.pick("a", 2, skip=skip, skip_version=1) == []
    looked = Counting.looked
    assert picker.pick("a", 2, skip=skip, skip_version=1) == [] and Counting.looked == looked  # memo taken
    skip.discard(0)  # let go, and the version says so
    assert picker.pick("a", 2, skip=skip, skip_version=2) == [0]
    assert picker.pick("a", 2, skip=Counting({1})) == []  # no version: no memo, looked at again
    assert Counting.looked > looked


# -- oracle-checked random walk ------------------------------------------------------------------------------


def expected_pick(picker: Picker, source, n: int, skip: set[int]) -> list[int]:
    """Brute force over the picker's public state: what `pick` must answer."""
    size = picker.num_blocks
    pickable = {BlockState.MISSING, BlockState.FAILED}
    candidates = [
        b for b in range(size) if picker.state(b) in pickable and picker.has(source, b) and b not in skip
    ]
    start = picker.delivery_point
    window = [b for b in candidates if start <= b < start + picker.window]
    rest = sorted(
        (b for b in candidates if b not in window),
        key=lambda b: (picker.availability(b) if picker.mode is Mode.RAREST_FIRST else 0, b),
    )
    chosen = (window + rest)[:n]
    busy = 0
    if source is ORIGIN and len(chosen) < n and picker.pickable - len(chosen) == 0:
        busy = n - len(chosen)  # the origin takes as many as it has room for
    elif not chosen and picker.pickable == 0 and not picker.requests_of(source):
        busy = 1  # an idle peer: one busy block
    if busy:
        duplicates = sorted(
            (len(picker.requesters(b)), b)
            for b in range(size)
            if picker.state(b) == BlockState.REQUESTED
            and b not in chosen
            and source not in picker.requesters(b)
            and len(picker.requesters(b)) < picker.max_duplicates
            and picker.has(source, b)
            and b not in skip
        )
        chosen += [b for _, b in duplicates[:busy]]
    return chosen


def check_invariants(picker: Picker, holders: dict) -> None:
    for block in range(picker.num_blocks):
        peers = sum(1 for s, has in holders.items() if s is not ORIGIN and has[block])
        assert picker.availability(block) == peers, block
        requesters = picker.requesters(block)
        assert bool(requesters) == (picker.state(block) == BlockState.REQUESTED), block
    counts = {state: 0 for state in BlockState}
    for state in picker.states():
        counts[state] += 1
    assert all(picker.count(state) == counts[state] for state in BlockState)


SOURCE_NAMES = ["a", "b", "c", "d", ORIGIN]
OPERATIONS = ["add", "have", "lost", "pick", "pick", "pick", "recv", "verify", "fail", "abort", "start"]


@pytest.mark.parametrize("factor", [0.0, 1e12], ids=["walk-lists", "walk-source-blocks"])
@pytest.mark.parametrize("mode", [Mode.RAREST_FIRST, Mode.RANDOM])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_random_walk_matches_the_oracle(factor: float, mode: Mode, data: st.DataObject) -> None:
    size = data.draw(st.integers(1, 24), label="blocks")
    window = data.draw(st.integers(0, 4), label="window")
    duplicates = data.draw(st.integers(1, 3), label="max_duplicates")
    with sparse_factor(factor), small_thresholds():
        # the oracle breaks ties by index, so the injected rng leaves the permutation as it is
        picker = Picker(size, mode=mode, window=window, rng=_IdentityRng(), max_duplicates=duplicates)
        holders: dict = {}
        for _ in range(data.draw(st.integers(1, 60), label="steps")):
            op = data.draw(st.sampled_from(OPERATIONS))
            source = data.draw(st.sampled_from(SOURCE_NAMES))
            block = data.draw(st.integers(0, size - 1))
            if op == "add" and source not in holders:
                bits = [True] * size
                if source is not ORIGIN:
                    bits = data.draw(st.lists(st.booleans(), min_size=size, max_size=size))
                picker.add_source(source, bits, has_all=source is ORIGIN)
                holders[source] = list(bits)
            elif op == "have" and source in holders:
                picker.have(source, block)
                holders[source][block] = True
            elif op == "lost" and source in holders:
                requested = picker.requests_of(source)
                returned = picker.remove_source(source)
                del holders[source]
                assert all(picker.state(b) == BlockState.MISSING for b in returned)
                assert set(returned) <= requested
            elif op == "pick" and source in holders:
                skip = set(data.draw(st.lists(st.integers(0, size - 1), max_size=2)))
                n = data.draw(st.integers(1, 5))
                want = expected_pick(picker, source, n, skip)
                assert picker.pick(source, n, skip) == want
                assert all(source in picker.requesters(b) for b in want)
            elif op == "recv" and source in holders and picker.wants(block):
                others = picker.requesters(block) - {source}
                assert set(picker.on_received(source, block)) == others
            elif op == "verify":
                picker.on_verified(block)
            elif op == "fail" and picker.state(block) == BlockState.RECEIVED:
                picker.on_failed(block)
            elif op == "abort" and source in holders:
                picker.abort(source, block)
            elif op == "start":
                picker.set_delivery_point(block)
            check_invariants(picker, holders)


class _IdentityRng(random.Random):
    def shuffle(self, x) -> None:  # type: ignore[override]
        pass


class _SmallChunks(picker_availability.SortedInts):
    _LOAD = 2  # split and merge chunks all the time


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 60)), max_size=80))
def test_chunked_sorted_set_behaves_like_a_sorted_list(ops: list[tuple[bool, int]]) -> None:
    reference = list(range(0, 60, 3))
    ours = _SmallChunks(list(reference))
    for add, value in ops:
        if add and value not in reference:
            ours.add(value)
            insort(reference, value)
        elif not add:
            if value in reference:
                ours.remove(value)
                reference.remove(value)
            else:
                with pytest.raises(KeyError):
                    ours.remove(value)
        assert list(ours) == reference and len(ours) == len(reference)


# -- scale -----------------------------------------------------------------------------------------------------


def test_scale_100k_blocks_300_sources() -> None:
    """A fifth of a 100,000-block download from 300 sources; an O(blocks × sources) pick would take minutes."""
    size, rng = 100_000, random.Random(3)
    picker = Picker(size, window=32, rng=rng)
    sources = []
    started = time.perf_counter()
    for i in range(300):
        name = f"p{i}"
        if i % 6 == 0:
            picker.add_source(name, has_all=True)
        else:
            density = (0.005, 0.05, 0.3, 0.8, 0.95)[i % 5]
            threshold = int(density * 256)
            table = bytes(1 if value < threshold else 0 for value in range(256))
            picker.add_source(name, rng.randbytes(size).translate(table))
        sources.append(name)
    picker.add_origin()
    sources.append(ORIGIN)
    for i in range(5000):  # HAVEs while the download runs
        picker.have(sources[1 + i % 299], rng.randrange(size))
    while picker.count(BlockState.VERIFIED) < size // 5:
        for source in sources:
            for block in picker.pick(source, 16):
                picker.on_received(source, block)
                picker.on_verified(block)
    elapsed = time.perf_counter() - started
    assert picker.delivery_point > 1000  # the window kept delivery moving
    assert elapsed < 10, f"{elapsed:.1f}s"


# -- spread picks (the origin) --------------------------------------------------------------------------------
# (window, peer bitfields, STARTs per peer, delivery point, n) -> blocks, in order
SPREAD = [
    # no peer known: the delivery-point block, then by rank (here the index: no rng)
    (2, {}, {}, 0, 4, [0, 1, 2, 3]),
    (2, {}, {}, 2, 2, [2, 3]),
    # a peer with nothing: the delivery-point block, then by rank (here the index: no rng), window included
    (2, {"a": "000000"}, {}, 0, 4, [0, 1, 2, 3]),
    (2, {"a": "000000"}, {}, 2, 6, [2, 3, 4, 5]),
    # blocks a peer has are left to the peers, the delivery point's too
    (2, {"a": "110001"}, {}, 0, 6, [2, 3, 4]),
    # ... and so are blocks a peer is fetching from the origin
    (2, {"a": "000000"}, {"a": [0, 3]}, 0, 6, [1, 2, 4, 5]),
    (2, {"a": "000000", "b": "000000"}, {"a": [4], "b": [5, 1]}, 0, 6, [0, 2, 3]),
    # verified blocks are never picked
    (3, {"a": "000000"}, {}, 4, 6, [4, 5]),
    # a peer that has everything: nothing from the origin
    (2, {"a": "111111"}, {}, 0, 6, []),
]


def spread_picker(window: int, peers: dict, starts: dict, cursor: int) -> Picker:
    picker = Picker(6, window=window)
    picker.add_origin()
    for name, bits in peers.items():
        picker.add_source(name, [c == "1" for c in bits])
    for name, blocks in starts.items():
        for block in blocks:
            picker.on_start(name, block)
    for block in range(cursor):
        picker.on_verified(block)
    picker.set_delivery_point(cursor)
    return picker


@pytest.mark.parametrize("window, peers, starts, cursor, n, expected", SPREAD)
def test_spread_picks_for_the_origin_take_what_no_peer_has_or_fetches(window, peers, starts, cursor, n, expected):
    picker = spread_picker(window, peers, starts, cursor)
    assert picker.pick(ORIGIN, n, spread=True) == expected


def test_a_start_ends_with_the_peers_have_with_the_peer_or_under_newer_starts():
    picker = spread_picker(2, {"a": "000000", "b": "000000"}, {"a": [2], "b": [3]}, 0)
    assert (picker.started(2), picker.started(3)) == (1, 1)
    picker.have("a", 2)  # fetched: available from a now, no longer "coming"
    picker.remove_source("b")  # gone: what it was fetching is not coming
    assert (picker.started(2), picker.started(3), picker.availability(2)) == (0, 0, 1)
    picker.add_source("c", [False] * 6)
    for block in range(STARTS_KEPT + 1):  # the oldest is forgotten: that request ended one way or another
        picker.on_start("c", block)
    assert picker.started(0) == 0 and all(picker.started(b) == 1 for b in range(1, STARTS_KEPT + 1))
    picker.on_start("c", 5)
    picker.on_start("nobody", 5)  # a source the picker does not know, or the origin: ignored
    picker.on_start(ORIGIN, 5)
    assert picker.started(5) == 1


@pytest.mark.parametrize("factor", [0.0, 1e12], ids=["walk-lists", "walk-source-blocks"])
def test_a_source_holding_no_pickable_block_is_answered_without_a_walk(factor: float, monkeypatch) -> None:
    """The pickable blocks a source holds are two byte masks ANDed: when that is empty, neither walk runs (the
    lists walk went through every pickable block to find nothing, most of a cluster simulation's time)."""
    picker = Picker(4096, rng=random.Random(3))
    picker.add_source("a", [1] * 64 + [0] * 4032)
    picker.add_source("b", [0] * 64 + [1] * 4032)
    assert len(picker.pick("a", 64)) == 64  # every block "a" holds is requested now

    def walked(*_args, **_kwargs):
        raise AssertionError("walked the pickable blocks for a source that holds none of them")

    monkeypatch.setattr(Picker, "_pick_from_lists", walked)
    monkeypatch.setattr(Picker, "_pick_from_source_blocks", walked)
    with sparse_factor(factor):
        assert picker.pick("a", 8) == []
    assert picker.pickable == 4032
