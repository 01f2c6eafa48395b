"""The proxy's engine on its own: what is about URLs and the origin (finding a manifest for a URL, storing an
origin download, vouching under the URL's key, "self" across restarts). Memory store and transport, a fake DHT,
a fake clock for the linger timer: nothing here waits for real time. The swarm glue under it (providers,
announcing, lingering, fetching) is tested in tests/swarm/service/test_swarm_service.py."""

from __future__ import annotations

import hashlib
import inspect
import os

import pytest

from dht.records import KIND_PROVIDER, Transport
from proxy.demo.local_swarm import Cluster
from proxy.engine import Found, Miss, SwarmEngine, agreed_manifest, url_key
from proxy.origin_head import OriginHead
from proxy.spool import Spool
from swarm.discovery import IN_PROGRESS_ROOT, Attestation, ManifestClaim, Provider, Vouch
from swarm.discovery.memory import MemoryDiscovery, MemoryDiscoveryNetwork
from swarm.net.memory import MemoryNetwork, MemoryTransport
from swarm.service.node import FETCH_STALL_TIMEOUT
from swarm.store.memory import MemoryBlockStore
from swarm.trust import parse_trust
from tests.swarm.service.fake_timers import FakeTimers
from tests.swarm.service.test_swarm_service import served  # the engine serves through its service

DATA = hashlib.sha256(b"engine").digest() * 4000  # 128,000 bytes
DATA_SIZE = len(DATA)
URL = "http://origin.test/file.bin"


@pytest.fixture
def world():
    return MemoryNetwork(), MemoryDiscoveryNetwork()


async def started_engine(world, tmp_path, store=None, host="engine", **kwargs) -> SwarmEngine:
    memory, dht = world
    store = MemoryBlockStore() if store is None else store  # not `or`: an empty store is falsy
    engine = SwarmEngine(store, {"tcp": MemoryTransport(memory)}, MemoryDiscovery(dht), None,
                         trust=parse_trust("quorum:2"), spool_dir=tmp_path / "spool", **kwargs)
    await engine.start(host, 0)
    return engine


async def ingest(engine: SwarmEngine, tmp_path, data: bytes = DATA, url: str = URL, publish: bool = True):
    spool = Spool(tmp_path / "spool", len(data))
    try:
        spool.feed(data)
        manifest = await engine.ingest(spool, url=url, validator='"v1"', content_type="text/plain",
                                       content_encoding=None, publish=publish)
    finally:
        spool.close()
    await engine.settled()  # announced
    return manifest


async def test_an_origin_download_is_shared_and_vouched_for_under_its_urls_key(world, tmp_path):
    timers = FakeTimers()
    engine = await started_engine(world, tmp_path, linger=600, call_later=timers.call_later)
    try:
        manifest = await ingest(engine, tmp_path)
        assert manifest.url == URL and engine._own_manifests[url_key(URL)] == manifest
        assert list(world[1].providers[manifest.root]) == [engine.discovery.node_id]
        [claim] = world[1].manifests[url_key(URL)].values()
        assert (claim.content_root, claim.validator) == (manifest.root, b'"v1"')
        assert await served(world, engine, manifest.root)
        [timer] = timers.pending
        assert timer.delay == 600
        status = engine.status()
        assert (status["shared"], status["announced"], status["published"]) == (1, 1, 1)
        assert status["trust"] == str(engine.trust) and status["transports"] == ["tcp"]

        timers.fire()  # the linger time is over
        await engine.settled()
        assert world[1].providers[manifest.root] == {} and engine.status()["shared"] == 0
        assert (await engine.find(URL)).source == "self"  # still in the store, and ours to use
    finally:
        await engine.stop()


async def test_an_origin_download_not_to_publish_is_shared_without_vouching(world, tmp_path):
    engine = await started_engine(world, tmp_path)
    try:
        manifest = await ingest(engine, tmp_path, publish=False)
        assert list(world[1].providers[manifest.root]) == [engine.discovery.node_id]
        assert world[1].manifests == {} and engine.counters.published == 0
    finally:
        await engine.stop()


