"""`SwarmService` on its own: memory store and transport, the in-memory fake discovery, a fake clock for the
linger timer. Nothing here waits for real time."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time

import pytest

from swarm.content.manifest import build_manifest
from swarm.discovery import ManifestClaim, Provider, TransportFlags, Vouch
from swarm.discovery.memory import MemoryDiscovery, MemoryDiscoveryNetwork
from swarm.errors import DiscoveryFailed, FetchFailed
from swarm.net.memory import MemoryNetwork, MemoryTransport
from swarm.service.node import SwarmNode
from swarm.service.shares import ContentShared, ContentWithdrawn
from swarm.service.store_work import BytesBody, fill_entry
from swarm.service.swarm_service import (
    CLAIM_ROOTS,
    PEER_SPARE,
    PROVIDER_REFRESH_FEW,
    SwarmService,
    refresh_waits,
)
from swarm.store.memory import MemoryBlockStore
from tests.swarm.service.fake_timers import FakeTimers

DATA = hashlib.sha256(b"service").digest() * 4000  # 128,000 bytes: 8 blocks of 16 KiB
KEY = hashlib.sha256(b"a key").digest()


@pytest.fixture
def world():
    return MemoryNetwork(), MemoryDiscoveryNetwork()


async def started(world, store=None, *, discovery=None, **kwargs) -> SwarmService:
    memory, dht = world
    store = MemoryBlockStore() if store is None else store  # not `or`: an empty store is falsy
    service = SwarmService(store, {"tcp": MemoryTransport(memory)}, discovery or MemoryDiscovery(dht), **kwargs)
    await service.start("service", 0)
    return service


async def stored(service: SwarmService, data: bytes = DATA, **manifest_fields):
    """`data` complete in the service's store, as a download leaves it."""
    manifest, layer = build_manifest([data], len(data), validator='"v1"', **manifest_fields)
    await service.in_thread(manifest.root,
                            lambda stop: fill_entry(service.store, manifest, layer, BytesBody(data), stop))
    return manifest


async def shared(service: SwarmService, data: bytes = DATA, vouch: bytes | None = KEY):
    manifest = await stored(service, data)
    service.share(manifest, vouch=vouch)
    await service.settled()  # announced
    return manifest


def provider(service: SwarmService) -> Provider:
    """`service` as a fetcher finds it in discovery: its node id and address, over TCP."""
    return Provider(service.discovery.node_id, *service.address, TransportFlags.TCP)


async def served(world, service, root: bytes) -> bool:
    """Whether a peer gets the manifest of `root` from `service` (a SwarmService, or a proxy's engine over one):
    what serving starts with."""
    peer = SwarmNode(MemoryBlockStore(), MemoryTransport(world[0]))
    try:
        await peer.fetch_manifest(root, [service.address], timeout=5)
        return True
    except FetchFailed:
        return False


async def _providers(world, manifest, count: int) -> list[MemoryDiscovery]:
    """`count` other nodes announce `manifest` (addresses only: nothing listens there)."""
    others = [MemoryDiscovery(world[1]) for _ in range(count)]
    for index, other in enumerate(others):
        await other.announce(manifest.root, ("127.0.0.1", 7000 + index))
    return others


# -- sharing, lingering, withdrawing ---------------------------------------------------------------------------


async def test_after_the_linger_time_the_service_stops_serving_and_announcing(world):
    timers = FakeTimers()
    service = await started(world, linger=600, call_later=timers.call_later)
    try:
        manifest = await shared(service)
        root = manifest.root
        providers = world[1].providers
        assert list(providers[root]) == [service.discovery.node_id]
        assert await served(world, service, root)
        [timer] = timers.pending
        assert timer.delay == 600

        timers.fire()
        await service.settled()  # the withdrawal went out
        assert providers[root] == {}
        assert not await served(world, service, root)
        assert service.status()["shared"] == 0
        assert service.store.complete(root)  # kept: only sharing ends
    finally:
        await service.stop()


async def test_sharing_again_restarts_the_linger_time(world):
    timers = FakeTimers()
    service = await started(world, linger=600, call_later=timers.call_later)
    try:
        manifest = await shared(service)
        service.completed(manifest)  # e.g. fetched again: a fresh linger time, one timer
        assert len(timers.pending) == 1 and len(timers.handles) == 2
        await service.settled()
        timers.fire()
        await service.settled()
        assert world[1].providers[manifest.root] == {}
    finally:
        await service.stop()


