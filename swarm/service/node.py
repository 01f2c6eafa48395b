"""A block-engine node: the asyncio shell around `FetchCore` and `ServeCore`.

    node = SwarmNode(store, transport)
    address = await node.start("127.0.0.1", 0)        # serve what the store shares
    manifest = await node.seed_file(path)              # hash a file, store it, share it
    async for chunk in node.fetch(manifest, peers=[...], origin=range_source):
        ...                                            # verified bytes, in order

Everything that decides lives in the cores; this module moves bytes and time. Store writes run in a
thread (`asyncio.to_thread`), batched: creating an entry fsyncs and a write can stall behind writeback. Reads are
inline (page cache). Verified blocks are kept in memory only until they are written and delivered; if the
store cannot take them (disk full), the fetch still completes from memory and the content is simply not
shared.

**Write backpressure.** Peers can deliver faster than the store writes (four seeds on loopback do). Once
`max_pending_writes` bytes of verified blocks wait for the store writer, a fetch stops taking messages from its
peers until the writer is below the bound again: the transports then stop reading (`receive_limit`) and the
peers' sends block, so memory stays bounded instead of growing by the difference of the two rates. While it is
paused, the FetchCore's clock stands still (`_FetchRun.now`, `swarm.service.fetch_run`): a request is not declared timed
out because *we* were not reading the reply. Origin ranges already requested still arrive (at most
`origin_max_outstanding`).

**Serving, bounded.** The peer port is open to anyone who finds a content root in the DHT, so what one peer —
or many — can make the node hold is bounded:

* slots (`swarm.core.slots.SlotPolicy`): `max_peers` connections, counted from their arrival, not their handshake;
  when all are taken the least useful one (idle longest, downloaded least recently) makes room for a newcomer,
  and an address or network holding more than its share of the slots makes room first, downloading or not;
* time (`swarm.core.serve`): a handshake timeout, an idle timeout, and a stall timeout for a peer that does not
  read what it asked for;
* requests: at most `MAX_QUEUED_REQUESTS` wait per peer and `MAX_SENDS_IN_FLIGHT` are being sent;
* backpressure: a peer whose send buffer is over its bound is not read from until it drains — so requests,
  hash-layer and manifest requests (each answered by up to 512 KiB) cannot queue replies without limit — and
  what waits unread is bounded by the transport's `accepted_receive_limit`, the rest left in the peer's socket;
* bytes: a BLOCK is received only in answer to our own REQUEST (`swarm.net.transport`), so nothing a peer announces
  is allocated before it arrives.

**Claims, asked directly.** A discovery backend that stores only addresses under a key (BitTorrent's Mainline
DHT) sends whoever looks a key up to the nodes that vouch for it, to ask each over this protocol: `ask_claims`
opens a query session (`swarm.net.wire`, "Query sessions") and asks for the peer's own claims under one key, and
the node answers such sessions from `own_claims` (`swarm.discovery.own_claims.OwnClaims`, on the wall clock). A
query session is served like any connection: it takes a slot and has the same timeouts (`swarm.core.serve`).

**Reachability.** Whether strangers can reach the peer port (most nodes are behind a NAT) is learnt by asking peers
to connect back (`probe_reachability`) and from strangers' connections, and this node connects back for others
within bounds; `reach` (`swarm.service.reach.Reach`, shared by the node of every transport) does both, and
`reachability` (`swarm.core.reachability.Reachability`) is what was learnt: whether to announce the port, and why.

**Extension points** (the proxy uses none of them; they are for the cluster mode):

* `shown` (`swarm.core.serve.Shown`): what each served peer is shown of a root (BITFIELD, HAVE, START) and may
  ask for, by the node id of its handshake; `reveal()` asks again for every served peer after the caller's
  answer changed (what was shown is never taken back);
* `upload_throttle(connection)` (`UploadThrottle`): the `swarm.core.throttle.Throttle` a BLOCK to a served peer
  is taken from, or None (the default): unlimited. The cluster mode's per-level throttle groups, without wrapping
  the connection. Asked for every BLOCK (a peer's level may be learnt late), once its payload is read; the send
  then waits, in its own task, until `consume(its bytes on the wire, loop time)` succeeds (`on_the_wire`: an
  upload cap is a link's rate), sleeping `delay_for` between
  tries, and is dropped if the connection closes meanwhile. Unlike the node's own `upload_rate` (which the
  `ServeCore` paces before a send starts), such a wait counts as a send in flight: a peer kept waiting longer than
  the stall timeout (`swarm.core.serve.STALL_TIMEOUT`) is closed as not reading;
* `links()`: every live connection with the peer's address and node id, the root and the direction, and its
  `swarm.net.transport.ConnectionCounters` (the BLOCK bytes it carried each way). A caller that must not lose the
  last bytes of a connection that closes between two looks keeps the `Connection.counters` of those it is shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import secrets
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from typing import cast

from swarm.content.manifest import Manifest
from swarm.core.claimers import ClaimerBook
from swarm.core.policy import PolicyConfig
from swarm.core.reachability import Outcome, Reachability
from swarm.core.serve import (
    HANDSHAKE_TIMEOUT,
    ClaimersAsked,
    ConnectBack,
    ProofArrived,
    SendBlock,
    ServeCore,
    Shared,
    Shown,
)
from swarm.core.serve import Close as ServeClose
from swarm.core.serve import Send as ServeSend
from swarm.core.slots import Evict, Refuse, SlotPolicy
from swarm.core.throttle import Throttle, on_the_wire, rate_cap
from swarm.discovery.own_claims import OwnClaims
from swarm.errors import FetchFailed, NotInStore, PeerError, StoreError, TransportError
from swarm.net import wire
from swarm.net.transport import (
    CONNECT_TIMEOUT,
    Address,
    Connection,
    ConnectionCounters,
    Listener,
    Transport,
    payload_length,
)
from swarm.service.claims_query import ClaimsAnswer, answer_claimers, ask_claims
from swarm.service.fetch_run import RangeSource, _FetchRun
from swarm.service.manifest_query import fetch_manifest
from swarm.service.punch import Introduce, Punching
from swarm.service.reach import PROBE_TIMEOUT, Reach
from swarm.service.report import FetchReport
from swarm.service.store_work import stored_file
from swarm.store.interface import BlockLocation, BlockStore, Evicted, StoreEvent, StoreFailed

__all__ = ["SwarmNode", "FetchFailed", "Link", "UploadThrottle", "FETCH_STALL_TIMEOUT"]

log = logging.getLogger("swarmproxy.swarm")

#: `upload_throttle(connection)`: what a BLOCK sent on that served connection is taken from; None: unlimited.
UploadThrottle = Callable[[Connection], Throttle | None]

# A fetch that verifies no block from any source, peers or the origin, for this long fails (FetchFailed), so that
# its caller goes elsewhere: the proxy's download reopens the origin at a Range, `swarm get` exits. 30 s lets the
# largest block (MAX_BLOCK_SIZE, 4 MiB) arrive from one source at the rate under which the proxy calls an origin
# slow (R, 160 000 B/s: 26 s), yet a download whose sources all fell silent is back at its origin within half a
# minute. The one default of SwarmNode.fetch, SwarmService.fetch, the proxy's engine and `swarm get --timeout`;
# the cluster agent passes its own (cluster.run.STALL_TIMEOUT), and a served peer that does not read is another
# timer (swarm.core.serve.STALL_TIMEOUT).
FETCH_STALL_TIMEOUT = 30.0

# A throttle may refuse and yet name no delay: a `ThrottleGroup` member queued behind one that has not come back
# for its turn. Polling at this pace until it does (or loses its place) keeps that from spinning the loop.
THROTTLE_POLL = 0.001


@dataclasses.dataclass(frozen=True)
class Link:
    """One live connection of a node (`SwarmNode.links`)."""

    address: Address  # the peer's
    peer: bytes | None  # the node id its handshake gave; None before it
    root: bytes | None  # the content it is about; None before the handshake
    serving: bool  # it connected to us and we serve it; else we opened it to fetch
    counters: ConnectionCounters


class SwarmNode:
    def __init__(
        self,
        store: BlockStore,
        transport: Transport,
        *,
        node_id: bytes | None = None,
        upload_rate: float | None = None,
        max_peers: int = 64,
        policy: PolicyConfig | None = None,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        max_pending_writes: int = 32 * 1024 * 1024,
        shown: Shown | None = None,
        upload_throttle: UploadThrottle | None = None,
        own_claims: OwnClaims | None = None,
        reach: Reach | None = None,
    ) -> None:
        """`shown`: what a served peer is shown (module docstring; None, the default: everything).
        `upload_throttle`: what each BLOCK to a served peer is taken from (module docstring; None, the default:
        unlimited). `own_claims`: this node's own claims, answered to query sessions (module docstring; None, the
        default: a table of its own, empty until the caller puts claims in `self.own_claims`). `reach`: the
        connect-backs' shell (module docstring; None: one of its own, for the public network only)."""
        self.store = store
        self.own_claims = own_claims if own_claims is not None else OwnClaims()
        self.claimers = ClaimerBook()  # the other claimers that asked us, passed on (`swarm.core.claimers`)
        self.shown = shown
        self.upload_throttle = upload_throttle
        self.transport = transport
        self.node_id = node_id or secrets.token_bytes(32)
        self.upload = rate_cap(upload_rate)  # on the wire (`swarm.core.throttle.WIRE_OVERHEAD`)
        self.max_peers = max_peers
        self.slots = SlotPolicy(max_peers)  # every connection we serve, from its arrival
        self.policy = policy
        self.handshake_timeout = handshake_timeout
        self.max_pending_writes = max_pending_writes  # bytes verified and waiting for the store, per fetch
        self.listener: Listener | None = None
        self._shared: set[bytes] = set()
        self._serving: dict[bytes, dict[Connection, ServeCore]] = {}
        self._fetching: dict[bytes, _FetchRun] = {}
        self._answered: dict[Connection, bytes] = {}  # connections we opened -> the node id the peer answered with
        self._tasks: set[asyncio.Task] = set()
        self._accept_task: asyncio.Task | None = None
        self.bytes_uploaded = 0
        self.fetch_totals = FetchReport()  # totals over finished fetches, for metrics
        store.add_listener(self._on_store_event)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.reach = reach if reach is not None else Reach()
        self.reach.attach(self)
        self.punching = Punching()  # hole punching (`swarm.service.punch`): for tests and labs, replace it

    @property
    def reachability(self) -> Reachability:
        """What this node learnt of strangers reaching its peer port (module docstring)."""
        return self.reach.reachability

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> Address:
        self._loop = asyncio.get_running_loop()
        self.listener = await self.transport.listen(host, port)
        self.reach.listening(self.transport.name, self.listener.address, self._loop.time())
        self._accept_task = asyncio.create_task(self._accept_loop(self.listener))
        return self.listener.address

    async def close(self) -> None:
        if self.listener is not None:
            await self.listener.aclose()
        tasks = [t for t in (self._accept_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for connections in self._serving.values():
            for connection in connections:
                connection.abort("node closing")

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- sharing ------------------------------------------------------------------------------------------------

    def share(self, root: bytes) -> None:
        self._shared.add(root)

    def unshare(self, root: bytes) -> None:
        self._shared.discard(root)
        for connection, core in list(self._serving.pop(root, {}).items()):
            self._apply_serve(connection, core, core.on_unshared())

    def _lookup(self, root: bytes) -> Shared | None:
        if root not in self._shared:
            return None
        try:
            if root in self.store.roots():
                if not self.store.shareable(root):
                    return None
                return Shared(self.store.manifest(root), self.store.hash_layer(root), self.store.have(root))
        except StoreError:
            return None
        run = self._fetching.get(root)
        if run is not None:
            # Being fetched, nothing stored yet: peers may connect now and hear HAVE as blocks arrive.
            manifest = run.manifest
            return Shared(manifest, run.core.layer or (), wire.Bitfield.from_blocks(manifest.num_blocks, ()))
        return None

    def _on_store_event(self, event: StoreEvent) -> None:
        # Listeners may run in the store's writer thread: hop back to the loop.
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._store_event, event)

    def _store_event(self, event: StoreEvent) -> None:
        if isinstance(event, (Evicted, StoreFailed)) and event.root is not None:  # (a store-wide failure names none)
            why = "evicted" if isinstance(event, Evicted) else f"the store failed: {event.error}"
            log.warning("content %s is no longer shared: %s", event.root.hex()[:16], why)
            self.unshare(event.root)

    def announce_block(self, root: bytes, block: int) -> None:
        """A fetch of `root` verified `block`: tell the peers we serve it to (a HAVE)."""
        for connection, core in list(self._serving.get(root, {}).items()):
            self._apply_serve(connection, core, core.on_new_block(block))

    def announce_origin_fetch(self, root: bytes, block: int) -> None:
        """A fetch of `root` asks the origin for `block`: tell the peers we serve it to (a START)."""
        for connection, core in list(self._serving.get(root, {}).items()):
            self._apply_serve(connection, core, core.on_origin_fetch(block))

    def reveal(self) -> int:
        """`shown` may answer more than before: every served peer hears HAVE for the blocks it may see now and was
        not shown yet. The number of HAVEs sent."""
        sent = 0
        for served in list(self._serving.values()):
            for connection, core in list(served.items()):
                actions = core.on_view_changed()
                sent += len(actions)
                self._apply_serve(connection, core, actions)
        return sent

    def links(self) -> list[Link]:
        """Every live connection that got past its handshake: the peers we serve, and those we fetch from."""
        links = [Link(c.remote_address, core.peer, root, True, c.counters)
                 for root, served in self._serving.items() for c, core in served.items()]
        for root, run in self._fetching.items():
            links += [Link(c.remote_address, self.peer_id(c), root, False, c.counters) for c in run.connections]
        return links

    def peer_id(self, connection: Connection) -> bytes | None:
        """The node id the peer answered our HANDSHAKE with on a connection we opened (`open_connection`) and that
        is still open; None otherwise."""
        return self._answered.get(connection)

    async def seed_file(self, path: str | os.PathLike, *, block_size: int | None = None) -> Manifest:
        """Hash `path`, put it in the store (`swarm.service.store_work.stored_file`: adopted as it is where the
        store can) and share it. Returns its manifest."""
        manifest = await stored_file(self.store, path, block_size)
        self.share(manifest.root)
        return manifest

    # -- serving ------------------------------------------------------------------------------------------------

    async def _accept_loop(self, listener: Listener) -> None:
        loop = asyncio.get_running_loop()
        async for connection in listener:
            refused = False
            for action in self.slots.admit(connection, loop.time(), connection.remote_address[0]):
                if isinstance(action, Refuse):
                    refused = True
                    connection.abort(action.reason)
                elif isinstance(action, Evict):
                    log.info("closing %s: %s", action.peer, action.reason)
                    cast(Connection, action.peer).abort(action.reason)  # the core's peers are our connections
            if not refused:
                self._spawn(self._serve(connection))

    async def _serve(self, connection: Connection) -> None:
        loop = asyncio.get_running_loop()
        core = ServeCore(self.node_id, self._lookup, upload=self.upload, now=loop.time(),
                         handshake_timeout=self.handshake_timeout, shown=self.shown, claims=self._own_claims)
        receiving: asyncio.Future | None = None
        draining: asyncio.Future | None = None
        told = False  # whether `reach` heard of it yet (a stranger's connection, or a connect-back)
        try:
            while connection.close_reason is None:
                if connection.buffered > connection.send_limit:  # it is not taking our replies: stop reading it
                    waiting = draining = draining or asyncio.ensure_future(connection.drain())
                else:
                    waiting = receiving = receiving or asyncio.ensure_future(connection.receive())
                deadline = core.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait({waiting}, timeout=timeout)
                if not done:
                    self._apply_serve(connection, core, core.on_timer(loop.time()))
                elif waiting is draining:
                    draining = None
                    if waiting.exception() is not None:  # ConnectionClosed
                        return
                else:
                    message, receiving = waiting.result(), None
                    if message is None:
                        return
                    was_new = core.root is None
                    self._apply_serve(connection, core, core.on_message(message, loop.time()))
                    if was_new and core.root is not None and not core.query:  # (a query is about no content)
                        self._serving.setdefault(core.root, {})[connection] = core
                    if was_new and core.query:  # (a coordinator may introduce it)
                        self.punching.registered(connection)
                    if not told and core.root is not None and not (was_new and core.query):  # (a query session:
                        told = True  # known by what follows its HANDSHAKE, a REACH_PROOF or not)
                        if not core.connect_back:
                            self.reach.inbound(self.transport.name, connection, loop.time())
        finally:
            for task in (receiving, draining):
                if task is not None:
                    task.cancel()
            if core.root is not None:
                self._serving.get(core.root, {}).pop(connection, None)
            self.punching.ended(connection)
            self.slots.release(connection)
            connection.abort("served")

    def _own_claims(self, key: bytes) -> Sequence[wire.ClaimEntry]:
        now = time.time()  # the claims' clock (`OwnClaims`), not the loop's that times the connection
        return [wire.ClaimEntry(own.claim, own.age_ms(now), own.seconds_left(now))
                for own in self.own_claims.get(key, now)]

    def _apply_serve(self, connection: Connection, core: ServeCore, actions: list) -> None:
        for action in actions:
            if isinstance(action, ServeSend):
                with contextlib.suppress(TransportError):
                    connection.send_nowait(action.message)
            elif isinstance(action, SendBlock):
                self._spawn(self._serve_block(connection, core, action))
            elif isinstance(action, ServeClose):
                log.debug("closing %s: %s", connection, action.reason)
                connection.close(action.reason)
            elif isinstance(action, ConnectBack):
                self._spawn(self.reach.connect_back(connection, action))
            elif isinstance(action, ProofArrived):
                self.reach.proof_arrived(self.transport.name, connection, action.proof)
            elif isinstance(action, Introduce):
                self.punching.introduce(connection, action, asyncio.get_running_loop().time())
            elif isinstance(action, ClaimersAsked):
                with contextlib.suppress(TransportError):
                    connection.send_nowait(answer_claimers(self.claimers, self.own_claims, connection, action,
                                                           asyncio.get_running_loop().time()))

    async def _serve_block(self, connection: Connection, core: ServeCore, action: SendBlock) -> None:
        await self._send_block(connection, core, action)
        if connection.close_reason is None:  # the connection took it: the peer is downloading
            now = asyncio.get_running_loop().time()
            self.slots.downloaded(connection, now)
            self._apply_serve(connection, core, core.on_sent(now))

    async def _send_block(self, connection: Connection, core: ServeCore, action: SendBlock) -> None:
        root = core.root
        assert root is not None
        try:
            location = self.store.block_location(root, action.block)
            if location is not None:
                payload: bytes | BlockLocation = BlockLocation(location.path, location.offset + action.offset,
                                                               action.length)
            else:
                data = self.store.read_block(root, action.block)
                payload = data[action.offset:action.offset + action.length]
            # Asked per block, after the read: a block not in the store takes nothing from the throttle.
            throttle = None if self.upload_throttle is None else self.upload_throttle(connection)
            if throttle is not None and not await self._throttled(connection, throttle,
                                                                  on_the_wire(payload_length(payload))):
                return  # closed while it waited: nothing to send, and nobody to tell
            await connection.send_block(action.block, action.offset, payload)
            self.bytes_uploaded += action.length
        except NotInStore:
            with contextlib.suppress(TransportError):
                connection.send_nowait(wire.Reject(action.block, action.offset, action.length,
                                                   wire.RejectReason.NOT_FOUND))
        except (TransportError, StoreError, OSError) as exc:
            log.debug("sending block %d to %s failed: %s", action.block, connection, exc)
            connection.abort(str(exc))

    @staticmethod
    async def _throttled(connection: Connection, throttle: Throttle, size: int) -> bool:
        """Wait until `throttle` lets `size` bytes go (True), or the connection closes (False). Only this send's
        task waits: the connection's other sends and every other connection go on."""
        loop = asyncio.get_running_loop()
        while connection.close_reason is None:  # checked first: a closed connection takes no tokens
            now = loop.time()
            if throttle.consume(size, now):
                return True
            # `closed` resolves when the connection is gone, so a wait of minutes does not outlive it.
            await asyncio.wait((connection.closed,), timeout=throttle.delay_for(size, now) or THROTTLE_POLL)
        return False

    # -- fetching -----------------------------------------------------------------------------------------------

    async def fetch_manifest(self, root: bytes, peers: Iterable[Address], *,
                             timeout: float = CONNECT_TIMEOUT) -> Manifest:
        """Ask peers for the manifest of `root`; the first one whose manifest has that root wins
        (`swarm.service.manifest_query.fetch_manifest`)."""
        return await fetch_manifest(self.open_connection, root, peers, timeout=timeout)

    async def ask_claims(self, address: Address, key: bytes, *, timeout: float = CONNECT_TIMEOUT,
                         claiming: tuple[int, int] | None = None) -> ClaimsAnswer:
        """The claims the node at `address` makes itself under `key` and the other claimers it heard of, saying
        `claiming` (our port and transports) if we claim there too (`swarm.service.claims_query.ask_claims`)."""
        return await ask_claims(self.open_connection, address, key, timeout=timeout, claiming=claiming)

    async def probe_reachability(self, peer: Address, *, transports: wire.Transport | None = None,
                                 timeout: float = PROBE_TIMEOUT, port: int | None = None) -> dict[str, Outcome]:
        """Ask the node at `peer` to connect back to us (by `transports`, default every one we listen by; to
        `port`, default ours: another only for tests); what each connect-back came to, by transport name, which
        `reachability` learns from (`swarm.service.reach.Reach.probe`). Never raises for what the peer does."""
        return await self.reach.probe(self, peer, transports=transports, timeout=timeout, port=port)

    async def open_connection(self, address: Address, root: bytes, timeout: float) -> Connection:
        """Connect and exchange handshakes for `root` (`wire.QUERY_ROOT`: a query session, `ask_claims`); the
        peer's BITFIELD is left for the caller."""
        connection = await self.transport.connect(address, timeout=timeout)
        try:
            connection.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, self.node_id, root))
            async with asyncio.timeout(timeout):
                answer = await connection.receive()
            if answer is None:
                raise PeerError(f"closed the connection ({connection.close_reason})")
            if not isinstance(answer, wire.Handshake) or answer.root != root:
                raise PeerError(f"answered {type(answer).__name__} instead of a HANDSHAKE for our root")
            if answer.node_id == self.node_id:
                raise PeerError("that is this node itself")
            self._answered[connection] = answer.node_id
            connection.closed.add_done_callback(lambda _closed: self._answered.pop(connection, None))
            return connection
        except BaseException:
            connection.abort("handshake failed")
            raise

    async def fetch(
        self,
        manifest: Manifest,
        peers: Iterable[Address] = (),
        *,
        origin: RangeSource | None = None,
        layer: list[bytes] | None = None,
        start: int = 0,
        end: int | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        stall_timeout: float = FETCH_STALL_TIMEOUT,
        window: int = 8,
        into_store: bool = False,
        report: FetchReport | None = None,
        rng: random.Random | None = None,
        distance: Callable[[Connection], int] | None = None,
        policy: PolicyConfig | None = None,
        priority: Callable[[bytes], bool] | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """Bytes `start..end-1` of `manifest`'s content, verified and in order, from `peers` and `origin`.

        Blocks the store already holds are used as they are; new blocks go into the store (and are served
        to others while the root is shared). `window` blocks after the delivery point are fetched first
        (streaming); beyond it, rarest first. Raises FetchFailed when no source is left, or when nothing
        verifies for `stall_timeout` seconds.

        `into_store=True` is for a consumer that wants the content in the store rather than in memory
        (`swarm get` takes the store's file as its output): a block is handed over only once the store has
        taken or refused it; one the store holds comes as `b""` (its bytes are not kept in memory, however
        far ahead of the delivery point it arrived), one it refused (disk full) as its bytes.

        `report`, if given, gets the fetch's counts added when it stops (`FetchReport`). `rng` orders the
        picker's ties (random by default). `distance(connection)` (0 = nearest), if given, turns on work stealing
        by START across distances (`swarm.core.starts`: the cluster mode's racks and datacenters). `policy`
        replaces the node's request policy for this fetch (a BitTorrent swarm as its Range source needs more
        than the origin's two requests in flight). `priority(node_id)`, if given, marks the peers the others make
        room for (`PolicyConfig.priority_others`: the cluster's pusher), by the node id their handshake gave.
        """
        end = manifest.size if end is None else end
        if not 0 <= start <= end <= manifest.size:
            raise ValueError(f"range {start}..{end} outside 0..{manifest.size}")
        if start == end:
            return
        run = _FetchRun(self, manifest, layer, start, end, origin, window, into_store, rng, distance, policy,
                        priority)
        run.report = report
        self._fetching.setdefault(manifest.root, run)
        run.begin(peers, connect_timeout, stall_timeout)
        try:
            async for chunk in run.chunks():
                yield chunk
        finally:
            if self._fetching.get(manifest.root) is run:
                del self._fetching[manifest.root]
            await run.stop()

    def add_peers(self, root: bytes, peers: Iterable[Address], *, connect_timeout: float = CONNECT_TIMEOUT) -> int:
        """More peers for the fetch of `root` under way (providers that appeared since it began); the number
        of connections started, 0 when no fetch of `root` runs."""
        run = self._fetching.get(root)
        if run is None or run.done or run.failure:
            return 0
        started = 0
        for address in peers:
            run.pending_connects += 1
            run.spawn(run.peer(address, connect_timeout))
            started += 1
        return started

    def stranded(self, root: bytes) -> list[bytes]:
        """Node ids of the peers the fetch of `root` waits on although their requests timed out: they alone
        hold blocks it lacks (`swarm.core.fetch.FetchCore.stranded`); empty when no fetch of `root` runs."""
        run = self._fetching.get(root)
        return [] if run is None or run.done else run.stranded()

    def peer_count(self, root: bytes) -> int | None:
        """Peers the fetch of `root` is connected or connecting to; None when no fetch of `root` runs."""
        run = self._fetching.get(root)
        if run is None or run.done or run.failure:
            return None
        return len(run.connections) + run.pending_connects
