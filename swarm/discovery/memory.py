"""`MemoryDiscovery`: both discovery roles in memory, for tests and the in-process lab. No sockets, keys or time.

Many instances sharing one `MemoryDiscoveryNetwork` see each other's announcements and claims. It refuses
arguments exactly like the real backends (`tests/swarm/discovery/test_contract.py` runs them side by side), so a
caller's bug fails in tests too, and it attests a claim the way an honest DHT does: from the address this node
is seen at, whatever the claim says (`Attestation.FIRST_HAND`).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import AsyncGenerator

from swarm.errors import DiscoveryFailed

from .seam import (
    KEY_BYTES,
    MAX_TTL_S,
    UNSPECIFIED_HOSTS,
    Attestation,
    ManifestClaim,
    Provider,
    TransportFlags,
    Vouch,
    claim_problem,
)

__all__ = ["MemoryDiscovery", "MemoryDiscoveryNetwork"]



class MemoryDiscoveryNetwork:
    """The shared directory and claim store of a group of `MemoryDiscovery` instances. Inspect it in tests."""

    def __init__(self) -> None:
        self.providers: dict[bytes, dict[bytes, Provider]] = {}
        self.manifests: dict[bytes, dict[bytes, Vouch]] = {}
        self.lookups = 0
        self.claims = 0  # claims put so far: each one's `published_at` (no clock here, only an order)


def _check_key(name: str, value: bytes) -> None:
    if not isinstance(value, bytes) or len(value) != KEY_BYTES:
        raise ValueError(f"{name} must be {KEY_BYTES} bytes")


def _check_address(host: str, port: int, transports: int) -> None:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"provider host must be an IP address literal, got {host!r}") from None
    if not 1 <= port <= 0xFFFF:
        raise ValueError(f"port out of range: {port}")
    if not 0 < int(transports) <= int(TransportFlags.TCP | TransportFlags.QUIC):
        raise ValueError(f"bad transports {transports}")


class MemoryDiscovery:
    """A `swarm.discovery.Discovery` in memory."""

    name = "memory"
    errors: tuple[type[Exception], ...] = (DiscoveryFailed,)

    def __init__(self, network: MemoryDiscoveryNetwork | None = None, node_id: bytes | None = None,
                 external_host: str | None = "127.0.0.1") -> None:
        self.network = network or MemoryDiscoveryNetwork()
        self.node_id = node_id or os.urandom(20)  # any length would do: 20 bytes, like the DHT's
        # What an unspecified announce host becomes and where claims are seen to come from, as in the DHT; None:
        # not known yet (no node has answered), so announcing there and vouching fail as they do there.
        self.external_host = external_host

    def own_host(self) -> str | None:
        return self.external_host or None

    def status(self) -> dict[str, object]:
        return {"node_id": self.node_id.hex(), "roots": len(self.network.providers),
                "keys": len(self.network.manifests), "lookups": self.network.lookups}

    async def announce(self, root: bytes, address: tuple[str, int],
                       transports: int = TransportFlags.TCP) -> None:
        _check_key("root", root)
        host = self.external_host if address[0] in UNSPECIFIED_HOSTS else address[0]
        if not host:
            raise DiscoveryFailed("our address as other nodes see it is not known yet (no node answered)")
        _check_address(host, address[1], transports)
        self.network.providers.setdefault(root, {})[self.node_id] = Provider(self.node_id, host, address[1],
                                                                             int(transports))

    async def withdraw(self, root: bytes) -> None:
        self.network.providers.get(root, {}).pop(self.node_id, None)

    async def find_providers(self, root: bytes) -> AsyncGenerator[Provider, None]:
        _check_key("root", root)
        self.network.lookups += 1
        for provider in list(self.network.providers.get(root, {}).values()):
            yield provider

    async def put_manifest(self, repr_key: bytes, claim: ManifestClaim, *, ttl: int | None = None) -> None:
        _check_key("repr_key", repr_key)
        _check_key("content_root", claim.content_root)
        if (problem := claim_problem(claim.size, claim.block_size, claim.validator)) is not None:
            raise ValueError(problem)
        if ttl is not None and not 0 < ttl <= MAX_TTL_S:
            raise ValueError(f"ttl must be in (0, {MAX_TTL_S}], got {ttl}")
        if not self.external_host:
            raise DiscoveryFailed("our address is not known yet: a claim counts only from an address")
        self.network.claims += 1
        stored = Vouch(ManifestClaim(claim.content_root, claim.size, claim.block_size, bytes(claim.validator)),
                       self.node_id, Attestation.FIRST_HAND, self.external_host,
                       published_at=float(self.network.claims))
        entries = self.network.manifests.setdefault(repr_key, {})
        entries.pop(self.node_id, None)  # re-insert so the newest comes last
        entries[self.node_id] = stored

    async def withdraw_manifest(self, repr_key: bytes) -> None:
        self.network.manifests.get(repr_key, {}).pop(self.node_id, None)

    async def get_manifests(self, repr_key: bytes) -> list[Vouch]:
        _check_key("repr_key", repr_key)
        self.network.lookups += 1
        return list(reversed(self.network.manifests.get(repr_key, {}).values()))
