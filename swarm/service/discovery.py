"""What the swarm needs from discovery, defined here so that `swarm` never imports an implementation.

`SwarmService` (`swarm.service.swarm_service`) takes any object satisfying `Discovery`: `dht.discovery.DhtDiscovery`
(over the Kademlia DHT) and `dht.discovery.FakeDiscovery` (in memory, for tests) today; a cluster's shared directory
or a BitTorrent bridge tomorrow. They satisfy it structurally (`dht` imports nothing of ours), and so do the values
they return: any object with the attributes of `Provider` / `ManifestSummary` will do.

The values that cross the seam:

* a content root (32 bytes, `Manifest.root`) is announced at an address, found as `Provider`s, withdrawn;
* a key (32 bytes, chosen by the caller: the proxy hashes a URL) holds manifest summaries: one per publisher,
  each saying "the representation under this key is the content of this root". `put_manifest` takes a
  `ManifestClaim` (or anything with its four attributes); `get_manifests` returns `ManifestSummary`s, which
  add who published it and, when storing nodes vouch for it, from which host. A claim naming `IN_PROGRESS_ROOT`
  says "I am fetching this representation from its origin now and will vouch for it when I have it": no root
  yet, a short life (`IN_PROGRESS_TTL`), withdrawn with `withdraw_manifest` or replaced by the real claim.

A lookup or an announcement that fails because of the network or other nodes raises one of the
implementation's `errors`; anything else is a bug and propagates.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from swarm.trust.quorum import IN_PROGRESS_ROOT  # what a claim names: the trust rule's vocabulary

__all__ = ["Discovery", "IN_PROGRESS_ROOT", "IN_PROGRESS_TTL", "ManifestClaim", "ManifestSummary", "Provider",
           "TransportFlags", "UNSPECIFIED_HOST", "validator_bytes"]

UNSPECIFIED_HOST = "0.0.0.0"  # an announced host meaning "this node's address as other nodes see it"
# Seconds an in-progress claim lives unless refreshed: a node that died mid-download stops counting soon.
IN_PROGRESS_TTL = 120


class TransportFlags(enum.IntFlag):
    """How a provider can be reached (the bits of `Provider.transports`, as in `dht.records.Transport`)."""

    TCP = 1
    QUIC = 2


@runtime_checkable
class Provider(Protocol):
    """A node that announced a content root: where to connect, and by which transports."""

    @property
    def node_id(self) -> bytes: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def transports(self) -> int: ...  # TransportFlags bits
    @property
    def address(self) -> tuple[str, int]: ...


@dataclass(frozen=True)
class ManifestClaim:
    """What this node vouches for under a key: the content of `content_root`, `size` bytes in blocks of
    `block_size`, as the origin labelled it with `validator` (an ETag's or Last-Modified's bytes)."""

    content_root: bytes
    size: int
    block_size: int
    validator: bytes


def validator_bytes(validator: str | None) -> bytes:
    """A manifest's validator (`Manifest.validator`, text) as a claim carries it."""
    return (validator or "").encode("latin-1", "replace")


@runtime_checkable
class ManifestSummary(Protocol):
    """One publisher's claim about a key, as discovery returns it. `publisher_host` is set only when the
    storing nodes vouch that the claim came from there, else None. `published_at`: when the publisher made
    this claim, by its own clock (seconds; 0.0 when discovery does not say): it orders claims alike for every
    reader, and proves nothing. `attested_by`: the networks whose storing nodes vouch for the host, empty when
    discovery saw it first-hand; a quorum spends each on one publisher only (`swarm.trust`)."""

    @property
    def content_root(self) -> bytes: ...
    @property
    def size(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def validator(self) -> bytes: ...
    @property
    def publisher_id(self) -> bytes: ...
    @property
    def publisher_host(self) -> str | None: ...
    @property
    def published_at(self) -> float: ...
    @property
    def attested_by(self) -> frozenset[str]: ...


@runtime_checkable
class Discovery(Protocol):
    """Finding and announcing who holds which content, and who vouches for which key."""

    # The exception types a call raises when the network or other nodes fail it (a timeout, no node
    # answering, an address not known yet, a bad reply): logged and survived. Anything else is a bug.
    errors: tuple[type[Exception], ...]

    @property
    def node_id(self) -> bytes:
        """This node's id, as its own `Provider` records carry it: `find_providers` may yield this node."""

    def own_host(self) -> str | None:
        """The host other nodes reach this node at, or None while unknown (no other node has answered yet):
        then announcing at `UNSPECIFIED_HOST` and `put_manifest` fail."""

    async def announce(self, root: bytes, address: tuple[str, int], transports: int = TransportFlags.TCP) -> None:
        """Announce that this node serves `root` at `address` (host `UNSPECIFIED_HOST`: `own_host()`), by
        `transports`; kept fresh by the implementation until `withdraw(root)`."""

    async def withdraw(self, root: bytes) -> None:
        """Stop announcing `root`."""

    def find_providers(self, root: bytes) -> AsyncGenerator[Provider, None]:
        """Providers of `root`, one per node, yielded as they are found. Close it (`contextlib.aclosing`) to
        stop early: outstanding queries are cancelled."""

    async def put_manifest(self, repr_key: bytes, summary: ManifestClaim, *, ttl: int | None = None) -> None:
        """Vouch for what the representation under `repr_key` is (only for bytes from its origin); kept fresh
        until `withdraw_manifest(repr_key)` or replaced by this node's next claim under the key. `ttl`: the
        seconds each copy lives (None: the implementation's default)."""

    async def withdraw_manifest(self, repr_key: bytes) -> None:
        """Withdraw this node's claim under `repr_key`."""

    async def get_manifests(self, repr_key: bytes) -> Sequence[ManifestSummary]:
        """Every publisher's summary for `repr_key`, newest first."""
