"""Parking end to end in one process: with an origin that gives no help, the first slow downloads of a file say
they fetch it from the origin; a newcomer that sees two independent fetchers leaves the origin to them, waits for
their vouches, and finishes from them; one party with many keys cannot make it leave (docs/ARCHITECTURE.md,
"Transition"; `proxy.download.core`, "Parking")."""

from __future__ import annotations

import asyncio
import hashlib

import pytest_asyncio

from proxy.demo.local_swarm import Cluster
from proxy.download.discovery_rule import DiscoveryRule
from proxy.engine import url_key
from proxy.server import ProxyServer

DATA = (hashlib.sha256(b"park").digest() * 12_500)[:400_000]
# W = 30 s: only the early lookup (0.3 s after the first byte) can move a download off the origin here.
SETTINGS = {"first_byte_timeout": "5", "min_rate": "160k", "rate_window": "30", "early_lookup": "0.3",
            "discover_size": "0"}  # every size may be announced: the privacy rule has tests of its own


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, **SETTINGS)
    yield group
    await group.close()


def on_claim(node: ProxyServer) -> asyncio.Event:
    """Set once `node` has said in the DHT that it fetches from the origin (its put is done)."""
    event, real = asyncio.Event(), node.engine.fetching

    def fetching(url: str, **kwargs) -> None:
        real(url, **kwargs)
        asyncio.ensure_future(node.engine.service.settled()).add_done_callback(lambda _: event.set())

    node.engine.fetching = fetching
    return event


def on_transition(node: ProxyServer, cause: str) -> asyncio.Event:
    event, real = asyncio.Event(), node.stats.transition

    def transition(got: str) -> None:
        real(got)
        if got == cause:
            event.set()

    node.stats.transition = transition
    return event


async def test_a_newcomer_leaves_the_origin_to_two_fetchers_and_finishes_from_them(cluster, slow_origin):
    url = slow_origin.add("/crowd.bin", DATA)
    slow_origin.set_rate(60_000)  # under R for everyone
    first, second, newcomer = await cluster.grow(3)
    downloads = []
    for fetcher in (first, second):  # one after the other: each sees fewer than two others, so each claims
        claimed = on_claim(fetcher)
        downloads.append(asyncio.ensure_future(cluster.get(fetcher, url)))
        await claimed.wait()
    parked = on_transition(newcomer, "fetching")
    late = asyncio.ensure_future(cluster.get(newcomer, url))
    await parked.wait()
    origin_bytes_when_parked = slow_origin.bytes_sent
    slow_origin.set_rate(None)  # the fetchers finish and vouch; the newcomer finds their quorum

    for task in (*downloads, late):
        status, _, body = await task
        assert status == 200 and body == DATA
    for fetcher in (first, second):
        assert cluster.last_record(fetcher)["transition"] is None and fetcher.engine.counters.published == 1
    record = cluster.last_record(newcomer)
    assert record["transition"] == "fetching" and record["manifest_source"] == "quorum"
    assert record["bytes_peers"] > 0 and record["error"] is None
    assert record["bytes_origin"] + record["bytes_peers"] == len(DATA)
    assert newcomer.engine.counters.published == 0  # got it from peers: never vouches
    assert origin_bytes_when_parked < 3 * len(DATA)
    # The record says why, in order: the lookup at its head saw the two fetchers, so it parked.
    events = record["events"]
    parked_at = next(i for i, e in enumerate(events) if "switch (fetching)" in e)
    assert any("no-record" in e and "(2 fetching" in e for e in events[:parked_at]), events
    assert not any("this node fetches it" in e for e in events), events
    assert all(e.startswith("+") and "s " in e for e in events)
    assert any(f"from {len(record['peers'])} peers, bytes " in e for e in events[parked_at:]), events
    assert any("this node fetches it from the origin" in e for e in cluster.last_record(first)["events"])


async def test_one_fetcher_is_not_enough_to_leave_the_origin_for(cluster, slow_origin):
    """Under quorum:2 one fetcher could not make a quorum with anyone but the newcomer's own vouch: the newcomer
    stays on the origin and says it fetches too (the pair then vouches for the next ones)."""
    url = slow_origin.add("/pair.bin", DATA)
    slow_origin.set_rate(100_000)
    first, second = await cluster.grow(2)
    claimed = on_claim(first)
    download = asyncio.ensure_future(cluster.get(first, url))
    await claimed.wait()
    claimed_too = on_claim(second)
    status, _, body = await cluster.get(second, url)
    assert status == 200 and body == DATA and claimed_too.is_set()
    assert (await download)[2] == DATA
    for node in (first, second):
        record = cluster.last_record(node)
        assert record["transition"] is None and record["bytes_origin"] == len(DATA)
        assert node.engine.counters.published == 1
    claims = await second.engine.discovery.get_manifests(url_key(url))
    assert len(claims) == 2 and all(c.content_root != bytes(32) for c in claims)  # claims replaced by vouches


