"""The proxy's side of the swarm: which manifest to trust for a URL, and the HTTP bodies that feed the store.

One `SwarmEngine` per proxy, over one `swarm.service.swarm_service.SwarmService` (the block store's peers, providers,
fetching, announcing, lingering and withdrawing: everything that is not about HTTP). What is left here is
about URLs and the origin, for the fallback download (`proxy.download.fallback`):

* `find(url, ...)` — which manifest may we trust for this URL, and who holds its blocks? The origin's own
  manifest when it publishes one (`proxy.origin_manifest`); else our own manifests (computed from bytes this
  node got from the origin: `self`), then the manifest claims under the URL's key weighed by
  `swarm.trust` (`quorum` / `any`), then the full manifest from a provider, checked against the root.
  At most `--fetch-peers` providers, picked at random among those found.
* `fetch(found, ...)` — verified bytes from the providers plus the origin as one capped Range source.
* `ingest(spool, ...)` — after a download from the origin: store, share, and vouch for the URL (only for bytes
  that came from the origin: a node that got them from peers never vouches; docs/ARCHITECTURE.md). `complete_prefix` /
  `completed_from_peers` / `abandon` / `fetch_over` after a download from peers.
* Which URLs this node got from the origin survives a restart (`origin_roots.json` beside the spool dir).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import pathlib
import threading
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

import aiohttp

from swarm.content.manifest import Manifest, OriginManifest
from swarm.content.merkle import block_count
from swarm.discovery import Discovery, Provider, validator_bytes
from swarm.discovery.own_claims import OwnClaims
from swarm.errors import ManifestError, StoreError
from swarm.net.transport import Transport
from swarm.service.claims_query import ClaimsAnswer
from swarm.service.node import FETCH_STALL_TIMEOUT, Link
from swarm.service.origin_source import OriginRangeSource
from swarm.service.store_work import fill_entry
from swarm.service.swarm_service import FETCH_PEERS, LINGER, PROVIDER_WAIT, ShareCounters, SwarmService
from swarm.store.interface import BlockStore
from swarm.trust import ManifestClaim, ManifestSource, TrustPolicy, decide, leading
from swarm.trust.judge import judge

from .origin_head import OriginHead
from .origin_manifest import fetch_layer
from .spool import Spool

__all__ = ["EngineCounters", "Found", "Miss", "SwarmEngine", "url_key", "validator_bytes"]

log = logging.getLogger("swarmproxy.engine")

URL_KEY_PREFIX = b"swarmproxy/url\x00"
ORIGIN_RANGE_CONCURRENCY = 2  # Dragonfly's back-to-source cap: a flood of fallbacks must not hammer the origin
# A version that one network vouches for has its providers looked up while its downloads wait for a quorum
# (`find`), at most once per root in this many s (our DHT keeps a lookup warm for 30 s, `dht.node`), and for at
# most PROVIDERS_AHEAD_ROOTS roots at a time.
PROVIDERS_AHEAD_EVERY = 10.0
PROVIDERS_AHEAD_ROOTS = 256


def url_key(url: str) -> bytes:
    """The discovery key of a URL: a hash, so the DHT never sees the plain URL (docs/ARCHITECTURE.md "Discovery")."""
    return hashlib.sha256(URL_KEY_PREFIX + url.encode("utf-8", "surrogateescape")).digest()


def agreed_manifest(url: str, accepted: ManifestClaim, head: OriginHead | None) -> Manifest | None:
    """The manifest of what a quorum agreed on, made from its fields and the origin's answer (`find`); None when
    the origin has not answered with that very version, or the fields and the origin's type make no manifest."""
    if head is None or head.size != accepted.size or not head.validator \
            or validator_bytes(head.validator) != accepted.validator:
        return None
    try:
        return Manifest(size=accepted.size, block_size=accepted.block_size, root=accepted.content_root, url=url,
                        validator=head.validator, content_type=head.content_type,
                        content_encoding=head.content_encoding)
    except ManifestError:
        return None


@dataclasses.dataclass
class Found:
    """A manifest we may use, where it came from, and the peers that hold its blocks."""

    manifest: Manifest
    source: ManifestSource  # ORIGIN, SELF, QUORUM or ANY
    providers: list[Provider]
    layer: list[bytes] | None = None  # the hash layer when we have it already (else a provider sends it)

    def __post_init__(self) -> None:
        self.source = ManifestSource(self.source)  # "origin" is ManifestSource.ORIGIN: `is` holds


