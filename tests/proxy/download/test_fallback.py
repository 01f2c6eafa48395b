"""The fallback download end to end in one process: ten full nodes (proxy + block engine + DHT) on 127.0.0.x
and a throttled origin. The first nodes fetch from the origin and publish; later ones switch by T and by R
and finish byte-exact with most bytes from peers."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gc
import hashlib
import logging
import os
import threading
import time

import aiohttp
import pytest
import pytest_asyncio

from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin
from proxy.engine import Found, Miss, url_key
from swarm.discovery import ManifestClaim
from swarm.store.disk import DiskBlockStore

SIZE = 3 * 1024 * 1024 + 12345
DATA = hashlib.sha256(b"fallback").digest() * (SIZE // 32 + 1)
DATA = DATA[:SIZE]

# Switches by T and R, not by the crowd rule: no early lookup (before the 0.25 s default, one at W was off anyway).
# Every size may be announced (--discover-size 0): these tests are about the swarm, not the privacy rule, whose own
# tests (test_fallback_privacy, test_download_privacy) run with the product's default.
FAST_SWITCH = {"first_byte_timeout": "0.3", "min_rate": "160k", "rate_window": "0.5", "early_lookup": "0",
               "discover_size": "0"}


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, **FAST_SWITCH)
    yield group
    await group.close()


async def seeded(cluster: Cluster, slow_origin: SlowOrigin, path: str = "/big.bin", data: bytes = DATA,
                 publishers: int = 4, **headers: str) -> str:
    """`publishers` nodes fetch `path` from a fast origin (so they vouch for it); returns its URL. Four by
    default: a quorum of 2 for an R switch, and the one more that a T switch before any origin byte needs; and
    in a DHT this small the storing nodes are the publishers, whose records attest each other: a party holding
    all but one of their networks could have made the last one up, so n of them weigh n - 1 to a reader whose
    own store did not see them (`swarm.trust.quorum._fewest_networks`)."""
    url = slow_origin.add(path, data, headers=headers or None)
    for node in await cluster.grow(publishers):
        status, _, body = await cluster.get(node, url)
        assert status == 200 and body == data
        assert cluster.last_record(node)["transition"] is None
    return url


async def test_ten_nodes_later_ones_switch_by_r_and_by_t_and_get_most_bytes_from_peers(cluster, slow_origin):
    url = await seeded(cluster, slow_origin)  # nodes 0..3 fetch from the origin and vouch for the file
    for node in cluster.nodes:
        assert node.engine.counters.published == 1

    for index in range(6):  # nodes 4..9, alternating: a crawling origin (R), a silent one (T)
        by_rate = index % 2 == 0
        slow_origin.set_rate(64_000 if by_rate else None)
        slow_origin.first_byte_delay = 0.0 if by_rate else 30.0
        node = await cluster.add()
        status, headers, body = await cluster.get(node, url)
        assert status == 200 and body == DATA
        record = cluster.last_record(node)
        assert record["transition"] == ("R" if by_rate else "T")
        assert record["manifest_source"] == "quorum" and record["swarm_skipped"] is None
        assert record["bytes_origin"] + record["bytes_peers"] == SIZE
        assert record["bytes_peers"] > SIZE // 2
        assert headers["Content-Length"] == str(SIZE)
        assert headers["ETag"] == slow_origin.files["/big.bin"][1]
        assert headers["Content-Type"] == "application/octet-stream"
        assert node.engine.counters.published == 0  # got it from peers: a provider, never a publisher
        assert node.engine.counters.announced == 1  # when its fetch began: that record stands once complete
    assert len(cluster.nodes) == 10
    assert sum(n.engine.bytes_uploaded for n in cluster.nodes[4:]) > 0  # later nodes served each other too


@pytest.mark.parametrize("agrees", [True, False], ids=["digest-agrees", "digest-disagrees"])
async def test_an_origins_repr_digest_is_checked_over_a_swarmed_body(cluster, slow_origin, agrees):
    url = await seeded(cluster, slow_origin)
    # From now on the origin says (RFC 9530) which bytes it serves; when that is not what peers hold, a body
    # with their bytes in it must never end as if complete.
    said = DATA if agrees else b"what the origin serves now"
    slow_origin.extra_headers["/big.bin"] = {"Repr-Digest": "sha-256=:{}:".format(base64.b64encode(
        hashlib.sha256(said).digest()).decode())}
    slow_origin.set_rate(64_000)
    node = await cluster.add()
    if agrees:
        status, _, body = await cluster.get(node, url)
        assert status == 200 and body == DATA
    else:
        with pytest.raises(aiohttp.ClientPayloadError):  # cut before its last byte
            await cluster.get(node, url)
    record = cluster.last_record(node)
    assert record["bytes_peers"] > 0
    assert record["error"] is None if agrees else record["error"].startswith("digest_mismatch")


async def test_client_range_in_the_middle_is_served_from_peers(cluster, slow_origin):
    url = await seeded(cluster, slow_origin)
    slow_origin.first_byte_delay = 30.0
    node = await cluster.add()
    status, headers, body = await cluster.get(node, url, {"Range": "bytes=1000000-2500000"})
    assert status == 206
    assert body == DATA[1000000:2500001]
    assert headers["Content-Range"] == f"bytes 1000000-2500000/{SIZE}"
    assert cluster.last_record(node)["transition"] == "T"

    node = await cluster.add()  # "bytes=0-" (what browsers send) is a 206 with a Content-Range too
    status, headers, body = await cluster.get(node, url, {"Range": "bytes=0-"})
    assert status == 206 and body == DATA
    assert headers["Content-Range"] == f"bytes 0-{SIZE - 1}/{SIZE}"


async def test_origin_dying_mid_transfer_is_finished_from_peers(cluster, slow_origin):
    url = await seeded(cluster, slow_origin)
    slow_origin.die_after["/big.bin"] = 500_000
    slow_origin.down_after_cut = True  # then an outage: only peers can supply the rest
    # Neither T nor R may fire first: on a loaded machine the origin's first byte took longer than the 0.3 s T.
    node = await cluster.add(first_byte_timeout="60", min_rate="0")
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(node)
    assert record["transition"] == "died"
    assert record["bytes_peers"] >= SIZE - 500_000


async def test_no_publisher_means_the_origin_alone_finishes(cluster, slow_origin):
    small = DATA[:300_000]
    url = await seeded(cluster, slow_origin, data=small, publishers=1)  # one vouch is no quorum of 2
    slow_origin.set_rate(100_000)
    node = await cluster.add()
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == small
    record = cluster.last_record(node)
    assert record["transition"] == "R"
    assert record["manifest_source"] is None
    assert record["bytes_peers"] == 0 and record["bytes_origin"] == len(small)
    assert node.engine.counters.published == 1  # all of it came from the origin: it vouches for it now


async def test_a_crawling_download_asks_again_and_moves_to_peers_that_appeared(cluster, slow_origin):
    # The flash crowd's problem: at the switch nobody has vouched yet, a moment later someone has.
    url = await seeded(cluster, slow_origin)
    slow_origin.set_rate(100_000)
    node = await cluster.add()
    node.fallback.settings = dataclasses.replace(node.fallback.settings, repoll=(0.0,))  # steps lookups, not time
    real_find, answers = node.engine.find, []

    async def find(*args, **kwargs):
        found = await real_find(*args, **kwargs) if answers else None  # the first lookup comes too early
        answers.append(found)
        return found

    node.engine.find = find
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    assert answers[0] is None and answers[-1] is not None
    record = cluster.last_record(node)
    assert record["transition"] == "R" and record["manifest_source"] == "quorum"
    assert record["bytes_peers"] > len(DATA) // 2


async def test_a_crowd_that_has_the_file_takes_a_slow_download_before_w(tmp_path, slow_origin):
    # W = 30 s: only the crowd rule can move this download; it looks up 0.3 s after the first byte.
    cluster = Cluster(tmp_path, first_byte_timeout="5", min_rate="160k", rate_window="30", early_lookup="0.3",
                      discover_size="0")
    try:
        url = await seeded(cluster, slow_origin)
        slow_origin.set_rate(64_000)
        node = await cluster.add()
        status, _, body = await cluster.get(node, url)
        assert status == 200 and body == DATA
        record = cluster.last_record(node)
        assert record["transition"] == "crowd" and record["manifest_source"] == "quorum"
        assert record["bytes_peers"] > len(DATA) // 2
        assert node.engine.counters.transitions == {"crowd": 1}
    finally:
        await cluster.close()


async def test_an_origin_that_is_fast_so_far_is_not_looked_up_early(tmp_path, slow_origin):
    cluster = Cluster(tmp_path, first_byte_timeout="5", min_rate="160k", rate_window="30", early_lookup="0.3",
                      discover_size="0")
    try:
        url = await seeded(cluster, slow_origin, publishers=1)
        slow_origin.set_rate(2_000_000)  # well above R, and still sending at the early-lookup point
        node = await cluster.add()
        lookups = []
        real_find = node.engine.find

        async def find(*args, **kwargs):
            lookups.append(args)
            return await real_find(*args, **kwargs)

        node.engine.find = find
        status, _, body = await cluster.get(node, url)
        assert status == 200 and body == DATA
        # One lookup at its head (are others fetching it already?), none at the early point: it was fast.
        assert len(lookups) == 1 and cluster.last_record(node)["transition"] is None
    finally:
        await cluster.close()


async def test_a_lone_node_that_switches_finishes_from_the_origin_and_then_shares(tmp_path, slow_origin):
    lone = Cluster(tmp_path, **FAST_SWITCH, dht_listen="off")  # no DHT: the lookup answers at once
    try:
        small = DATA[:300_000]
        url = slow_origin.add("/lone.bin", small)
        slow_origin.set_rate(100_000)
        node = await lone.add()
        status, _, body = await lone.get(node, url)
        assert status == 200 and body == small
        record = lone.last_record(node)
        assert record["transition"] == "R" and record["error"] is None and record["swarm_skipped"] == "dht-off"
        assert node.stats.registry.get_sample_value("swarmproxy_swarm_skipped_total", {"reason": "dht-off"}) == 1
        assert url_key(url) in node.engine._own_manifests  # stored: it can serve it to peers
    finally:
        await lone.close()


async def test_an_origin_breaking_off_while_the_next_lookup_waits_is_cut_after_that_lookup(tmp_path, slow_origin):
    # Between two lookups the shell waits only for time: the scheduled lookup is the last chance, then the cut.
    lone = Cluster(tmp_path, **FAST_SWITCH, dht_listen="off")
    try:
        url = slow_origin.add("/dies.bin", DATA[:1_000_000])
        slow_origin.set_rate(100_000)
        slow_origin.die_after["/dies.bin"] = 200_000
        node = await lone.add()
        with pytest.raises(aiohttp.ClientPayloadError):  # cut, never ended short as if complete
            await lone.get(node, url)
        record = lone.last_record(node)
        assert record["transition"] == "R" and record["bytes_origin"] < 1_000_000
        assert record["error"].startswith("origin_cut: the origin broke off after")
    finally:
        await lone.close()


@pytest.mark.parametrize("case", [
    pytest.param({"headers": {"Cache-Control": "private, max-age=60"}, "why": "private"}, id="cache-control-private"),
    pytest.param({"headers": {"Set-Cookie": "session=1"}, "why": "set-cookie"}, id="set-cookie"),
    pytest.param({"request": {"Authorization": "Bearer x"}, "why": "authorization"}, id="authorization"),
    pytest.param({"headers": {"ETag": "", "Last-Modified": ""}, "why": "no-validator"}, id="no-validator"),
])
async def test_private_responses_are_never_announced(cluster, slow_origin, case):
    path = "/private.bin"
    url = slow_origin.add(path, DATA[:100_000], headers=case.get("headers"))
    nodes = await cluster.grow(3)
    for node in nodes:
        _, _, body = await cluster.get(node, url, case.get("request", {}))
        assert body == DATA[:100_000]
        assert cluster.last_record(node)["swarm_skipped"] == case["why"]  # /_swarm/requests says why
    key = url_key(url)
    for node in nodes:
        assert node.engine.counters.published == 0 and node.engine.counters.announced == 0
        stored = list(node.dht.store.records(time.time()))
        assert not any(getattr(r, "repr_key", None) == key for r in stored)
        assert stored == []  # nothing else is in play: no provider record either


async def test_a_peer_serving_bad_blocks_is_banned_and_no_bad_byte_reaches_the_client(cluster, slow_origin):
    small = DATA[:600_000]
    url = await seeded(cluster, slow_origin, data=small, publishers=3)
    liar = cluster.nodes[0]
    root = liar.engine._own_manifests[url_key(url)].root
    for other in cluster.nodes[1:]:  # only the liar serves: the others stop sharing
        other.engine.withdraw(root, "test")
    await asyncio.gather(*(n.engine.settled() for n in cluster.nodes))
    data_file = liar.config.data_dir / "blocks" / f"{root.hex()}.data"
    with open(data_file, "r+b") as handle:  # corrupt every byte the liar holds, behind its store's back
        handle.write(bytes(b ^ 0x5A for b in small))
    slow_origin.set_rate(120_000)
    node = await cluster.add()
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == small  # finished by the origin (Range source and stream), verified
    assert node.stats.counters["hash_failures"] >= 1
    assert node.stats.counters["peer_bans"] >= 1
    assert b"swarmproxy_hash_failures_total" in node.stats.prometheus_text()


async def _publish_fake(liar, url: str, tmp_path) -> bytes:
    """`liar` vouches for `url` with a manifest of other bytes, and serves those bytes."""
    fake = bytes(b ^ 0xFF for b in DATA)
    path = tmp_path / "fake.bin"
    path.write_bytes(fake)
    manifest = await liar.engine.nodes["tcp"].seed_file(path)
    for other in liar.engine.nodes.values():
        other.share(manifest.root)
    own = next(iter(liar.engine._own_manifests.values()), None)
    origin_validator = own.validator if own else '"fake"'
    validator = origin_validator.encode("latin-1")
    await liar.engine.discovery.announce(manifest.root, ("0.0.0.0", liar.engine.address[1]),
                                         liar.engine.transport_flags)
    await liar.engine.discovery.put_manifest(url_key(url), ManifestClaim(
        manifest.root, manifest.size, manifest.block_size, validator))
    return manifest.root


async def test_two_nodes_with_the_defaults_say_why_the_second_keeps_to_the_origin(cluster, slow_origin):
    # What the README promises a newcomer trying two nodes: no swarm with quorum:2, and the reason in plain words.
    url = await seeded(cluster, slow_origin, data=DATA[:400_000], publishers=1)
    slow_origin.set_rate(100_000)
    second = await cluster.add()
    status, _, body = await cluster.get(second, url)
    assert status == 200 and body == DATA[:400_000]
    record = cluster.last_record(second)
    assert record["transition"] == "R" and record["bytes_peers"] == 0
    # Two nodes alone: its one publisher's address is attested by no second storing node, so it weighs nothing.
    assert record["swarm_skipped"] == "below-quorum (0 publishers, 1 unattested)"


async def test_a_fake_manifest_without_quorum_is_never_used(cluster, slow_origin, tmp_path):
    small = DATA[:400_000]
    url = await seeded(cluster, slow_origin, data=small, publishers=1)  # one honest publisher...
    liar = await cluster.add()
    fake_root = await _publish_fake(liar, url, tmp_path)  # ...and one liar: no quorum of 2 either way
    slow_origin.set_rate(100_000)
    node = await cluster.add()
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == small
    record = cluster.last_record(node)
    assert record["transition"] == "R" and record["manifest_source"] is None
    assert record["swarm_skipped"].startswith("below-quorum (")  # said plainly, not a silent no-swarm
    assert liar.engine.bytes_uploaded == 0
    assert fake_root not in node.engine.store


async def test_a_fake_manifest_is_outvoted_by_a_quorum(cluster, slow_origin, tmp_path):
    # The liar is there first: a storing node when the honest two publish, so each of their records is seen
    # arriving from its publisher by two others (dht.attestation), as in any DHT of more than three nodes.
    liar = await cluster.add()
    url = await seeded(cluster, slow_origin, publishers=2)
    fake_root = await _publish_fake(liar, url, tmp_path)
    slow_origin.set_rate(64_000)
    node = await cluster.add()
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(node)
    assert record["manifest_source"] == "quorum" and record["bytes_peers"] > SIZE // 2
    assert fake_root not in node.engine.store


async def test_a_manifest_of_an_older_version_is_not_used_when_the_origins_head_says_so(cluster, slow_origin):
    url = await seeded(cluster, slow_origin)
    slow_origin.add("/big.bin", DATA[::-1])  # a new version: another ETag
    slow_origin.first_byte_delay = 2.0  # GET says nothing (T fires) ...
    slow_origin.head_delay = 0.0  # ... while HEAD answers at once
    node = await cluster.add()
    status, headers, body = await cluster.get(node, url)
    assert status == 200 and body == DATA[::-1]  # the origin's current version, from the origin
    record = cluster.last_record(node)
    assert record["transition"] == "T" and record["manifest_source"] is None and record["bytes_peers"] == 0


async def test_an_origin_answering_after_t_then_crawling_is_looked_up_again_at_r(cluster, slow_origin):
    """T fires, the lookup finds no usable peer, the origin answers late and then crawls: the R switch looks
    up again and uses the peers that appeared meanwhile."""
    url = await seeded(cluster, slow_origin)
    manifest = cluster.nodes[0].engine._own_manifests[url_key(url)]
    publishers = list(cluster.nodes)
    for publisher in publishers:  # their manifest records stay in the DHT, but nobody provides the content
        publisher.engine.withdraw(manifest.root, "test")
    await asyncio.gather(*(n.engine.settled() for n in publishers))
    slow_origin.first_byte_delay = 0.6  # past T = 0.3 s ...
    slow_origin.set_rate(64_000)  # ... and then under R
    node = await cluster.add()
    lookups = []
    find = node.engine.find

    async def counting_find(*args, **kwargs):
        found = await find(*args, **kwargs)
        lookups.append(found)
        if len(lookups) == 1:  # the publishers share again, after the first lookup and before the second
            for publisher in publishers:
                publisher.engine.completed_from_peers(manifest)
            await asyncio.gather(*(n.engine.settled() for n in publishers))
        return found

    node.engine.find = counting_find
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    assert lookups[0] == Miss("no-provider") and isinstance(lookups[1], Found) and len(lookups) == 2
    assert node.engine.counters.transitions == {"T": 1, "R": 1}
    record = cluster.last_record(node)
    assert record["transition"] == "R" and record["manifest_source"] == "quorum"
    assert record["bytes_peers"] > SIZE // 2


class HeadWatch:
    """A proxy's client session, passed through, that tells when a HEAD answer has arrived."""

    def __init__(self, session) -> None:
        self.session = session
        self.answered = asyncio.Event()

    def __getattr__(self, name):
        return getattr(self.session, name)

    async def head(self, *args, **kwargs):
        answer = await self.session.head(*args, **kwargs)
        self.answered.set()
        return answer