async def test_held_content_lingers_only_once_released_and_a_failed_fetch_does_not_drop_it(world):
    """A segment of a file still downloading is shared with `hold`: no linger time runs (a withdrawal mid-download
    would take it from the crowd) until `release`; meanwhile it is shared complete, so a fetch of the same root
    that ends incomplete does not drop it."""
    timers = FakeTimers()
    service = await started(world, linger=600, call_later=timers.call_later)
    try:
        manifest = await shared(service)
        root = manifest.root
        service.shares.share(manifest, hold=True)  # the running timer is cancelled, none is started
        assert timers.pending == []
        service.abandon(root)
        await service.settled()
        assert service.store.complete(root) and await served(world, service, root)
        assert list(world[1].providers[root]) == [service.discovery.node_id]
        service.shares.release(root)
        [timer] = timers.pending
        assert timer.delay == 600
        service.shares.release(root)  # twice: still one timer
        assert len(timers.pending) == 1
        timers.fire()
        await service.settled()
        assert world[1].providers[root] == {} and not await served(world, service, root)
    finally:
        await service.stop()


async def test_evicted_content_is_forgotten_and_withdrawn(world):
    timers, forgotten = FakeTimers(), []
    store = MemoryBlockStore(capacity=int(len(DATA) * 1.5))  # room for one file
    service = await started(world, store, linger=600, call_later=timers.call_later, on_forget=forgotten.append)
    try:
        first = await shared(service)
        second = await shared(service, DATA[::-1])  # evicts the first
        await asyncio.sleep(0)  # the store's event comes through the loop (it may be raised in a thread)
        await service.settled()
        assert first.root not in store and forgotten == [first.root]
        providers = world[1].providers
        assert providers[first.root] == {} and list(providers[second.root]) == [service.discovery.node_id]
        assert not await served(world, service, first.root)
        assert [t.args[0] for t in timers.pending] == [second.root]  # its linger timer went with it
    finally:
        await service.stop()


async def test_watchers_are_told_once_when_content_starts_and_stops_being_shared(world):
    """What the BitTorrent bridge seeds follows what the node shares: once each, evictions included, and a watcher
    that fails costs a log line, not the share."""
    timers, events = FakeTimers(), []
    store = MemoryBlockStore(capacity=int(len(DATA) * 1.5))  # room for one file
    service = await started(world, store, linger=600, call_later=timers.call_later)

    def broken(event):
        raise RuntimeError("a watcher's bug")

    service.watch_shares(broken)
    service.watch_shares(events.append)
    try:
        first = await shared(service)
        service.completed(first)  # shared again: not news
        assert events == [ContentShared(first)]
        second = await shared(service, DATA[::-1])  # evicts the first
        await asyncio.sleep(0)  # the store's event comes through the loop
        await service.settled()
        assert events[1:] == [ContentWithdrawn(first.root, "evicted"), ContentShared(second)]
        timers.fire()
        assert events[3:] == [ContentWithdrawn(second.root, "linger time over")]
    finally:
        await service.stop()


async def test_content_kept_from_an_earlier_run_is_shared_again_at_start(world):
    memory, _ = world
    store = MemoryBlockStore()
    earlier = SwarmService(store, {"tcp": MemoryTransport(memory)}, None)
    manifest = await stored(earlier, DATA)
    service = await started(world, store)
    try:
        await service.settled()
        assert list(world[1].providers[manifest.root]) == [service.discovery.node_id]
        assert await served(world, service, manifest.root)
    finally:
        await service.stop()


async def test_content_is_announced_and_vouched_for_once(world):
    """Discovery keeps an announcement fresh by itself: 50 downloads of one file are one announcement and one
    claim, not 50 of each. After a withdrawal, sharing it again announces it again."""
    timers = FakeTimers()
    service = await started(world, linger=600, call_later=timers.call_later)
    try:
        for _ in range(50):
            manifest = await shared(service)
        assert service.counters.announced == 1 and service.counters.published == 1
        [claim] = world[1].manifests[KEY].values()
        assert (claim.content_root, claim.size, claim.block_size, claim.validator) == \
            (manifest.root, manifest.size, manifest.block_size, b'"v1"')
        service.withdraw(manifest.root, "test")
        await service.settled()
        await shared(service)
        assert service.counters.announced == 2 and service.counters.published == 1
        assert list(world[1].providers[manifest.root]) == [service.discovery.node_id]
        await shared(service, vouch=None)  # a provider, never a publisher
        assert service.counters.published == 1
    finally:
        await service.stop()