@dataclasses.dataclass(frozen=True)
class Miss:
    """Why `find` has no manifest to use: a short key (a metric's label) and what it depends on."""

    reason: str  # "dht-off", "lookup-failed", "no-record", "below-quorum", "conflict", "no-provider", ...
    detail: str = ""  # e.g. "1 publisher"
    others: int = 0  # the weight of the others who hold or are fetching this version from the origin (`working`)
    # Of those, the ones a download that claimed to fetch it steps back for: holders, and earlier claimers
    # (`swarm.trust.ahead_of`).
    ahead: int = 0

    def __str__(self) -> str:
        return f"{self.reason} ({self.detail})" if self.detail else self.reason


@dataclasses.dataclass
class EngineCounters(ShareCounters):
    """`announced` / `published` (counted by the service), and what the fallback counts."""

    transitions: dict[str, int] = dataclasses.field(default_factory=dict)
    bytes_origin: int = 0
    bytes_peers: int = 0
    manifests_rejected: int = 0


def _trusted_root(policy: TrustPolicy, *, known_size: int | None = None,
                  known_validator: bytes | None = None) -> Callable[[Any], list[bytes]]:
    """`SwarmService.claims`' `roots=`: the root `policy` lets us trust, whose providers alone are looked up."""
    def roots(summaries) -> list[bytes]:
        accepted = decide(summaries, policy, known_size=known_size, known_validator=known_validator).accepted
        return [accepted.content_root] if accepted is not None else []
    return roots


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
        linger: float = LINGER,
        share: bool = True,
        provider_wait: float = PROVIDER_WAIT,
        fetch_peers: int = FETCH_PEERS,
        node_kwargs: dict | None = None,
        call_later: Callable[..., Any] | None = None,
        own_claims: OwnClaims | None = None,
    ) -> None:
        """`own_claims`: the table of this node's own claims its peer port answers queries from (the Internet
        mode's claim store fills it: `bittorrent.mainline_claims`); None: an empty one."""
        self.counters = EngineCounters()
        self.service = SwarmService(store, transports, discovery, linger=linger, share=share,
                                    provider_wait=provider_wait, fetch_peers=fetch_peers, node_kwargs=node_kwargs,
                                    call_later=call_later, counters=self.counters, on_forget=self._forget_url,
                                    own_claims=own_claims)
        self.store = store
        self.session = session
        self.trust = trust
        self.spool_dir = spool_dir
        self._own_manifests: dict[bytes, Manifest] = {}  # url key -> manifest computed from origin bytes
        self._in_progress: dict[bytes, int] = {}  # url key -> downloads of it from the origin that said `fetching`
        self._claimed_at: dict[bytes, float] = {}  # url key -> when this node said so (time.time(), as records)
        self._providers_ahead: dict[bytes, float] = {}  # root -> when its providers were last looked up ahead
        self._origin_roots_file = pathlib.Path(spool_dir).parent / "origin_roots.json"
        self._index_store()

    async def ask_claims(self, address: tuple[str, int], key: bytes,
                         claiming: tuple[int, int] | None = None) -> ClaimsAnswer:
        """The claims the node at `address` makes itself under `key` and the other claimers it passes on, telling it
        ours (`claiming`: port, transports) if we claim there too (`SwarmNode.ask_claims`), by the transport
        `SwarmService.node_for` chooses (QUIC to a node we punched a way to, else TCP where we speak it)."""
        return await self.service.node_for(address).ask_claims(address, key, claiming=claiming)

    async def punch(self, coordinators: Sequence[tuple[str, int]], address: tuple[str, int]) -> bool:
        """A way through the NATs to the node at `address`, introduced by one of `coordinators`
        (`SwarmService.punch`)."""
        return await self.service.punch(coordinators, address)

    # What callers and tests reach through the engine, kept by the service.
    discovery = property(lambda self: self.service.discovery)
    nodes = property(lambda self: self.service.nodes)
    address = property(lambda self: self.service.address)
    transport_flags = property(lambda self: self.service.transport_flags)
    bytes_uploaded = property(lambda self: self.service.bytes_uploaded)
    sharing = property(lambda self: self.service.sharing)

    def peers_for(self, manifest: Manifest) -> int:
        return self.service.peers_for(manifest)

    # -- which URLs came from the origin, across restarts -----------------------------------------------------

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

    def _forget_url(self, root: bytes) -> None:
        """The store lost `root` (evicted, failed): it is no longer "self" for its URL."""
        for key, manifest in list(self._own_manifests.items()):
            if manifest.root == root:
                del self._own_manifests[key]

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Open the peer listener(s); with two transports both take the same port number."""
        return await self.service.start(host, port)

    async def stop(self) -> None:
        await self.service.stop()

    async def settled(self) -> None:
        """Wait for background work (storing, announcing) started so far: for tests and orderly shutdown."""
        await self.service.settled()

    # -- finding a manifest and providers ------------------------------------------------------------------------

    def look_ahead(self, url: str, *, timeout: float = 5.0) -> asyncio.Future | None:
        """Start the lookup of `url`'s claims before its head, for the `find` the head asks for (`looked_ahead`);
        None when there is nothing to look up (no discovery; our own copy answers).

        The privacy rule (`download.discovery_rule`) starts it only when the head is late (half of T) or the host was
        slow recently (`download_actions.LookAhead`), never as every GET leaves. The head's lookup took about
        0.17 s after the head in the lab's crowd at 20/s, and a newcomer read the origin all that while, which
        divided the origin among more readers; started before the head, the lookup runs while the head is on its
        way. The providers looked up with it are those of the root the claims would let us trust whatever version
        the head names; `find` decides with the head's size and validator, as always, and looks providers up
        again if it trusts another root. A response that turns out small or not to be shared drops it."""
        if self.service.discovery is None or url_key(url) in self._own_manifests:
            return None
        return asyncio.ensure_future(self.service.claims(url_key(url), timeout=timeout,
                                                         roots=_trusted_root(self.trust)))

    async def find(self, url: str, *, known_size: int | None = None, known_validator: str | None = None,
                   timeout: float = 5.0, published: OriginManifest | None = None,
                   content_type: str | None = None, headless: bool = False,
                   origin_head: Callable[[], OriginHead | None] | None = None,
                   looked_ahead: asyncio.Future | None = None,
                   peers: Sequence[tuple[str, int]] = ()) -> Found | Miss:
        """A trusted manifest of `url` with providers, or why not (then the origin alone goes on).

        `headless`: the origin has not answered at all yet, so a manifest claim needs the stricter
        `TrustPolicy.headless()`.

        `origin_head()`: the origin's answer to this GET once it came (asked when the lookup has answered, which is
        usually later): a manifest the trust rule accepts for the size and validator it gave is then made here
        from the agreed fields and the origin's own type and encoding (`agreed_manifest`), instead of asked of a
        provider: a connection and a round trip to a busy peer, 0.45 s at the median in the lab's 10/s crowd.
        The provider's copy would add nothing trusted: only its root is checked against the agreed one.

        `published`: the origin's own manifest from its response (`proxy.origin_manifest`), trusted as is.

        `looked_ahead`: the claims lookup `look_ahead` started with the request, used instead of a new one.

        `peers`: the peers a busy origin listed with `published` (`Swarm-Peers`), fetched from at once."""
        if published is not None:
            if looked_ahead is not None:
                looked_ahead.cancel()
            return await self._find_published(url, published, known_validator, content_type, peers)
        service = self.service
        key = url_key(url)
        own = self._own_manifests.get(key)
        if own is not None and self._consistent(own, known_size, known_validator):
            if looked_ahead is not None:
                looked_ahead.cancel()
            return Found(own, ManifestSource.SELF, service.pick(await service.providers(own.root), own))
        if service.discovery is None:
            return Miss("dht-off")
        policy = self.trust.headless() if headless else self.trust
        known = validator_bytes(known_validator) if known_validator else None
        claims = await looked_ahead if looked_ahead is not None else await service.claims(
            key, timeout=timeout, roots=_trusted_root(policy, known_size=known_size, known_validator=known))
        if claims is None:
            return Miss("lookup-failed")
        summaries, providers_by_root = claims
        verdict = judge(summaries, self.trust, known_size=known_size, known_validator=known,
                        me=service.discovery.node_id, claimed_at=self._claimed_at.get(key, math.inf),
                        headless=headless)
        if verdict.accepted is None:
            if verdict.rejected:
                self.counters.manifests_rejected += 1
            if verdict.reason == "below-quorum":
                self._look_providers_ahead(summaries, known_size, known)
            log.info("no trusted manifest for %s: %s", url, Miss(verdict.reason, verdict.detail))
            return Miss(verdict.reason, verdict.detail, verdict.others, verdict.ahead)
        accepted = verdict.accepted
        providers = providers_by_root.get(accepted.content_root)
        if providers is None:  # looked ahead for another root (or none): the head named this version
            blocks = block_count(accepted.size, accepted.block_size)
            providers = await service.providers(accepted.content_root, service.peers_for_blocks(blocks))
        if not providers:
            log.info("a trusted manifest for %s but no provider", url)
            return Miss("no-provider")
        manifest = agreed_manifest(url, accepted, origin_head and origin_head()) or \
            await service.full_manifest(accepted.content_root, providers)
        if manifest is None or manifest.size != accepted.size or manifest.block_size != accepted.block_size \
                or validator_bytes(manifest.validator) != accepted.validator:
            log.info("no provider gave a manifest matching the record for %s", url)
            return Miss("no-manifest", "no provider gave one matching the record")
        if manifest.url != url:  # a provider's manifest names what it chose: what is stored names what we asked
            manifest = dataclasses.replace(manifest, url=url)
        return Found(manifest, verdict.source, service.pick(providers, manifest))

    def _look_providers_ahead(self, summaries: Sequence[Any], known_size: int | None, known: bytes | None) -> None:
        """Below a quorum, look up the providers of the version one network vouches for (`leading`), in the
        background: the lookup that finds the quorum then asks for them again from where this one got (one round
        trip on our DHT), not from scratch (three or four hops, 0.2-0.5 s at the tail of the lab's no-plugin
        crowd, where every parked download paid it at once). What it finds is not used: it is never trusted, and
        by the quorum more hold it."""
        claim = leading(summaries, known_size=known_size, known_validator=known)
        now = time.monotonic()
        if claim is None or now - self._providers_ahead.get(claim.content_root, -math.inf) < PROVIDERS_AHEAD_EVERY:
            return
        self._providers_ahead.pop(claim.content_root, None)
        if len(self._providers_ahead) >= PROVIDERS_AHEAD_ROOTS:
            del self._providers_ahead[next(iter(self._providers_ahead))]  # the oldest
        self._providers_ahead[claim.content_root] = now
        service = self.service
        service.spawn(service.providers(claim.content_root,
                                        service.peers_for_blocks(block_count(claim.size, claim.block_size))))

    async def _find_published(self, url: str, published: OriginManifest, validator: str | None,
                              content_type: str | None, listed: Sequence[tuple[str, int]] = ()) -> Found | Miss:
        """The origin published the manifest: only providers are looked up, and not even they when the origin
        `listed` peers (`Swarm-Peers`): the fetch starts with those, and its refresh brings the DHT's
        (`SwarmService.refresh_providers`, within PROVIDER_REFRESH_FEW s when they are fewer than it wants). The
        hash layer comes from a provider (any fetching peer has it) or, when nobody holds the content yet, from the
        origin: so the first nodes of a crowd fetch distinct blocks from the origin instead of waiting for a
        complete copy."""
        try:
            manifest = published.manifest(url=url, validator=validator, content_type=content_type)
        except ManifestError:  # a Content-Type or ETag our manifests cannot carry (empty, over 1 KiB, ...)
            try:
                manifest = published.manifest(url=url, validator=validator)
            except ManifestError as exc:
                log.info("%s: the origin's manifest is not usable here: %s", url, exc)
                return Miss("origin-manifest-unusable")
        own = self._own_manifests.get(url_key(url))
        if own is not None and own.root != manifest.root:
            log.warning("%s: the origin now publishes root %s, our copy from it has %s", url,
                        manifest.root.hex()[:16], own.root.hex()[:16])
        # No manifest to vouch for, so no need for many providers: the download starts with --fetch-peers of
        # them (a DHT reply is a random sample of what its node holds), and the refresh adds the rest. Waiting
        # for the pool of 64 was half of a flash-crowd download (0.5 s of 1.0 s at the median in the lab).
        # An origin-listed peer's node id is learnt at its handshake; it offers the transports we do (ours serve
        # both on one port number).
        providers = [Provider(b"", host, port, self.transport_flags) for host, port in listed] if listed else \
            await self.service.providers(manifest.root, enough=self.peers_for(manifest))
        layer = list(published.hashes) if published.hashes is not None else None
        if layer is None and manifest.root in self.store:
            with contextlib.suppress(StoreError):
                layer = list(self.store.hash_layer(manifest.root))
        if layer is None and not providers:
            layer = await fetch_layer(self.session, url, published)
            if layer is None:
                return Miss("no-layer", "the origin's hash layer could not be fetched")
        return Found(manifest, ManifestSource.ORIGIN, self.service.pick(providers, manifest), layer)

    @staticmethod
    def _consistent(manifest: Manifest, size: int | None, validator: str | None) -> bool:
        return (size is None or manifest.size == size) and (validator is None or manifest.validator == validator)

    # -- fetching -------------------------------------------------------------------------------------------------

    def fetching(self, url: str, *, size: int, block_size: int, validator: str) -> None:
        """This node fetches `url` (that version) from its origin and will vouch for it: say so under the URL's
        key, so that newcomers wait for the vouches instead of loading the origin too (`fetch_ended` ends it)."""
        key = url_key(url)
        self._in_progress[key] = self._in_progress.get(key, 0) + 1
        if self._in_progress[key] == 1:
            self._claimed_at[key] = time.time()
            self.service.claim_in_progress(key, size, block_size, validator_bytes(validator))

    def fetch_ended(self, url: str, *, vouching: bool) -> None:
        """A download that said `fetching` is over; `vouching`: its bytes are going to the store, whose share
        replaces the claim with the real one (a failure to store ends it there: `ingest`)."""
        key = url_key(url)
        left = self._in_progress.get(key, 0) - 1
        if left > 0:
            self._in_progress[key] = left
            return
        self._in_progress.pop(key, None)
        self._claimed_at.pop(key, None)
        if not vouching:
            self._will_not_vouch(url)

    def origin_source(self, url: str, manifest: Manifest) -> OriginRangeSource:
        return OriginRangeSource(self.session, url, size=manifest.size, validator=manifest.validator,
                                 max_concurrent=ORIGIN_RANGE_CONCURRENCY,
                                 content_encoding=manifest.content_encoding)

    def fetch(self, found: Found, *, origin: OriginRangeSource | None, start: int, end: int,
              stall_timeout: float = FETCH_STALL_TIMEOUT, report=None) -> AsyncGenerator[bytes, None]:
        """Verified bytes `start..end-1` in order, from the providers (one transport) and the origin."""
        return self.service.fetch(found.manifest, found.providers, layer=found.layer, origin=origin, start=start,
                                  end=end, stall_timeout=stall_timeout, report=report)

    # -- after a download -----------------------------------------------------------------------------------------

    async def ingest(self, spool: Spool, *, url: str, validator: str | None, content_type: str | None,
                     content_encoding: str | None, publish: bool, own: bool = True) -> Manifest | None:
        """Put a complete download into the store; share, announce and (if `publish`) vouch for it. `own`: every
        byte came from the origin, so it is this node's own manifest of the URL (`self`, across restarts); a file
        assembled from vouched segments is not, and its trust stays the vouchers' (`find` asks the DHT)."""
        if not spool.complete:
            self._will_not_vouch(url)
            return None
        manifest, layer = self.service.stored_as(*spool.manifest(
            url=url, validator=validator, content_type=content_type, content_encoding=content_encoding))
        try:
            await self.service.in_thread(manifest.root,
                                         lambda stop: self._store_from_spool(manifest, layer, spool, stop))
        except (StoreError, OSError) as exc:
            log.warning("%s will not be shared: %s", url, exc)
            self._will_not_vouch(url)
            return None
        key = url_key(url)
        if own:
            self._own_manifests[key] = manifest
            self._save_origin_roots()
        self.service.share(manifest, vouch=key if publish else None)
        return manifest

    def _will_not_vouch(self, url: str) -> None:
        """A download that said `fetching` and handed its bytes over will not vouch after all: withdraw the
        claim, unless another download of the URL still fetches or this node vouched already."""
        key = url_key(url)
        if key not in self._in_progress and key not in self._own_manifests:
            self.service.end_in_progress(key)

    def _store_from_spool(self, manifest: Manifest, layer: list[bytes], spool: Spool,
                          stop: threading.Event) -> None:  # in a worker thread
        fill_entry(self.store, manifest, layer, spool, stop)

    async def complete_prefix(self, manifest: Manifest, spool: Spool, upto: int) -> bool:
        """After a swarm fetch from `upto` on, add the origin's blocks before it; False if they do not verify
        (the manifest disagrees with the origin: then nothing is shared)."""
        return await self.service.complete_prefix(manifest, spool, upto)

    def abandon(self, root: bytes) -> None:
        """A swarm download ended incomplete: stop serving and announcing its partial content, and drop it."""
        self.service.abandon(root)

    def fetch_over(self, root: bytes) -> None:
        """After a download's store work: a root announced while fetching that did not end up shared complete
        (a partial range, a prefix the origin's bytes contradict) is withdrawn and dropped."""
        self.service.fetch_over(root)

    def completed_from_peers(self, manifest: Manifest) -> None:
        """A swarm download finished and is complete in the store: be a provider (never a publisher)."""
        self.service.completed(manifest)

    def withdraw(self, root: bytes, why: str) -> None:
        self.service.withdraw(root, why)

    def links(self) -> list[tuple[str, Link]]:
        """Every live peer connection, by the transport it runs on (the status page's peers)."""
        return [(name, link) for name, node in self.service.nodes.items() for link in node.links()]

    def status(self) -> dict:
        return {
            **self.service.status(),
            "trust": str(self.trust),
            "manifests_rejected": self.counters.manifests_rejected,
            "transitions": dict(self.counters.transitions),
        }