async def test_what_came_from_the_origin_is_self_again_after_a_restart(world, tmp_path):
    store = MemoryBlockStore()
    engine = await started_engine(world, tmp_path, store=store)
    try:
        manifest = await ingest(engine, tmp_path)
    finally:
        await engine.stop()
    again = await started_engine(world, tmp_path, store=store)
    try:
        found = await again.find(URL, known_size=len(DATA), known_validator='"v1"')
        assert found is not None and found.source == "self" and found.manifest == manifest
        changed = await again.find(URL, known_validator='"v2"')  # changed at the origin: not ours, nor others'
        assert isinstance(changed, Miss) and changed.reason == "inconsistent"
    finally:
        await again.stop()


async def test_evicted_content_is_forgotten_and_withdrawn(world, tmp_path):
    timers = FakeTimers()
    store = MemoryBlockStore(capacity=int(len(DATA) * 1.5))  # room for one file
    engine = await started_engine(world, tmp_path, store=store, linger=600, call_later=timers.call_later)
    try:
        first = await ingest(engine, tmp_path)
        second = await ingest(engine, tmp_path, DATA[::-1], url=URL + "?2")  # evicts the first
        assert first.root not in store
        providers = world[1].providers
        assert providers[first.root] == {} and list(providers[second.root]) == [engine.discovery.node_id]
        assert url_key(URL) not in engine._own_manifests  # no longer "self" for the URL
        assert not await served(world, engine, first.root)
        assert [t.args[0] for t in timers.pending] == [second.root]  # its linger timer went with it
    finally:
        await engine.stop()


async def test_eviction_ends_the_dht_announcement_of_a_real_node(tmp_path, slow_origin):
    """The same through a proxy with a disk store and a real DHT node: the evicted root is no longer among
    the announcements the DHT node refreshes."""
    cluster = Cluster(tmp_path, store_size=str(int(len(DATA) * 1.5)), discover_size="0")
    try:
        node = await cluster.add()
        first, second = slow_origin.add("/a.bin", DATA), slow_origin.add("/b.bin", DATA[::-1])
        assert (await cluster.get(node, first))[2] == DATA
        first_root = node.engine._own_manifests[url_key(first)].root
        assert (KIND_PROVIDER, first_root) in node.dht.announcements
        assert (await cluster.get(node, second))[2] == DATA[::-1]  # evicts the first
        second_root = node.engine._own_manifests[url_key(second)].root
        assert first_root not in node.engine.store
        assert (KIND_PROVIDER, first_root) not in node.dht.announcements
        assert (KIND_PROVIDER, second_root) in node.dht.announcements
    finally:
        await cluster.close()


async def test_an_origin_download_completes_an_entry_a_swarm_download_left_partial(world, tmp_path):
    engine = await started_engine(world, tmp_path, linger=600, call_later=FakeTimers().call_later)
    try:
        spool = Spool(tmp_path / "spool", len(DATA))
        spool.feed(DATA)
        manifest, layer = spool.manifest(url=URL, validator='"v1"', content_type="text/plain", content_encoding=None)
        spool.close()
        engine.store.create(manifest, layer)  # as a swarm fetch leaves it: one block of eight
        engine.store.write_block(manifest.root, 0, DATA[:manifest.block_size])
        assert await ingest(engine, tmp_path) == manifest
        assert engine.store.complete(manifest.root)  # not shared (and vouched for) incomplete
    finally:
        await engine.stop()


async def _providers(world, manifest, count: int) -> list[MemoryDiscovery]:
    """`count` other nodes announce `manifest` (addresses only: nothing listens there)."""
    others = [MemoryDiscovery(world[1]) for _ in range(count)]
    for index, other in enumerate(others):
        await other.announce(manifest.root, ("127.0.0.1", 7000 + index))
    return others


async def test_for_our_own_url_at_most_fetch_peers_providers_are_picked_at_random(world, tmp_path):
    engine = await started_engine(world, tmp_path, fetch_peers=3)
    try:
        manifest = await ingest(engine, tmp_path)
        others = await _providers(world, manifest, 10)
        every = {other.node_id for other in others}
        picked = []
        for _ in range(20):
            found = await engine.find(URL)
            ids = {provider.node_id for provider in found.providers}
            assert len(ids) == 3 and ids <= every
            picked.append(frozenset(ids))
        assert len(set(picked)) > 1  # not always the same three (all twenty equal: p = 120**-19)
    finally:
        await engine.stop()


