"""What the block engine needs from discovery: two roles a backend implements, and the values that cross.

`swarm` never imports an implementation; every backend imports this module and returns its types:
`dht.discovery.DhtDiscovery` (our Kademlia DHT: both roles), `cluster.discovery.RedisDiscovery` (the cluster's
redis), `swarm.discovery.memory.MemoryDiscovery` (in memory, for tests), and `swarm.discovery.composite` runs
several side by side. The two roles:

* a **provider directory** (`ProviderDirectory`): a content root (32 bytes, `Manifest.root`) is announced at an
  address, found as `Provider`s, withdrawn. It says who to connect to; what they send is checked block by block
  against the root, so a directory needs no trust.
* a **claim store** (`ClaimStore`): a key (32 bytes, chosen by the caller: the proxy hashes a URL) holds one
  claim per publisher, each saying "the representation under this key is the content of this root"
  (`ManifestClaim`). This is where trust is decided, so each claim comes back as a `Vouch` that says explicitly
  whether and how the publisher's address was attested (`Attestation`): a backend that cannot attest says
  `NONE`, and its claims weigh nothing. A claim naming `IN_PROGRESS_ROOT` says "I am fetching this
  representation from its origin now and will vouch for it when I have it": a short life (`IN_PROGRESS_TTL`),
  withdrawn with `withdraw_manifest` or replaced by the real claim.

A `Discovery` is both. A call that fails because of the network or other nodes raises one of the backend's
`errors`; anything else is a bug and propagates.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from swarm.trust.claims import IN_PROGRESS_ROOT, MAX_VALIDATOR_BYTES, Attestation, ManifestClaim, Vouch

__all__ = ["Attestation", "Backend", "ClaimStore", "Discovery", "IN_PROGRESS_ROOT", "IN_PROGRESS_TTL", "KEY_BYTES",
           "MAX_TTL_S", "MAX_VALIDATOR_BYTES", "ManifestClaim", "Provider", "ProviderDirectory", "TransportFlags",
           "UNSPECIFIED_HOST", "UNSPECIFIED_HOSTS", "Vouch", "claim_problem", "validator_bytes"]

UNSPECIFIED_HOST = "0.0.0.0"  # an announced host meaning "this node's address as other nodes see it"
UNSPECIFIED_HOSTS = ("0.0.0.0", "::", "")  # ... and the forms a backend reads as the same
# Seconds an in-progress claim lives unless refreshed: a node that died mid-download stops counting soon.
IN_PROGRESS_TTL = 120
KEY_BYTES = 32  # a content root or a claim's key: SHA-256 sized
MAX_TTL_S = 24 * 3600  # the longest life an announcement or a claim may ask for
_U32_MAX = 0xFFFF_FFFF


class TransportFlags(enum.IntFlag):
    """How a provider can be reached (the bits of `Provider.transports`)."""

    TCP = 1
    QUIC = 2


@dataclass(frozen=True)
class Provider:
    """A node that announced a content root: where to connect, and by which transports (`TransportFlags` bits)."""

    node_id: bytes
    host: str
    port: int
    transports: int

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


def validator_bytes(validator: str | None) -> bytes:
    """A manifest's validator (`Manifest.validator`, text) as a claim carries it."""
    return (validator or "").encode("latin-1", "replace")


def claim_problem(size: int, block_size: int, validator: bytes) -> str | None:
    """Why a claim's fields cannot be stored (every backend refuses alike), or None. The block size is opaque here
    (a u32): whether it could be a manifest's is the trust rule's to judge, so a bad one is dropped, not refused."""
    if not 0 <= size < 2**63:
        return f"size out of range: {size}"
    if not 0 <= block_size <= _U32_MAX:
        return f"block size must fit a u32, got {block_size}"
    if not 0 < len(validator) <= MAX_VALIDATOR_BYTES:
        return f"validator must be 1..{MAX_VALIDATOR_BYTES} bytes, got {len(validator)}"
    return None


@runtime_checkable
class Backend(Protocol):
    """What every discovery backend has, whichever roles it plays."""

    # `name`: a short word for logs and the admin API ("dht", "redis", "memory"). `errors`: the exception types a
    # call raises when the network or other nodes fail it (a timeout, no node answering, an address not known
    # yet, a bad reply): logged and survived. Anything else is a bug.
    name: str
    errors: tuple[type[Exception], ...]

    @property
    def node_id(self) -> bytes:
        """This node's id, as its own `Provider` records and claims carry it: `find_providers` may yield this
        node, and `get_manifests` this node's own claims."""

    def status(self) -> dict[str, object]:
        """What the admin API shows of this backend (JSON-serialisable)."""


@runtime_checkable
class ProviderDirectory(Backend, Protocol):
    """Who holds which content: announce, withdraw, find."""

    def own_host(self) -> str | None:
        """The host other nodes reach this node at, or None while unknown (no other node has answered yet):
        then announcing at `UNSPECIFIED_HOST` fails."""

    async def announce(self, root: bytes, address: tuple[str, int], transports: int = TransportFlags.TCP) -> None:
        """Announce that this node serves `root` at `address` (host `UNSPECIFIED_HOST`: `own_host()`), by
        `transports`; kept fresh by the implementation until `withdraw(root)`."""

    async def withdraw(self, root: bytes) -> None:
        """Stop announcing `root`."""

    def find_providers(self, root: bytes) -> AsyncGenerator[Provider, None]:
        """Providers of `root`, one per node, yielded as they are found. Close it (`contextlib.aclosing`) to
        stop early: outstanding queries are cancelled."""


@runtime_checkable
class ClaimStore(Backend, Protocol):
    """Who vouches for which key, with the publisher's address attested (or said not to be)."""

    async def put_manifest(self, repr_key: bytes, claim: ManifestClaim, *, ttl: int | None = None) -> None:
        """Vouch for what the representation under `repr_key` is (only for bytes from its origin); kept fresh
        until `withdraw_manifest(repr_key)` or replaced by this node's next claim under the key. `ttl`: the
        seconds each copy lives (None: the implementation's default). Fails while this node's address is not
        known: a claim counts only from an address."""

    async def withdraw_manifest(self, repr_key: bytes) -> None:
        """Withdraw this node's claim under `repr_key`."""

    async def get_manifests(self, repr_key: bytes) -> Sequence[Vouch]:
        """Every publisher's claim under `repr_key`, one per publisher, newest first."""


@runtime_checkable
class Discovery(ProviderDirectory, ClaimStore, Protocol):
    """Both roles: what `swarm.service.swarm_service.SwarmService` takes."""