def watch_claims(node: ProxyServer, order: list[str], *, stall: bool = False) -> asyncio.Event:
    """Note "lookup" in `order` when `node` asks the DHT for a URL's claims; with `stall`, the DHT never answers.
    The event returned is set when such a lookup was cancelled."""
    cancelled, real = asyncio.Event(), node.engine.service.claims

    async def claims(*args, **kwargs):
        order.append("lookup")
        try:
            if stall:
                await asyncio.Event().wait()
            return await real(*args, **kwargs)
        except asyncio.CancelledError:
            cancelled.set()
            raise
    node.engine.service.claims = claims
    return cancelled


def watch_heads(monkeypatch, order: list[str]) -> None:
    import proxy.download.fallback

    real = proxy.download.fallback.describe

    def describe(*args, **kwargs):
        order.append("head")
        return real(*args, **kwargs)
    monkeypatch.setattr(proxy.download.fallback, "describe", describe)


async def test_a_late_head_starts_the_lookup_before_it_comes(cluster, slow_origin, monkeypatch):
    """The DHT's part of the head's lookup runs while a late head is on its way (`SwarmEngine.look_ahead`, started
    by the privacy rule once the head is silent for half of T): one lookup, asked before the head came, answers the
    lookup at the head."""
    url = slow_origin.add("/ahead.bin", DATA)
    slow_origin.set_rate(60_000)
    slow_origin.first_byte_delay = 0.5  # a busy origin's queue: the head comes after half of T (0.3 s)
    node = await cluster.add(first_byte_timeout="0.6", discover_size=str(DiscoveryRule().large))
    order: list[str] = []
    watch_claims(node, order)
    watch_heads(monkeypatch, order)
    download = asyncio.ensure_future(cluster.get(node, url))
    claimed = on_claim(node)
    await claimed.wait()  # the lookup at the head found nobody fetching: it claims
    assert order[:2] == ["lookup", "head"]
    slow_origin.set_rate(None)
    status, _, body = await download
    assert status == 200 and body == DATA
    events = cluster.last_record(node)["events"]
    assert any("no response head yet" in e for e in events[:1]), events
    assert any("lookup: no-record" in e for e in events[:2]), events


async def test_a_prompt_head_of_a_small_file_is_never_looked_up(cluster, slow_origin, monkeypatch):
    """Before the privacy rule every GET's claims were looked up as it left, and a small or unshared response
    dropped the lookup at its head: a few datagrams for every page's every image. Now a prompt head is never
    looked up (the size rule's default: the file is small)."""
    url = slow_origin.add("/small.bin", DATA[:20_000])
    node = await cluster.add(first_byte_timeout="0.6", discover_size=str(DiscoveryRule().large))
    order: list[str] = []
    watch_claims(node, order, stall=True)
    watch_heads(monkeypatch, order)
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA[:20_000]
    assert order == ["head"]
    events = cluster.last_record(node)["events"]
    assert node.engine.counters.lookups == 0 and len(events) == 1 and "kept private" in events[0]


async def test_a_download_that_steps_back_vouches_for_no_more_segments():
    """After `EndClaim` the spool may take peers' segments (a parked, segmented download), and a swarm failure
    reopens the origin at the spool's end: the download's segment vouches must be gone by then, or it would vouch
    for peers' bytes as first-hand."""
    from proxy.download import actions as act
    from proxy.download.fallback import _Download
    from proxy.stats import RequestRecord

    released, ended = [], []

    class Vouches:
        trust = "its segments' shares"

        def release(self):
            released.append(True)

    download = _Download.__new__(_Download)
    download.record, download.url = RequestRecord("GET", "http://o/f", "127.0.0.1", 0.0), "http://o/f"
    download.loop, download.began = asyncio.get_running_loop(), asyncio.get_running_loop().time()
    download.engine = type("Engine", (), {"fetch_ended": lambda self, url, vouching: ended.append(vouching)})()
    download.vouches, download.vouched_before = Vouches(), []
    await download._do(act.EndClaim())
    assert download.vouches is None and released == [True] and ended == [False]
    assert download.vouched_before == ["its segments' shares"]  # withdrawn too should the body prove wrong
    assert "leaving it to them" in download.record.events[-1]