async def test_an_unknown_own_address_is_logged_once_not_per_download(world, caplog):
    service = await started(world)
    service.discovery.external_host = None  # as a DHT node that no other node has answered yet
    try:
        with caplog.at_level("DEBUG", logger="swarmproxy.swarm"):
            for index in range(3):
                await shared(service, DATA[index:])
        warnings = [r for r in caplog.records if r.levelname == "WARNING" and "not announcing" in r.message]
        assert len(warnings) == 1
        assert service.counters.announced == 0 and world[1].providers == {}
    finally:
        await service.stop()


async def test_without_sharing_nothing_is_served_or_announced(world):
    service = await started(world, share=False)
    try:
        manifest = await shared(service)
        assert not service.sharing and world[1].providers == {}
        assert not await served(world, service, manifest.root)
    finally:
        await service.stop()


async def test_a_failing_discovery_costs_a_warning_not_the_download(world, caplog):
    class Down(MemoryDiscovery):
        async def announce(self, root, address, transports=TransportFlags.TCP):
            raise DiscoveryFailed("network unreachable")

    service = await started(world, discovery=Down(world[1]))
    try:
        with caplog.at_level("WARNING", logger="swarmproxy.swarm"):
            manifest = await shared(service)
        assert "announcing" in caplog.text and service.counters.announced == 0
        assert await served(world, service, manifest.root)  # peers that know us still get it
    finally:
        await service.stop()


@pytest.mark.parametrize("waits, providers, wanted, expected", [
    ((1.0, 2.0, 4.0), 9, 9, [1.0, 2.0, 4.0]),  # as many as it wants: the schedule as it is
    ((1.0, 2.0, 4.0), 2, 9, [PROVIDER_REFRESH_FEW, 2.0, 4.0]),  # a few copies for a herd: the first look sooner
    ((0.0, 0.0), 0, 9, [0.0, 0.0]),  # never later than asked
    ((), 1, 9, []),  # no refreshes (the cluster's agent): none added
])
def test_a_fetch_with_few_providers_looks_for_more_sooner(waits, providers, wanted, expected):
    assert refresh_waits(waits, providers, wanted) == expected


async def test_the_vouch_does_not_wait_for_the_announcement(world):
    """Parked downloads wait for the vouch; the root's announcement is a lookup of its own, so it goes in parallel
    (and a failed announcement does not hold the vouch back)."""
    release, vouched = asyncio.Event(), asyncio.Event()

    class SlowAnnounce(MemoryDiscovery):
        fail = False

        async def put_manifest(self, *args, **kwargs):
            await super().put_manifest(*args, **kwargs)
            vouched.set()

        async def announce(self, root, address, transports=TransportFlags.TCP):
            await release.wait()
            if self.fail:
                raise DiscoveryFailed("no node took it")
            return await super().announce(root, address, transports)

    discovery = SlowAnnounce(world[1])
    service = await started(world, discovery=discovery)
    try:
        manifest = await stored(service)
        service.share(manifest, vouch=KEY)
        await asyncio.wait_for(vouched.wait(), 5)  # while the announcement waits
        assert service.counters.published == 1 and service.counters.announced == 0
        assert [v.content_root for v in await discovery.get_manifests(KEY)] == [manifest.root]
        release.set()
        await service.settled()
        assert service.counters.announced == 1
        other = await stored(service, DATA[:50000])
        discovery.fail = True
        service.share(other, vouch=hashlib.sha256(b"another key").digest())
        await service.settled()
        assert service.counters.published == 2 and service.counters.announced == 1
    finally:
        await service.stop()


# -- providers --------------------------------------------------------------------------------------------------


