"""Trust before a complete copy, end to end in one process: the first two fetchers of a file vouch for each
segment as their origin streams pass it; a newcomer takes the vouched segments from them while neither has the
whole file, waits for the next ones, and one liar's vouches are outvoted (`proxy.download.segments`)."""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib

import pytest
import pytest_asyncio

from proxy.demo.local_swarm import Cluster
from proxy.download import segment_walk
from proxy.download import segments as segment_swarm
from proxy.download.segment_walk import SegmentWalk
from proxy.download.segments import SegmentedFetch, SegmentTrust, segment_key
from proxy.engine import url_key
from proxy.server import ProxyServer
from swarm.content import segments
from swarm.content.merkle import merkle_root
from swarm.content.segments import Segments

from .test_fallback_park import SETTINGS, on_claim, on_transition

SEGMENT = 64 * 1024  # 4 blocks of 16 KiB: a 448 KiB file is 7 segments
DATA = (hashlib.sha256(b"segments").digest() * 14_336)[:7 * SEGMENT]
CUT_BLOCK = 16 * 1024


@pytest.fixture(autouse=True)
def small_segments(monkeypatch):
    monkeypatch.setattr(segments, "SEGMENT_TARGET", SEGMENT)


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, **SETTINGS)
    yield group
    await group.close()


def count_vouches(monkeypatch) -> tuple[collections.Counter, asyncio.Event, list[int]]:
    """Vouches made per segment index (their puts under way: `settled()` waits for them); the event is set once
    `wanted[0]` segments have two."""
    made, event, wanted = collections.Counter(), asyncio.Event(), [2]
    real = SegmentTrust.vouch

    async def vouch(self, key, cut, index, data, validator, claimed=None):
        await real(self, key, cut, index, data, validator, claimed)
        made[index] += 1
        if sum(1 for n in made.values() if n >= 2) >= wanted[0]:
            event.set()

    monkeypatch.setattr(SegmentTrust, "vouch", vouch)
    return made, event, wanted


def count_peer_segments(monkeypatch, enough: int) -> asyncio.Event:
    """Set once `enough` segments were delivered from peers by segmented downloads."""
    event, done, real = asyncio.Event(), [0], SegmentedFetch._from_peers

    async def from_peers(self, found, start, end, **kwargs):
        async for chunk in real(self, found, start, end, **kwargs):
            yield chunk
        done[0] += 1
        if done[0] >= enough:
            event.set()

    monkeypatch.setattr(SegmentedFetch, "_from_peers", from_peers)
    return event


async def start_fetchers(cluster, nodes: list[ProxyServer], url: str) -> list[asyncio.Future]:
    downloads = []
    for fetcher in nodes:  # one after the other: each sees fewer than two others, so each claims
        claimed = on_claim(fetcher)
        downloads.append(asyncio.ensure_future(cluster.get(fetcher, url)))
        await claimed.wait()
    return downloads


