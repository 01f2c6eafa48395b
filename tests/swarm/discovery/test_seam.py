"""The discovery seam: every backend implements its roles with the same calls and returns its types.

Checked for the DHT's backend, the cluster's, the in-memory one and the composite; the calls' behaviour is
`tests/dht/test_discovery.py` (the DHT and memory side by side) and `test_composite.py`."""

from __future__ import annotations

import inspect
import os

import pytest

from cluster.discovery import RedisDiscovery
from dht.config import DhtConfig
from dht.discovery import DhtDiscovery
from dht.identity import NodeIdentity
from dht.node import DhtNode
from swarm.discovery import (
    Attestation,
    ClaimStore,
    Discovery,
    ManifestClaim,
    Provider,
    ProviderDirectory,
    TransportFlags,
    Vouch,
    validator_bytes,
)
from swarm.discovery.composite import CompositeDiscovery, compose
from swarm.discovery.memory import MemoryDiscovery, MemoryDiscoveryNetwork

# Each role's calls, and whether each is a coroutine function (find_providers is an async iterator: implemented
# as an async generator).
DIRECTORY_CALLS = {"own_host": False, "status": False, "announce": True, "withdraw": True, "find_providers": False}
STORE_CALLS = {"status": False, "put_manifest": True, "withdraw_manifest": True, "get_manifests": True}
CALLS = DIRECTORY_CALLS | STORE_CALLS


def implementations() -> list:
    memory = MemoryDiscovery(MemoryDiscoveryNetwork())
    return [DhtDiscovery(DhtNode(NodeIdentity.generate(), DhtConfig())), memory,
            RedisDiscovery(None, os.urandom(32), "127.0.0.1"),  # type: ignore[arg-type]  # no call reaches redis
            CompositeDiscovery([memory], [memory])]


@pytest.mark.parametrize("discovery", implementations(), ids=["dht", "memory", "redis", "composite"])
def test_every_backend_satisfies_both_roles(discovery):
    assert isinstance(discovery, Discovery)
    assert isinstance(discovery, ProviderDirectory) and isinstance(discovery, ClaimStore)
    assert isinstance(discovery.node_id, bytes) and discovery.node_id
    assert isinstance(discovery.name, str) and discovery.name
    assert all(issubclass(error, Exception) for error in discovery.errors)
    for name, is_coroutine in CALLS.items():
        theirs, ours = getattr(discovery, name), getattr(Discovery, name)
        assert inspect.iscoroutinefunction(theirs) == is_coroutine, name
        expected = list(inspect.signature(ours).parameters)[1:]  # without self
        assert list(inspect.signature(theirs).parameters) == expected, name
    assert inspect.isasyncgenfunction(discovery.find_providers)
    defaults = {p.name: p.default for p in inspect.signature(discovery.announce).parameters.values()}
    assert defaults["transports"] == TransportFlags.TCP


def test_the_roles_are_every_public_call_of_the_backends():
    """Nothing the service could need is left to duck typing: every public method of each is in a role (the
    cluster's `refresh` is its agent's, which rewrites announcements after a redis restart)."""
    members = set(CALLS) | {"node_id", "errors", "name"}
    extra = {"RedisDiscovery": {"refresh"}}
    for discovery in implementations():
        public = {n for n, v in inspect.getmembers(type(discovery)) if not n.startswith("_") and callable(v)}
        assert public <= members | extra.get(type(discovery).__name__, set()), public - members


def test_one_backend_of_both_roles_is_used_as_it_is():
    memory = MemoryDiscovery()
    assert compose([memory], [memory]) is memory
    assert isinstance(compose([memory], [MemoryDiscovery()]), CompositeDiscovery)


def test_a_provider_is_an_address():
    provider = Provider(os.urandom(20), "127.0.0.1", 7000, TransportFlags.TCP | TransportFlags.QUIC)
    assert provider.address == ("127.0.0.1", 7000)


@pytest.mark.parametrize(("host", "attested_by", "attestation"), [
    (None, (), Attestation.NONE),
    ("192.31.196.1", (), Attestation.FIRST_HAND),
    ("192.31.196.1", ("192.175.48.0/24",), Attestation.STORING_NODES),
    (None, ("192.175.48.0/24",), Attestation.NONE),  # attesters of no host attest nothing
])
def test_a_vouch_says_how_its_address_was_attested(host, attested_by, attestation):
    vouch = Vouch.seen(ManifestClaim(os.urandom(32), 10, 1 << 14, b'"v"'), b"p", host, frozenset(attested_by))
    assert vouch.attestation is attestation
    assert vouch.publisher_host == host and (vouch.attested_by != frozenset()) == (attestation is
                                                                                    Attestation.STORING_NODES)


@pytest.mark.parametrize(("attestation", "host", "attested_by"), [
    (Attestation.NONE, "192.31.196.1", ()),  # a host nobody attests would count
    (Attestation.FIRST_HAND, None, ()),
    (Attestation.FIRST_HAND, "192.31.196.1", ("192.175.48.0/24",)),
    (Attestation.STORING_NODES, "192.31.196.1", ()),
])
def test_a_vouch_whose_fields_contradict_its_attestation_is_refused(attestation, host, attested_by):
    with pytest.raises(ValueError):
        Vouch(ManifestClaim(os.urandom(32), 10, 1 << 14, b'"v"'), b"p", attestation, host, frozenset(attested_by))


async def test_a_claim_put_in_memory_comes_back_as_a_first_hand_vouch():
    network = MemoryDiscoveryNetwork()
    publisher, reader = MemoryDiscovery(network), MemoryDiscovery(network)
    key, root = os.urandom(32), os.urandom(32)
    await publisher.put_manifest(key, ManifestClaim(root, 100_000, 1 << 14, validator_bytes('"v1"')))
    [vouch] = await reader.get_manifests(key)
    assert vouch.claim == ManifestClaim(root, 100_000, 1 << 14, b'"v1"')
    assert (vouch.publisher_id, vouch.publisher_host, vouch.attestation) == \
        (publisher.node_id, "127.0.0.1", Attestation.FIRST_HAND)


def test_validator_bytes():
    assert validator_bytes('"abc"') == b'"abc"'
    assert validator_bytes(None) == b""
    assert validator_bytes("caf\u00e9") == b"caf\xe9"  # latin-1, as HTTP header values
