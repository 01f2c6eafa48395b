"""`DhtDiscovery`: the discovery seam (`swarm.discovery.seam`) over our Kademlia DHT, both of its roles.

A provider directory (signed provider records under a content root) and a claim store (signed manifest records
under a key, one per publisher). Its claims are attested: each comes back as a `Vouch` whose publisher host is
the address the storing nodes saw the record arrive from (`dht.attestation`), first-hand when this node's own
store saw it, `Attestation.NONE` when nobody vouches for the address (it then weighs nothing in a quorum).

An unspecified announce host ("0.0.0.0" / "::") means `own_host()`, this node's address as other nodes see it
(None while unknown: then announcing there fails). A call that fails because of the network or other nodes
raises one of `errors`; a bad argument raises `dht.errors.InvalidArgument`, a `ValueError`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from dht.errors import DhtError, InvalidArgument
from dht.node import DhtNode
from dht.records import KEY_BYTES, ProviderRecord, Transport
from swarm.discovery.seam import UNSPECIFIED_HOSTS, ManifestClaim, Provider, Vouch

__all__ = ["DhtDiscovery"]


def _check_key(name: str, value: bytes) -> None:
    if not isinstance(value, bytes) or len(value) != KEY_BYTES:
        raise InvalidArgument(f"{name} must be {KEY_BYTES} bytes")


class DhtDiscovery:
    """`swarm.discovery.Discovery` over a running `DhtNode`."""

    name = "dht"
    errors: tuple[type[Exception], ...] = (DhtError, OSError)

    def __init__(self, node: DhtNode) -> None:
        self.node = node

    @property
    def node_id(self) -> bytes:
        return self.node.node_id

    def own_host(self) -> str | None:
        return self.node.own_host()

    def status(self) -> dict[str, object]:
        return self.node.stats()

    async def announce(self, root: bytes, address: tuple[str, int], transports: int = Transport.TCP) -> None:
        host = address[0]
        if host in UNSPECIFIED_HOSTS:
            host = self.node.own_host() or ""
            if not host:
                raise InvalidArgument("our public address is not known yet (no node answered); pass it explicitly")
        await self.node.announce(root, host, address[1], transports)

    async def withdraw(self, root: bytes) -> None:
        await self.node.withdraw(root)

    async def find_providers(self, root: bytes) -> AsyncGenerator[Provider, None]:
        _check_key("root", root)
        record: ProviderRecord
        async for record in self.node.find_providers(root):
            yield Provider(record.node_id, record.host, record.port, record.transports)

    async def put_manifest(self, repr_key: bytes, claim: ManifestClaim, *, ttl: int | None = None) -> None:
        await self.node.put_manifest(repr_key, claim.content_root, claim.size, claim.block_size, claim.validator,
                                     ttl_s=ttl)

    async def withdraw_manifest(self, repr_key: bytes) -> None:
        await self.node.withdraw_manifest(repr_key)

    async def get_manifests(self, repr_key: bytes) -> list[Vouch]:
        return [Vouch.seen(ManifestClaim(r.content_root, r.size, r.block_size, r.validator), r.publisher_id, host,
                           attesters, r.timestamp)
                for r, host, attesters in await self.node.get_manifests(repr_key)]
