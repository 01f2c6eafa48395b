"""`SwarmService`: one node's swarm, and the life of each content in it, over any `Discovery`.

Whatever asks for content (the proxy's HTTP fallback, a cluster member, a BitTorrent bridge) knows *what* it
wants, as a `Manifest` it trusts; the service does the rest:

* **Listening** — one `SwarmNode` per transport (`tcp`, `quic`), sharing one store and one node id; with both,
  they listen on the same port number. Content left complete in the store by an earlier run is shared again.
* **Providers** — `providers(root)` looks them up for at most `provider_wait` s (stopping at `enough`), skips
  this node and those we share no transport with; `pick` takes at most `peers_for(manifest)` of them at random.
  `claims(key)` looks up who vouches for what under a key, with the providers of the roots they name.
* **Fetching** — `fetch(manifest, providers, ...)` runs over the one transport most providers are reached by
  (TCP for loopback and private peers, QUIC for public ones, among those both sides offer), announces this node
  as a provider at once, and while it runs brings in providers that appeared since: at `provider_refresh`'s
  times, then every `provider_topup` s while the fetch has fewer peers than it wants.
* **Sharing** (`swarm.service.shares`) — `share` complete content (announced once, optionally vouched for under
  a key, lingering `linger` s), `completed` after a fetch, `abandon` / `fetch_over` a fetch that did not end
  complete, `withdraw`; eviction or a store failure withdraws at once and tells `on_forget`.
* **Store work** (`swarm.service.store_work`) — `in_thread` for filling the store from a body off the loop,
  `complete_prefix` after a fetch that began mid-content.

Time: the linger timer goes through `call_later` (tests pass a fake clock's); the refresh schedule is
`provider_refresh` / `provider_topup` (tests set them to 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from swarm.content.manifest import Manifest
from swarm.content.merkle import block_count
from swarm.core.punch import PunchedPaths
from swarm.core.reachability import Outcome
from swarm.core.serve import Shown
from swarm.discovery.own_claims import OwnClaims
from swarm.discovery.seam import (
    IN_PROGRESS_ROOT,
    IN_PROGRESS_TTL,
    Discovery,
    ManifestClaim,
    Provider,
    TransportFlags,
    Vouch,
)
from swarm.errors import FetchFailed, PeerError, StoreError, SwarmError, TransportError
from swarm.net.transport import Transport
from swarm.service.node import FETCH_STALL_TIMEOUT, SwarmNode, UploadThrottle
from swarm.service.reach import PROBE_TIMEOUT, Reach
from swarm.service.shares import ShareCounters, ShareListener, Shares
from swarm.service.store_work import Body, fill_prefix, in_block_size_stored, in_thread
from swarm.service.transports import make_transports, prefers_tcp
from swarm.store.interface import BlockStore, Evicted, StoreFailed

if TYPE_CHECKING:  # a type only, as in `swarm.service.node`: importing it pulls in aiohttp
    from swarm.core.policy import PolicyConfig
    from swarm.service.fetch_run import RangeSource

__all__ = ["SwarmService", "ShareCounters", "make_transports"]  # (make_transports: `swarm.service.transports`)

log = logging.getLogger("swarmproxy.swarm")

T = TypeVar("T")

PROVIDER_WAIT = 1.5  # seconds to collect providers before starting; more are rarely found later
LINGER = 86400.0  # seconds a content stays shared after its last use (--linger)
FETCH_PEERS = 16  # providers used per download (--fetch-peers) ...
PEER_SPARE = 2  # ... but at most this many more than the download has blocks
PROVIDER_POOL = 64  # ... picked at random from up to this many found (a DHT node keeps 64 per root)
PROVIDER_REFRESH = (1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0)  # s between lookups for more providers during a fetch
PROVIDER_TOPUP = 8.0  # ... and after those, while the fetch has fewer than --fetch-peers peers
# A fetch that starts with fewer providers than it wants looks for more this soon, not after the first wait: in a
# flash crowd without the origin's help, the downloads parked for a quorum all fetch once it comes, from the two
# or three copies there are, and the first of them each queue behind the others on those copies' uplinks, while
# those that started a moment before hold blocks already (a fetch announces its node at once). In the simulated
# no-plugin crowd (`bench.crowd_sim`, seeds 1-4) the p99 went from 3.13, 2.57, 2.68, 3.31 s to 2.79, 2.51, 2.66,
# 3.17 s; 0.15 s did no better (the announcements need that long to be found).
PROVIDER_REFRESH_FEW = 0.3
CLAIM_ROOTS = 4  # roots named under one key whose providers are looked up (side by side: a liar's cost no time)


def refresh_waits(waits: Sequence[float], providers: int, wanted: int) -> list[float]:
    """The waits between a fetch's lookups for more providers (`refresh_providers`): `waits`, the first no longer
    than PROVIDER_REFRESH_FEW when it starts with fewer `providers` than the `wanted` (`peers_for`)."""
    schedule = list(waits)
    if schedule and providers < wanted:
        schedule[0] = min(schedule[0], PROVIDER_REFRESH_FEW)
    return schedule


def _with_vouchers(found: list[Provider], root: bytes, summaries: Sequence[Vouch]) -> list[Provider]:
    """`found` and, first, the publishers that vouch for `root` and answered us on their peer port a moment ago
    (`Vouch.serves_at`): providers the directory may not list yet. Blocks are checked against the root whoever
    serves them, so a voucher needs no more trust as a provider than a stranger the directory names."""
    known = {provider.node_id for provider in found}
    vouchers = [Provider(vouch.publisher_id, vouch.serves_at[0], vouch.serves_at[1], TransportFlags.TCP)
                for vouch in summaries if vouch.serves_at is not None and vouch.content_root == root
                and vouch.publisher_id not in known]
    return [*dict((provider.node_id, provider) for provider in vouchers).values(), *found]


class SwarmService:
    def __init__(
        self,
        store: BlockStore,
        transports: dict[str, Transport],
        discovery: Discovery | None,
        *,
        linger: float = LINGER,
        share: bool = True,
        provider_wait: float = PROVIDER_WAIT,
        fetch_peers: int = FETCH_PEERS,
        node_kwargs: dict | None = None,
        call_later: Callable[..., Any] | None = None,
        counters: ShareCounters | None = None,
        on_forget: Callable[[bytes], None] | None = None,
        node_id: bytes | None = None,
        shown: Shown | None = None,
        upload_throttle: UploadThrottle | None = None,
        provider_refresh: tuple[float, ...] = PROVIDER_REFRESH,
        provider_topup: float = PROVIDER_TOPUP,
        provider_rank: Callable[[Provider], int] | None = None,
        own_claims: OwnClaims | None = None,
        reach: Reach | None = None,
    ) -> None:
        """`node_id`: this node's id in every handshake (default: a random one), e.g. the cluster agent's id, so
        that a peer is one identity for the engine and for its caller. `shown`: what a served peer is shown, by
        that id (`swarm.core.serve.Shown`; None: everything), on every transport; `reveal()` after it changed.
        `upload_throttle(connection)`: the `swarm.core.throttle.Throttle` every BLOCK sent to a served peer is
        taken from, asked per block (`swarm.service.node.UploadThrottle`; None: unlimited), on every transport.
        `provider_refresh` / `provider_topup`: when a running fetch looks for more providers (`refresh_providers`).
        `provider_rank(provider)`: lower is preferred when not all providers found can join a fetch (`pick`, and
        the refreshes), e.g. a cluster's nearer peers first; None: chosen at random. `own_claims`: this node's own
        claims, which every transport's node answers a peer asking it directly (`SwarmNode.ask_claims`), kept in
        `self.own_claims` (None: an empty table of its own). `reach`: the connect-backs' shell, one for the node of
        every transport (`swarm.service.reach.Reach`; None: one of its own, for the public network only)."""
        if not transports:
            raise ValueError("at least one transport is needed")
        self.store = store
        self.discovery = discovery
        self.provider_wait = provider_wait
        self.fetch_peers = fetch_peers
        self.provider_refresh = provider_refresh
        self.provider_topup = provider_topup
        self.provider_rank = provider_rank
        self.counters = counters if counters is not None else ShareCounters()
        self.on_forget = on_forget  # told of a root evicted or lost by the store, before it is withdrawn
        self.own_claims = own_claims if own_claims is not None else OwnClaims()  # one node: one table, every transport
        self.reach = reach if reach is not None else Reach()  # one node: one probe table and one limiter
        self.punched = PunchedPaths()  # addresses reached through a punch lately: by QUIC only (`punch`)
        self.nodes: dict[str, SwarmNode] = {}
        for name, transport in transports.items():
            node = SwarmNode(store, transport, node_id=node_id, shown=shown, upload_throttle=upload_throttle,
                             own_claims=self.own_claims, reach=self.reach, **(node_kwargs or {}))
            node_id = node.node_id  # one identity whichever transport a peer uses
            self.nodes[name] = node
        self.address: tuple[str, int] | None = None
        self.tasks: set[asyncio.Task] = set()
        self._claims: dict[bytes, asyncio.Task] = {}  # key -> the last in-progress claim's put or withdrawal
        self.shares = Shares(store, self.nodes, discovery, enabled=share, linger=linger,
                             transports=self.transport_flags, spawn=self.spawn, call_later=call_later,
                             counters=self.counters)
        self._loop: asyncio.AbstractEventLoop | None = None
        store.add_listener(self._on_store_event)

    @property
    def transport_flags(self) -> int:
        flags = 0
        if "tcp" in self.nodes:
            flags |= TransportFlags.TCP
        if "quic" in self.nodes:
            flags |= TransportFlags.QUIC
        return flags

    @property
    def sharing(self) -> bool:
        """Whether this node serves and announces what it fetches (else it only downloads)."""
        return self.shares.enabled

    def watch_shares(self, listener: ShareListener) -> None:
        """Tell `listener` when complete content starts being shared (`ContentShared`) and when it stops
        (`ContentWithdrawn`: linger over, evicted, store failure): for whoever offers it elsewhere too."""
        self.shares.watch(listener)

    @property
    def bytes_uploaded(self) -> int:
        return sum(node.bytes_uploaded for node in self.nodes.values())

    async def probe_reachability(self, peer: tuple[str, int], *,
                                 timeout: float = PROBE_TIMEOUT) -> dict[str, Outcome]:
        """Ask the node at `peer` to connect back to us by every transport we listen by
        (`SwarmNode.probe_reachability`; the session over TCP where we have it): what each came to, by transport name.
        `self.reach.reachability` learns from it."""
        node = self.nodes.get("tcp") or next(iter(self.nodes.values()))
        return await node.probe_reachability(peer, timeout=timeout)

    def reveal(self) -> int:
        """`shown` may answer more than before: HAVE to every served peer for what it may see now
        (`SwarmNode.reveal`); the number sent."""
        return sum(node.reveal() for node in self.nodes.values())

    def stranded(self, root: bytes) -> list[bytes]:
        """Node ids of the peers a fetch of `root` waits on although their requests timed out: they alone hold
        blocks it lacks (`SwarmNode.stranded`), on every transport."""
        return [peer for node in self.nodes.values() for peer in node.stranded(root)]

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
        assert self.address is not None
        self.shares.started(self.address[1])
        for root in self.store.roots():  # content kept from an earlier run is served and announced again
            with contextlib.suppress(StoreError):
                if self.sharing and self.store.complete(root):
                    self.shares.share(self.store.manifest(root))
        return self.address

    async def stop(self) -> None:
        self.shares.stop()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for node in self.nodes.values():
            await node.close()

    def spawn(self, coro) -> asyncio.Task:
        """Background work (announcing, withdrawing) that `settled()` waits for and `stop()` cancels."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def settled(self) -> None:
        """Wait for background work started so far: for tests and orderly shutdown."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    # -- providers ------------------------------------------------------------------------------------------------

    def peers_for(self, manifest: Manifest) -> int:
        """How many peers one download of `manifest` uses: `fetch_peers`, but no more than its blocks and
        PEER_SPARE. Each peer is asked for different blocks, so a 7-block file gains nothing from a 16th
        peer, while each connection costs both sides a handshake and a bitfield (in the lab's 20/s crowd,
        peer connections were about a tenth of a node's CPU)."""
        return self.peers_for_blocks(manifest.num_blocks)

    def peers_for_blocks(self, num_blocks: int) -> int:
        return max(1, min(self.fetch_peers, num_blocks + PEER_SPARE))

    def pick(self, providers: list[Provider], manifest: Manifest) -> list[Provider]:
        """At most `peers_for(manifest)` providers for one download, chosen at random (the best ranked first,
        with `provider_rank`): were it always the first ones found (discovery's answer order), every downloader
        would crowd the same peers."""
        return self._choose(providers, self.peers_for(manifest), self.provider_rank)

    @staticmethod
    def _choose(found: list[T], most: int, rank: Callable[[T], int] | None = None) -> list[T]:
        """At most `most` of `found`: at random, or the lowest `rank` first and at random among equals."""
        if len(found) <= most:
            return list(found)
        chosen = random.sample(found, len(found))
        if rank is not None:
            chosen.sort(key=rank)  # stable: random among equal ranks
        return chosen[:most]

    async def providers(self, root: bytes, enough: int | None = None) -> list[Provider]:
        """Providers of `root` found within `provider_wait` s, stopping at `enough` (default: the pool); never
        this node, nor one we share no transport with. [] without discovery."""
        if self.discovery is None:
            return []
        self.counters.lookups += 1
        enough = enough or max(PROVIDER_POOL, self.fetch_peers)
        own = self.discovery.node_id
        found: dict[bytes, Provider] = {}
        with contextlib.suppress(asyncio.TimeoutError, *self.discovery.errors):
            async with asyncio.timeout(self.provider_wait):
                async with contextlib.aclosing(self.discovery.find_providers(root)) as providers:
                    async for provider in providers:
                        if provider.node_id != own and provider.transports & self.transport_flags:
                            found[provider.node_id] = provider
                            if len(found) >= enough:
                                break
        return list(found.values())

    async def claims(self, key: bytes, *, timeout: float,
                     roots: Callable[[Sequence[Vouch]], Iterable[bytes]] | None = None
                     ) -> tuple[Sequence[Vouch], dict[bytes, list[Provider]]] | None:
        """Every publisher's summary under `key`, and the providers of (up to CLAIM_ROOTS of) the roots they
        name, or of those `roots(summaries)` picks (a caller that will use one root only: none, when no
        manifest is trusted yet, saves a lookup); None without discovery, or when it failed or took more than
        `timeout` s.

        A root's provider lookup stops once it has found as many as one download of it uses (`peers_for`, by its
        summary's size): the storing nodes answer with their records shuffled, so the first found are a random
        few, and the download's refreshes bring in more; waiting for the lookup to end would add its slowest
        storing node's time (a busy host's timeout, in a crowd) to every download's first byte."""
        if self.discovery is None:
            return None
        failures: tuple[type[Exception], ...] = (TimeoutError, *self.discovery.errors)
        self.counters.lookups += 1
        try:
            async with asyncio.timeout(timeout):
                summaries = await self.discovery.get_manifests(key)
                wanted: dict[bytes, int] = {}
                vouchers: Counter[bytes] = Counter()
                for summary in summaries:
                    if summary.content_root != IN_PROGRESS_ROOT and summary.block_size > 0:
                        blocks = block_count(summary.size, summary.block_size)
                        wanted.setdefault(summary.content_root, self.peers_for_blocks(blocks))
                        vouchers[summary.content_root] += 1
                if roots is not None:  # the caller's pick, however few vouch for it
                    candidates = [root for root in dict.fromkeys(roots(summaries)) if root in wanted][:CLAIM_ROOTS]
                else:  # the most vouched-for first: one a quorum may accept is not crowded out by a liar's many
                    candidates = [root for root, _ in vouchers.most_common(CLAIM_ROOTS)]
                providers = await asyncio.gather(*(self.providers(root, wanted[root]) for root in candidates))
        except failures as exc:
            log.info("manifest lookup of %s failed: %s", key.hex()[:16], str(exc) or type(exc).__name__)
            return None
        return summaries, {root: _with_vouchers(found, root, summaries) for root, found in zip(candidates, providers)}

    def claim_in_progress(self, key: bytes, size: int, block_size: int, validator: bytes) -> None:
        """Say under `key` that this node is fetching that representation from its origin now and will vouch
        for it (`IN_PROGRESS_ROOT`), so that a newcomer can wait for the vouches instead of asking the origin
        too. Ended by `end_in_progress(key)` or replaced by the real claim when `share` vouches."""
        if self.discovery is None or not self.sharing:
            return
        claim = ManifestClaim(IN_PROGRESS_ROOT, size, block_size, validator)
        self.counters.claims += 1
        self.shares.forget_vouch(key)  # the claim takes our slot under `key`: a later share must vouch again
        self._chain_claim(key, lambda discovery: discovery.put_manifest(key, claim, ttl=IN_PROGRESS_TTL))

    def end_in_progress(self, key: bytes) -> None:
        """Withdraw this node's in-progress claim under `key` (it will not vouch after all)."""
        if self.discovery is not None and self.sharing:
            self._chain_claim(key, lambda discovery: discovery.withdraw_manifest(key))

    def _chain_claim(self, key: bytes, call: Callable[[Discovery], Any]) -> None:
        """Run `call` after the previous claim work under `key`: a withdrawal must not overtake its put."""
        previous, discovery = self._claims.get(key), self.discovery
        assert discovery is not None

        async def run() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            try:
                await call(discovery)
            except discovery.errors as exc:
                log.info("an in-progress claim under %s failed: %s", key.hex()[:16], exc)

        task = self.spawn(run())
        self._claims[key] = task
        task.add_done_callback(lambda done: self._claims.pop(key) if self._claims.get(key) is done else None)

    def transport_for(self, provider: Provider) -> str:
        """"tcp" or "quic": the transport to reach `provider` by, among those both sides offer (QUIC where we
        punched a way to it lately: `punch`)."""
        if "quic" in self.nodes and self.punched and self.punched.fresh(provider.address, self._now()):
            return "quic"  # (whatever the directory said: it kept a QUIC rendezvous, and only QUIC passes now)
        both = provider.transports & self.transport_flags
        if both & TransportFlags.TCP and (prefers_tcp(provider.host) or not both & TransportFlags.QUIC):
            return "tcp"
        return "quic"

    def node_for(self, address: tuple[str, int]) -> SwarmNode:
        """The node to ask `address` a query by: QUIC where we punched a way to it lately, else TCP where we speak
        it (a Mainline entry names a port, not a transport; ours serve both on one port number)."""
        if "quic" in self.nodes and self.punched and self.punched.fresh(address, self._now()):
            return self.nodes["quic"]
        return self.nodes.get("tcp") or next(iter(self.nodes.values()))

    async def punch(self, coordinators: Sequence[tuple[str, int]], address: tuple[str, int]) -> bool:
        """Ask each of `coordinators` in turn (nodes that answered us lately) to introduce us to the node whose
        rendezvous with it comes from `address`, until one does (`swarm.service.punch`): then `address` is reached
        by QUIC from our listener's socket for a while (`PunchedPaths`). False if none did, or we have no QUIC
        listener (only it can punch)."""
        node = self.nodes.get("quic")
        if node is None or node.listener is None:
            return False
        for coordinator in coordinators:
            try:
                await node.punching.request(node, coordinator, address)
            except (PeerError, TransportError, TimeoutError, OSError, ValueError) as exc:  # (ValueError: not an IP)
                log.debug("no punch to %s:%d through %s:%d: %s", *address, *coordinator, str(exc) or type(exc).__name__)
                continue
            self.punched.add(address, self._now())
            return True
        return False

    def _now(self) -> float:
        return (self._loop or asyncio.get_running_loop()).time()

    async def full_manifest(self, root: bytes, providers: list[Provider]) -> Manifest | None:
        """The manifest of `root`: from the store, else from one of the first providers (checked against
        the root by `SwarmNode.fetch_manifest`); None if none gives it."""
        if root in self.store:
            with contextlib.suppress(StoreError):
                return self.store.manifest(root)
        for provider in providers[:4]:
            with contextlib.suppress(FetchFailed, PeerError, TransportError, SwarmError, OSError):
                node = self.nodes[self.transport_for(provider)]
                return await node.fetch_manifest(root, [provider.address], timeout=3.0)
        return None

    # -- fetching -------------------------------------------------------------------------------------------------

    def fetch(self, manifest: Manifest, providers: list[Provider], *, layer: list[bytes] | None = None,
              origin: RangeSource | None = None, start: int = 0, end: int | None = None,
              stall_timeout: float = FETCH_STALL_TIMEOUT, report=None, window: int | None = None,
              into_store: bool = False, rng: random.Random | None = None, distance=None,
              policy: PolicyConfig | None = None,
              priority: Callable[[bytes], bool] | None = None) -> AsyncGenerator[bytes, None]:
        """Verified bytes `start..end-1` of `manifest`'s content in order, from `providers` (over one
        transport), more providers as they appear, and `origin` as a capped Range source.

        `window`, `into_store`, `rng`, `distance`, `policy` and `priority` go to `SwarmNode.fetch` (its defaults
        when not given)."""
        by_transport: dict[str, list[Provider]] = {}
        for provider in providers:
            by_transport.setdefault(self.transport_for(provider), []).append(provider)
        # One fetch runs over one transport: the one most providers are reached by.
        name = max(by_transport, key=lambda n: len(by_transport[n])) if by_transport else next(iter(self.nodes))
        peers = [p.address for p in by_transport.get(name, [])]
        node = self.nodes[name]
        self.shares.fetching(manifest)
        engine = {} if window is None else {"window": window}
        chunks = node.fetch(manifest, peers, layer=layer, origin=origin, start=start, end=end,
                            stall_timeout=stall_timeout, report=report, into_store=into_store, rng=rng,
                            distance=distance, policy=policy, priority=priority, **engine)
        if self.discovery is None:
            return chunks
        return self._refreshed(chunks, node, name, manifest.root, set(peers), self.peers_for(manifest))

    async def _refreshed(self, chunks: AsyncIterator[bytes], node: SwarmNode, transport: str, root: bytes,
                         known: set[tuple[str, int]], wanted: int) -> AsyncGenerator[bytes, None]:
        """`chunks`, while providers that appeared since the lookup join the fetch: in a flash crowd the first
        lookups find the first two or three copies, and everyone crowding them would wait."""
        refresher = asyncio.ensure_future(self.refresh_providers(node, transport, root, known, wanted))
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
            await chunks.aclose()  # type: ignore[attr-defined]

    async def refresh_providers(self, node: SwarmNode, transport: str, root: bytes,
                                known: set[tuple[str, int]], wanted: int) -> None:
        """New providers join the fetch: at `provider_refresh`'s times (`refresh_waits`: the first sooner for a
        fetch that starts with fewer than `wanted`), up to `wanted` (`peers_for`) at a time and
        PROVIDER_POOL in all; then, for as long as the fetch runs, every `provider_topup` s while it has fewer
        than `wanted` peers. A long download in a crowd loses peers (done and gone, or dropped as unresponsive);
        one left with none took the rest from the origin alone, at its share of the origin's rate. An address
        once tried is never tried again: it may have been dropped for lying."""
        for wait in refresh_waits(self.provider_refresh, len(known), wanted):
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

    async def _fresh(self, root: bytes, transport: str, known: set[tuple[str, int]]) -> list[Provider]:
        return [p for p in await self.providers(root)
                if p.address not in known and self.transport_for(p) == transport]

    def _join(self, node: SwarmNode, root: bytes, fresh: list[Provider], most: int,
              known: set[tuple[str, int]]) -> None:
        joining = [p.address for p in self._choose(fresh, most, self.provider_rank)]
        known.update(joining)
        if joining and node.add_peers(root, joining):
            log.debug("%d more provider(s) join the fetch of %s", len(joining), root.hex()[:16])

    # -- sharing (swarm.service.shares) ----------------------------------------------------------------------------

    def share(self, manifest: Manifest, *, vouch: bytes | None = None) -> None:
        """`manifest`'s content is complete in the store: serve and announce it for `linger` s, and vouch for
        it under the key `vouch` if given (only for bytes from its origin: a node that got them from peers
        never vouches)."""
        self.shares.share(manifest, vouch=vouch)

    def completed(self, manifest: Manifest) -> None:
        """A fetch finished: if the content is complete in the store, be a provider of it (never a publisher)."""
        with contextlib.suppress(StoreError):
            if self.store.complete(manifest.root):
                self.shares.share(manifest)

    def abandon(self, root: bytes) -> None:
        """A fetch ended incomplete: stop serving and announcing its partial content, and drop it."""
        self.shares.abandon(root)

    def fetch_over(self, root: bytes) -> None:
        """After a fetch's store work: withdraw and drop a root announced while fetching that did not end up
        shared complete."""
        self.shares.fetch_over(root)

    def withdraw(self, root: bytes, why: str) -> None:
        """Stop serving and announcing `root` (the store keeps it)."""
        self.shares.withdraw(root, why)

    def _on_store_event(self, event: object) -> None:
        # Listeners may run in the store's writer thread: hop back to the loop.
        if self._loop is not None and isinstance(event, (Evicted, StoreFailed)) and event.root is not None:
            why = "evicted" if isinstance(event, Evicted) else f"the store failed: {event.error}"
            self._loop.call_soon_threadsafe(self._forget, event.root, why)

    def _forget(self, root: bytes, why: str) -> None:
        if self.on_forget is not None:
            self.on_forget(root)
        self.shares.withdraw(root, why)

    # -- store work (swarm.service.store_work) -------------------------------------------------------------------------

    def stored_as(self, manifest: Manifest, layer: list[bytes]) -> tuple[Manifest, list[bytes]]:
        """The manifest and layer to store a body of `manifest` by (that of an entry of the same root in
        another block size, if the store has one)."""
        return in_block_size_stored(self.store, manifest, layer)

    async def in_thread(self, root: bytes, work: Callable[[threading.Event], T]) -> T:
        """`work(stop)` filling the store's entry of `root`, in a worker thread (see `store_work.in_thread`)."""
        return await in_thread(self.store, root, work)

    async def complete_prefix(self, manifest: Manifest, body: Body, upto: int) -> bool:
        """After a fetch from `upto` on, add the blocks before it from `body`; False if they do not verify
        (the manifest disagrees with the body: then nothing is shared) or cannot be stored."""
        try:
            return await self.in_thread(manifest.root, lambda stop: fill_prefix(self.store, manifest, body, upto, stop))
        except (StoreError, OSError, ValueError) as exc:
            log.info("cannot complete %s in the store: %s", manifest.root.hex()[:16], exc)
            return False

    def status(self) -> dict:
        return {
            "peer": None if self.address is None else f"{self.address[0]}:{self.address[1]}",
            "transports": sorted(self.nodes),
            "sharing": self.sharing,
            "linger_s": self.shares.linger,
            "shared": len(self.shares.lingering),
            "bytes_uploaded": self.bytes_uploaded,
            "lookups": self.counters.lookups,
            "announced": self.counters.announced,
            "published": self.counters.published,
            "claims": self.counters.claims,
            "stored_bytes": self.store.used,
        }
