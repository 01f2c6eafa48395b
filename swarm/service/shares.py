"""What a node shares: serving a content root, announcing it, vouching for it, lingering, withdrawing.

`Shares` is the part of `SwarmService` that talks to discovery on a content's behalf. Its rules:

* A node that fetches a root serves it at once (peers take the blocks it has verified) and announces it once,
  like a BitTorrent client: others find it before it is complete. That announcement stands for the complete
  copy's too (the record is the same; a second publish was a fifth of a flash crowd's DHT traffic). A fetch
  that does not end up shared complete is withdrawn (`abandon`, `fetch_over`).
* Complete content is served and announced (once: discovery keeps an announcement fresh by itself until it is
  withdrawn, so a file downloaded fifty times is one announcement), optionally vouched for under a key (once per
  key and root), and shared for `linger` seconds from the last time it was shared; then withdrawn. The store
  keeps it: only sharing ends.
* Eviction or a store failure withdraws it at once (`SwarmService` forwards the store's events).
* Whoever else offers what this node shares (the BitTorrent bridge) watches it: `watch(listener)` is told
  `ContentShared(manifest)` when complete content starts being shared and `ContentWithdrawn(root, why)` when it
  stops, once each, in that order.

The linger timer is driven by `call_later` (`loop.call_later` unless given: tests pass a fake clock's).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from swarm.content.manifest import Manifest
from swarm.discovery.seam import UNSPECIFIED_HOST, Discovery, ManifestClaim, validator_bytes
from swarm.service.node import SwarmNode
from swarm.service.store_work import drop_partial
from swarm.store.interface import BlockStore

log = logging.getLogger("swarmproxy.swarm")


class _Held:
    """The linger "timer" of content shared with `hold`: none runs until `release`."""

    def cancel(self) -> None:
        pass


_HELD = _Held()


@dataclasses.dataclass(frozen=True)
class ContentShared:
    """Complete content started being shared (it was not a moment ago)."""

    manifest: Manifest


@dataclasses.dataclass(frozen=True)
class ContentWithdrawn:
    """Content shared complete is no longer shared: its linger time ended, it was evicted, or the store failed."""

    root: bytes
    why: str


ShareEvent = ContentShared | ContentWithdrawn
ShareListener = Callable[[ShareEvent], None]


@dataclasses.dataclass
class ShareCounters:
    announced: int = 0  # announcements made (a root announced again after a withdrawal counts again)
    published: int = 0  # manifest claims put (vouched for)
    claims: int = 0  # in-progress claims put ("this node fetches it from the origin now")
    lookups: int = 0  # DHT lookups made: of a key's claims, and of a root's providers


class Shares:
    def __init__(
        self,
        store: BlockStore,
        nodes: dict[str, SwarmNode],
        discovery: Discovery | None,
        *,
        enabled: bool,
        linger: float,
        transports: int,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task],
        call_later: Callable[..., Any] | None,
        counters: ShareCounters,
    ) -> None:
        self.store = store
        self.nodes = nodes
        self.discovery = discovery
        self.enabled = enabled
        self.linger = linger
        self.transports = transports  # TransportFlags bits announced
        self.counters = counters
        self._spawn = spawn
        self._call_later = call_later
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port: int | None = None  # announced with our host as others see it, once listening
        self.lingering: dict[bytes, Any] = {}  # root -> its linger timer's handle (or _HELD): shared complete
        self._announcing: dict[bytes, Any] = {}  # root -> its announcement under way, which `unvouch` waits for
        self.fetch_announced: set[bytes] = set()  # roots announced while still being fetched
        self.kept_up: set[bytes] = set()  # of those, the ones discovery took: it keeps them fresh until withdrawn
        # What discovery already keeps announced (it refreshes each on its own schedule until withdrawn), so
        # content shared again is not announced again: roots shared complete, and (key, root) vouched for.
        self.announced: set[bytes] = set()
        self.vouched: set[tuple[bytes, bytes]] = set()
        self._host_unknown_logged = False
        self._listeners: list[ShareListener] = []
        self.complete: set[bytes] = set()  # roots shared complete, as the watchers were told

    def watch(self, listener: ShareListener) -> None:
        """Tell `listener` of every `ShareEvent` from now on."""
        self._listeners.append(listener)

    def _withdrawn(self, root: bytes, why: str) -> None:
        if root in self.complete:
            self.complete.discard(root)
            self._tell(ContentWithdrawn(root, why))

    def _tell(self, event: ShareEvent) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:  # a watcher's bug must not cost the download that shared the content
                log.exception("a share watcher failed on %s", event)

    def started(self, port: int) -> None:
        self._loop = asyncio.get_running_loop()
        self.port = port

    def stop(self) -> None:
        for handle in self.lingering.values():
            handle.cancel()
        self.lingering.clear()

    def fetching(self, manifest: Manifest) -> None:
        """A fetch of `manifest` begins: serve what it verifies, and be found while it runs."""
        if not self.enabled:
            return
        root = manifest.root
        for node in self.nodes.values():
            node.share(root)
        if self.discovery is not None and self.port is not None and root not in self.lingering \
                and root not in self.fetch_announced:
            self.fetch_announced.add(root)
            self._spawn(self._announce(manifest, None, complete=False))

    def share(self, manifest: Manifest, *, vouch: bytes | None = None, hold: bool = False) -> None:
        """`manifest`'s content is complete in the store: serve it, announce it, vouch for it under the key
        `vouch` if given, and (re)start its linger time; `hold`: no linger time until `release` (a segment of a
        file still downloading: leaving when done means when the download is done)."""
        if not self.enabled:
            return
        root = manifest.root
        self.fetch_announced.discard(root)
        newly = root not in self.complete
        for node in self.nodes.values():
            node.share(root)
        if self.discovery is not None and self.port is not None:
            task = self._spawn(self._announce(manifest, vouch if manifest.validator else None))
            if isinstance(task, asyncio.Future):
                self._announcing[root] = task
                task.add_done_callback(lambda done: self._announcing.pop(root, None) if
                                       self._announcing.get(root) is done else None)
        if hold:
            old = self.lingering.pop(root, None)
            if old is not None:
                old.cancel()
            self.lingering[root] = _HELD
        elif self._loop is not None and self.linger > 0:
            self._linger(root)
        if newly:
            self.complete.add(root)
            self._tell(ContentShared(manifest))

    def release(self, root: bytes) -> None:
        """Start the linger time of `root`, shared with `hold`."""
        if self.lingering.get(root) is _HELD:
            del self.lingering[root]
            if self._loop is not None and self.linger > 0:
                self._linger(root)

    def _linger(self, root: bytes) -> None:
        assert self._loop is not None
        old = self.lingering.pop(root, None)
        if old is not None:
            old.cancel()
        call_later = self._call_later or self._loop.call_later
        self.lingering[root] = call_later(self.linger, self.withdraw, root, "linger time over")

    def abandon(self, root: bytes) -> None:
        """A fetch ended incomplete: unless the content is shared complete, stop serving and announcing it,
        and drop what it stored."""
        if root in self.lingering:
            return
        for node in self.nodes.values():
            node.unshare(root)
        self._withdrawn(root, "abandoned")
        drop_partial(self.store, root)
        self.announced.discard(root)
        self.kept_up.discard(root)
        if root in self.fetch_announced:
            self.fetch_announced.discard(root)
            if self.discovery is not None:
                self._spawn(self._withdraw(root))

    def fetch_over(self, root: bytes) -> None:
        """After a fetch's store work: a root announced while fetching that did not end up shared complete (a
        partial range, a prefix that did not verify) is withdrawn and dropped."""
        if root in self.fetch_announced:
            self.abandon(root)

    def withdraw(self, root: bytes, why: str) -> None:
        """Stop serving and announcing `root` (the store keeps it)."""
        self.fetch_announced.discard(root)
        self.announced.discard(root)
        self.kept_up.discard(root)
        handle = self.lingering.pop(root, None)
        if handle is not None:
            handle.cancel()
        for node in self.nodes.values():
            node.unshare(root)
        self._withdrawn(root, why)
        if self.discovery is not None:
            log.info("no longer sharing %s: %s", root.hex()[:16], why)
            self._spawn(self._withdraw(root, after=self._announcing.get(root)))

    def unvouch(self, key: bytes, root: bytes) -> None:
        """Withdraw our vouch for `root` under `key`, after its announcement if one is under way (a withdrawal
        must not overtake the put it withdraws)."""
        self.vouched.discard((key, root))
        discovery = self.discovery
        if discovery is None:
            return
        pending = self._announcing.get(root)

        async def run() -> None:
            if pending is not None:
                await asyncio.gather(pending, return_exceptions=True)
                self.vouched.discard((key, root))  # the put it waited for noted it again
            with contextlib.suppress(*discovery.errors):
                await discovery.withdraw_manifest(key)

        self._spawn(run())

    def forget_vouch(self, key: bytes) -> None:
        """Our claim under `key` was replaced (by an in-progress one): the next share vouches again."""
        self.vouched = {(vouch, root) for vouch, root in self.vouched if vouch != key}

    async def _announce(self, manifest: Manifest, vouch: bytes | None, *, complete: bool = True) -> None:
        """Announce `manifest.root` (and vouch for it under `vouch`), unless discovery already keeps that up.

        The vouch does not wait for the announcement: a crowd's parked downloads wait for the first-hand vouches,
        whose key this node looked up moments ago (a write goes on from that lookup: one round trip), while the
        root's announcement starts a lookup of its own (three or four hops). Put one after the other, the lab's
        no-plugin crowd saw its second vouch 0.3-0.5 s later than it could have."""
        assert self.discovery is not None and self.port is not None
        root = manifest.root
        if self.discovery.own_host() is None:  # the same for every download until another node answers
            level = logging.DEBUG if self._host_unknown_logged else logging.WARNING
            self._host_unknown_logged = True
            log.log(level, "not announcing %s yet: our address as other nodes see it is not known yet", root.hex()[:16])
            return
        steps = [self._announce_root(root, complete)]
        if vouch is not None and (vouch, root) not in self.vouched:
            steps.append(self._vouch(manifest, vouch))
        for outcome in await asyncio.gather(*steps, return_exceptions=True):
            if isinstance(outcome, self.discovery.errors):
                log.warning("announcing %s failed: %s", root.hex()[:16], outcome)
            elif isinstance(outcome, BaseException):
                raise outcome

    async def _announce_root(self, root: bytes, complete: bool) -> None:
        assert self.discovery is not None and self.port is not None
        if complete and root in self.kept_up:  # announced while fetching: the same record, kept fresh
            self.kept_up.discard(root)
            self.announced.add(root)
            return
        if complete and root in self.announced:
            return
        if not complete:
            # Before the await: a share completing meanwhile must not publish the same record again.
            self.kept_up.add(root)
        try:
            await self.discovery.announce(root, (UNSPECIFIED_HOST, self.port), self.transports)
        except self.discovery.errors:
            if not complete and root not in self.kept_up:  # a share relied on it meanwhile
                self.announced.discard(root)  # the next share announces it
            self.kept_up.discard(root)  # not taken: the complete share announces it
            raise
        self.counters.announced += 1
        if complete:
            self.announced.add(root)

    async def _vouch(self, manifest: Manifest, vouch: bytes) -> None:
        assert self.discovery is not None
        await self.discovery.put_manifest(vouch, ManifestClaim(
            manifest.root, manifest.size, manifest.block_size, validator_bytes(manifest.validator)))
        self.counters.published += 1
        self.vouched.add((vouch, manifest.root))

    async def _withdraw(self, root: bytes, *, after: Any = None) -> None:
        """Withdraw `root`'s announcement, after the one `after` under way (a withdrawal must not overtake it)."""
        assert self.discovery is not None
        if after is not None:
            await asyncio.gather(after, return_exceptions=True)
            if root in self.lingering:  # shared again meanwhile: its announcement stands
                return
            self.announced.discard(root)  # what the announcement noted after `withdraw` is void
            self.kept_up.discard(root)
        with contextlib.suppress(*self.discovery.errors):
            await self.discovery.withdraw(root)