async def test_an_origin_download_fills_an_entry_stored_in_another_block_size(world, tmp_path):
    """The spool hashed in 16 KiB blocks, the swarm stored the same root by a manifest of 32 KiB blocks."""
    engine = await started_engine(world, tmp_path)
    try:
        spool = Spool(tmp_path / "spool", len(DATA), block_size=32 * 1024)
        spool.feed(DATA)
        theirs, layer = spool.manifest(url=URL, validator='"v1"', content_type=None, content_encoding=None)
        spool.close()
        engine.store.create(theirs, layer)
        engine.store.write_block(theirs.root, 1, DATA[32 * 1024:64 * 1024])
        ours = await ingest(engine, tmp_path)
        assert ours.root == theirs.root and ours.block_size == 32 * 1024 and ours.url == URL
        assert engine.store.complete(ours.root)
        assert engine._own_manifests[url_key(URL)] == ours
    finally:
        await engine.stop()


async def test_a_node_fetching_is_a_provider_at_once_and_withdraws_when_it_abandons(world, tmp_path):
    seeder = await started_engine(world, tmp_path / "a")
    fetcher = await started_engine(world, tmp_path / "b")
    try:
        manifest = await ingest(seeder, tmp_path)
        seed = Provider(seeder.discovery.node_id, *seeder.address, Transport.TCP)
        found = Found(manifest, "quorum", [seed])  # as if two had vouched
        chunks = fetcher.fetch(found, origin=None, start=0, end=manifest.size)
        first = await anext(chunks)
        assert DATA.startswith(first)
        await fetcher.settled()
        providers = world[1].providers[manifest.root]
        assert fetcher.discovery.node_id in providers  # found by others before it is complete
        await chunks.aclose()
        fetcher.abandon(manifest.root)
        await fetcher.settled()
        assert fetcher.discovery.node_id not in providers
        assert list(providers) == [seeder.discovery.node_id]
    finally:
        await fetcher.stop()
        await seeder.stop()


async def test_with_the_origins_manifest_the_download_starts_at_fetch_peers_providers(world, tmp_path):
    from swarm.content.manifest import OriginManifest, build_manifest
    manifest, layer = build_manifest([DATA], len(DATA))
    published = OriginManifest(manifest.root, manifest.size, manifest.block_size, hashes=tuple(layer))
    engine = await started_engine(world, tmp_path, fetch_peers=3)
    try:
        await _providers(world, manifest, 10)
        yielded = []
        real = engine.discovery.find_providers

        async def counting(root):
            async for provider in real(root):
                yielded.append(provider)
                yield provider
        engine.discovery.find_providers = counting
        found = await engine.find(URL, published=published, known_validator='"v1"')
        assert found is not None and found.source == "origin" and len(found.providers) == 3
        assert len(yielded) == 3  # the lookup stopped there: no vouching needs the other seven
    finally:
        await engine.stop()


@pytest.mark.parametrize("content_type", ["", "x" * 2000, "text/plain\x01"])
async def test_an_origin_manifest_whose_content_type_ours_cannot_carry_is_used_without_it(world, tmp_path,
                                                                                           content_type):
    from swarm.content.manifest import OriginManifest, build_manifest
    manifest, layer = build_manifest([DATA], len(DATA))
    published = OriginManifest(manifest.root, manifest.size, manifest.block_size, hashes=tuple(layer))
    engine = await started_engine(world, tmp_path)
    try:
        found = await engine.find(URL, published=published, known_validator='"v1"', content_type=content_type)
        assert found is not None and found.source == "origin" and found.manifest.content_type is None
        assert found.manifest.root == manifest.root and found.layer == layer
        # A validator ours cannot carry: not usable, and no exception into the download
        unusable = await engine.find(URL, published=published, known_validator='"' + "v" * 2000 + '"')
        assert unusable == Miss("origin-manifest-unusable")
    finally:
        await engine.stop()


async def test_a_file_downloaded_again_is_announced_and_vouched_for_once(world, tmp_path):
    """The DHT node keeps an announcement fresh by itself: 50 downloads of one file are one ANNOUNCE and one
    manifest record, not 50 of each. After a withdrawal, sharing it again announces it again."""
    timers = FakeTimers()
    engine = await started_engine(world, tmp_path, linger=600, call_later=timers.call_later)
    try:
        for _ in range(50):
            manifest = await ingest(engine, tmp_path)
        assert engine.counters.announced == 1 and engine.counters.published == 1
        engine.withdraw(manifest.root, "test")
        await engine.settled()
        await ingest(engine, tmp_path)
        assert engine.counters.announced == 2 and engine.counters.published == 1
        assert list(world[1].providers[manifest.root]) == [engine.discovery.node_id]
    finally:
        await engine.stop()


