"""Trust before a complete copy: a file swarmed by its segments while its first fetchers still read the origin.

Without the origin's help a manifest needs every byte (`swarm.trust`), so a crowd would wait for two
whole copies before anyone swarms. A file of several segments (`swarm.content.segments`) is also shared as its
segments, each a content of its own:

* a node that received a whole segment *from the origin* stores it, serves and announces its root, and vouches for
  it under `segment_key(url key, size, index)`, a small signed DHT record like a manifest's (`SegmentTrust.vouch`).
  The first fetchers of a crowd do so as their stream passes each segment's end (`SpoolVouches`);
* a newcomer that would park (`proxy.download.core`) takes the file segment by segment instead
  (`SegmentedFetch`): a segment that a quorum of independent vouchers agree on (`swarm.trust.decide`, exactly
  as for a whole manifest: one party with many keys in one network weighs one) is fetched from its holders,
  verified block by block against that root; while enough independent others vouched for it or are fetching it
  (or the file) from the origin, it waits for them, for at most parking's wait for the whole rest counted from the
  last segment others delivered; else it takes the segment from the origin with Range requests, claiming it
  first, and then vouches for it itself. So the origin sends each segment about quorum times, not once per client.

A liar's vouch is outvoted (it weighs one network) and a block that disagrees with the trusted root is never
delivered: the block engine drops it and bans its sender. Holders that fail a segment (busy, or lying about holding
it) cost that segment a second try, then its rest from the origin: never the rest of the file. A node that got a
segment from peers serves it but never vouches for it. A download's segments stay shared until it ends, then linger
as any content. The download's spool takes the verified segments too (`fallback`), so one that covered the whole
file ends with the file whole: it is stored and served, and vouched for only when every byte came from the origin
(`ledger`): a file assembled from peers' segments is never vouched for, so a poisoned segment cannot
recruit its victims as publishers. `Segments.file_root` gives the same root from the segments' roots.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import random
import struct
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING

from swarm.content.manifest import Manifest
from swarm.content.merkle import MerkleHasher
from swarm.content.segments import Segments, segmented
from swarm.discovery import IN_PROGRESS_ROOT, IN_PROGRESS_TTL, ManifestClaim, validator_bytes
from swarm.errors import FetchFailed, ManifestError, OriginSourceError, StoreError, SwarmError
from swarm.service.origin_source import OriginRangeSource
from swarm.service.report import FetchReport
from swarm.service.store_work import BytesBody, fill_entry
from swarm.trust import Vouch, decide, working

from ..engine import Found
from .parking import ParkingSettings
from .segment_walk import Pause, Poll, Segment, SegmentLookup, SegmentWalk, Take

if TYPE_CHECKING:
    from ..engine import SwarmEngine
    from ..spool import Spool

log = logging.getLogger("swarmproxy.segments")

SEGMENT_KEY_PREFIX = b"swarmproxy/segment\x00"
LOOKUP_TIMEOUT = 5.0  # seconds for one segment's claims: a lookup that takes longer counts as none


def segment_key(url_key: bytes, size: int, index: int) -> bytes:
    """The discovery key of segment `index` of the `size`-byte version of the URL whose key is `url_key`: a
    hash, so the DHT never sees the URL, and one key per size, so versions of different sizes never mix."""
    return hashlib.sha256(SEGMENT_KEY_PREFIX + url_key + struct.pack(">QI", size, index)).digest()


class SegmentTrust:
    """Looking segments up and vouching for them, over one engine (its service, trust policy and session)."""

    def __init__(self, engine: SwarmEngine) -> None:
        self.engine = engine
        # Segments this download shares: held (no linger time) while it runs, so that a file's first segments
        # are not withdrawn while its last are still fetched; `release` starts their linger time.
        self.held: list[bytes] = []
        self.released = False
        self.shared: list[tuple[bytes, bytes | None]] = []  # every (root, vouch key) it shared, for `withdraw_all`
        self.withdrawn = False

    def hold(self, manifest: Manifest, vouch: bytes | None = None) -> None:
        """Share the complete segment (vouching under `vouch`) until `release`."""
        if self.withdrawn:  # a vouch that was under way when the body was found wrong: it shares nothing
            if vouch is not None:
                self.engine.service.shares.unvouch(vouch, manifest.root)  # nor leaves its claim of the segment
            self._drop(manifest.root, "its download's body disagreed with the origin's Repr-Digest")
            return
        self.engine.service.shares.share(manifest, vouch=vouch, hold=not self.released)
        self.shared.append((manifest.root, vouch))
        if not self.released:
            self.held.append(manifest.root)

    def withdraw_all(self, why: str) -> None:
        """The download's body disagreed with the origin's Repr-Digest: stop serving and announcing every segment it
        shared, withdraw its vouches, and drop them from the store, so that they are never served again (the
        origin's own bytes included: what the origin says its representation hashes to is the authority)."""
        self.withdrawn = True
        service = self.engine.service
        for root, key in self.shared:
            if key is not None:
                service.shares.unvouch(key, root)
            self._drop(root, why)
        self.shared.clear()
        self.held.clear()

    def _drop(self, root: bytes, why: str) -> None:
        service, store = self.engine.service, self.engine.store
        service.withdraw(root, why)
        with contextlib.suppress(StoreError):
            if root in store and store.info(root).pins == 0:
                store.remove(root)

    def release(self) -> None:
        """The download is over: its segments linger as any content does."""
        self.released = True
        for root in self.held:
            self.engine.service.shares.release(root)
        self.held.clear()

    async def look_up(self, url_key: bytes, cut: Segments, index: int, validator: str, *,
                      file_fetchers: bool = True, enough: int = 1) -> SegmentLookup:
        """Whether a quorum vouched for segment `index` and who holds it; else how many independent others will
        vouch for it: its claimers and vouchers, and (`file_fetchers`) those fetching the whole file, asked only
        when the segment's own are fewer than `enough` (one DHT lookup per poll instead of two)."""
        service, wanted = self.engine.service, validator_bytes(validator)
        start, end = cut.span(index)
        if service.discovery is None:
            return SegmentLookup(None, 0, "dht-off")
        segment = await service.claims(segment_key(url_key, cut.size, index), timeout=LOOKUP_TIMEOUT)
        if segment is None:
            return SegmentLookup(None, 0, "lookup-failed")
        summaries, providers_by_root = segment
        vouches = list(summaries)
        # Who vouched for this segment, and who fetches it or the whole file from the origin now: together, whether
        # waiting for them can end in a quorum.
        ours = [v for v in vouches if (v.size, v.validator) == (end - start, wanted)]
        fetching = [v for v in ours if v.content_root == IN_PROGRESS_ROOT]
        vouched = [v for v in ours if v.content_root != IN_PROGRESS_ROOT]
        decision = decide(vouches, self.engine.trust, known_size=end - start, known_validator=wanted)
        root = decision.accepted.content_root if decision.accepted else None
        providers = providers_by_root.get(root, []) if root else []

        me = service.discovery.node_id

        def bringing(v: Vouch) -> Vouch:  # one who will bring this segment, as one claim of the same kind
            return dataclasses.replace(v, claim=ManifestClaim(IN_PROGRESS_ROOT, 0, cut.block_size, wanted))

        def weight(helpers: list[Vouch]) -> int:  # who will bring this segment, counted as a quorum is
            return working([bringing(v) for v in helpers], size=0, validator=wanted, exclude=me)
        # Trusted but held by nobody (its vouchers left): only those still fetching can still bring it.
        helpers = fetching if root else fetching + vouched
        others = weight(helpers)
        if file_fetchers and not providers and others < enough:
            whole = await service.claims(url_key, timeout=LOOKUP_TIMEOUT)
            if whole is None:  # who fetches the file is unknown: so is `others`
                return SegmentLookup(None, 0, "lookup-failed")
            others = weight(helpers + [s for s in whole[0] if (s.size, s.validator, s.content_root) ==
                                       (cut.size, wanted, IN_PROGRESS_ROOT)])
        if root is None:
            return SegmentLookup(None, others, decision.reason)
        if not providers:
            return SegmentLookup(None, others, "no-provider", enough=1)
        assert decision.accepted is not None
        manifest = self._agreed(root, decision.accepted.block_size, end - start, validator)
        if manifest is None or manifest.size != end - start or manifest.block_size != cut.block_size \
                or validator_bytes(manifest.validator) != wanted:
            return SegmentLookup(None, others, "no-manifest")
        return SegmentLookup(Found(manifest, decision.source, service.pick(providers, manifest)), others, "ok")

    def _agreed(self, root: bytes, block_size: int, size: int, validator: str) -> Manifest | None:
        """The manifest of a segment a quorum agreed on: ours when the store holds it, else made from the agreed
        fields, which are all a segment's manifest has (`vouch` makes it so). Asking a provider for it added
        nothing trusted (only its root was checked against the agreed one) and cost a round trip to a busy peer:
        in the 100-client largefile, eight segments went to the origin when no provider answered within 3 s."""
        store = self.engine.store
        if root in store:
            with contextlib.suppress(StoreError):
                return store.manifest(root)
        try:
            return Manifest(size=size, block_size=block_size, root=root, validator=validator)
        except ManifestError:
            return None

    def claim(self, url_key: bytes, cut: Segments, index: int, validator: str) -> asyncio.Task | None:
        """Say that this node fetches the segment from the origin now; the task puts the claim (None: no DHT).
        `vouch` and `unclaim` wait for it, so that the claim never lands after what replaces it."""
        service, key = self.engine.service, segment_key(url_key, cut.size, index)
        discovery = service.discovery
        if discovery is None or not service.sharing:
            return None
        start, end = cut.span(index)
        claim = ManifestClaim(IN_PROGRESS_ROOT, end - start, cut.block_size, validator_bytes(validator))
        service.counters.claims += 1
        service.shares.forget_vouch(key)  # the claim takes our slot under `key`: the share must vouch again

        async def put() -> None:
            try:
                await discovery.put_manifest(key, claim, ttl=IN_PROGRESS_TTL)
            except discovery.errors as exc:
                log.info("claiming segment %d failed: %s", index, exc)

        return service.spawn(put())

    async def unclaim(self, url_key: bytes, cut: Segments, index: int, claimed: asyncio.Task | None) -> None:
        """This node will not vouch for the segment after all: withdraw its claim."""
        discovery = self.engine.service.discovery
        if claimed is None or discovery is None:
            return
        await asyncio.gather(claimed, return_exceptions=True)
        with contextlib.suppress(*discovery.errors):
            await discovery.withdraw_manifest(segment_key(url_key, cut.size, index))

    async def vouch(self, url_key: bytes, cut: Segments, index: int, data: bytes, validator: str,
                    claimed: asyncio.Task | None = None) -> None:
        """`data`, segment `index` as received from the origin: store it, serve it, and vouch for it (after
        `claimed`, this node's claim of it, is put)."""
        service, key = self.engine.service, segment_key(url_key, cut.size, index)
        try:
            root, layer = await asyncio.to_thread(_hashed, data, cut.block_size)
            manifest, layer = service.stored_as(
                Manifest(size=len(data), block_size=cut.block_size, root=root, validator=validator), layer)
            await service.in_thread(root, lambda stop: fill_entry(self.engine.store, manifest, layer, BytesBody(data),
                                                                  stop))
        except (StoreError, OSError, ValueError) as exc:
            log.warning("segment %d will not be shared: %s", index, exc)
            await self.unclaim(url_key, cut, index, claimed)
            return
        if claimed is not None:
            await asyncio.gather(claimed, return_exceptions=True)
        self.hold(manifest, vouch=key)


def _hashed(data: bytes, block_size: int) -> tuple[bytes, list[bytes]]:
    hasher = MerkleHasher(len(data), block_size)
    hasher.update(data)
    return hasher.finish()


class SpoolVouches:
    """A download that said it fetches the file from the origin vouches for each segment as its spool gets it."""

    def __init__(self, trust: SegmentTrust, url_key: bytes, validator: str, spawn: Callable) -> None:
        self.trust, self.url_key, self.validator, self.spawn = trust, url_key, validator, spawn
        self.next = 0

    def release(self) -> None:
        """The download is over: its segments linger as any content does."""
        self.trust.release()

    def fed(self, spool: Spool) -> None:
        cut = segmented(spool.size, spool.block_size)
        if cut is None or not spool.usable:
            return
        while self.next < cut.count and cut.span(self.next)[1] <= spool.received:
            start, end = cut.span(self.next)
            with contextlib.suppress(OSError, ValueError):  # an unreadable spool shares nothing, as in `ingest`
                self.spawn(self.trust.vouch(self.url_key, cut, self.next, spool.read(start, end - start),
                                            self.validator))
            self.next += 1


class SegmentedFetch:
    """Bytes `start..end-1` of a file, in order, segment by segment (see the module docstring)."""

    def __init__(self, engine: SwarmEngine, url: str, url_key: bytes, cut: Segments, *, validator: str,
                 parking: ParkingSettings, origin_rate: float, report: FetchReport | None = None,
                 clock: Callable[[], float] | None = None, sleep: Callable = asyncio.sleep,
                 jitter: Callable[[], float] = random.random) -> None:
        self.engine, self.url, self.url_key, self.cut, self.validator = engine, url, url_key, cut, validator
        self.parking, self.report = parking, report
        self.trust = SegmentTrust(engine)
        self.clock = clock or asyncio.get_running_loop().time
        self.sleep = sleep
        self.walk = SegmentWalk(parking, origin_rate=origin_rate, now=self.clock(), jitter=jitter)  # the decisions
        self.origin = OriginRangeSource(engine.session, url, size=cut.size, validator=validator,
                                        max_concurrent=1)
        self.sources: list[str] = []  # per segment taken: "peers", "origin" or "peers+origin", for the request's record
        # Told where each segment's bytes came from as it is taken (and again when a retry changes it): the
        # download's core decides from these whether the file it assembles may be vouched for.
        self.taken: Callable[[int, str], None] = lambda index, source: None
        self.event: Callable[[str], None] = lambda text: None  # the request's `events` (why each segment came whence)
        # The file's last segment, fetched ahead (`_prefetch_tail`): (where from, its bytes).
        self.tail: asyncio.Future[tuple[str, bytes]] | None = None

    async def _until(self, at: float) -> None:
        """Wait until the walk's deadline `at`."""
        await self.sleep(max(0.0, at - self.clock()))

    async def chunks(self, start: int, end: int) -> AsyncGenerator[bytes, None]:
        first, last = self.cut.index_of(start), self.cut.index_of(end - 1)
        self.walk.begin(start, end)
        ahead: asyncio.Future | None = None  # the next segment's lookup, run while this one is fetched
        if last - first >= 2 and last == self.cut.count - 1:
            self.tail = asyncio.ensure_future(self._prefetch_tail(last))
        try:
            for index in range(first, last + 1):
                lo, hi = self.cut.span(index)
                current, ahead = ahead, None
                async for piece in self._segment(index, max(start, lo) - lo, min(end, hi) - lo, current):
                    if ahead is None and index < last:
                        ahead = asyncio.ensure_future(self._look_up(index + 1))
                    yield piece
        finally:
            self.trust.release()
            for task in (ahead, self.tail):
                if task is not None:
                    task.cancel()
                    task.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def _look_up(self, index: int, *, file_fetchers: bool = True) -> SegmentLookup:
        """The segment's lookup, as the walk goes by it (`SegmentWalk.looked_up`)."""
        began = self.clock()
        lookup = await self.trust.look_up(self.url_key, self.cut, index, self.validator, file_fetchers=file_fetchers,
                                          enough=self.parking.after)
        return self.walk.looked_up(lookup, began=began, now=self.clock(), file_fetchers=file_fetchers)

    async def _segment(self, index: int, start: int, end: int, ahead: asyncio.Future | None
                       ) -> AsyncGenerator[bytes, None]:
        if self.tail is not None and index == self.cut.count - 1:
            try:
                source, data = await self.tail
            except SwarmError as exc:  # the origin or the peers failed it
                log.info("%s: the last segment fetched ahead failed (%s); asking again", self.url, exc)
            else:
                self._took(index, source)
                if source == "origin" and self.report is not None:
                    self.report.add(FetchReport(bytes_origin=end - start))
                yield data[start:end]
                return
        segment, partial, asked_from = Segment(index, began=self.clock()), False, start
        while True:
            lookup = await ahead if ahead is not None else None
            if lookup is None or lookup.found is None:  # only a trusted answer is worth keeping: ask again now
                lookup = await self._look_up(index)
            ahead = None
            step = self.walk.step(segment, lookup, self.clock())
            if isinstance(step, Poll):
                log.debug("%s: segment %d: %s, %d fetching; waiting", self.url, index, lookup.reason, lookup.others)
                await self._until(step.at)
                continue
            if isinstance(step, Pause):
                await self._until(step.at)
                continue
            assert isinstance(step, Take)
            source = step.source
            self.event(step.event)
            # The rest of a segment its holders failed after some bytes: those bytes came from peers all the same.
            self._took(index, "peers+origin" if partial and source == "origin" else source,
                       again=segment.failures > 0)
            if source == "peers":
                assert lookup.found is not None
                log.info("%s: segment %d from %d peer(s)", self.url, index, len(lookup.found.providers))
                pieces = self._from_peers(lookup.found, start, end)
            else:
                log.info("%s: segment %d from the origin (%s, %d fetching)", self.url, index, lookup.reason,
                         lookup.others)
                pieces = self._from_origin(index, start, end)
            try:
                async with contextlib.aclosing(pieces):
                    async for piece in pieces:
                        start += len(piece)
                        yield piece
            except SwarmError as exc:
                if source != "peers":
                    raise  # the origin failed this segment: the download's own fallback decides
                # Busy holders (a hash layer queued behind a crowd's blocks) or a lying one: this segment is
                # asked again, never the whole rest of the file, which two such failures in the 100-client
                # largefile sent to the origin (30 MB each, dividing the origin among four readers instead of two).
                self.event(f"segment {index} from peers failed after byte {self.cut.span(index)[0] + start} "
                           f"({exc}); asking again")
                log.info("%s: segment %d from peers failed (%s); asking again", self.url, index, exc)
                partial = partial or start > asked_from  # some of its bytes came from them
                self.walk.peers_failed(segment, self.clock())
                continue
            return

    def _took(self, index: int, source: str, *, again: bool = False) -> None:
        if again:
            self.sources[-1] = source  # where the rest of it comes from
        else:
            self.sources.append(source)
        self.taken(index, source)

    async def _from_peers(self, found: Found, start: int, end: int, *,
                          counted: bool = True) -> AsyncGenerator[bytes, None]:
        engine, root = self.engine, found.manifest.root
        # No origin beside the peers: every Range request a crowd's segments made of it would slow the very
        # fetchers whose vouches the crowd waits for (a segment the peers fail falls back to the origin's stream).
        chunks = engine.fetch(found, origin=None, start=start, end=end, report=self.report if counted else None)
        try:
            async with contextlib.aclosing(chunks):  # closed, the fetch has stored what it verified
                async for chunk in chunks:
                    yield chunk
        finally:  # also when the download closes us after the last piece
            with contextlib.suppress(StoreError):
                if engine.store.complete(root):  # served from now on (never vouched for: from peers)
                    self.trust.hold(found.manifest)
            engine.fetch_over(root)

    async def _from_origin(self, index: int, start: int, end: int, *, origin: OriginRangeSource | None = None,
                           counted: bool = True) -> AsyncGenerator[bytes, None]:
        """The whole segment from the origin (it is vouched for whole), block by block; `start..end` of it out."""
        lo, hi = self.cut.span(index)
        origin = origin or self.origin
        claimed = self.trust.claim(self.url_key, self.cut, index, self.validator)
        data = bytearray()
        try:
            for offset in range(lo, hi, self.cut.block_size):
                chunk = await origin.fetch(offset, min(self.cut.block_size, hi - offset))
                data += chunk
                if len(data) == hi - lo:  # before the last piece goes out: the download may close us then
                    self.engine.service.spawn(self.trust.vouch(self.url_key, self.cut, index, bytes(data),
                                                               self.validator, claimed))
                at = offset - lo
                piece = chunk[max(start - at, 0):max(end - at, 0)]
                if piece:
                    if self.report is not None and counted:
                        self.report.add(FetchReport(bytes_origin=len(piece)))
                    yield piece
        except (OriginSourceError, asyncio.CancelledError, GeneratorExit):
            if len(data) < hi - lo:
                self.engine.service.spawn(self.trust.unclaim(self.url_key, self.cut, index, claimed))
            raise

    async def _prefetch_tail(self, index: int) -> tuple[str, bytes]:
        """The file's last segment, fetched while the delivery is still at the first ones.

        Its first fetchers vouch for it last, when their download ends, and a node that leaves when done (Pack's
        setup) takes it away at that moment: a crowd that reaches the end together would then all ask the origin
        for it. So it is fetched ahead: from peers once a quorum vouched for it, else from the origin by whoever
        finds fewer than quorum others fetching this very segment (those who fetch the whole file do not count:
        they hold it last), which then vouch for it early."""
        lo, hi = self.cut.span(index)
        await self.sleep(self.walk.tail_pause())  # a crowd arriving together: the first claims land
        began = self.clock()
        while True:
            lookup = await self._look_up(index, file_fetchers=False)
            now = self.clock()
            step = self.walk.tail_step(index, lookup, waited=now - began, now=now)
            if isinstance(step, Poll):
                await self._until(step.at)
                continue
            source = step.source
            log.info("%s: the last segment ahead, from %s", self.url, source)
            self.event(step.event)
            if source == "peers":
                assert lookup.found is not None
                pieces = self._from_peers(lookup.found, 0, hi - lo, counted=False)
            else:
                origin = OriginRangeSource(self.engine.session, self.url, size=self.cut.size,
                                           validator=self.validator, max_concurrent=1)
                pieces = self._from_origin(index, 0, hi - lo, origin=origin, counted=False)
            data = bytearray()
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    data += piece
            if len(data) != hi - lo:
                raise FetchFailed(f"the last segment ahead ended after {len(data)} of {hi - lo} bytes")
            return source, bytes(data)