async def test_on_a_t_switch_the_content_type_comes_from_the_origins_head_not_the_manifest(cluster, slow_origin):
    url = await seeded(cluster, slow_origin, **{"Content-Type": "text/plain"})  # what the publishers were sent
    slow_origin.extra_headers["/big.bin"] = {"Content-Type": "application/x-new"}  # same bytes, same ETag
    slow_origin.first_byte_delay = 30.0  # GET says nothing (T fires) ...
    slow_origin.head_delay = 0.0  # ... while HEAD answers at once
    node = await cluster.add()
    watch = node.fallback.session = HeadWatch(node.fallback.session)
    find = node.engine.find

    async def find_after_head(*args, **kwargs):  # the HEAD wins the race, for sure
        found = await find(*args, **kwargs)
        await watch.answered.wait()
        return found

    node.engine.find = find_after_head
    status, headers, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(node)
    assert record["transition"] == "T" and record["bytes_peers"] > 0
    assert headers["Content-Type"] == "application/x-new"


async def test_the_fallback_over_quic(tmp_path, slow_origin):
    """Every node offers QUIC only, so peers are fetched from over QUIC (loopback would pick TCP if offered)."""
    quic = Cluster(tmp_path, **FAST_SWITCH, transport="quic")
    try:
        url = await seeded(quic, slow_origin)
        slow_origin.set_rate(64_000)
        node = await quic.add()
        assert sorted(node.engine.nodes) == ["quic"]
        status, _, body = await quic.get(node, url)
        assert status == 200 and body == DATA
        record = quic.last_record(node)
        assert record["transition"] == "R" and record["manifest_source"] == "quorum"
        assert record["bytes_peers"] > SIZE // 2
        assert sum(n.engine.nodes["quic"].bytes_uploaded for n in quic.nodes[:4]) >= record["bytes_peers"]
    finally:
        await quic.close()