async def test_at_most_fetch_peers_providers_are_used_and_they_are_picked_at_random(world):
    service = await started(world, fetch_peers=3)
    try:
        manifest = await shared(service)
        others = await _providers(world, manifest, 10)
        every = {other.node_id for other in others}
        found = await service.providers(manifest.root)
        assert {p.node_id for p in found} == every  # never this node itself
        picked = []
        for _ in range(20):
            ids = {provider.node_id for provider in service.pick(found, manifest)}
            assert len(ids) == 3 and ids <= every
            picked.append(frozenset(ids))
        assert len(set(picked)) > 1  # not always the same three (all twenty equal: p = 120**-19)
    finally:
        await service.stop()


async def test_with_a_rank_the_best_ranked_providers_are_picked_and_equals_at_random(world):
    near = {7001, 7004, 7007}  # rank 0; the others rank 1
    service = await started(world, fetch_peers=4, provider_rank=lambda p: 0 if p.port in near else 1)
    try:
        manifest = await shared(service)
        await _providers(world, manifest, 10)
        found = await service.providers(manifest.root)
        fourth = set()
        for _ in range(20):
            ports = {provider.port for provider in service.pick(found, manifest)}
            assert len(ports) == 4 and near <= ports  # every near one, whatever the discovery's order
            fourth |= ports - near
        assert len(fourth) > 1  # the fourth among the far ones at random (always the same: p = 7**-19)
    finally:
        await service.stop()


async def test_with_a_rank_the_refreshes_join_the_best_ranked_providers_first(world):
    service = await started(world, fetch_peers=2, provider_refresh=(0.0,), provider_topup=0.0,
                            provider_rank=lambda p: 0 if p.port == 7005 else 1)
    try:
        manifest = await shared(service)
        await _providers(world, manifest, 6)
        added = []

        class Node:
            def add_peers(self, root, peers):
                added.append(list(peers))
                return len(peers)

            def peer_count(self, root):
                return None

        for _ in range(5):  # one may join each time: the near one, not one of five at random (p = 5**-5)
            await service.refresh_providers(Node(), "tcp", manifest.root, {("127.0.0.1", 7000)}, 1)
        assert added == [[("127.0.0.1", 7005)]] * 5
    finally:
        await service.stop()


async def test_all_providers_are_used_when_there_are_no_more_than_fetch_peers(world):
    service = await started(world, fetch_peers=3)
    try:
        manifest = await shared(service)
        others = await _providers(world, manifest, 3)
        found = service.pick(await service.providers(manifest.root), manifest)
        assert {p.node_id for p in found} == {other.node_id for other in others}
    finally:
        await service.stop()


async def test_a_small_file_uses_no_more_peers_than_its_blocks_and_the_spare(world):
    service = await started(world, fetch_peers=16)
    try:
        manifest = await shared(service)
        assert manifest.num_blocks + PEER_SPARE < 16
        await _providers(world, manifest, 14)
        found = service.pick(await service.providers(manifest.root), manifest)
        assert len(found) == service.peers_for(manifest) == manifest.num_blocks + PEER_SPARE
    finally:
        await service.stop()


async def test_the_lookup_stops_at_enough_and_skips_unreachable_providers(world):
    service = await started(world)
    try:
        manifest = await shared(service)
        quic_only = MemoryDiscovery(world[1])
        await quic_only.announce(manifest.root, ("127.0.0.1", 6999), TransportFlags.QUIC)  # we speak TCP only
        others = await _providers(world, manifest, 5)
        found = await service.providers(manifest.root)
        assert {p.node_id for p in found} == {o.node_id for o in others}
        assert len(await service.providers(manifest.root, enough=2)) == 2
    finally:
        await service.stop()


def test_the_transport_is_tcp_for_private_peers_and_quic_for_public_ones():
    memory = MemoryNetwork()
    service = SwarmService(MemoryBlockStore(), {"tcp": MemoryTransport(memory), "quic": MemoryTransport(memory)},
                           None)
    both = TransportFlags.TCP | TransportFlags.QUIC
    assert service.transport_flags == both
    assert service.transport_for(Provider(b"a", "192.168.1.7", 1, both)) == "tcp"
    assert service.transport_for(Provider(b"b", "127.0.0.1", 1, both)) == "tcp"
    assert service.transport_for(Provider(b"c", "93.184.216.34", 1, both)) == "quic"
    assert service.transport_for(Provider(b"d", "93.184.216.34", 1, TransportFlags.TCP)) == "tcp"
    assert service.transport_for(Provider(b"e", "10.0.0.1", 1, TransportFlags.QUIC)) == "quic"