async def test_a_newcomer_takes_vouched_segments_before_anyone_has_the_whole_file(cluster, slow_origin,
                                                                                  monkeypatch):
    from_peers = count_peer_segments(monkeypatch, 2)
    url = slow_origin.add("/big.bin", DATA)
    slow_origin.set_rate(150_000)
    first, second, newcomer, *witnesses = await cluster.grow(6)
    asked_for_manifests = []  # a segment's manifest is made from the agreed fields, never asked of a busy holder
    real_full_manifest = newcomer.engine.service.full_manifest
    monkeypatch.setattr(newcomer.engine.service, "full_manifest",
                        lambda root, providers: asked_for_manifests.append(root) or real_full_manifest(root, providers))
    # Three more nodes vouch for every segment but the last (as if they had read them): however many vouched for
    # the segments it takes from peers, the newcomer never vouches for the file it assembles.
    cut, etag = Segments(len(DATA), CUT_BLOCK), slow_origin.files["/big.bin"][1]
    for witness in witnesses:
        for index in range(cut.count - 1):
            await SegmentTrust(witness.engine).vouch(url_key(url), cut, index, DATA[slice(*cut.span(index))], etag)
        await witness.engine.settled()
    made, two_vouched, _ = count_vouches(monkeypatch)  # the fetchers' and the newcomer's vouches from here on
    downloads = await start_fetchers(cluster, [first, second], url)
    await two_vouched.wait()  # segments 0 and 1 are vouched for by both fetchers
    slow_origin.pause()  # nobody gets one more origin byte: the whole file is nowhere
    await asyncio.gather(first.engine.settled(), second.engine.settled())
    parked = on_transition(newcomer, "fetching")
    late = asyncio.ensure_future(cluster.get(newcomer, url))
    await parked.wait()
    await from_peers.wait()

    assert slow_origin.bytes_sent < 2 * len(DATA)
    assert not any(task.done() for task in downloads)
    whole = await newcomer.engine.discovery.get_manifests(url_key(url))
    assert whole and all(claim.content_root == bytes(32) for claim in whole)  # nobody vouched for the file
    slow_origin.resume()

    for task in (*downloads, late):
        status, _, body = await task
        assert status == 200 and body == DATA
    record = cluster.last_record(newcomer)
    assert record["transition"] == "fetching" and record["manifest_source"] == "segments"
    # The last segment was fetched ahead, from the origin: nobody else had claimed that very segment (the fetchers
    # of the whole file hold it last); the others from the fetchers.
    assert record["segments"] == ["peers"] * 6 + ["origin"]
    assert record["bytes_peers"] == 6 * SEGMENT and record["bytes_origin"] == SEGMENT and record["error"] is None
    assert asked_for_manifests == []
    assert made[0] == 2 and made[6] == 3  # it vouches for what it got from the origin only
    said = [e.split(" ", 1)[1] for e in record["events"]]  # its events say where each segment came from, and why
    assert any(e.startswith("last segment 6 ahead from origin") for e in said), said
    assert [e.split(" (")[0] for e in said if e.startswith("segment ")] == [f"segment {i} from peers" for i in range(6)]
    for fetcher in (first, second):
        assert cluster.last_record(fetcher)["transition"] is None
    # Every segment's vouched root is its bytes' own; together they give the file's root.
    await asyncio.gather(*(node.engine.settled() for node in (first, second, newcomer)))
    cut = Segments(len(DATA), CUT_BLOCK)
    roots = []
    for index in range(cut.count):
        claims = await newcomer.engine.discovery.get_manifests(segment_key(url_key(url), len(DATA), index))
        real = {claim.content_root for claim in claims} - {bytes(32)}
        assert real == {merkle_root(DATA[slice(*cut.span(index))])}
        roots.extend(real)
        assert newcomer.engine.store.complete(roots[-1])  # it serves what it took from peers, the last one too
    assert cut.file_root(roots) == merkle_root(DATA)
    # Every segment vouched for by three (quorum:2 plus one), the whole file it assembled is stored and served, but
    # never vouched for: only bytes from the origin make a vouch (a poisoned segment must not recruit its victims).
    # Nor is it the newcomer's own (`self`): most of its bytes came from peers.
    whole = await first.engine.discovery.get_manifests(url_key(url))
    ours = {c.content_root for c in whole if c.publisher_id == newcomer.engine.discovery.node_id}
    assert ours <= {bytes(32)} and newcomer.engine.store.complete(merkle_root(DATA))
    assert url_key(url) not in newcomer.engine._own_manifests


async def test_a_liars_segment_vouches_are_outvoted_and_its_blocks_never_delivered(cluster, slow_origin,
                                                                                   monkeypatch):
    url = slow_origin.add("/lied.bin", DATA)
    slow_origin.set_rate(400_000)
    first, second, liar, newcomer = await cluster.grow(4)
    cut, key = Segments(len(DATA), CUT_BLOCK), url_key(url)
    lie = bytes(len(DATA))
    etag = slow_origin.files["/lied.bin"][1]
    for index in range(cut.count):  # the liar vouches for (and serves) other bytes for every segment
        start, end = cut.span(index)
        await segment_swarm.SegmentTrust.vouch(SegmentTrust(liar.engine), key, cut, index, lie[start:end], etag)
    await liar.engine.settled()
    downloads = await start_fetchers(cluster, [first, second], url)
    slow_origin.set_rate(150_000)
    late = asyncio.ensure_future(cluster.get(newcomer, url))
    for task in (*downloads, late):
        status, _, body = await task
        assert status == 200 and body == DATA
    record = cluster.last_record(newcomer)
    assert record["manifest_source"] == "segments" and record["bytes_peers"] > 0
    assert liar.engine.bytes_uploaded == 0  # nobody asked the liar for a block
    # The file it assembled is served, never vouched for.
    await newcomer.engine.settled()
    whole = await newcomer.engine.discovery.get_manifests(key)
    assert newcomer.engine.discovery.node_id not in {c.publisher_id for c in whole}
    assert newcomer.engine.store.complete(merkle_root(DATA)) and key not in newcomer.engine._own_manifests
    claims = await newcomer.engine.discovery.get_manifests(segment_key(key, len(DATA), 0))
    assert merkle_root(lie[:SEGMENT]) in {claim.content_root for claim in claims}  # its vouch was there, outvoted


