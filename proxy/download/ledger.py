"""What one fallback download leaves behind: its request record, the engine's counters, its bytes in the store.

The download's shell (`proxy.download.fallback`) calls one method per bookkeeping action of its core
(`proxy.download.core`); each count is made here once. Storing and announcing happen after the response, in tasks
the `Fallback` tracks, so that a client never waits for them.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from swarm.content.manifest import Manifest
from swarm.service.report import FetchReport
from swarm.trust import ManifestSource

from ..engine import Found, Miss, SwarmEngine
from ..spool import Spool
from ..stats import RequestRecord, Stats

if TYPE_CHECKING:
    from .core import DownloadCore
    from .segments import SegmentedFetch

log = logging.getLogger("swarmproxy.fallback")


class Owner(Protocol):
    """What the ledger needs of the proxy's `fallback.Fallback`: the engine, the statistics, tracked tasks."""

    engine: SwarmEngine
    stats: Stats

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...


class Ledger:
    def __init__(self, owner: Owner, url: str, record: RequestRecord, core: DownloadCore) -> None:
        self.owner, self.engine, self.url, self.record, self.core = owner, owner.engine, url, record, core
        self.report = FetchReport()  # filled by the block engine when its fetch stops
        self.vouching = False  # the origin's bytes went on to be stored and vouched for
        self.segments: SegmentedFetch | None = None  # a download taken segment by segment
        # The block engine's bytes written to the client, and those `account` split (the record's bytes_swarm)
        self.swarm_sent = self.swarm_accounted = 0

    def skipped(self, why: object) -> None:
        """Peers were not (or not yet) used, and why; a later swarm clears it."""
        self.record.swarm_skipped = str(why) if why is not None else None

    def usable(self, found: Found | Miss) -> Found | None:
        """A lookup's manifest, or None after saying why there is none (the log, the request's record)."""
        if isinstance(found, Miss):
            log.info("%s: no usable manifest: %s", self.url, found)
            self.skipped(found)
            return None
        return found

    def switched(self, cause: str) -> None:
        self.record.transition = cause
        counts = self.engine.counters.transitions
        counts[cause] = counts.get(cause, 0) + 1
        self.owner.stats.transition(cause)

    def rejected(self, source: ManifestSource) -> None:
        log.warning("%s: the manifest from %s does not match the origin's bytes; dropping the swarm", self.url, source)
        self.engine.counters.manifests_rejected += 1

    def account(self, from_swarm: int) -> None:
        """Split what the block engine delivered into origin (Range requests) and peer bytes."""
        self.owner.stats.swarm_fetch(self.report)
        from_range = min(self.report.bytes_origin, from_swarm)
        self.record.bytes_origin += from_range
        self.record.bytes_peers += from_swarm - from_range
        self.engine.counters.bytes_origin += from_range
        self.engine.counters.bytes_peers += from_swarm - from_range
        self.swarm_accounted = from_swarm
        self.record.bytes_swarm = max(0, self.swarm_sent - from_swarm)

    def swarm_delivered(self, count: int) -> None:
        """The block engine's bytes went to the client: not split into peers and origin until `account` (which may
        come before the last of them is written: it counts what the core delivered, the shell writes after)."""
        self.swarm_sent += count
        self.record.bytes_swarm = max(0, self.swarm_sent - self.swarm_accounted)

    def finished(self, from_origin_stream: int) -> None:
        self.engine.counters.bytes_origin += from_origin_stream

    def origin_complete(self, spool: Spool | None, publishable: bool, response) -> None:
        """The origin sent the whole body: store and announce the spool if it may be shared, else drop it."""
        if spool is not None and spool.complete and publishable:
            self.vouching = True
            self.owner.spawn(self._ingest(spool, response, close=True))
        elif spool is not None:
            spool.close()

    def hand_over(self, manifest: Manifest | None, fetch_start: int, swarm_done: bool, spool: Spool | None,
                  publishable: bool, vouch: bool, response) -> bool:
        """After a merge: store and share what is complete, stop sharing what is not. True: the spool is ours.
        No manifest (a segmented download): each segment was shared, or dropped, when its fetch ended; and the
        spool, which took the verified segments too, holds the whole file when the download covered it all: it
        is stored and shared like an origin download, and vouched for only when every byte came from the origin
        (`vouch`: the download's core decides it from where each segment came from).
        A file assembled from segments others vouched for is served, never vouched for: a party that made one
        segment's quorum and poisoned what its victims assembled would otherwise recruit them as publishers, each
        an independent network, and with them answer URLs the origin has not answered yet."""
        if manifest is None:
            if spool is None or not spool.complete or not publishable:
                return False
            self.vouching = vouch
            self.owner.spawn(self._ingest(spool, response, close=True, publish=vouch, own=vouch))
            return True
        if swarm_done or (spool is not None and spool.complete):
            self.vouching = spool is not None and spool.complete and publishable
            self.owner.spawn(self._after_swarm(manifest, fetch_start, swarm_done, spool, publishable, response))
            return True
        self.engine.abandon(manifest.root)
        return False

    async def _after_swarm(self, manifest: Manifest, fetch_start: int, swarm_done: bool, spool: Spool | None,
                           publishable: bool, response) -> None:
        try:
            if spool is not None and spool.complete and publishable:
                await self._ingest(spool, response)
            elif spool is not None and swarm_done and manifest.size == spool.size:
                if await self.engine.complete_prefix(manifest, spool, fetch_start):
                    self.engine.completed_from_peers(manifest)
            elif swarm_done and fetch_start == 0:
                self.engine.completed_from_peers(manifest)
        finally:
            if spool is not None:
                spool.close()
            self.engine.fetch_over(manifest.root)

    async def _ingest(self, spool: Spool, response, *, close: bool = False, publish: bool = True,
                      own: bool = True) -> None:
        """Store and announce the spooled body, described by the head we answered with; vouch if `publish`; the
        manifest is this node's own (`own`) when every byte came from the origin."""
        headers = response.headers if response is not None else {}
        try:
            await self.engine.ingest(spool, url=self.url, validator=self.core.known.validator,
                                     content_type=headers.get("Content-Type"),
                                     content_encoding=headers.get("Content-Encoding"), publish=publish, own=own)
        finally:
            if close:
                spool.close()