async def test_a_url_vouched_for_by_a_quorum_is_found_with_the_manifest_from_a_provider(world, tmp_path):
    seeder = await started_engine(world, tmp_path / "seeder", host="127.0.0.1")  # where the fake DHT sees it
    engine = await started_engine(world, tmp_path)
    try:
        manifest = await ingest(seeder, tmp_path / "seeder", publish=False)
        assert await engine.find(URL) == Miss("no-record")  # nobody vouches yet
        second = MemoryDiscovery(world[1], external_host="127.0.0.2")  # a publisher in another network
        for publisher in (seeder.discovery, second):
            await publisher.put_manifest(url_key(URL), ManifestClaim(
                manifest.root, manifest.size, manifest.block_size, b'"v1"'))
        found = await engine.find(URL, known_size=len(DATA), known_validator='"v1"')
        assert found is not None and found.source == "quorum" and found.manifest == manifest
        assert [p.node_id for p in found.providers] == [seeder.discovery.node_id]
        other = await engine.find(URL, known_validator='"v2"')  # the claims are of another version
        assert isinstance(other, Miss) and str(other) == "inconsistent (0 publishers)"
        assert engine.counters.manifests_rejected == 1
    finally:
        await engine.stop()
        await seeder.stop()


async def test_a_providers_manifest_is_stored_under_the_url_we_asked_for_not_the_one_it_names(world, tmp_path):
    """A provider chooses the URL its manifest names; the BitTorrent bridge judges (and exports as a web seed) the
    URL a stored manifest names, so it must be the one this node fetched."""
    seeder = await started_engine(world, tmp_path / "seeder", host="127.0.0.1")
    engine = await started_engine(world, tmp_path)
    try:
        manifest = await ingest(seeder, tmp_path / "seeder", url="http://tracker.example/pixel", publish=False)
        for publisher in (seeder.discovery, MemoryDiscovery(world[1], external_host="127.0.0.2")):
            await publisher.put_manifest(url_key(URL), ManifestClaim(
                manifest.root, manifest.size, manifest.block_size, b'"v1"'))
        found = await engine.find(URL, known_size=len(DATA), known_validator='"v1"')
        assert found.manifest.root == manifest.root and found.manifest.url == URL
    finally:
        await engine.stop()
        await seeder.stop()


def head(size=DATA_SIZE, validator='"v1"', content_type="text/plain", content_encoding=None) -> OriginHead:
    return OriginHead(status=200, swarmable=True, reason=None, size=size, validator=validator, start=0, end=size,
                      content_type=content_type, content_encoding=content_encoding)


AGREED = ManifestClaim(hashlib.sha256(b"root").digest(), len(DATA), 16384, b'"v1"')


@pytest.mark.parametrize("answer, made", [
    (None, False),  # the origin has not answered yet: ask a provider
    (head(), True),
    (head(content_type=None, content_encoding="gzip"), True),
    (head(size=len(DATA) - 1), False),  # another version at the origin
    (head(validator='"v2"'), False),
    (head(validator=None), False),
    (head(content_type="text/plain\r\nSet-Cookie: x"), False),  # no manifest carries that: ask a provider
])
def test_a_manifest_is_made_from_the_agreed_fields_and_the_origins_answer(answer, made):
    manifest = agreed_manifest(URL, AGREED, answer)
    assert (manifest is not None) == made
    if made:
        assert (manifest.root, manifest.size, manifest.block_size, manifest.url, manifest.validator) == \
            (AGREED.content_root, AGREED.size, AGREED.block_size, URL, '"v1"')
        assert (manifest.content_type, manifest.content_encoding) == (answer.content_type, answer.content_encoding)


