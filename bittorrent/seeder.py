"""`Seeder`: every content this node shares complete is seeded as a BitTorrent v2 torrent, from the store's file.

It follows `SwarmService.watch_shares`: `ContentShared` seeds the content from its data file in the block store
(`DiskBlockStore` keeps a content at its real offsets, so the file *is* the torrent's one file: no second copy),
pinned so the store does not evict it while libtorrent may read it; `ContentWithdrawn` (linger over, store
failure) stops the torrent first and only then unpins it. So exactly what our own swarm shares is seeded: the
publish gate and the privacy rules decided that before the content was shared, and nothing else ever is.

A store that keeps no files (`MemoryBlockStore`) seeds nothing; a content whose layer does not reduce to its root
(a corrupt store) or an empty file is not seeded, nor what `refusal` refuses (the proxy's rule for what may leave
for the BitTorrent world), and the log says why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from swarm.content.manifest import Manifest
from swarm.content.torrent import Torrent, torrent_of
from swarm.errors import HashMismatch, ManifestError, NotInStore
from swarm.service.shares import ContentShared, ContentWithdrawn, ShareEvent
from swarm.store.interface import BlockStore

from .session import BtSession, Seeding

__all__ = ["Seeder"]

log = logging.getLogger("swarmproxy.bittorrent")


class Seeder:
    """Seeds what `store` shares through `session` (see the module docstring)."""

    def __init__(self, session: BtSession, store: BlockStore,
                 refusal: Callable[[Manifest], str | None] = lambda manifest: None) -> None:
        self.session = session
        self.store = store
        self.refusal = refusal  # why a content may not go to the BitTorrent world, or None (the proxy's rule)
        self.seeding: dict[bytes, Seeding] = {}  # root -> its torrent, seeded and pinned

    def on_share(self, event: ShareEvent) -> None:
        """`SwarmService.watch_shares`' listener."""
        if isinstance(event, ContentShared):
            self.seed(event.manifest)
        elif isinstance(event, ContentWithdrawn):
            self.stop(event.root, event.why)

    def torrent(self, root: bytes) -> Torrent | None:
        """The torrent of `root` if it is seeded (nothing else is ever exported)."""
        seeding = self.seeding.get(root)
        return seeding.torrent if seeding is not None else None

    def seed(self, manifest: Manifest) -> None:
        root = manifest.root
        if root in self.seeding or self.session.session is None:
            return
        if (why := self.refusal(manifest)) is not None:
            log.info("not seeding %s over BitTorrent: %s", root.hex()[:16], why)
            return
        try:
            location = self.store.block_location(root, 0)
            if location is None:
                log.debug("not seeding %s: the store keeps no file", root.hex()[:16])
                return
            torrent = torrent_of(manifest, self.store.hash_layer(root))
            self.store.pin(root)
        except (NotInStore, ManifestError, HashMismatch) as exc:  # gone meanwhile; a layer not the root's; empty
            log.info("not seeding %s over BitTorrent: %s", root.hex()[:16], exc)
            return
        path = Path(location.path)
        try:
            self.seeding[root] = self.session.seed(torrent, path.parent, path.name)
        except BaseException:
            self.store.unpin(root)
            raise
        log.info("seeding %s over BitTorrent: info-hash %s", root.hex()[:16], torrent.info_hash_hex[:16])

    def stop(self, root: bytes, why: str) -> asyncio.Future[None] | None:
        """Stop the torrent of `root`, and once libtorrent has let go of it let the store evict it: the future is
        done then (None when it was not seeded)."""
        seeding = self.seeding.pop(root, None)
        if seeding is None:
            return None
        removed = self.session.remove(seeding)
        removed.add_done_callback(lambda _: self.store.unpin(root))
        log.info("no longer seeding %s over BitTorrent: %s", root.hex()[:16], why)
        return removed

    def close(self) -> None:
        for root in list(self.seeding):
            self.stop(root, "shutting down")

    def status(self) -> dict[str, object]:
        return self.session.status(list(self.seeding.values()))
