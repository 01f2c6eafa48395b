"""`RedisDiscovery`: the block engine's `Discovery` over redis, filtered by the overlay.

`swarm.service.swarm_service.SwarmService` runs unchanged on it: announcing a root writes a provider key with a
TTL (`cluster.records`), refreshed by `refresh()` every reconcile period until `withdraw`, and rewritten after a
redis restart; `find_providers(root)` yields only the providers the overlay lets this node talk to (`allowed`,
given by the agent: same rack, or both representants of one level), and looks up only those (`candidates`, the
peers in the agent's view): not the provider record of every agent of the cluster that holds the content.
Manifests are not looked up by key in the cluster (the pusher publishes them with the transfer), so
`put_manifest` / `withdraw_manifest` / `get_manifests` keep this node's claims in memory, enough for the protocol.

A redis that cannot be reached raises `RedisUnavailable`, listed in `errors`: the service logs and survives it,
and the fetches under way go on with the peers they have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence

from cluster.coord import Coord
from cluster.errors import RedisUnavailable
from cluster.records import ProviderRecord
from swarm.discovery.seam import UNSPECIFIED_HOSTS, Attestation, ManifestClaim, Provider, Vouch

__all__ = ["RedisDiscovery"]

log = logging.getLogger("swarmproxy.cluster")

class RedisDiscovery:
    """`swarm.discovery.Discovery` over the cluster's redis (see the module docstring)."""

    name = "redis"
    errors: tuple[type[Exception], ...] = (RedisUnavailable,)

    def __init__(self, coord: Coord, node_id: bytes, host: str,
                 allowed: Callable[[bytes, str], bool] | None = None,
                 candidates: Callable[[bytes], Iterable[str] | None] | None = None) -> None:
        self.coord = coord
        self._node_id = node_id
        self.host = host
        self.allowed = allowed or (lambda root, node: True)  # (root, provider's node id hex) -> may we talk
        self.candidates = candidates or (lambda root: None)  # root -> the node ids worth looking up (None: all)
        self.announced: dict[bytes, ProviderRecord] = {}
        self._claims: dict[bytes, list[Vouch]] = {}

    @property
    def node_id(self) -> bytes:
        return self._node_id

    @property
    def node(self) -> str:
        return self._node_id.hex()

    def own_host(self) -> str | None:
        return self.host

    async def announce(self, root: bytes, address: tuple[str, int], transports: int = 1) -> None:
        host = self.host if address[0] in UNSPECIFIED_HOSTS else address[0]
        record = ProviderRecord(host, int(address[1]), int(transports))
        self.announced[root] = record  # kept even if redis is away now: `refresh` writes it when it is back
        await self.coord.announce(root, self.node, record)

    async def withdraw(self, root: bytes) -> None:
        record = self.announced.pop(root, None)
        if record is not None:
            await self.coord.withdraw(root, self.node, record)

    async def refresh(self) -> None:
        """Rewrite every announcement (their TTL; after a redis restart, the keys themselves)."""
        for root, record in list(self.announced.items()):
            await self.coord.announce(root, self.node, record)

    async def find_providers(self, root: bytes) -> AsyncGenerator[Provider, None]:
        for node, record in (await self.coord.providers(root, self.candidates(root))).items():
            if node == self.node or not self.allowed(root, node):
                continue
            try:
                node_id = bytes.fromhex(node)
            except ValueError:
                continue
            yield Provider(node_id, record.host, record.port, record.transports)

    def status(self) -> dict[str, object]:
        return {"node_id": self.node, "host": self.host, "announced": len(self.announced)}

    async def put_manifest(self, repr_key: bytes, claim: ManifestClaim, *, ttl: int | None = None) -> None:
        # Kept here, never written to redis: its only reader is this node, which saw it first-hand.
        entry = Vouch(ManifestClaim(claim.content_root, claim.size, claim.block_size, bytes(claim.validator)),
                      self._node_id, Attestation.FIRST_HAND, self.host, published_at=time.time())
        self._claims[repr_key] = [entry]  # this node's next claim under a key replaces its last

    async def withdraw_manifest(self, repr_key: bytes) -> None:
        self._claims.pop(repr_key, None)

    async def get_manifests(self, repr_key: bytes) -> Sequence[Vouch]:
        return list(self._claims.get(repr_key, ()))