async def test_providers_are_looked_up_only_for_a_trusted_root(world, tmp_path):
    """Until a quorum vouched, a lookup asks for nobody's providers: the crowd's parked downloads poll, and each
    newcomer waits on the origin for this answer. Then it asks for the trusted root's only."""
    seeder = await started_engine(world, tmp_path / "seeder", host="127.0.0.1")
    engine = await started_engine(world, tmp_path)
    try:
        manifest = await ingest(seeder, tmp_path / "seeder", publish=False)
        liar = MemoryDiscovery(world[1], external_host="192.175.48.9")
        await liar.put_manifest(url_key(URL), ManifestClaim(os.urandom(32), len(DATA), 16384, b'"v1"'))
        await seeder.discovery.put_manifest(url_key(URL), ManifestClaim(
            manifest.root, manifest.size, manifest.block_size, b'"v1"'))
        before = world[1].lookups
        below = await engine.find(URL, known_size=len(DATA), known_validator='"v1"')
        assert below.reason == "below-quorum" and world[1].lookups == before + 1  # the claims' only
        await MemoryDiscovery(world[1], external_host="192.31.196.2").put_manifest(url_key(URL), ManifestClaim(
            manifest.root, manifest.size, manifest.block_size, b'"v1"'))
        found = await engine.find(URL, known_size=len(DATA), known_validator='"v1"', origin_head=lambda: head())
        assert isinstance(found, Found) and found.source == "quorum"
        assert world[1].lookups == before + 3  # the claims, and the trusted root's providers (not the liar's)
    finally:
        await engine.stop()
        await seeder.stop()


async def test_below_a_quorum_the_leading_versions_providers_are_looked_up_ahead_once(world, tmp_path):
    """One network vouches: the lookup answers below-quorum at once, and the vouched root's providers are looked up
    in the background (so the lookup that finds the quorum goes on from a warm one), once in PROVIDERS_AHEAD_EVERY
    s, and never for a root nobody attested."""
    seeder = await started_engine(world, tmp_path / "seeder", host="127.0.0.1")
    engine = await started_engine(world, tmp_path)
    try:
        manifest = await ingest(seeder, tmp_path / "seeder", publish=False)
        claim = ManifestClaim(manifest.root, manifest.size, manifest.block_size, b'"v1"')
        world[1].manifests[url_key(URL)] = {b"x" * 20: Vouch(claim, b"x" * 20, Attestation.NONE)}  # weighs nothing
        before = world[1].lookups
        assert (await engine.find(URL, known_size=len(DATA), known_validator='"v1"')).reason == "below-quorum"
        await engine.service.settled()
        assert world[1].lookups == before + 1  # the claims' only
        await seeder.discovery.put_manifest(url_key(URL), claim)
        for _ in range(2):
            below = await engine.find(URL, known_size=len(DATA), known_validator='"v1"')
            assert below.reason == "below-quorum"
            await engine.service.settled()
        assert world[1].lookups == before + 4  # three claims lookups, one providers lookup ahead
    finally:
        await engine.stop()
        await seeder.stop()


async def test_a_lookup_started_before_the_head_is_decided_with_the_heads_version(world, tmp_path):
    """`look_ahead` runs before the head says which version the origin serves: its claims answer the `find` at
    the head, which decides with the head's size and validator; when the claims alone could not say which root
    to look providers up for (a quorum for each of two versions), they are looked up for the head's."""
    seeder = await started_engine(world, tmp_path / "seeder", host="127.0.0.1")
    engine = await started_engine(world, tmp_path)
    try:
        manifest = await ingest(seeder, tmp_path / "seeder", publish=False)
        for publisher in (seeder.discovery, MemoryDiscovery(world[1], external_host="127.0.0.2")):
            await publisher.put_manifest(url_key(URL), ManifestClaim(
                manifest.root, manifest.size, manifest.block_size, b'"v1"'))
        before = world[1].lookups
        found = await engine.find(URL, known_size=len(DATA), known_validator='"v1"', origin_head=lambda: head(),
                                  looked_ahead=engine.look_ahead(URL))
        assert isinstance(found, Found) and found.source == "quorum" and found.manifest == manifest
        assert world[1].lookups == before + 2  # the claims and their root's providers, both ahead of the head

        for host in ("192.31.196.7", "192.175.48.8"):  # a quorum for another version, as after an edit
            await MemoryDiscovery(world[1], external_host=host).put_manifest(url_key(URL), ManifestClaim(
                os.urandom(32), len(DATA), 16384, b'"v2"'))
        before = world[1].lookups
        found = await engine.find(URL, known_size=len(DATA), known_validator='"v1"', origin_head=lambda: head(),
                                  looked_ahead=engine.look_ahead(URL))
        assert isinstance(found, Found) and found.manifest == manifest
        assert [p.node_id for p in found.providers] == [seeder.discovery.node_id]
        assert world[1].lookups == before + 2  # the claims ahead (two versions: no providers), then v1's
    finally:
        await engine.stop()
        await seeder.stop()