async def test_segments_nobody_else_fetches_come_from_the_origin_and_are_vouched_for(cluster, slow_origin,
                                                                                     monkeypatch):
    """The two fetchers a newcomer waits for leave (their clients hang up, so their claims are withdrawn): it
    takes every segment from the origin by Range, and vouches for each, as they came from the origin."""
    monkeypatch.setattr(segment_walk, "OTHERS_MEMORY", 0.0)  # believe at once that they left
    made, _, _ = count_vouches(monkeypatch)
    url = slow_origin.add("/left.bin", DATA)
    slow_origin.set_rate(30_000)
    first, second, newcomer = await cluster.grow(3)
    downloads = await start_fetchers(cluster, [first, second], url)
    parked = on_transition(newcomer, "fetching")
    late = asyncio.ensure_future(cluster.get(newcomer, url))
    await parked.wait()
    for task in downloads:
        task.cancel()
    await asyncio.gather(*downloads, return_exceptions=True)
    await asyncio.gather(first.engine.settled(), second.engine.settled())  # their claims are withdrawn
    slow_origin.set_rate(None)

    status, _, body = await late
    assert status == 200 and body == DATA
    record = cluster.last_record(newcomer)
    assert record["manifest_source"] == "segments" and record["bytes_origin"] == len(DATA)
    assert record["bytes_peers"] == 0 and record["error"] is None and record["segments"] == ["origin"] * 7
    await newcomer.engine.settled()
    key = url_key(url)
    for index in range(Segments(len(DATA), CUT_BLOCK).count):
        claims = await first.engine.discovery.get_manifests(segment_key(key, len(DATA), index))
        assert newcomer.engine.discovery.node_id in {c.publisher_id for c in claims if c.content_root != bytes(32)}
    assert set(made) == set(range(7))


async def test_segments_of_a_body_that_disagrees_with_its_repr_digest_are_withdrawn(cluster, slow_origin,
                                                                                    monkeypatch):
    """A fetcher vouches for each segment as its origin stream passes it; when the whole body then disagrees with
    the origin's RFC 9530 Repr-Digest, every segment it shared is withdrawn, its vouches too, and dropped from
    its store: nothing of that body is served again (before, they stayed shared and vouched for)."""
    made, _, _ = count_vouches(monkeypatch)
    wrong = base64.b64encode(hashlib.sha256(b"what the origin says it serves").digest()).decode()
    url = slow_origin.add("/wrong.bin", DATA, headers={"Repr-Digest": f"sha-256=:{wrong}:"})
    slow_origin.set_rate(150_000)
    fetcher, witness = await cluster.grow(2)
    [download] = await start_fetchers(cluster, [fetcher], url)
    status, _, body = await download
    assert status == 200 and body == DATA  # the origin's own bytes, relayed as they are
    await asyncio.gather(fetcher.engine.settled(), witness.engine.settled())
    assert made  # it did vouch for segments as its stream passed them
    key, cut = url_key(url), Segments(len(DATA), CUT_BLOCK)
    for index in range(cut.count):
        claims = await witness.engine.discovery.get_manifests(segment_key(key, len(DATA), index))
        assert fetcher.engine.discovery.node_id not in {c.publisher_id for c in claims}, index
        assert merkle_root(DATA[slice(*cut.span(index))]) not in fetcher.engine.store, index
    whole = await witness.engine.discovery.get_manifests(key)
    assert fetcher.engine.discovery.node_id not in {c.publisher_id for c in whole if c.content_root != bytes(32)}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def scripted_fetch(answer, *, wait: float, jitter: float, peers=None) -> tuple[bytes, list, SegmentedFetch]:
    """A two-segment SegmentedFetch on a fake clock whose lookups answer `answer(index)` (each takes a second) and
    whose peers (`peers(start, end)`'s pieces when given) and origin answer at once; parking waits `wait` s at
    most. The body, what came from where when."""
    import aiohttp

    from proxy.download.parking import ParkingSettings

    clock = FakeClock()
    cut = Segments(2 * SEGMENT, CUT_BLOCK)
    taken: list[tuple[str, float]] = []

    class Trust:
        async def look_up(self, url_key, cut, index, validator, file_fetchers=True, enough=1):
            clock.now += 1.0
            return answer(index)

        def release(self):
            pass

    async with aiohttp.ClientSession(auto_decompress=False) as session:
        engine = type("Engine", (), {"session": session})()
        fetch = SegmentedFetch(engine, "http://127.0.0.1:9/f", b"k" * 32, cut, validator='"v"',
                               parking=ParkingSettings(after=2, poll=0.5, shortest=wait, longest=wait),
                               origin_rate=1e9, clock=clock, sleep=clock.sleep, jitter=lambda: jitter)
        fetch.trust = Trust()

        async def from_peers(found, start, end):
            taken.append(("peers", clock.now))
            for piece in (peers or (lambda start, end: [b"p" * (end - start)]))(start, end):
                yield piece

        async def from_origin(index, start, end):
            taken.append(("origin", clock.now))
            yield b"o" * (end - start)

        fetch._from_peers, fetch._from_origin = from_peers, from_origin
        body = b"".join([piece async for piece in fetch.chunks(0, cut.size)])
    return body, taken, fetch


