"""Several discovery backends as one: a publisher seen twice counts once, a failing backend costs its answer only."""

from __future__ import annotations

import asyncio
import os
from contextlib import aclosing

import pytest

from swarm.discovery import Attestation, ManifestClaim, Provider, Vouch
from swarm.discovery.composite import CompositeDiscovery, merge_vouches
from swarm.discovery.memory import MemoryDiscovery, MemoryDiscoveryNetwork
from swarm.errors import DiscoveryFailed
from swarm.trust import decide, parse_trust

KEY, ROOT = os.urandom(32), os.urandom(32)
CLAIM = ManifestClaim(ROOT, 100_000, 1 << 14, b'"v1"')


def vouch(publisher: bytes, attestation: Attestation, at: float, root: bytes = ROOT) -> Vouch:
    host = None if attestation is Attestation.NONE else "192.31.196.1"
    by = frozenset({"192.175.48.0/24"}) if attestation is Attestation.STORING_NODES else frozenset()
    return Vouch(ManifestClaim(root, 100_000, 1 << 14, b'"v1"'), publisher, attestation, host, by, at)


class Stub(MemoryDiscovery):
    """A backend whose claim answers, or failures, the test chooses."""

    def __init__(self, answer=(), failure: BaseException | None = None, providers=()) -> None:
        super().__init__(MemoryDiscoveryNetwork())
        self.answer, self.failure, self.providers = list(answer), failure, list(providers)
        self.put: list[bytes] = []

    async def get_manifests(self, repr_key):
        if self.failure is not None:
            raise self.failure
        return self.answer

    async def put_manifest(self, repr_key, claim, *, ttl=None):
        if self.failure is not None:
            raise self.failure
        self.put.append(repr_key)

    async def find_providers(self, root):
        if self.failure is not None:
            raise self.failure
        for provider in self.providers:
            await asyncio.sleep(0)  # as a network would: one at a time
            yield provider


@pytest.mark.parametrize(("first", "second", "kept"), [
    # the newest claim of one publisher wins, whatever backend it came from
    ((Attestation.FIRST_HAND, 1.0), (Attestation.STORING_NODES, 2.0), 1),
    ((Attestation.STORING_NODES, 2.0), (Attestation.FIRST_HAND, 1.0), 0),
    # equally new: the best attested
    ((Attestation.NONE, 1.0), (Attestation.STORING_NODES, 1.0), 1),
    ((Attestation.FIRST_HAND, 1.0), (Attestation.STORING_NODES, 1.0), 0),
    ((Attestation.NONE, 1.0), (Attestation.FIRST_HAND, 1.0), 1),
])
def test_a_publisher_seen_on_two_backends_is_one_publisher(first, second, kept):
    answers = [[vouch(b"p", *first)], [vouch(b"p", *second)]]
    assert merge_vouches(answers) == [answers[kept][0]]


def test_merged_claims_are_newest_first():
    merged = merge_vouches([[vouch(b"a", Attestation.FIRST_HAND, 1.0)], [vouch(b"b", Attestation.FIRST_HAND, 3.0),
                                                                         vouch(b"c", Attestation.FIRST_HAND, 2.0)]])
    assert [v.publisher_id for v in merged] == [b"b", b"c", b"a"]


async def test_claims_a_backend_cannot_attest_weigh_nothing():
    """Many keys on a backend that cannot say where a claim came from never make a quorum, with or without an
    attested publisher beside them."""
    unattested = Stub([vouch(os.urandom(20), Attestation.NONE, 1.0) for _ in range(10)])
    composite = CompositeDiscovery([], [unattested, Stub([vouch(b"honest", Attestation.FIRST_HAND, 1.0)])])
    found = await composite.get_manifests(KEY)
    assert len(found) == 11
    assert decide(found, parse_trust("quorum:2")).reason == "below-quorum"
    assert decide(found, parse_trust("quorum:1")).accepted == CLAIM


