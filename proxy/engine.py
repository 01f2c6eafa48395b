"""The proxy's side of the swarm: block store, peer listeners, discovery, trust, sharing and lingering.

One `SwarmEngine` per proxy. It answers three questions for the fallback download (`proxy.fallback`):

* `find(url, ...)` — which manifest may we trust for this URL, and who holds its blocks? Our own manifests
  first (computed from bytes this node got from the origin: `self`), then DHT manifest records weighed by
  `proxy.manifest_trust` (`quorum` / `any`), then the full manifest from a provider, checked against the root.
  At most `--fetch-peers` providers, picked at random among those found.
* `fetch(found, ...)` — verified bytes from the providers plus the origin as one capped Range source.
* `completed(...)` — after a verified download: store, share, announce as a provider, publish a manifest record
  only for bytes that came from the origin (DESIGN.md: a node that got them from peers never vouches for a
  URL), linger `--linger` seconds, then withdraw (also when the store evicts the content).

Transports: `tcp`, `quic` or `both` (one SwarmNode per transport, sharing the store; both listen on the same
port number). A fetch prefers TCP for loopback and private peers (LAN speed) and QUIC for public ones, among
the transports both sides offer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import ipaddress
import json
import logging
import os
import pathlib
import random
import threading
from collections.abc import AsyncIterator, Callable

import aiohttp

from dht.discovery import Discovery, ManifestSummary, Provider
from dht.errors import DhtError, InvalidArgument
from dht.records import Transport as TransportFlag
from swarm.errors import ManifestError, PeerError, StoreError, SwarmError, TransportError
from swarm.manifest import Manifest, OriginManifest
from swarm.node import FetchFailed, SwarmNode
from swarm.origin_source import OriginRangeSource
from swarm.store import BlockStore, Evicted, StoreFailed
from swarm.transport import Transport

from .manifest_trust import TrustPolicy, Vouch, decide
from .origin_manifest import fetch_layer
from .spool import Spool

log = logging.getLogger("swarmproxy.engine")

URL_KEY_PREFIX = b"swarmproxy/url\x00"
PROVIDER_WAIT = 1.5  # seconds to collect providers before starting; more are rarely found later
FETCH_PEERS = 16  # providers used per download (--fetch-peers) ...
PEER_SPARE = 2  # ... but at most this many more than the download has blocks
PROVIDER_POOL = 64  # ... picked at random from up to this many found (a DHT node keeps 64 per root)
PROVIDER_REFRESH = (1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0)  # s between lookups for more providers during a fetch
PROVIDER_TOPUP = 8.0  # ... and after those, while the fetch has fewer than --fetch-peers peers
ORIGIN_RANGE_CONCURRENCY = 2  # Dragonfly's back-to-source cap: a flood of fallbacks must not hammer the origin


def make_transports(name: str) -> dict[str, Transport]:
    """`tcp`, `quic` or `both` -> the transports to listen and fetch on."""
    transports: dict[str, Transport] = {}
    if name in ("tcp", "both"):
        from swarm.transport_tcp import TcpTransport
        transports["tcp"] = TcpTransport()
    if name in ("quic", "both"):
        from swarm.transport_quic import QuicTransport
        transports["quic"] = QuicTransport()
    if not transports:
        raise ValueError(f"unknown transport {name!r}")
    return transports


def url_key(url: str) -> bytes:
    """The DHT key of a URL: a hash, so the DHT never sees the plain URL (DESIGN.md "Discovery")."""
    return hashlib.sha256(URL_KEY_PREFIX + url.encode("utf-8", "surrogateescape")).digest()


def validator_bytes(validator: str | None) -> bytes:
    return (validator or "").encode("latin-1", "replace")


@dataclasses.dataclass
class Found:
    """A manifest we may use, where it came from, and the peers that hold its blocks."""

    manifest: Manifest
    source: str  # "origin", "self", "quorum" or "any"
    providers: list[Provider]
    layer: list[bytes] | None = None  # the hash layer when we have it already (else a provider sends it)


@dataclasses.dataclass
class EngineCounters:
    transitions: dict[str, int] = dataclasses.field(default_factory=dict)
    bytes_origin: int = 0
    bytes_peers: int = 0
    manifests_rejected: int = 0
    published: int = 0
    announced: int = 0


def _prefers_tcp(host: str) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


class SwarmEngine:
    def __init__(
        self,
        store: BlockStore,
        transports: dict[str, Transport],
        discovery: Discovery | None,
        session: aiohttp.ClientSession,
        *,
        trust: TrustPolicy,
        spool_dir,
        linger: float = 86400.0,
        share: bool = True,
        provider_wait: float = PROVIDER_WAIT,
        fetch_peers: int = FETCH_PEERS,
        node_kwargs: dict | None = None,
        call_later: Callable[..., asyncio.TimerHandle] | None = None,
    ) -> None:
        if not transports:
            raise ValueError("at least one transport is needed")
        self.store = store
        self.discovery = discovery
        self.session = session
        self.trust = trust
        self.spool_dir = spool_dir
        self.linger = linger
        self.sharing = share
        self.provider_wait = provider_wait
        self.fetch_peers = fetch_peers
        # Schedules the linger timer (`loop.call_later` unless given): tests pass a fake clock's and fire it.
        self._call_later = call_later
        self.counters = EngineCounters()
        node_id = None
        self.nodes: dict[str, SwarmNode] = {}
        for name, transport in transports.items():
            node = SwarmNode(store, transport, node_id=node_id, **(node_kwargs or {}))
            node_id = node.node_id  # one identity whichever transport a peer uses
            self.nodes[name] = node
        self.address: tuple[str, int] | None = None
        self._own_manifests: dict[bytes, Manifest] = {}  # url key -> manifest computed from origin bytes
        self._lingering: dict[bytes, asyncio.TimerHandle] = {}
        self._fetch_announced: set[bytes] = set()  # roots announced while still being fetched
        # What the DHT node already keeps announced (it refreshes each on its own schedule until withdrawn), so a
        # file downloaded again is not announced again: roots shared complete, and (URL key, root) vouched for.
        self._announced: set[bytes] = set()
        self._vouched: set[tuple[bytes, bytes]] = set()
        self._address_unknown_logged = False
        self.provider_refresh: tuple[float, ...] = PROVIDER_REFRESH  # tests poll at once
        self.provider_topup = PROVIDER_TOPUP
        self._tasks: set[asyncio.Task] = set()
        store.add_listener(self._on_store_event)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._origin_roots_file = pathlib.Path(spool_dir).parent / "origin_roots.json"
        self._index_store()

    @property
    def transport_flags(self) -> int:
        flags = 0
        if "tcp" in self.nodes:
            flags |= TransportFlag.TCP
        if "quic" in self.nodes:
            flags |= TransportFlag.QUIC
        return flags

    def _index_store(self) -> None:
        """Content this node fetched from the origin in an earlier run is "self" again. Only what the
        origin-roots file lists: a manifest that came from a peer carries whatever URL that peer wrote."""
        try:
            listed = json.loads(self._origin_roots_file.read_text())
        except (OSError, ValueError):
            listed = {}
        for key_hex, root_hex in listed.items() if isinstance(listed, dict) else ():
            with contextlib.suppress(StoreError, ValueError, TypeError):
                root = bytes.fromhex(root_hex)
                manifest = self.store.manifest(root)
                if manifest.url and url_key(manifest.url).hex() == key_hex and self.store.complete(root):
                    self._own_manifests[url_key(manifest.url)] = manifest

    def _save_origin_roots(self) -> None:
        data = {key.hex(): manifest.root.hex() for key, manifest in self._own_manifests.items()}
        tmp = self._origin_roots_file.with_suffix(".tmp")
        try:
            self._origin_roots_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self._origin_roots_file)
        except OSError as exc:
            log.warning("cannot save %s: %s", self._origin_roots_file, exc)

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Open the peer listener(s); with two transports both take the same port number."""
        self._loop = asyncio.get_running_loop()
        names = sorted(self.nodes, key=lambda n: n != "tcp")  # TCP first: it fails loudly on a taken port
        for attempt in range(20):
            opened: list[SwarmNode] = []
            try:
                bound = port
                for name in names:
                    address = await self.nodes[name].start(host, bound)
                    opened.append(self.nodes[name])
                    bound = address[1]
                self.address = (host, bound)
                break
            except OSError:
                for node in opened:
                    await node.close()
                if port != 0 or attempt == 19:
                    raise
        for root in self.store.roots():  # content kept from an earlier run is served and announced again
            if self.sharing and self.store.complete(root):
                self._share(root, self.store.manifest(root), publish_url=False)
        assert self.address is not None
        return self.address

    async def stop(self) -> None:
        for handle in self._lingering.values():
            handle.cancel()
        self._lingering.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for node in self.nodes.values():
            await node.close()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def settled(self) -> None:
        """Wait for background work (storing, announcing) started so far: for tests and orderly shutdown."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    @property
    def bytes_uploaded(self) -> int:
        return sum(node.bytes_uploaded for node in self.nodes.values())

    # -- finding a manifest and providers ------------------------------------------------------------------------

    async def find(self, url: str, *, known_size: int | None = None, known_validator: str | None = None,
                   timeout: float = 5.0, published: OriginManifest | None = None,
                   content_type: str | None = None, headless: bool = False) -> Found | None:
        """A trusted manifest of `url` with providers, or None (then the origin alone goes on).

        `headless`: the origin has not answered at all yet, so a DHT manifest needs the stricter
        `TrustPolicy.headless()`.

        `published`: the origin's own manifest from its response (`proxy.origin_manifest`), trusted as is."""
        if published is not None:
            return await self._find_published(url, published, known_validator, content_type)
        key = url_key(url)
        own = self._own_manifests.get(key)
        if own is not None and self._consistent(own, known_size, known_validator):
            providers = await self._providers(own.root) if self.discovery else []
            return Found(own, "self", self._pick(providers, own))
        if self.discovery is None:
            return None
        try:
            async with asyncio.timeout(timeout):
                summaries = await self.discovery.get_manifests(key)
                if not summaries:
                    log.info("no manifest record for %s", url)
                    return None
                roots = {s.content_root for s in summaries}
                candidates = list(roots)[:4]  # looked up side by side: extra (e.g. a liar's) roots cost no time
                providers_by_root = dict(zip(candidates, await asyncio.gather(
                    *(self._providers(root) for root in candidates))))
        except (asyncio.TimeoutError, DhtError, OSError) as exc:
            log.info("manifest lookup for %s failed: %s", url, exc or type(exc).__name__)
            return None
        decision = decide(
            [Vouch(s.publisher_id, s.content_root, s.size, s.block_size, s.validator, s.publisher_host)
             for s in summaries],
            self.trust.headless() if headless else self.trust, known_size=known_size,
            known_validator=validator_bytes(known_validator) if known_validator else None,
        )
        if decision.accepted is None:
            self.counters.manifests_rejected += 1
            log.info("no trusted manifest for %s: %s (%d publisher(s))", url, decision.reason, decision.publishers)
            return None
        accepted = decision.accepted
        providers = providers_by_root.get(accepted.content_root, [])
        if not providers:
            log.info("a trusted manifest for %s but no provider", url)
            return None
        manifest = await self._full_manifest(accepted.content_root, providers)
        if manifest is None or manifest.size != accepted.size or manifest.block_size != accepted.block_size \
                or validator_bytes(manifest.validator) != accepted.validator:
            log.info("no provider gave a manifest matching the record for %s", url)
            return None
        return Found(manifest, decision.source, self._pick(providers, manifest))

    async def _find_published(self, url: str, published: OriginManifest, validator: str | None,
                              content_type: str | None) -> Found | None:
        """The origin published the manifest: only providers are looked up. The hash layer comes from a
        provider (any fetching peer has it) or, when nobody holds the content yet, from the origin: so the
        first nodes of a crowd fetch distinct blocks from the origin instead of waiting for a complete copy."""
        try:
            manifest = published.manifest(url=url, validator=validator, content_type=content_type)
        except ManifestError:  # a Content-Type or ETag our manifests cannot carry (empty, over 1 KiB, ...)
            try:
                manifest = published.manifest(url=url, validator=validator)
            except ManifestError as exc:
                log.info("%s: the origin's manifest is not usable here: %s", url, exc)
                return None
        own = self._own_manifests.get(url_key(url))
        if own is not None and own.root != manifest.root:
            log.warning("%s: the origin now publishes root %s, our copy from it has %s", url,
                        manifest.root.hex()[:16], own.root.hex()[:16])
        # No manifest to vouch for, so no need for many providers: the download starts with --fetch-peers of
        # them (a DHT reply is a random sample of what its node holds), and the refresh adds the rest. Waiting
        # for the pool of 64 was half of a flash-crowd download (0.5 s of 1.0 s at the median in the lab).
        providers = await self._providers(manifest.root, enough=self.peers_for(manifest)) \
            if self.discovery is not None else []
        layer = list(published.hashes) if published.hashes is not None else None
        if layer is None and manifest.root in self.store:
            with contextlib.suppress(StoreError):
                layer = list(self.store.hash_layer(manifest.root))
        if layer is None and not providers:
            layer = await fetch_layer(self.session, url, published)
            if layer is None:
                return None
        return Found(manifest, "origin", self._pick(providers, manifest), layer)

    def peers_for(self, manifest: Manifest) -> int:
        """How many peers one download of `manifest` uses: --fetch-peers, but no more than its blocks and
        PEER_SPARE. Each peer is asked for different blocks, so a 7-block file gains nothing from a 16th
        peer, while each connection costs both sides a handshake and a bitfield (in the lab's 20/s crowd,
        peer connections were about a tenth of a node's CPU)."""
        return max(1, min(self.fetch_peers, manifest.num_blocks + PEER_SPARE))

    def _pick(self, providers: list[Provider], manifest: Manifest) -> list[Provider]:
        """At most `peers_for(manifest)` providers for one download, chosen at random: were it always the first
        ones found (the DHT's answer order), every downloader would crowd the same peers."""
        most = self.peers_for(manifest)
        if len(providers) <= most:
            return providers
        return random.sample(providers, most)

    @staticmethod
    def _consistent(manifest: Manifest, size: int | None, validator: str | None) -> bool:
        return (size is None or manifest.size == size) and (validator is None or manifest.validator == validator)

    def _own_discovery_id(self) -> bytes | None:
        discovery = self.discovery
        node = getattr(discovery, "node", None)
        return getattr(node, "node_id", None) or getattr(discovery, "node_id", None)

    async def _providers(self, root: bytes, enough: int | None = None) -> list[Provider]:
        """Providers of `root` found within `provider_wait` s, stopping at `enough` (default: the pool)."""
        assert self.discovery is not None
        enough = enough or max(PROVIDER_POOL, self.fetch_peers)
        own = self._own_discovery_id()
        found: dict[bytes, Provider] = {}
        with contextlib.suppress(asyncio.TimeoutError, DhtError, OSError):
            async with asyncio.timeout(self.provider_wait):
                async with contextlib.aclosing(self.discovery.find_providers(root)) as providers:
                    async for provider in providers:
                        if provider.node_id != own and self._reachable(provider):
                            found[provider.node_id] = provider
                            if len(found) >= enough:
                                break
        return list(found.values())

    def _reachable(self, provider: Provider) -> bool:
        return bool(provider.transports & self.transport_flags)

    def _transport_for(self, provider: Provider) -> str:
        """"tcp" or "quic": the transport to reach `provider` by, among those both sides offer."""
        both = provider.transports & self.transport_flags
        if both & TransportFlag.TCP and (_prefers_tcp(provider.host) or not both & TransportFlag.QUIC):
            return "tcp"
        return "quic"

    async def _full_manifest(self, root: bytes, providers: list[Provider]) -> Manifest | None:
        if root in self.store:
            with contextlib.suppress(StoreError):
                return self.store.manifest(root)
        for provider in providers[:4]:
            with contextlib.suppress(FetchFailed, PeerError, TransportError, SwarmError, OSError):
                return await self.nodes[self._transport_for(provider)].fetch_manifest(root, [provider.address], timeout=3.0)
        return None

    # -- fetching -------------------------------------------------------------------------------------------------

    def origin_source(self, url: str, manifest: Manifest) -> OriginRangeSource:
        return OriginRangeSource(self.session, url, size=manifest.size, validator=manifest.validator,
                                 max_concurrent=ORIGIN_RANGE_CONCURRENCY,
                                 content_encoding=manifest.content_encoding)

    def fetch(self, found: Found, *, origin: OriginRangeSource | None, start: int, end: int,
              stall_timeout: float = 30.0, report: dict | None = None) -> AsyncIterator[bytes]:
        """Verified bytes `start..end-1` in order, from the providers (one transport) and the origin."""
        by_transport: dict[str, list[Provider]] = {}
        for provider in found.providers:
            by_transport.setdefault(self._transport_for(provider), []).append(provider)
        # One fetch runs over one transport: the one most providers are reached by.
        name = max(by_transport, key=lambda n: len(by_transport[n])) if by_transport else next(iter(self.nodes))
        peers = [p.address for p in by_transport.get(name, [])]
        node = self.nodes[name]
        root = found.manifest.root
        if self.sharing:
            # Peers may take blocks from us while we fetch (HAVE as they verify), and should find us: like a
            # BitTorrent client, a node that fetches announces at once, not only once it is complete.
            node.share(root)
            if self.discovery is not None and self.address is not None and root not in self._lingering \
                    and root not in self._fetch_announced:
                self._fetch_announced.add(root)
                self._spawn(self._announce(root, found.manifest, False, complete=False))
        chunks = node.fetch(found.manifest, peers, layer=found.layer, origin=origin, start=start, end=end,
                            stall_timeout=stall_timeout, report=report)
        if self.discovery is None:
            return chunks
        return self._refreshed(chunks, node, name, root, set(peers), self.peers_for(found.manifest))

    async def _refreshed(self, chunks: AsyncIterator[bytes], node: SwarmNode, transport: str, root: bytes,
                         known: set[tuple[str, int]], wanted: int) -> AsyncIterator[bytes]:
        """`chunks`, while providers that appeared since the lookup join the fetch: in a flash crowd the first
        lookups find the first two or three copies, and everyone crowding them would wait."""
        refresher = asyncio.ensure_future(self._refresh_providers(node, transport, root, known, wanted))
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
            await chunks.aclose()

    async def _refresh_providers(self, node: SwarmNode, transport: str, root: bytes,
                                 known: set[tuple[str, int]], wanted: int) -> None:
        """New providers join the fetch: at `provider_refresh`'s times, up to `wanted` (`peers_for`) at a time and
        PROVIDER_POOL in all; then, for as long as the fetch runs, every `provider_topup` s while it has fewer
        than `wanted` peers. A long download in a crowd loses peers (done and gone, or dropped as unresponsive);
        one left with none took the rest from the origin alone, at its share of the origin's rate. An address
        once tried is never tried again: it may have been dropped for lying."""
        for wait in self.provider_refresh:
            await asyncio.sleep(wait)  # the poll interval: nothing to wait for but time
            if len(known) >= PROVIDER_POOL:
                break
            self._join(node, root, await self._fresh(root, transport, known),
                       min(wanted, PROVIDER_POOL - len(known)), known)
        while True:
            await asyncio.sleep(self.provider_topup)  # as above
            peers = node.peer_count(root)
            if peers is None:  # the fetch is over
                return
            if peers < wanted:
                self._join(node, root, await self._fresh(root, transport, known), wanted - peers, known)

    async def _fresh(self, root: bytes, transport: str, known: set[tuple[str, int]]) -> list[tuple[str, int]]:
        return [p.address for p in await self._providers(root)
                if p.address not in known and self._transport_for(p) == transport]

    @staticmethod
    def _join(node: SwarmNode, root: bytes, fresh: list[tuple[str, int]], most: int,
              known: set[tuple[str, int]]) -> None:
        fresh = random.sample(fresh, min(len(fresh), most))
        known.update(fresh)
        if fresh and node.add_peers(root, fresh):
            log.debug("%d more provider(s) join the fetch of %s", len(fresh), root.hex()[:16])

    # -- after a download -----------------------------------------------------------------------------------------

    async def ingest(self, spool: Spool, *, url: str, validator: str | None, content_type: str | None,
                     content_encoding: str | None, publish: bool) -> Manifest | None:
        """Put a complete origin download into the store; share, announce and (if `publish`) vouch for it."""
        if not spool.complete:
            return None
        manifest, layer = spool.manifest(url=url, validator=validator, content_type=content_type,
                                         content_encoding=content_encoding)
        with contextlib.suppress(StoreError):
            stored = self.store.manifest(manifest.root) if manifest.root in self.store else None
            if stored is not None and stored.block_size != manifest.block_size:
                # The same bytes are stored in other blocks (a swarm download by a manifest of another
                # --block-size): a root has one entry, so fill that one, and vouch in its block size.
                layer = list(self.store.hash_layer(manifest.root))
                manifest = dataclasses.replace(manifest, block_size=stored.block_size)
        try:
            await self._in_thread(manifest.root, lambda stop: self._store_from_spool(manifest, layer, spool, stop))
        except (StoreError, OSError) as exc:
            log.warning("%s will not be shared: %s", url, exc)
            return None
        self._own_manifests[url_key(url)] = manifest
        self._save_origin_roots()
        self._share(manifest.root, manifest, publish_url=publish)
        return manifest

    def _store_from_spool(self, manifest: Manifest, layer: list[bytes], spool: Spool,
                          stop: threading.Event) -> None:
        fd = spool.fileno()
        if fd is not None and self.store.adopt_fd(manifest, layer, fd):
            # The spool holds exactly the bytes the manifest was computed from: linked (O_TMPFILE) or copied
            # in the kernel, never read back through Python.
            return
        # The entry exists already, e.g. from a swarm download of the same content the origin finished first:
        # fill in the blocks it lacks, or it would be shared (and vouched for) incomplete.
        self.store.create(manifest, layer)
        for block in range(manifest.num_blocks):
            if stop.is_set():
                return
            offset, length = manifest.block_span(block)
            if not self.store.has_block(manifest.root, block):
                if not self.store.write_block(manifest.root, block, spool.read(offset, length)):
                    raise StoreError(f"the store refused block {block}")

    async def complete_prefix(self, manifest: Manifest, spool: Spool, upto: int) -> bool:
        """After a swarm fetch from `upto` on, add the origin's blocks before it; False if they do not verify
        (the manifest disagrees with the origin: then nothing is shared)."""
        def work(stop: threading.Event) -> bool:
            if manifest.root not in self.store:
                return False
            layer = self.store.hash_layer(manifest.root)
            for block in range(upto // manifest.block_size):
                if stop.is_set():
                    return False
                if self.store.has_block(manifest.root, block):
                    continue
                offset, length = manifest.block_span(block)
                data = spool.read(offset, length)
                try:
                    manifest.verify_block(layer, block, data)
                except PeerError:
                    return False
                self.store.write_block(manifest.root, block, data)
            return self.store.complete(manifest.root)
        try:
            return await self._in_thread(manifest.root, work)
        except (StoreError, OSError, ValueError) as exc:
            log.info("cannot complete %s in the store: %s", manifest.root.hex()[:16], exc)
            return False

    async def _in_thread(self, root: bytes, work: Callable[[threading.Event], object]):
        """`work(stop)` in a worker thread, moving a spool's bytes into the store's entry of `root`.

        Cancelling a thread's awaiter does not stop the thread, and our caller closes the spool as soon as we
        return: closing it under the thread would make it read a closed (or reused!) descriptor. So when
        cancelled (the proxy stopping), ask the thread to stop between blocks, wait for it, and drop what it
        left incomplete."""
        stop = threading.Event()
        thread = asyncio.ensure_future(asyncio.to_thread(work, stop))
        try:
            return await asyncio.shield(thread)
        except asyncio.CancelledError:
            stop.set()
            log.info("stopping: waiting for the store to finish with %s", root.hex()[:16])
            await asyncio.wait({thread})
            self._drop_partial(root)
            raise

    def _drop_partial(self, root: bytes) -> None:
        """Delete an incomplete entry that no download is filling: it is never shared, and would only take room
        (and be verified again at every start) until evicted."""
        with contextlib.suppress(StoreError):
            if root in self.store and not self.store.complete(root) and self.store.info(root).pins == 0:
                self.store.remove(root)

    def abandon(self, root: bytes) -> None:
        """A swarm download ended incomplete: stop serving and announcing its partial content, and drop it."""
        if root not in self._lingering:
            for node in self.nodes.values():
                node.unshare(root)
            self._drop_partial(root)
            self._announced.discard(root)
            if root in self._fetch_announced:
                self._fetch_announced.discard(root)
                if self.discovery is not None:
                    self._spawn(self._withdraw(root))

    def fetch_over(self, root: bytes) -> None:
        """After a download's store work: a root announced while fetching that did not end up shared complete
        (a partial range, a prefix the origin's bytes contradict) is withdrawn and dropped."""
        if root in self._fetch_announced:
            self.abandon(root)

    def completed_from_peers(self, manifest: Manifest) -> None:
        """A swarm download finished and is complete in the store: be a provider (never a publisher)."""
        with contextlib.suppress(StoreError):
            if self.store.complete(manifest.root):
                self._share(manifest.root, manifest, publish_url=False)

    def _share(self, root: bytes, manifest: Manifest, *, publish_url: bool) -> None:
        if not self.sharing:
            return
        self._fetch_announced.discard(root)
        for node in self.nodes.values():
            node.share(root)
        if self.discovery is not None and self.address is not None:
            self._spawn(self._announce(root, manifest, publish_url))
        if self._loop is not None and self.linger > 0:
            old = self._lingering.pop(root, None)
            if old is not None:
                old.cancel()
            call_later = self._call_later or self._loop.call_later
            self._lingering[root] = call_later(self.linger, self.withdraw, root, "linger time over")

    async def _announce(self, root: bytes, manifest: Manifest, publish_url: bool, *, complete: bool = True) -> None:
        """Announce `root` (and vouch for its URL if `publish_url`), unless the DHT node already keeps that up."""
        assert self.discovery is not None and self.address is not None
        vouch = (url_key(manifest.url), root) if publish_url and manifest.url and manifest.validator else None
        try:
            if not (complete and root in self._announced):
                await self.discovery.announce(root, ("0.0.0.0", self.address[1]), self.transport_flags)
                self.counters.announced += 1
                if complete:
                    self._announced.add(root)
            if vouch is not None and vouch not in self._vouched:
                await self.discovery.put_manifest(vouch[0], ManifestSummary(
                    root, manifest.size, manifest.block_size, validator_bytes(manifest.validator)))
                self.counters.published += 1
                self._vouched.add(vouch)
        except InvalidArgument as exc:  # our address is not known yet: the same for every download until it is
            level = logging.DEBUG if self._address_unknown_logged else logging.WARNING
            self._address_unknown_logged = True
            log.log(level, "not announcing %s yet: %s", root.hex()[:16], exc)
        except (DhtError, OSError) as exc:
            log.warning("announcing %s failed: %s", root.hex()[:16], exc)

    def withdraw(self, root: bytes, why: str) -> None:
        self._fetch_announced.discard(root)
        self._announced.discard(root)
        handle = self._lingering.pop(root, None)
        if handle is not None:
            handle.cancel()
        for node in self.nodes.values():
            node.unshare(root)
        if self.discovery is not None:
            log.info("no longer sharing %s: %s", root.hex()[:16], why)
            self._spawn(self._withdraw(root))

    async def _withdraw(self, root: bytes) -> None:
        assert self.discovery is not None
        with contextlib.suppress(DhtError, OSError):
            await self.discovery.withdraw(root)

    def _on_store_event(self, event: object) -> None:
        if self._loop is not None and isinstance(event, (Evicted, StoreFailed)):
            self._loop.call_soon_threadsafe(self._forget, event.root, str(event))

    def _forget(self, root: bytes, why: str) -> None:
        for key, manifest in list(self._own_manifests.items()):
            if manifest.root == root:
                del self._own_manifests[key]
        self.withdraw(root, why)

    def status(self) -> dict:
        return {
            "peer": None if self.address is None else f"{self.address[0]}:{self.address[1]}",
            "transports": sorted(self.nodes),
            "trust": str(self.trust),
            "sharing": self.sharing,
            "linger_s": self.linger,
            "shared": len(self._lingering),
            "bytes_uploaded": self.bytes_uploaded,
            "announced": self.counters.announced,
            "published": self.counters.published,
            "manifests_rejected": self.counters.manifests_rejected,
            "transitions": dict(self.counters.transitions),
            "stored_bytes": self.store.used,
        }