class StopWatch:
    """What a proxy's stop leaves behind: tasks still running, errors logged or handed to the loop."""

    def __init__(self, caplog) -> None:
        self.caplog = caplog
        self.loop = asyncio.get_running_loop()
        self.unhandled: list[dict] = []
        self.previous = self.loop.get_exception_handler()
        self.loop.set_exception_handler(lambda _, context: self.unhandled.append(context))
        self.before = asyncio.all_tasks()

    async def check(self, node) -> None:
        # Tasks cancelled during the stop (aiohttp's connection handlers) end at their next step; one that
        # has not after a few seconds is leaked (the timeout only bounds a failure).
        started = [t for t in asyncio.all_tasks() - self.before if not t.done()]
        if started:
            _, running = await asyncio.wait(started, timeout=5)
            assert running == set()
        self.loop.set_exception_handler(self.previous)
        gc.collect()  # "Task was destroyed but it is pending", "exception was never retrieved"
        assert self.unhandled == []
        assert [r.getMessage() for r in self.caplog.records if r.levelno >= logging.WARNING] == []
        assert not node.fallback.tasks and not node.engine.service.tasks
        store = DiskBlockStore(node.config.data_dir / "blocks")  # as the next start would find it
        try:
            self.stored = {root: store.complete(root) for root in store.roots()}
        finally:
            store.close()
        assert all(self.stored.values()), "a partial entry was left in the store"