async def test_two_keys_of_one_party_on_two_backends_count_as_one_network():
    """The same address under two ids, one per backend: one network, one vote."""
    a = Stub([Vouch(CLAIM, b"id-on-dht", Attestation.FIRST_HAND, "192.31.196.1", published_at=1.0)])
    b = Stub([Vouch(CLAIM, b"id-on-other", Attestation.FIRST_HAND, "192.31.196.2", published_at=1.0)])
    found = await CompositeDiscovery([], [a, b]).get_manifests(KEY)
    assert len(found) == 2 and decide(found, parse_trust("quorum:2")).reason == "below-quorum"


async def test_a_failing_backend_costs_its_answer_only():
    good = Stub([vouch(b"p", Attestation.FIRST_HAND, 1.0)])
    composite = CompositeDiscovery([], [Stub(failure=DiscoveryFailed("down")), good])
    assert [v.publisher_id for v in await composite.get_manifests(KEY)] == [b"p"]
    await composite.put_manifest(KEY, CLAIM)
    assert good.put == [KEY]


async def test_every_backend_failing_is_one_of_the_composites_errors():
    composite = CompositeDiscovery([Stub(failure=DiscoveryFailed("a"))], [Stub(failure=DiscoveryFailed("b"))])
    with pytest.raises(composite.errors):
        await composite.get_manifests(KEY)
    with pytest.raises(composite.errors):
        await composite.put_manifest(KEY, CLAIM)
    with pytest.raises(composite.errors):
        [p async for p in composite.find_providers(ROOT)]


async def test_a_backends_bug_propagates():
    composite = CompositeDiscovery([Stub(failure=KeyError("bug"))], [Stub(failure=KeyError("bug")), Stub()])
    with pytest.raises(KeyError):
        await composite.get_manifests(KEY)
    with pytest.raises(KeyError):
        [p async for p in composite.find_providers(ROOT)]


async def test_providers_from_every_directory_once_each_and_never_this_node():
    one = Provider(b"1" * 20, "127.0.0.2", 7000, 1)
    first = Stub(providers=[one, Provider(b"2" * 20, "127.0.0.3", 7000, 1)])
    second = Stub(providers=[Provider(b"x" * 20, "127.0.0.2", 7000, 1),  # the same address under another id
                             Provider(b"3" * 20, "127.0.0.4", 7000, 1)])
    second.providers.append(Provider(first.node_id, "127.0.0.9", 7000, 1))  # this node, found on the other
    composite = CompositeDiscovery([first, second, Stub(failure=DiscoveryFailed("down"))], [first])
    found = [p async for p in composite.find_providers(ROOT)]
    assert sorted(p.host for p in found) == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


async def test_stopping_early_cancels_every_directorys_lookup():
    closed = []

    class Endless(Stub):
        async def find_providers(self, root):
            try:
                n = 0
                while True:
                    n += 1
                    await asyncio.sleep(0)
                    yield Provider(os.urandom(20), f"127.0.{n // 250}.{n % 250 + 1}", 7000, 1)
            finally:
                closed.append(self)

    backends = [Endless(), Endless()]
    composite = CompositeDiscovery(backends, [])
    async with aclosing(composite.find_providers(ROOT)) as providers:
        await anext(providers)
    assert sorted(map(id, closed)) == sorted(map(id, backends))


async def test_announcements_go_to_directories_and_claims_to_claim_stores():
    directory_net, store_net = MemoryDiscoveryNetwork(), MemoryDiscoveryNetwork()
    directory, store = MemoryDiscovery(directory_net), MemoryDiscovery(store_net)
    composite = CompositeDiscovery([directory], [store])
    await composite.announce(ROOT, ("0.0.0.0", 7000))
    await composite.put_manifest(KEY, CLAIM)
    assert ROOT in directory_net.providers and ROOT not in store_net.providers
    assert KEY in store_net.manifests and KEY not in directory_net.manifests
    assert composite.node_id == store.node_id
    assert composite.status() == {"memory": directory.status(), "memory-2": store.status()}


def test_a_composite_needs_a_backend():
    with pytest.raises(ValueError):
        CompositeDiscovery([], [])
