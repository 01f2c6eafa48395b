"""`Seeder`: every content this node shares complete is seeded as a BitTorrent v2 torrent, from the store's file.

It follows `SwarmService.watch_shares`: `ContentShared` seeds the content from its data file in the block store
(`DiskBlockStore` keeps a content at its real offsets, so the file *is* the torrent's one file: no second copy);
`ContentWithdrawn` (linger over, evicted, store failure) stops the torrent. The store may still evict a seeded
content when it needs the room (a pin for the whole linger time made a full store refuse new downloads): its
eviction hook stops the torrent before the file is deleted (`BlockStore.add_eviction_hook`), so libtorrent never
opens a file that is gone, and one it still holds open reads the old bytes, never another content's.

Exactly what our own swarm shares is seeded, minus what `refusal` refuses: the proxy's rule for what may leave for
the BitTorrent world (`proxy.bridge`). A store that keeps no files (`MemoryBlockStore`) seeds nothing; a content
whose layer does not reduce to its root (a corrupt store) or an empty file is not seeded; libtorrent failing to
read a file (changed or gone behind the store's back) ends that torrent. The log says why each time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from swarm.content.manifest import Manifest
from swarm.content.torrent import Torrent, torrent_of, v1_pieces
from swarm.errors import HashMismatch, ManifestError, NotInStore
from swarm.service.shares import ContentShared, ContentWithdrawn, ShareEvent
from swarm.store.interface import BlockStore

from .session import BtSession, Seeding

__all__ = ["Seeder"]

log = logging.getLogger("swarmproxy.bittorrent")

READ_CHUNK = 1 << 20  # the hybrid's SHA-1 pass reads the file this much at a time


class Seeder:
    """Seeds what `store` shares through `session` (see the module docstring)."""

    def __init__(self, session: BtSession, store: BlockStore,
                 refusal: Callable[[Manifest], str | None] = lambda manifest: None) -> None:
        self.session = session
        self.store = store
        self.refusal = refusal  # why a content may not go to the BitTorrent world, or None (the proxy's rule)
        self.seeding: dict[bytes, Seeding] = {}  # root -> its torrent
        self.hybrids: dict[bytes, Seeding] = {}  # root -> its hybrid torrent too, once one was asked for
        store.add_eviction_hook(self._deleting)
        session.on_failure = self._failed

    def on_share(self, event: ShareEvent) -> None:
        """`SwarmService.watch_shares`' listener."""
        if isinstance(event, ContentShared):
            self.seed(event.manifest)
        elif isinstance(event, ContentWithdrawn):
            self.stop(event.root, event.why)

    def seeded(self, root: bytes) -> Seeding | None:
        """How `root` is seeded, if it is (nothing else is ever exported)."""
        return self.seeding.get(root)

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
        except (NotInStore, ManifestError, HashMismatch) as exc:  # gone meanwhile; a layer not the root's; empty
            log.info("not seeding %s over BitTorrent: %s", root.hex()[:16], exc)
            return
        path = Path(location.path)
        try:
            self.seeding[root] = self.session.seed(torrent, manifest, path.parent, path.name)
        except RuntimeError as exc:  # a download of the same torrent holds the info-hash (`BtSession.download`)
            log.info("not seeding %s over BitTorrent: %s", root.hex()[:16], exc)
            return
        log.info("seeding %s over BitTorrent: info-hash %s", root.hex()[:16], torrent.info_hash_hex[:16])

    async def hybrid(self, root: bytes) -> Torrent | None:
        """The hybrid torrent of seeded `root` (with a v1 part, for v1-only clients), seeded too from now on:
        made on the first request by one SHA-1 pass over the file, in a thread. None if `root` is not seeded."""
        if (seeding := self.seeding.get(root)) is None:
            return None
        if (known := self.hybrids.get(root)) is not None:
            return known.torrent
        try:
            with self.store.pinned(root):  # not evicted while it is read
                location = self.store.block_location(root, 0)
                assert location is not None  # seeded, so kept in a file
                path = Path(location.path)
                v1 = await asyncio.to_thread(lambda: v1_pieces(_read(path)))
        except (NotInStore, OSError) as exc:  # evicted or failed meanwhile: its withdrawal follows
            log.info("no hybrid torrent of %s: %s", root.hex()[:16], exc)
            return None
        if self.seeding.get(root) is not seeding:  # withdrawn meanwhile
            return None
        if (known := self.hybrids.get(root)) is not None:  # another request made it meanwhile
            return known.torrent
        torrent = torrent_of(seeding.manifest, self.store.hash_layer(root), v1=v1)
        try:
            self.hybrids[root] = self.session.seed(torrent, seeding.manifest, path.parent, path.name)
        except RuntimeError as exc:  # a download of the hybrid holds its info-hash
            log.info("no hybrid torrent of %s: %s", root.hex()[:16], exc)
            return None
        return torrent

    def stop(self, root: bytes, why: str) -> asyncio.Future[None] | None:
        """Stop the torrents of `root`: the future is done once libtorrent has let go of them (None when `root` was
        not seeded)."""
        seeding = self.seeding.pop(root, None)
        hybrid = self.hybrids.pop(root, None)
        if seeding is None:
            return None
        removals = [self.session.remove(one) for one in (seeding, hybrid) if one is not None]
        log.info("no longer seeding %s over BitTorrent: %s", root.hex()[:16], why)
        return asyncio.ensure_future(_all(removals))

    def close(self) -> None:
        for root in list(self.seeding):
            self.stop(root, "shutting down")

    def status(self) -> dict[str, object]:
        status = self.session.status([*self.seeding.values(), *self.hybrids.values()])
        status["torrents"] = len(self.seeding)  # contents: a hybrid is the same content under two info-hashes
        return status

    def _deleting(self, root: bytes) -> None:
        """The store is about to delete `root`'s files (from any thread): libtorrent stops reading them first. The
        bookkeeping follows on the loop, with the store's `Evicted` event (`ContentWithdrawn`)."""
        for seeding in (self.seeding.get(root), self.hybrids.get(root)):
            if seeding is not None:
                self.session.stop_reading(seeding)

    def _failed(self, info_hash: bytes, why: str) -> None:
        for root, seeding in list(self.seeding.items()):
            hybrid = self.hybrids.get(root)
            if info_hash in (seeding.torrent.info_hash, hybrid.torrent.info_hash if hybrid else None):
                self.stop(root, f"libtorrent cannot read it: {why}")


async def _all(removals: list[asyncio.Future[None]]) -> None:
    await asyncio.gather(*removals)


def _read(path: Path) -> Iterator[bytes]:
    with path.open("rb") as file:
        while chunk := file.read(READ_CHUNK):
            yield chunk
