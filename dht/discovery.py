"""Discovery over the DHT for the block engine and the proxy, and an in-memory fake of it.

`swarm.service.discovery.Discovery` is the protocol the block engine takes (`swarm` never imports `dht`, and `dht`
imports nothing of ours): both classes here satisfy it structurally, and `tests/swarm/service/test_discovery.py` checks
that they do. The values crossing the boundary are plain dataclasses (`Provider`, `ManifestSummary`), not DHT
records, so the fake needs no keys.

* `DhtDiscovery(node)` — over a started, bootstrapped `DhtNode`.
* `FakeDiscovery(network)` — many instances sharing one `FakeDiscoveryNetwork` see each other's announcements;
  it validates arguments exactly like the real one, so a caller's bug fails in tests too.

Both have: ``announce(root, address, transports)`` (host "0.0.0.0" or "::" stands for `own_host()`, this node's
address as other nodes see it, None while unknown), ``withdraw(root)``, ``find_providers(root)`` (an async
iterator of `Provider`; it may yield this node's own announcement, which callers skip by `node_id`; wrap it in
`contextlib.aclosing` when stopping early, so outstanding queries are cancelled at once),
``put_manifest(repr_key, summary, ttl=None)`` (any object with `ManifestFields`' attributes),
``withdraw_manifest(repr_key)``, ``get_manifests(repr_key)``,
and `errors`: the exception types a call fails with when the network or other nodes do.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

from dht.errors import DhtError, InvalidArgument
from dht.identity import NODE_ID_BYTES
from dht.node import DhtNode
from dht.records import KEY_BYTES, MAX_TTL_S, ProviderRecord, Transport, manifest_problem
from dht.wire import pack_address

_UNSPECIFIED = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class Provider:
    """A peer that announced a content root."""

    node_id: bytes
    host: str
    port: int
    transports: int

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


@dataclass(frozen=True)
class ManifestSummary:
    """What the DHT holds about a representation. `publisher_id` and `publisher_host` are set by whoever
    returns it: the host only when the storing nodes attest that the record came from there
    (`dht.attestation`), else None: an unattested publisher weighs nothing in a quorum; `attested_by` the
    networks whose storing nodes attest it, each of which a quorum spends on this publisher alone."""

    content_root: bytes
    size: int
    block_size: int
    validator: bytes
    publisher_id: bytes = b""
    publisher_host: str | None = None
    published_at: float = 0.0  # the signed record's timestamp
    attested_by: frozenset[str] = frozenset()  # the networks that attest the host; empty: first-hand (our store)


class ManifestFields(Protocol):
    """What `put_manifest` reads of its summary: a `ManifestSummary`, or any object with these attributes."""

    @property
    def content_root(self) -> bytes: ...
    @property
    def size(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def validator(self) -> bytes: ...


# What a call fails with when the network or other nodes do (`errors` of both classes).
ERRORS: tuple[type[Exception], ...] = (DhtError, OSError)


def _check_root(name: str, value: bytes) -> None:
    if not isinstance(value, bytes) or len(value) != KEY_BYTES:
        raise InvalidArgument(f"{name} must be {KEY_BYTES} bytes")


def _check_address(address: tuple[str, int], transports: int) -> None:
    host, port = address
    try:
        pack_address(host)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    if not 1 <= port <= 0xFFFF:
        raise InvalidArgument(f"port out of range: {port}")
    if not 0 < int(transports) <= int(Transport.TCP | Transport.QUIC):
        raise InvalidArgument(f"bad transports {transports}")


def _check_summary(summary: ManifestFields) -> None:
    _check_root("content_root", summary.content_root)
    # The same check a record gets when it is made or decoded: the fake and the real DHT refuse alike.
    if (problem := manifest_problem(summary.size, summary.block_size, summary.validator)) is not None:
        raise InvalidArgument(problem)


class DhtDiscovery:
    """`Discovery` over a running `DhtNode`."""

    errors = ERRORS

    def __init__(self, node: DhtNode) -> None:
        self.node = node

    @property
    def node_id(self) -> bytes:
        return self.node.node_id

    def own_host(self) -> str | None:
        return self.node.own_host()

    async def announce(self, root: bytes, address: tuple[str, int], transports: int = Transport.TCP) -> None:
        """Announce that this node serves `root` at `address`; kept fresh until `withdraw(root)`. An unspecified
        host ("0.0.0.0" / "::") means "my address as other nodes see it"."""
        host = address[0]
        if host in _UNSPECIFIED:
            host = self.node.own_host() or ""
            if not host:
                raise InvalidArgument("our public address is not known yet (no node answered); pass it explicitly")
        await self.node.announce(root, host, address[1], transports)

    async def withdraw(self, root: bytes) -> None:
        await self.node.withdraw(root)

    async def find_providers(self, root: bytes) -> AsyncGenerator[Provider, None]:
        _check_root("root", root)
        record: ProviderRecord
        async for record in self.node.find_providers(root):
            yield Provider(record.node_id, record.host, record.port, record.transports)

    async def put_manifest(self, repr_key: bytes, summary: ManifestFields, *, ttl: int | None = None) -> None:
        await self.node.put_manifest(
            repr_key, summary.content_root, summary.size, summary.block_size, summary.validator, ttl_s=ttl
        )

    async def withdraw_manifest(self, repr_key: bytes) -> None:
        await self.node.withdraw_manifest(repr_key)

    async def get_manifests(self, repr_key: bytes) -> list[ManifestSummary]:
        found = await self.node.get_manifests(repr_key)
        return [
            ManifestSummary(r.content_root, r.size, r.block_size, r.validator, r.publisher_id, host, r.timestamp,
                            attesters)
            for r, host, attesters in found
        ]


class FakeDiscoveryNetwork:
    """The shared "DHT" of a group of `FakeDiscovery` instances. Inspect it in tests."""

    def __init__(self) -> None:
        self.providers: dict[bytes, dict[bytes, Provider]] = {}
        self.manifests: dict[bytes, dict[bytes, ManifestSummary]] = {}
        self.lookups = 0
        self.claims = 0  # claims put so far: each one's `published_at` (no clock here, only an order)


class FakeDiscovery:
    """In-memory `Discovery` for tests of other packages: no sockets, no keys, no time."""

    errors = ERRORS

    def __init__(
        self, network: FakeDiscoveryNetwork | None = None, node_id: bytes | None = None,
        external_host: str | None = "127.0.0.1",
    ) -> None:
        self.network = network or FakeDiscoveryNetwork()
        self.node_id = node_id or os.urandom(NODE_ID_BYTES)
        # What an unspecified announce host becomes and where storing nodes see our records come from, as in
        # DhtDiscovery; None: not known yet (no node has answered), so announcing and vouching fail as there.
        self.external_host = external_host

    def own_host(self) -> str | None:
        return self.external_host or None

    async def announce(self, root: bytes, address: tuple[str, int], transports: int = Transport.TCP) -> None:
        _check_root("root", root)
        host = self.external_host if address[0] in _UNSPECIFIED else address[0]
        if not host:
            raise InvalidArgument("our public address is not known yet (no node answered); pass it explicitly")
        _check_address((host, address[1]), transports)
        provider = Provider(self.node_id, host, address[1], int(transports))
        self.network.providers.setdefault(root, {})[self.node_id] = provider

    async def withdraw(self, root: bytes) -> None:
        self.network.providers.get(root, {}).pop(self.node_id, None)

    async def find_providers(self, root: bytes) -> AsyncGenerator[Provider, None]:
        _check_root("root", root)
        self.network.lookups += 1
        for provider in list(self.network.providers.get(root, {}).values()):
            yield provider

    async def put_manifest(self, repr_key: bytes, summary: ManifestFields, *, ttl: int | None = None) -> None:
        _check_root("repr_key", repr_key)
        _check_summary(summary)
        if ttl is not None and not 0 < ttl <= MAX_TTL_S:
            raise InvalidArgument(f"ttl must be in (0, {MAX_TTL_S}], got {ttl}")
        if not self.external_host:
            raise InvalidArgument("our address is not known yet: storing nodes accept a manifest only from it")
        # As an honest DHT would attest it: the address this node is seen at, whatever the summary says.
        self.network.claims += 1
        stored = ManifestSummary(summary.content_root, summary.size, summary.block_size, bytes(summary.validator),
                                 self.node_id, self.external_host, float(self.network.claims))
        entries = self.network.manifests.setdefault(repr_key, {})
        entries.pop(self.node_id, None)  # re-insert so the newest comes last
        entries[self.node_id] = stored

    async def withdraw_manifest(self, repr_key: bytes) -> None:
        self.network.manifests.get(repr_key, {}).pop(self.node_id, None)

    async def get_manifests(self, repr_key: bytes) -> list[ManifestSummary]:
        _check_root("repr_key", repr_key)
        self.network.lookups += 1
        return list(reversed(self.network.manifests.get(repr_key, {}).values()))