FOUND = type("Found", (), {"providers": []})()


async def test_the_wait_for_vouches_is_bounded_and_counts_from_the_last_segment_others_delivered():
    """Segment 0 comes from peers after 4 s of waiting; segment 1's fetchers stop delivering: after the budget
    (the whole rest at the origin's rate, here 5 s) since segment 0 it is taken from the origin."""
    from proxy.download.segments import SegmentLookup

    answers = {0: iter([None, None, None, FOUND]), 1: iter([None] * 1000)}

    def answer(index):
        found = next(answers[index])
        return SegmentLookup(found, 2, "ok" if found else "below-quorum")

    body, taken, fetch = await scripted_fetch(answer, wait=5.0, jitter=1.0)
    assert body == b"p" * SEGMENT + b"o" * SEGMENT
    (first, at0), (second, at1) = taken
    assert (first, second) == ("peers", "origin")
    # Four lookups of 1 s and three polls, each 1.25 times (the spread) the back-off: 0.5 s, then an eighth of
    # the wait so far (4.25 s at the third).
    assert at0 == pytest.approx(4 + 1.25 * (0.5 + 0.5 + 4.25 / 8))
    # The budget again, from segment 0 on (at most a lookup and a poll late: the polls back off with all the
    # download waited, at most 1.25 * 12.5 / 8 s by then), then a pause (twice a lookup's 1 s here) and one more
    # lookup.
    assert 5.0 + 2.0 + 1.0 <= at1 - at0 <= 5.0 + 1.0 + 1.25 * 12.5 / 8 + 2.0 + 1.0
    assert fetch.sources == ["peers", "origin"]


async def test_a_failed_lookup_is_no_reason_to_ask_the_origin():
    """A busy DHT times a lookup out: that says nothing of who fetches the segment, so the download keeps the last
    count it had (at first, the fetchers it parked for) and goes on waiting instead of joining the origin."""
    from proxy.download.segments import SegmentLookup

    answers = iter([SegmentLookup(None, 0, "lookup-failed")] * 3 + [SegmentLookup(FOUND, 2, "ok")] * 10)
    body, _, fetch = await scripted_fetch(lambda index: next(answers), wait=60.0, jitter=0.0)
    assert body == b"p" * 2 * SEGMENT and fetch.sources == ["peers", "peers"]


