"""Today's segment-by-segment walk (`proxy.download.segments.SegmentedFetch`), pinned by the vectors of
`segment_vectors.py`: each plays one scenario (lookups' answers per segment and call, what peers and the origin
do, parking, jitter) on a fake clock and compares everything the walk did with the vector's expectation, times
exact. The same vectors are meant to be played later against a sans-I/O core, by a driver of its own."""

from __future__ import annotations

import asyncio

import pytest

from proxy.download import parking, segment_walk

from .segment_vectors import VECTORS, VirtualLoop, play, settled


def test_the_rules_the_vectors_arithmetic_assumes():
    """The vectors' times are computed from these constants: a change to one should fail here first, by name."""
    assert (segment_walk.OTHERS_MEMORY, segment_walk.PEER_TRIES, segment_walk.HESITATION_MAX) == (20.0, 2, 2.0)
    assert parking.SEGMENT_POLL_MAX_SECONDS == 4.0


def test_the_fake_clock_jumps_to_the_next_timer_and_runs_tasks_side_by_side():
    loop, seen = VirtualLoop(), []

    async def after(seconds: float, name: str) -> None:
        await asyncio.sleep(seconds)
        seen.append((loop.time(), name))

    async def both() -> None:
        await asyncio.gather(after(3600.0, "late"), after(1.5, "early"))

    try:
        loop.run_until_complete(both())
    finally:
        loop.close()
    assert seen == [(1.5, "early"), (3600.0, "late")]


def test_the_vectors_have_unique_names():
    names = [vector.name for vector in VECTORS]
    assert len(names) == len(set(names)) and 15 <= len(names) <= 30


@pytest.mark.parametrize("vector", VECTORS, ids=[vector.name for vector in VECTORS])
def test_the_walk_does_what_the_vector_says(vector):
    assert settled(play(vector.given)) == settled(vector.expect)
