"""The `Discovery` protocol swarm defines is what `dht` implements: structurally, since neither imports the
other. Checked here for the DHT's implementation and for the in-memory fake the tests use."""

from __future__ import annotations

import inspect
import os

import pytest

from dht.config import DhtConfig
from dht.discovery import DhtDiscovery, FakeDiscovery, FakeDiscoveryNetwork
from dht.discovery import ManifestSummary as DhtManifestSummary
from dht.discovery import Provider as DhtProvider
from dht.identity import NodeIdentity
from dht.node import DhtNode
from dht.records import Transport
from swarm.service.discovery import Discovery, ManifestClaim, ManifestSummary, Provider, TransportFlags, validator_bytes

# The protocol's members that are calls, and whether each is a coroutine function (find_providers is an async
# iterator: implemented as an async generator).
CALLS = {"own_host": False, "announce": True, "withdraw": True, "find_providers": False, "put_manifest": True,
         "withdraw_manifest": True, "get_manifests": True}


def implementations() -> list:
    return [DhtDiscovery(DhtNode(NodeIdentity.generate(), DhtConfig())), FakeDiscovery(FakeDiscoveryNetwork())]


@pytest.mark.parametrize("discovery", implementations(), ids=["dht", "fake"])
def test_the_dht_and_its_fake_satisfy_the_protocol(discovery):
    assert isinstance(discovery, Discovery)
    assert isinstance(discovery.node_id, bytes) and len(discovery.node_id) == 20
    assert all(issubclass(error, Exception) for error in discovery.errors)
    for name, is_coroutine in CALLS.items():
        theirs, ours = getattr(discovery, name), getattr(Discovery, name)
        assert inspect.iscoroutinefunction(theirs) == is_coroutine, name
        expected = list(inspect.signature(ours).parameters)[1:]  # without self
        assert list(inspect.signature(theirs).parameters) == expected, name
    assert inspect.isasyncgenfunction(discovery.find_providers)
    defaults = {p.name: p.default for p in inspect.signature(discovery.announce).parameters.values()}
    assert defaults["transports"] == TransportFlags.TCP


def test_the_protocol_is_every_public_call_of_the_implementations():
    """Nothing the service could need is left to duck typing: every public method of both is in the protocol."""
    members = set(CALLS) | {"node_id", "errors"}
    for discovery in implementations():
        public = {n for n, v in inspect.getmembers(type(discovery)) if not n.startswith("_") and callable(v)}
        assert public <= members, public - members


def test_the_values_returned_satisfy_the_structural_types():
    provider = DhtProvider(os.urandom(20), "127.0.0.1", 7000, Transport.TCP | Transport.QUIC)
    assert isinstance(provider, Provider) and provider.address == ("127.0.0.1", 7000)
    summary = DhtManifestSummary(os.urandom(32), 10, 1 << 14, b'"v"', os.urandom(20), "127.0.0.1")
    assert isinstance(summary, ManifestSummary)
    assert not isinstance(ManifestClaim(os.urandom(32), 10, 1 << 14, b'"v"'), ManifestSummary)  # no publisher


def test_transport_flags_are_the_dhts():
    assert {f.name: f.value for f in TransportFlags} == {f.name: f.value for f in Transport}


async def test_a_claim_put_through_the_fake_comes_back_as_a_summary():
    network = FakeDiscoveryNetwork()
    publisher, reader = FakeDiscovery(network), FakeDiscovery(network)
    key, root = os.urandom(32), os.urandom(32)
    await publisher.put_manifest(key, ManifestClaim(root, 100_000, 1 << 14, validator_bytes('"v1"')))
    [summary] = await reader.get_manifests(key)
    assert isinstance(summary, ManifestSummary)
    assert (summary.content_root, summary.size, summary.block_size, summary.validator) == \
        (root, 100_000, 1 << 14, b'"v1"')
    assert (summary.publisher_id, summary.publisher_host) == (publisher.node_id, "127.0.0.1")


def test_validator_bytes():
    assert validator_bytes('"abc"') == b'"abc"'
    assert validator_bytes(None) == b""
    assert validator_bytes("caf\u00e9") == b"caf\xe9"  # latin-1, as HTTP header values