async def test_a_trusted_segments_count_of_others_is_not_kept_for_the_next():
    """A trusted segment's lookup counts only that segment's claimers (none, once it is vouched for): when the next
    segment's lookups time out, the download still waits for the fetchers it parked for."""
    from proxy.download.segments import SegmentLookup

    answers = iter([SegmentLookup(FOUND, 0, "ok")] + [SegmentLookup(None, 0, "lookup-failed")] * 3
                   + [SegmentLookup(FOUND, 0, "ok")] * 10)
    body, _, fetch = await scripted_fetch(lambda index: next(answers), wait=60.0, jitter=0.0)
    assert body == b"p" * 2 * SEGMENT and fetch.sources == ["peers", "peers"]


async def test_fetchers_missing_from_one_lookup_are_not_taken_for_gone():
    """A busy DHT answers a lookup from nodes that miss the fetchers' claims: the download goes on waiting for
    OTHERS_MEMORY s after it last saw them, and only then (nobody seen since) takes the segment from the origin."""
    from proxy.download.segment_walk import OTHERS_MEMORY, SegmentLookup

    answers = iter([SegmentLookup(None, 2, "below-quorum")] + [SegmentLookup(None, 0, "no-record")] * 1000)
    body, taken, fetch = await scripted_fetch(lambda index: next(answers), wait=600.0, jitter=0.0)
    assert fetch.sources[0] == "origin"
    at = taken[0][1]
    assert 1.0 + OTHERS_MEMORY <= at <= 1.0 + OTHERS_MEMORY + 1.0 + 4.0  # a lookup and a poll late at most


def failing_peers(failures: int):
    """Peers that send a quarter of what is asked and then fail, `failures` times; then all of it."""
    from swarm.errors import FetchFailed

    asked: list[tuple[int, int]] = []

    def peers(start, end):
        asked.append((start, end))
        if len(asked) <= failures:
            yield b"p" * (SEGMENT // 4)
            raise FetchFailed("no peer sent the hash layer within 5 s of being asked")
        yield b"p" * (end - start)

    return peers, asked


async def test_a_segment_its_holders_fail_is_asked_again_from_where_they_left_off_not_the_whole_file():
    """Busy holders fail a segment midway (a hash layer queued behind a crowd's blocks): the download asks for that
    segment's rest again, and never takes the rest of the file from the origin (on the tree before, the failure
    ended the segmented download: the 100-client largefile's two such failures read 30 MB each from the origin)."""
    from proxy.download.segments import SegmentLookup

    peers, asked = failing_peers(1)
    body, taken, fetch = await scripted_fetch(lambda index: SegmentLookup(FOUND, 2, "ok"), wait=60.0, jitter=0.0,
                                              peers=peers)
    assert body == b"p" * 2 * SEGMENT
    assert asked == [(0, SEGMENT), (SEGMENT // 4, SEGMENT), (0, SEGMENT)]
    assert [source for source, _ in taken] == ["peers"] * 3 and fetch.sources == ["peers", "peers"]


async def test_a_segment_its_holders_fail_twice_comes_from_the_origin_and_the_next_from_peers_again():
    from proxy.download.segment_walk import PEER_TRIES, SegmentLookup

    peers, asked = failing_peers(PEER_TRIES)
    body, taken, fetch = await scripted_fetch(lambda index: SegmentLookup(FOUND, 2, "ok"), wait=60.0, jitter=0.0,
                                              peers=peers)
    quarter = SEGMENT // 4
    assert body == b"p" * 2 * quarter + b"o" * (SEGMENT - 2 * quarter) + b"p" * SEGMENT
    assert asked == [(0, SEGMENT), (quarter, SEGMENT), (0, SEGMENT)]
    assert [source for source, _ in taken] == ["peers", "peers", "origin", "peers"]
    assert fetch.sources == ["peers+origin", "peers"]  # its first quarter came from the holders


@pytest.mark.parametrize("lookup_seconds,longest", [(0.0, 0.5), (0.4, 0.8), (1.0, 2.0), (30.0, 2.0)])
def test_the_pause_before_claiming_follows_the_dhts_pace_within_a_bound(lookup_seconds, longest):
    """Twice a lookup's time (a claim's put takes about as long), at least the poll, and at most HESITATION_MAX:
    a lookup slowed on purpose must not stretch every segment's wait."""
    from proxy.download.parking import ParkingSettings

    walk = SegmentWalk(ParkingSettings(after=2, poll=0.5), origin_rate=1e6, now=0.0, jitter=lambda: 0.5)
    walk.lookup_seconds = lookup_seconds
    assert walk.hesitation() == pytest.approx(longest)