async def test_with_the_origins_answer_a_quorum_manifest_needs_no_provider_to_give_it(world, tmp_path):
    seeder = await started_engine(world, tmp_path / "seeder", host="127.0.0.1")
    engine = await started_engine(world, tmp_path)
    try:
        manifest = await ingest(seeder, tmp_path / "seeder", publish=False)
        second = MemoryDiscovery(world[1], external_host="127.0.0.2")
        for publisher in (seeder.discovery, second):
            await publisher.put_manifest(url_key(URL), ManifestClaim(
                manifest.root, manifest.size, manifest.block_size, b'"v1"'))
        await seeder.stop()  # its announcement stays in the fake DHT, but nobody answers there now
        missing = await engine.find(URL, known_size=len(DATA), known_validator='"v1"')
        assert missing == Miss("no-manifest", "no provider gave one matching the record")
        found = await engine.find(URL, known_size=len(DATA), known_validator='"v1"', origin_head=lambda: head())
        assert isinstance(found, Found) and found.source == "quorum" and found.manifest == manifest
        assert [p.node_id for p in found.providers] == [seeder.discovery.node_id]
    finally:
        await engine.stop()
        await seeder.stop()


async def test_fetching_from_the_origin_is_claimed_counted_by_network_and_withdrawn(world, tmp_path):
    """In-progress claims: a newcomer counts the independent others fetching a version (one party with many keys
    in one network counts once), never itself, never as a manifest; a fetcher that will not vouch withdraws."""
    engine = await started_engine(world, tmp_path)
    fetcher = await started_engine(world, tmp_path / "fetcher", host="192.31.196.7")
    try:
        fetcher.discovery.external_host = "192.31.196.7"
        fetcher.fetching(URL, size=len(DATA), block_size=1 << 14, validator='"v1"')
        engine.fetching(URL, size=len(DATA), block_size=1 << 14, validator='"v1"')
        await fetcher.settled()
        await engine.settled()
        sybils = [MemoryDiscovery(world[1], external_host=f"192.175.48.{i}") for i in range(1, 6)]  # one /24
        for sybil in sybils:
            await sybil.put_manifest(url_key(URL), ManifestClaim(IN_PROGRESS_ROOT, len(DATA), 1 << 14, b'"v1"'))
        miss = await engine.find(URL, known_size=len(DATA), known_validator='"v1"')
        assert (miss.reason, miss.detail, miss.others) == ("no-record", "2 fetching from the origin", 2)  # not us
        # Ahead of us: the fetcher, which claimed before us; the /24 claimed after us, whatever its ids.
        assert miss.ahead == 1
        assert (await engine.find(URL, known_size=len(DATA), known_validator='"v2"')).others == 0
        assert (await engine.find(URL, known_size=7, known_validator='"v1"')).others == 0

        fetcher.fetch_ended(URL, vouching=False)  # its client went away: it will not vouch
        await fetcher.settled()
        assert fetcher.discovery.node_id not in world[1].manifests[url_key(URL)]
        assert (await engine.find(URL, known_size=len(DATA), known_validator='"v1"')).others == 1
    finally:
        await engine.stop()
        await fetcher.stop()


async def test_a_fetcher_that_stores_its_download_replaces_the_claim_with_its_vouch(world, tmp_path):
    engine = await started_engine(world, tmp_path)
    try:
        engine.fetching(URL, size=len(DATA), block_size=1 << 14, validator='"v1"')
        engine.fetching(URL, size=len(DATA), block_size=1 << 14, validator='"v1"')  # a second download of it
        await engine.settled()
        [claim] = world[1].manifests[url_key(URL)].values()
        assert claim.content_root == IN_PROGRESS_ROOT
        engine.fetch_ended(URL, vouching=False)  # the other download still fetches: the claim stays
        await engine.settled()
        assert engine.discovery.node_id in world[1].manifests[url_key(URL)]
        engine.fetch_ended(URL, vouching=True)
        manifest = await ingest(engine, tmp_path)
        [claim] = world[1].manifests[url_key(URL)].values()
        assert claim.content_root == manifest.root  # the real vouch, in the same slot
        assert (await engine.find(URL, known_size=len(DATA), known_validator='"v1"')).source == "self"
    finally:
        await engine.stop()


def test_a_swarm_download_stalls_after_the_engines_one_default():
    assert inspect.signature(SwarmEngine.fetch).parameters["stall_timeout"].default == FETCH_STALL_TIMEOUT