async def test_a_proxy_stopped_mid_swarm_download_stops_cleanly(cluster, slow_origin, caplog):
    url = await seeded(cluster, slow_origin)
    loop = asyncio.get_running_loop()
    for publisher in cluster.nodes:  # peers trickle: the download is still on when the proxy stops
        for peer in publisher.engine.nodes.values():
            peer.upload.set_rate(32_000, loop.time(), burst=16 * 1024)
    slow_origin.first_byte_delay = 30.0  # T; the origin's Range requests wait too
    node = await cluster.add()
    cluster.nodes.remove(node)  # stopped here
    watch = StopWatch(caplog)
    async with cluster.client.get(url, proxy=node.url) as response:
        assert response.status == 200
        assert await response.content.readany()  # the first block came from a peer: the fetch is on
        await node.stop()
        with pytest.raises(aiohttp.ClientPayloadError):  # cut off, not a short body that looks complete
            await response.read()
    await watch.check(node)
    assert watch.stored == {}  # what the fetch had stored is gone


async def test_a_proxy_stopped_while_storing_a_download_lets_the_store_finish(cluster, slow_origin, caplog):
    url = slow_origin.add("/big.bin", DATA)
    node = await cluster.add()
    cluster.nodes.remove(node)  # stopped here
    loop = asyncio.get_running_loop()
    storing, release = asyncio.Event(), threading.Event()
    seen = {}
    store_from_spool = node.engine._store_from_spool

    def held_store_from_spool(manifest, layer, spool, stop):  # in the ingest thread
        fd = spool.fileno()
        loop.call_soon_threadsafe(storing.set)
        release.wait(timeout=30)  # set when the engine, cancelled, waits for us (never, if it does not)
        seen["spool still open"] = spool.fileno() == fd and os.fstat(fd) is not None
        return store_from_spool(manifest, layer, spool, stop)

    class Release(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("stopping: waiting for the store"):
                release.set()

    node.engine._store_from_spool = held_store_from_spool
    caplog.set_level(logging.INFO, logger="swarmproxy.swarm")
    releaser = Release()
    logging.getLogger("swarmproxy.swarm").addHandler(releaser)
    try:
        watch = StopWatch(caplog)
        async with cluster.client.get(url, proxy=node.url) as response:
            assert await response.read() == DATA
        await storing.wait()
        await node.stop()
    finally:
        logging.getLogger("swarmproxy.swarm").removeHandler(releaser)
        release.set()
    assert seen == {"spool still open": True}
    await watch.check(node)
    assert list(watch.stored.values()) == [True]  # adopted whole before the stop went on


async def test_block_size_sets_the_manifests_a_node_makes_and_others_fetch_by_them(cluster, slow_origin):
    url = slow_origin.add("/big.bin", DATA)
    for node in await cluster.grow(4, block_size="64Ki"):  # four: see `seeded`
        status, _, body = await cluster.get(node, url)
        assert status == 200 and body == DATA
        manifest = node.engine._own_manifests[url_key(url)]
        assert manifest.block_size == 64 * 1024  # by the size rule it would be 16 KiB
        summaries = await node.engine.discovery.get_manifests(url_key(url))
        assert {s.block_size for s in summaries} == {64 * 1024}
    slow_origin.first_byte_delay = 30.0
    node = await cluster.add()  # block size auto: a swarm download keeps the manifest's
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    assert cluster.last_record(node)["transition"] == "T"
    assert node.engine.store.manifest(manifest.root).block_size == 64 * 1024


async def test_fetch_peers_caps_the_providers_one_download_uses(cluster, slow_origin):
    url = await seeded(cluster, slow_origin, publishers=3)
    slow_origin.set_rate(64_000)
    node = await cluster.add(fetch_peers="1")
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(node)
    assert record["transition"] == "R" and record["bytes_peers"] > 0
    assert len(record["peers"]) == 1
    assert sum(1 for n in cluster.nodes[:3] if n.engine.bytes_uploaded) == 1


async def test_a_t_switch_before_any_origin_byte_needs_one_more_publisher(cluster, slow_origin):
    """A quorum of 2 is enough beside the origin's word (R); with no word from it at all (T), it is not."""
    url = await seeded(cluster, slow_origin, publishers=2)
    slow_origin.first_byte_delay = 1.0
    node = await cluster.add()
    status, _, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(node)
    assert record["transition"] == "T" and record["manifest_source"] is None
    assert record["bytes_peers"] == 0 and record["bytes_origin"] == SIZE


async def test_a_headless_answer_never_takes_its_content_type_from_a_peer(cluster, slow_origin):
    url = await seeded(cluster, slow_origin, **{"Content-Type": "text/html"})  # what the publishers were sent
    slow_origin.first_byte_delay = 30.0  # neither GET ...
    slow_origin.head_delay = 30.0  # ... nor HEAD says anything: the type could only come from a peer's manifest
    node = await cluster.add()
    status, headers, body = await cluster.get(node, url)
    assert status == 200 and body == DATA
    assert cluster.last_record(node)["manifest_source"] == "quorum"
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["X-Content-Type-Options"] == "nosniff"


async def test_a_headless_416_names_its_record_and_has_no_body(cluster, slow_origin):
    url = await seeded(cluster, slow_origin)
    slow_origin.first_byte_delay = 30.0
    slow_origin.head_delay = 30.0
    node = await cluster.add()
    status, headers, body = await cluster.get(node, url, {"Range": f"bytes={SIZE + 10}-"})
    assert status == 416 and body == b"" and headers["Content-Length"] == "0"
    assert headers["Content-Range"] == f"bytes */{SIZE}"
    assert headers["Swarm-Request"] == cluster.last_record(node)["id"]
