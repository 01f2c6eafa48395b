"""Several discovery backends side by side, as one `Discovery`.

The BitTorrent bridge and the Internet mode add backends next to our DHT: a provider directory that cannot
attest claims (BitTorrent's DHT), or another claim store. `compose(directories, claim_stores)` runs them
together: an announcement or a claim goes to each; a lookup asks all at once and merges what they answer.

* Providers are yielded as any backend finds them, one per address, never this node itself.
* Claims are merged **one per publisher**: a publisher seen on two backends is one publisher (its newest claim,
  and of equally new ones the best attested: first-hand, then storing nodes, then none). Independence is then
  counted by network, as for one backend (`swarm.trust.quorum`): a party that shows itself on two backends under
  two ids is still one network, and a backend that cannot attest adds no weight at all.
* A backend failing (its `errors`) costs only its own answer: the call fails, with `DiscoveryFailed`, only when
  every backend failed. Anything else a backend raises is a bug and propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from swarm.errors import DiscoveryFailed

from .seam import (
    Attestation,
    ClaimStore,
    Discovery,
    ManifestClaim,
    Provider,
    ProviderDirectory,
    TransportFlags,
    Vouch,
)

__all__ = ["CompositeDiscovery", "backend_status", "compose"]

log = logging.getLogger("swarmproxy.discovery")

_T = TypeVar("_T")
_B = TypeVar("_B", ProviderDirectory, ClaimStore)
# Which of one publisher's equally new claims a merge keeps: the one whose address is best known.
_ATTESTATION_RANK = {Attestation.FIRST_HAND: 2, Attestation.STORING_NODES: 1, Attestation.NONE: 0}


def compose(directories: Sequence[ProviderDirectory], claim_stores: Sequence[ClaimStore]) -> Discovery:
    """One `Discovery` over these backends: the backend itself when it is the only one of both roles."""
    if len(directories) == 1 and len(claim_stores) == 1 and id(directories[0]) == id(claim_stores[0]) \
            and isinstance(directories[0], Discovery):
        return directories[0]
    return CompositeDiscovery(directories, claim_stores)


def backend_status(discovery: Discovery) -> dict[str, object]:
    """Each backend's `status()` under its name, whether `discovery` is one backend or several."""
    if isinstance(discovery, CompositeDiscovery):
        return discovery.status()
    return {discovery.name: discovery.status()}


def merge_vouches(answers: Sequence[Sequence[Vouch]]) -> list[Vouch]:
    """One vouch per publisher out of several claim stores' answers, newest first."""
    best: dict[bytes, Vouch] = {}
    for answer in answers:
        for vouch in answer:
            kept = best.get(vouch.publisher_id)
            if kept is None or (vouch.published_at, _ATTESTATION_RANK[vouch.attestation]) > \
                    (kept.published_at, _ATTESTATION_RANK[kept.attestation]):
                best[vouch.publisher_id] = vouch
    return sorted(best.values(), key=lambda v: v.published_at, reverse=True)


@dataclass(frozen=True)
class _Failed:
    error: BaseException
    expected: bool


class _Done:
    pass


_DONE = _Done()