async def _vouch(publishers: list[MemoryDiscovery], manifest) -> None:
    """Each of `publishers` vouches under KEY that its representation is `manifest`'s content."""
    for publisher in publishers:
        await publisher.put_manifest(KEY, ManifestClaim(manifest.root, manifest.size, manifest.block_size, b"v"))


async def test_claims_under_a_key_come_with_the_providers_of_their_roots(world):
    service = await started(world)
    try:
        manifest, _ = build_manifest([DATA], len(DATA))
        publishers = await _providers(world, manifest, 2)
        await _vouch(publishers, manifest)
        summaries, providers = await service.claims(KEY, timeout=5)
        assert {s.publisher_id for s in summaries} == {p.node_id for p in publishers}
        assert {p.node_id for p in providers[manifest.root]} == {p.node_id for p in publishers}
        assert await service.claims(hashlib.sha256(b"nobody").digest(), timeout=5) == ([], {})
    finally:
        await service.stop()


async def test_a_claims_lookup_stops_at_the_providers_one_download_uses(world):
    """It does not wait for the provider lookup to end (a busy storing node's timeout, in a crowd)."""
    class Slow(MemoryDiscovery):
        async def find_providers(self, root):
            async for found in super().find_providers(root):
                yield found
            await asyncio.sleep(3600)  # the lookup's last storing node never answers

    service = await started(world, discovery=Slow(world[1]), provider_wait=3600, fetch_peers=16)
    try:
        manifest, _ = build_manifest([DATA], len(DATA))
        publishers = await _providers(world, manifest, manifest.num_blocks + 5)
        await _vouch(publishers[:2], manifest)
        _, providers = await service.claims(KEY, timeout=5)
        assert len(providers[manifest.root]) == service.peers_for(manifest) == manifest.num_blocks + 2
    finally:
        await service.stop()


async def test_the_roots_vouched_for_most_are_looked_up_first(world):
    service = await started(world)
    try:
        manifest, _ = build_manifest([DATA], len(DATA))
        publishers = await _providers(world, manifest, 2)
        await _vouch(publishers, manifest)
        for index in range(8):  # a liar with many keys, each vouching for another root once
            liar = MemoryDiscovery(world[1])
            root = hashlib.sha256(b"lie %d" % index).digest()
            await liar.put_manifest(KEY, ManifestClaim(root, manifest.size, manifest.block_size, b"v"))
        summaries, providers = await service.claims(KEY, timeout=5)
        assert len(summaries) == 10 and len(providers) == CLAIM_ROOTS
        assert {p.node_id for p in providers[manifest.root]} == {p.node_id for p in publishers}
    finally:
        await service.stop()


async def test_a_first_hand_voucher_is_a_provider_before_the_directory_lists_it(world):
    """On the Mainline DHT a root's announcement lands seconds after its vouch is answerable (the flash-crowd lab:
    parked nodes had a quorum and no provider for 20 s): a publisher that answered us first-hand on its peer port
    (`Vouch.serves_at`) is one of the root's providers at once; one vouching for another root is not."""
    manifest, _ = build_manifest([DATA], len(DATA))
    other = hashlib.sha256(b"another root").digest()
    answered = [Vouch.seen(ManifestClaim(manifest.root, manifest.size, manifest.block_size, b"v"), b"p" * 20,
                           "55.55.101.2", frozenset(), serves_at=("55.55.101.2", 4000)),
                Vouch.seen(ManifestClaim(other, manifest.size, manifest.block_size, b"v"), b"q" * 20,
                           "55.55.102.2", frozenset(), serves_at=("55.55.102.2", 4000))]

    class FirstHand(MemoryDiscovery):
        async def get_manifests(self, repr_key):
            return answered

    service = await started(world, discovery=FirstHand(world[1]))
    try:
        _, providers = await service.claims(KEY, timeout=5, roots=lambda summaries: [manifest.root])
        assert [(p.node_id, p.address) for p in providers[manifest.root]] == [(b"p" * 20, ("55.55.101.2", 4000))]
    finally:
        await service.stop()