class CompositeDiscovery:
    """A `Discovery` over provider directories and claim stores (see the module docstring)."""

    name = "composite"
    errors: tuple[type[Exception], ...] = (DiscoveryFailed,)

    def __init__(self, directories: Sequence[ProviderDirectory], claim_stores: Sequence[ClaimStore]) -> None:
        if not directories and not claim_stores:
            raise ValueError("a composite discovery needs at least one backend")
        self.directories = list(directories)
        self.claim_stores = list(claim_stores)
        every: list[ProviderDirectory | ClaimStore] = [*self.directories, *self.claim_stores]
        # Each once, though a backend of both roles is in both lists.
        self._backends = [backend for i, backend in enumerate(every) if all(backend is not b for b in every[:i])]
        # This node's ids on its backends: its own announcements are never yielded as providers.
        self._own_ids = {backend.node_id for backend in self._backends}

    @property
    def node_id(self) -> bytes:
        """The id this node's claims carry: the first claim store's (else the first directory's)."""
        return (self.claim_stores or self.directories)[0].node_id

    def own_host(self) -> str | None:
        """Our address as the first directory that knows it sees it (claim stores attest it on their own)."""
        for directory in self.directories:
            if (host := directory.own_host()) is not None:
                return host
        return None

    def status(self) -> dict[str, object]:
        """Each backend's, under its name (two of one kind: "memory", "memory-2")."""
        shown: dict[str, object] = {}
        for backend in self._backends:
            name, count = backend.name, 1
            while name in shown:
                count += 1
                name = f"{backend.name}-{count}"
            shown[name] = backend.status()
        return shown

    async def announce(self, root: bytes, address: tuple[str, int], transports: int = TransportFlags.TCP) -> None:
        await self._each("announce", self.directories, lambda d: d.announce(root, address, transports))

    async def withdraw(self, root: bytes) -> None:
        await self._each("withdraw", self.directories, lambda d: d.withdraw(root))

    async def put_manifest(self, repr_key: bytes, claim: ManifestClaim, *, ttl: int | None = None) -> None:
        await self._each("put_manifest", self.claim_stores, lambda s: s.put_manifest(repr_key, claim, ttl=ttl))

    async def withdraw_manifest(self, repr_key: bytes) -> None:
        await self._each("withdraw_manifest", self.claim_stores, lambda s: s.withdraw_manifest(repr_key))

    async def get_manifests(self, repr_key: bytes) -> list[Vouch]:
        answers = await self._each("get_manifests", self.claim_stores, lambda s: s.get_manifests(repr_key))
        return merge_vouches(answers)

    async def _each(self, what: str, backends: Sequence[_B], call: Callable[[_B], Awaitable[_T]]) -> list[_T]:
        """`call` on every backend at once: the answers of those that did not fail, or `DiscoveryFailed` when all
        did (a backend's `errors`); anything else is raised as it is."""
        if not backends:
            return []
        results = await asyncio.gather(*(call(backend) for backend in backends), return_exceptions=True)
        answers: list[_T] = []
        failures: list[BaseException] = []
        for backend, result in zip(backends, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, backend.errors):
                    raise result
                log.debug("%s on %s failed: %s", what, backend.name, result)
                failures.append(result)
            else:
                answers.append(result)
        if not answers:
            raise DiscoveryFailed(f"{what} failed on every backend: {failures[0]}") from failures[0]
        return answers

    async def find_providers(self, root: bytes) -> AsyncGenerator[Provider, None]:
        if not self.directories:
            return
        found: asyncio.Queue[Provider | _Failed | _Done] = asyncio.Queue()

        async def pump(directory: ProviderDirectory) -> None:
            try:
                async with contextlib.aclosing(directory.find_providers(root)) as providers:
                    async for provider in providers:
                        found.put_nowait(provider)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # handed to the reader, who raises a bug and survives a backend's error
                found.put_nowait(_Failed(exc, isinstance(exc, directory.errors)))
            else:
                found.put_nowait(_DONE)

        tasks = [asyncio.create_task(pump(directory)) for directory in self.directories]
        seen: set[tuple[str, int]] = set()
        failures: list[BaseException] = []
        try:
            for _ in range(len(tasks)):
                while not isinstance(item := await found.get(), _Done | _Failed):
                    if item.node_id in self._own_ids or item.address in seen:
                        continue
                    seen.add(item.address)
                    yield item
                if isinstance(item, _Failed):
                    if not item.expected:
                        raise item.error
                    failures.append(item.error)
            if len(failures) == len(tasks):
                raise DiscoveryFailed(f"finding providers failed on every backend: {failures[0]}") from failures[0]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