@pytest.mark.parametrize("failure", ["error", "timeout"])
async def test_a_failed_claims_lookup_is_none(world, failure):
    class Failing(MemoryDiscovery):
        async def get_manifests(self, repr_key):
            if failure == "error":
                raise DiscoveryFailed("no route")
            await asyncio.sleep(3600)

    service = await started(world, discovery=Failing(world[1]))
    try:
        assert await service.claims(KEY, timeout=0.01) is None
    finally:
        await service.stop()


async def test_the_manifest_comes_from_the_store_or_a_provider(world):
    seeder = await started(world)
    fetcher = await started(world)
    try:
        manifest = await shared(seeder)
        seed = provider(seeder)
        assert await fetcher.full_manifest(manifest.root, [seed]) == manifest
        assert await fetcher.full_manifest(hashlib.sha256(b"x").digest(), [seed]) is None
        assert await seeder.full_manifest(manifest.root, []) == manifest
    finally:
        await fetcher.stop()
        await seeder.stop()


# -- fetching ---------------------------------------------------------------------------------------------------


async def test_a_node_fetching_is_a_provider_at_once_and_withdraws_when_it_abandons(world):
    seeder = await started(world)
    fetcher = await started(world)
    try:
        manifest = await shared(seeder)
        seed = provider(seeder)
        chunks = fetcher.fetch(manifest, [seed], start=0, end=manifest.size)
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
        assert manifest.root not in fetcher.store  # the partial copy is dropped
    finally:
        await fetcher.stop()
        await seeder.stop()


async def test_a_finished_fetch_is_shared_as_a_provider_never_a_publisher(world):
    seeder = await started(world)
    fetcher = await started(world)
    try:
        manifest = await shared(seeder)
        seed = provider(seeder)
        assert b"".join([chunk async for chunk in fetcher.fetch(manifest, [seed])]) == DATA
        fetcher.completed(manifest)
        fetcher.fetch_over(manifest.root)  # shared complete: nothing to withdraw
        await fetcher.settled()
        assert fetcher.discovery.node_id in world[1].providers[manifest.root]
        # Announced when it began; complete, that announcement (the same record, kept fresh) stands.
        assert fetcher.counters.announced == 1 and fetcher.counters.published == 0
        assert fetcher.status()["shared"] == 1
    finally:
        await fetcher.stop()
        await seeder.stop()


async def test_a_fetch_whose_announcement_failed_is_announced_when_complete(world):
    """The announcement made when a fetch began stands for the complete copy, unless discovery refused it."""

    class Refusing(MemoryDiscovery):
        refusals = 1

        async def announce(self, *args, **kwargs):
            if self.refusals:
                self.refusals -= 1
                raise DiscoveryFailed("no node took it")
            return await super().announce(*args, **kwargs)

    seeder = await started(world)
    fetcher = await started(world, discovery=Refusing(world[1]))
    try:
        manifest = await shared(seeder)
        assert b"".join([chunk async for chunk in fetcher.fetch(manifest, [provider(seeder)])]) == DATA
        await fetcher.settled()
        assert fetcher.discovery.node_id not in world[1].providers[manifest.root]  # refused while fetching
        fetcher.completed(manifest)
        await fetcher.settled()
        assert fetcher.discovery.node_id in world[1].providers[manifest.root]
        assert fetcher.counters.announced == 1
    finally:
        await fetcher.stop()
        await seeder.stop()


async def test_a_partial_fetch_announced_while_running_is_withdrawn_when_over(world):
    seeder = await started(world)
    fetcher = await started(world)
    try:
        manifest = await shared(seeder)
        seed = provider(seeder)
        assert b"".join([c async for c in fetcher.fetch(manifest, [seed], start=0, end=20000)]) == DATA[:20000]
        fetcher.completed(manifest)  # not complete: not shared
        await fetcher.settled()
        assert fetcher.discovery.node_id in world[1].providers[manifest.root]
        fetcher.fetch_over(manifest.root)
        await fetcher.settled()
        assert list(world[1].providers[manifest.root]) == [seeder.discovery.node_id]
    finally:
        await fetcher.stop()
        await seeder.stop()


async def test_providers_that_appear_during_a_fetch_join_it(world):
    service = await started(world, fetch_peers=2)
    try:
        manifest = await shared(service)  # the service's own announcement is never its own provider
        await _providers(world, manifest, 3)
        added = []

        class Node:
            def add_peers(self, root, peers):
                added.append((root, list(peers)))
                return len(peers)

            def peer_count(self, root):
                return None  # the fetch is over once the schedule has run

        service.provider_refresh, service.provider_topup = (0.0, 0.0), 0.0
        known = {("127.0.0.1", 7000)}  # the lookup found this one already
        await service.refresh_providers(Node(), "tcp", manifest.root, known, service.fetch_peers)
        assert [root for root, _ in added] == [manifest.root]  # the second poll found nobody new
        [(_, peers)] = added
        assert len(peers) == 2 and set(peers) <= {("127.0.0.1", 7001), ("127.0.0.1", 7002)}  # at most fetch_peers
        assert known == {("127.0.0.1", 7000 + i) for i in range(3)} | set(peers)
    finally:
        await service.stop()


async def test_a_fetch_that_lost_its_peers_gets_new_ones_for_as_long_as_it_runs(world):
    service = await started(world, fetch_peers=3)
    try:
        manifest = await shared(service)
        await _providers(world, manifest, 6)
        added: list[list] = []
        # The fetch's peer count at each top-up: full (no lookup), down to one (two more), full, then over.
        counts = iter([3, 1, 3, None])

        class Node:
            def add_peers(self, root, peers):
                added.append(list(peers))
                return len(peers)

            def peer_count(self, root):
                return next(counts)

        service.provider_refresh, service.provider_topup = (), 0.0  # straight to the top-ups
        known = {("127.0.0.1", 7000), ("127.0.0.1", 7001)}  # tried already: never again
        await service.refresh_providers(Node(), "tcp", manifest.root, known, service.fetch_peers)
        [peers] = added
        assert len(peers) == 2 and set(peers) <= {("127.0.0.1", 7000 + i) for i in range(2, 6)}
        assert next(counts, "done") == "done"  # it asked until the fetch was over
    finally:
        await service.stop()


# -- store work -------------------------------------------------------------------------------------------------


async def test_a_prefix_from_a_body_completes_a_fetch_that_began_mid_content(world):
    seeder = await started(world)
    fetcher = await started(world)
    try:
        manifest = await shared(seeder)
        seed = provider(seeder)
        upto = 3 * manifest.block_size
        assert b"".join([c async for c in fetcher.fetch(manifest, [seed], start=upto)]) == DATA[upto:]
        assert not await fetcher.complete_prefix(manifest, BytesBody(DATA[::-1]), upto)  # not this content
        assert not fetcher.store.complete(manifest.root)
        assert await fetcher.complete_prefix(manifest, BytesBody(DATA), upto)
        assert fetcher.store.complete(manifest.root)
    finally:
        await fetcher.stop()
        await seeder.stop()


async def test_a_body_is_stored_in_the_block_size_of_the_entry_there(world):
    """The same root, stored by a swarm download in 32 KiB blocks, and a body hashed in 16 KiB blocks."""
    service = await started(world)
    try:
        theirs = await stored(service, DATA, block_size=32 * 1024)
        ours, layer = build_manifest([DATA], len(DATA), block_size=16 * 1024)
        manifest, layer = service.stored_as(ours, layer)
        assert manifest.root == theirs.root and manifest.block_size == 32 * 1024
        assert layer == list(service.store.hash_layer(theirs.root))
        assert service.stored_as(*build_manifest([DATA[1:]], len(DATA) - 1))[0].block_size == 16 * 1024
    finally:
        await service.stop()


async def test_store_work_cancelled_stops_the_thread_and_drops_what_it_left(world, caplog):
    service = await started(world)
    manifest, layer = build_manifest([DATA], len(DATA), validator='"v1"')
    begun = asyncio.Event()
    loop = asyncio.get_running_loop()

    class SlowBody(BytesBody):
        def read(self, offset, length):
            loop.call_soon_threadsafe(begun.set)
            time.sleep(0.05)  # in the worker thread
            return super().read(offset, length)

    try:
        work = asyncio.ensure_future(service.in_thread(
            manifest.root, lambda stop: fill_entry(service.store, manifest, layer, SlowBody(DATA), stop)))
        await begun.wait()
        work.cancel()
        with caplog.at_level(logging.INFO, logger="swarmproxy.swarm"), pytest.raises(asyncio.CancelledError):
            await work
        assert "waiting for the store" in caplog.text
        assert manifest.root not in service.store  # incomplete and unpinned: dropped
    finally:
        await service.stop()
