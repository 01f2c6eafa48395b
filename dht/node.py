"""`DhtNode`: the asyncio shell that ties identity, routing, storage, admission and lookups to one UDP socket.

Decisions live in the pure cores (`responder.Responder`, `storage.RecordStore`,
`admission.RateLimiter`/`WriteTokens`, `lookup.Lookup`, `announcements.AnnouncementSchedule`); this module only
moves bytes and arms timers. Its settings are `dht.config.DhtConfig` (importable from here too).

Request handling is synchronous (no task per datagram), so a handler cannot leave a failed task behind; the
datagram protocol contains any exception. Lookups send `alpha` queries at a time with a short per-RPC timeout
and stop at an overall deadline. A contact that leaves two requests in a row unanswered is dropped from the
routing table when a replacement waits or when this node is heard by the others it asks
(`RoutingTableFacade.unanswered`), which keeps lookups away from dead nodes without losing good contacts to
one lost datagram, nor to this node's own full link.

Two clocks: records carry wall-clock timestamps (`clock`, `time.time` by default) because they are compared
across machines; timeouts use the event loop's clock; rate limits, write tokens and refresh times use `monotonic`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import cast

from dht import key_file
from dht.admission import RateLimiter, WriteTokens
from dht.announcements import AnnouncementSchedule
from dht.attestation import Attestations
from dht.bootstrap import REJOIN_SECONDS, resolve
from dht.config import DhtConfig  # noqa: F401 - importable from here, as before
from dht.errors import InvalidArgument, MalformedRecord, NotRunning
from dht.identity import NODE_ID_BYTES, NodeIdentity
from dht.lan import LanDiscovery
from dht.lookup import Lookup
from dht.protocol import Address, DhtDatagramProtocol
from dht.records import (
    KEY_BYTES,
    KIND_MANIFEST,
    KIND_PROVIDER,
    ManifestRecord,
    ProviderRecord,
    Record,
    Transport,
    decode_record,
    dht_key,
)
from dht.responder import Responder, source_key
from dht.routing import RoutingTableFacade
from dht.routing_file import load_contacts, save_contacts
from dht.storage import RecordStore, StoreResult
from dht.wire import Contact, Message, MessageType, Method

log = logging.getLogger(__name__)

_WRITE_METHOD_OF_KIND = {KIND_PROVIDER: Method.ANNOUNCE, KIND_MANIFEST: Method.PUT_RECORD}
_ACCEPTED_STATUSES = frozenset(int(r) for r in StoreResult if r.accepted)
# Storers that answered but are full (the key's slots, the publisher's, the source's or all): a larger routing
# table would not place the record with them, so for republishing they count as reached (`AnnouncementSchedule`).
# A hot file's 65th provider met KEY_FULL at all 20 storers, was "thin", and was published again every
# maintenance round: in the lab's 1,000-node crowd that was a republish per new provider every ~30 s.
_FULL_STATUSES = frozenset(int(r) for r in (StoreResult.KEY_FULL, StoreResult.PUBLISHER_FULL,
                                            StoreResult.SOURCE_FULL, StoreResult.STORE_FULL))
_RECEIVE_BUFFER_BYTES = 1 << 20
_OBSERVERS_KEPT = 32
# A record lookup's state is kept this long for a write of the same key to go on from (`_closest_with_tokens`):
# well inside a write token's life (WriteTokens rotates every 300 s and accepts the previous secret); and for a
# read of the same key to start from its closest nodes (`Lookup.again`).
_WARM_LOOKUP_S = 30.0
_WARM_LOOKUPS = 64
# A record read ends once all but this many of the k closest answered (`Lookup.finished`): each record is on
# `replicas` (20) of them.
_READ_SLACK = 3


def _enlarge_receive_buffer(transport: asyncio.DatagramTransport) -> None:
    # The kernel drops datagrams when the socket buffer is full, before our rate limiter ever sees them; the
    # default (~200 KB, a few hundred small datagrams) lets a short burst from one flooder push out everyone
    # else's requests. A larger buffer lets the cheap per-source drop in user space do its job.
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER_BYTES)
    except OSError as exc:
        log.debug("DHT: cannot enlarge the receive buffer: %s", exc)


MAINTENANCE_JITTER = 0.25  # each maintenance round waits the interval give or take 25 %, at random


def jittered(interval: float, rng: random.Random | None = None) -> float:
    """`interval` give or take MAINTENANCE_JITTER, at random. Periodic timers started together stay together
    (Floyd & Jacobson, "The synchronization of periodic routing messages", 1994): nodes started in one burst
    (a rollout, the lab's thousand nodes) would all refresh their buckets in the same second, for ever."""
    return interval * (rng or random).uniform(1 - MAINTENANCE_JITTER, 1 + MAINTENANCE_JITTER)


class DhtNode:
    """One DHT node: a UDP socket, a routing table, a record store, and the lookups and publishing over them.

    Typical use: ``node = DhtNode.from_data_dir(path)``; ``await node.start(host, port)``;
    ``await node.bootstrap([(host, port), ...])``; then announce / find; ``await node.stop()``.
    """

    def __init__(
        self,
        identity: NodeIdentity,
        config: DhtConfig | None = None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.identity = identity
        self.node_id = identity.node_id
        self.config = config or DhtConfig()
        if self.config.rate_limit_by not in ("ip", "address"):
            raise InvalidArgument("rate_limit_by must be 'ip' or 'address'")
        self.data_dir = data_dir
        self.clock = clock
        self.monotonic = monotonic
        self.store = RecordStore(self.config.store_limits)
        self.limiter = RateLimiter(self.config.request_rate, self.config.request_burst)
        self.tokens = WriteTokens(now=monotonic())
        self.routing = RoutingTableFacade(
            self.node_id, self.config.k, self._ping_contact, asyncio.ensure_future, self.config.routing_contacts_per_ip
        )
        self.announcements = AnnouncementSchedule(self.config.refresh_fraction)
        self.counters: Counter[str] = Counter()
        self.responder = Responder(self)
        self._protocol: DhtDatagramProtocol | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._maintenance_task: asyncio.Task | None = None
        self.lan: LanDiscovery | None = None
        self._last_save = 0.0
        self._warm_lookups: dict[bytes, tuple[float, Lookup]] = {}  # target -> (when, a record lookup's state)
        self._observed_by: OrderedDict[bytes, str] = OrderedDict()  # responder id -> our IP as it saw it
        self._saved_contacts: list[Contact] = load_contacts(data_dir) if data_dir is not None else []
        self._entry_points: list[tuple[str, int]] = []  # the bootstrap nodes, asked again when no contact is left
        self._rejoin_at = 0.0

    @classmethod
    def from_data_dir(cls, data_dir: str | os.PathLike[str], config: DhtConfig | None = None, **kwargs) -> DhtNode:
        """A node whose key and routing table live in `data_dir` (created if needed)."""
        return cls(key_file.load_or_create(data_dir), config, data_dir=data_dir, **kwargs)

    # ------------------------------------------------------------------------------------------- lifecycle

    async def start(self, host: str = "0.0.0.0", port: int = 0, *, maintenance: bool = True) -> Address:
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._transport, self._protocol = await loop.create_datagram_endpoint(
            lambda: DhtDatagramProtocol(self), local_addr=(host, port), family=family
        )
        _enlarge_receive_buffer(self._transport)
        if self.config.lan_discovery and family == socket.AF_INET:
            await self._start_lan(host)
        if maintenance:
            self._maintenance_task = asyncio.create_task(self._maintenance_loop())
        return self.address

    async def _start_lan(self, bound_host: str) -> None:
        interface = self.config.lan_interface
        if interface is None:
            # A node bound to one address must be pinged at that address: beacon from that interface.
            interface = bound_host if bound_host not in ("", "0.0.0.0") else "0.0.0.0"
        self.lan = LanDiscovery(
            self.node_id,
            self.address[1],
            self.ping,
            group=self.config.lan_group,
            port=self.config.lan_port,
            interface=interface,
            interval_s=self.config.lan_interval_s,
        )
        if not await self.lan.start():
            self.lan = None

    @property
    def address(self) -> Address:
        if self._protocol is None:
            raise NotRunning("DHT node not started")
        return self._protocol.local_address

    @property
    def running(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def stop(self, *, save: bool = True) -> None:
        if self._maintenance_task is not None:
            self._maintenance_task.cancel()
            try:
                await self._maintenance_task
            except asyncio.CancelledError:
                pass
            self._maintenance_task = None
        if self.lan is not None:
            await self.lan.stop()
            self.lan = None
        if save and self.data_dir is not None:
            self.save_routing_table()
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def save_routing_table(self) -> None:
        if self.data_dir is None:
            return
        contacts = self.routing.contacts()
        if not contacts:
            return  # do not overwrite a useful old table with an empty one
        try:
            save_contacts(self.data_dir, self.node_id, contacts)
        except OSError as exc:
            log.warning("DHT: cannot save routing table: %s", exc)

    # -------------------------------------------------------------------------------- incoming (handler API)

    def admit(self, address: Address) -> bool:
        return self.limiter.allow(source_key(address, self.config.rate_limit_by), self.monotonic())

    def on_message_from(self, message: Message, address: Address) -> None:
        if message.sender_id != self.node_id:
            self.routing.add(Contact(message.sender_id, address[0], address[1]), self.monotonic())

    def handle_request(self, message: Message, address: Address) -> Message | None:
        return self.responder.answer(message, address, self.clock(), self.monotonic())

    # ------------------------------------------------------------------------------------------- outgoing

    def _require_protocol(self) -> DhtDatagramProtocol:
        if self._protocol is None or not self.running:
            raise NotRunning("DHT node not started")
        return self._protocol

    def _request(self, method: Method, **fields) -> Message:
        return Message(MessageType.REQUEST, b"", method, self.node_id, **fields)

    async def ping(self, address: Address) -> bytes | None:
        """The node id answering at `address`, or None. A reply also puts the node in the routing table."""
        reply = await self._require_protocol().request(address, self._request(Method.PING), self.config.rpc_timeout_s)
        if reply is None or reply.type != MessageType.RESPONSE:
            return None
        if reply.observed is not None and reply.sender_id != self.node_id:
            self._observed_by[reply.sender_id] = reply.observed[0]
            self._observed_by.move_to_end(reply.sender_id)
            while len(self._observed_by) > _OBSERVERS_KEPT:
                self._observed_by.popitem(last=False)
        return reply.sender_id

    def external_host(self) -> str | None:
        """Our IP address as other nodes see it (behind NAT: the public one), or None if unknown/disputed.

        Each ping reply says from which address our request came. One vote per answering node (the last
        `_OBSERVERS_KEPT` nodes); the most common answer wins if at least two nodes agree — or if only one node
        ever answered (two nodes on a LAN). A single liar cannot redirect our announcements elsewhere.
        """
        if not self._observed_by:
            return None
        (host, votes), *_ = Counter(self._observed_by.values()).most_common(1)
        return host if votes >= min(2, len(self._observed_by)) else None

    def own_host(self) -> str | None:
        """The address other nodes reach us at: `external_host()`, else the address we are bound to unless
        that is unspecified (0.0.0.0 / ::). None while unknown (no node has answered yet)."""
        host = self.external_host()
        if host:
            return host
        bound = self.address[0]
        return None if bound in ("0.0.0.0", "::", "") else bound

    async def _ping_contact(self, contact: Contact) -> bool:
        if self._protocol is None or not self.running:
            return True  # shutting down: do not evict anybody
        return (await self.ping(contact.address)) == contact.node_id

    async def bootstrap(self, addresses: Iterable[tuple[str, int]] = ()) -> int:
        """Join via `addresses` (hostnames allowed) plus the saved routing table; returns the table size. They
        are asked again whenever the table is empty (`dht.bootstrap`)."""
        self._entry_points = list(addresses)
        self._rejoin_at = self.monotonic() + REJOIN_SECONDS
        candidates = [await resolve(a, self.address[0]) for a in self._entry_points]
        candidates += [c.address for c in self._saved_contacts]
        unique = list(dict.fromkeys(a for a in candidates if a is not None and a != self.address))
        await asyncio.gather(*(self.ping(a) for a in unique))
        if len(self.routing):
            await self.find_node(self.node_id)
        return len(self.routing)

    async def _rejoin_if_alone(self) -> None:
        if len(self.routing) or self.monotonic() < self._rejoin_at or not self.running:
            return
        size = await self.bootstrap(self._entry_points)
        log.log(logging.INFO if size else logging.DEBUG, "DHT: no contact left; joined again: %d contacts", size)

    async def _drive(self, lookup: Lookup, make_request: Callable[[], Message]
                     ) -> AsyncGenerator[tuple[Contact, Message], None]:
        """Run `lookup` over the network, yielding every successful reply as it arrives."""
        protocol = self._require_protocol()
        loop = asyncio.get_running_loop()
        pending: dict[asyncio.Future, Contact] = {}
        try:
            while True:
                now = loop.time()
                for contact in lookup.next_queries(now):
                    pending[protocol.request(contact.address, make_request(), self.config.rpc_timeout_s)] = contact
                if not pending or lookup.finished(now):
                    return
                done, _ = await asyncio.wait(
                    pending, timeout=max(0.0, lookup.deadline - now), return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    self.counters["lookup_deadline"] += 1
                    return
                for future in done:
                    contact = pending.pop(future)
                    reply = future.result()
                    if reply is None or reply.type != MessageType.RESPONSE or reply.sender_id != contact.node_id:
                        lookup.on_failure(contact)
                        if reply is None:
                            self.routing.unanswered(contact)
                        continue
                    self.routing.answered()
                    lookup.on_reply(contact, reply.contacts, reply.token)
                    yield contact, reply
        finally:
            for future in pending:
                future.cancel()

    async def _new_lookup(self, target: bytes, previous: Lookup | None = None, slack: int = 0) -> Lookup:
        """A lookup of `target` from our routing table, or going on from `previous` (`Lookup.again`); one that
        may end without `slack` of the k closest (a read, `Lookup.finished`)."""
        await self._rejoin_if_alone()  # a lookup from scratch needs contacts to start from
        loop = asyncio.get_running_loop()
        self.routing.touch(target)
        seeds = self.routing.closest(target, self.config.k)
        deadline = loop.time() + self.config.lookup_deadline_s
        if previous is not None:
            return Lookup.again(previous, seeds, k=self.config.k, alpha=self.config.alpha, deadline=deadline,
                                self_id=self.node_id, slack=slack)
        return Lookup.start(target, seeds, k=self.config.k, alpha=self.config.alpha, deadline=deadline,
                            self_id=self.node_id, slack=slack)

    async def _closest_with_tokens(self, target: bytes) -> list[tuple[Contact, bytes]]:
        """The k closest nodes to `target` that replied, with their write tokens. Goes on from a record lookup
        of the same key made moments ago, if any: a node that looked for providers announces itself next,
        and a second lookup from scratch was most of its DHT traffic (BitTorrent's announce_peer likewise
        uses the tokens its get_peers collected). That lookup may have stopped early; it runs to the end
        here, with FIND_NODE."""
        lookup = self._take_warm(target)
        if lookup is None:
            lookup = await self._new_lookup(target)
        async for _ in self._drive(lookup, lambda: self._request(Method.FIND_NODE, target=target)):
            pass
        return lookup.result()

    def _keep_warm(self, target: bytes, lookup: Lookup) -> None:
        warm = self._warm_lookups
        warm.pop(target, None)
        if len(warm) >= _WARM_LOOKUPS:
            del warm[next(iter(warm))]  # the oldest
        warm[target] = (self.monotonic(), lookup)

    def _warm(self, target: bytes) -> Lookup | None:
        """The state of a record lookup of `target` made moments ago, if any (left in place)."""
        entry = self._warm_lookups.get(target)
        return entry[1] if entry is not None and self.monotonic() - entry[0] <= _WARM_LOOKUP_S else None

    def _take_warm(self, target: bytes) -> Lookup | None:
        lookup = self._warm(target)
        self._warm_lookups.pop(target, None)
        if lookup is None:
            return None
        lookup.resume(asyncio.get_running_loop().time() + self.config.lookup_deadline_s)
        return lookup

    async def find_node(self, target: bytes) -> list[Contact]:
        """The k nodes closest to `target` that answered, closest first."""
        if len(target) != NODE_ID_BYTES:
            raise InvalidArgument(f"a node id is {NODE_ID_BYTES} bytes")
        return [contact for contact, _ in await self._closest_with_tokens(target)]

    # ------------------------------------------------------------------------------------------- records

    async def publish(self, record: Record) -> int:
        """Store `record` on the `replicas` closest nodes (and here if we are among them). Returns acceptances."""
        return (await self._publish(record))[0]

    async def _publish(self, record: Record) -> tuple[int, int]:
        """`publish`, returning (acceptances, storers reached: those that accepted it or answered they are full)."""
        protocol = self._require_protocol()
        method = _WRITE_METHOD_OF_KIND[record.kind]
        targets = (await self._closest_with_tokens(record.dht_key))[: self.config.replicas]
        futures = [
            protocol.request(c.address, self._request(method, token=token, record=record.wire),
                             self.config.rpc_timeout_s)
            for c, token in targets
        ]
        replies = await asyncio.gather(*futures)
        answered = [reply.status for reply in replies if reply is not None and reply.type == MessageType.RESPONSE]
        accepted = sum(1 for status in answered if status in _ACCEPTED_STATUSES)
        full = sum(1 for status in answered if status in _FULL_STATUSES)
        position = int.from_bytes(record.dht_key, "big")
        farthest = max((int.from_bytes(c.node_id, "big") ^ position for c, _ in targets), default=-1)
        we_are_close = (len(targets) < self.config.replicas
                        or (int.from_bytes(self.node_id, "big") ^ position) < farthest)
        if we_are_close and self.store.put(record, "self", self.clock()).accepted:
            accepted += 1
        self.counters["published"] += 1
        return accepted, accepted + full

    async def announce(
        self, root: bytes, host: str, port: int, transports: int = Transport.TCP, *, ttl_s: int | None = None
    ) -> int:
        """Announce that we provide `root` at host:port, and keep re-announcing until `withdraw(root)`."""
        ttl = ttl_s if ttl_s is not None else self.config.provider_ttl_s
        params: dict[str, object] = dict(root=root, host=host, port=port, transports=int(transports))
        record = ProviderRecord.create(self.identity, now=self.clock(), ttl_s=ttl, root=root, host=host, port=port,
                                       transports=int(transports))
        self.announcements.add(KIND_PROVIDER, root, params, ttl, self.monotonic())
        return await self._publish_own(KIND_PROVIDER, root, record)

    async def put_manifest(
        self,
        repr_key: bytes,
        content_root: bytes,
        size: int,
        block_size: int,
        validator: str | bytes,
        *,
        ttl_s: int | None = None,
    ) -> int:
        """Publish a manifest summary under `repr_key`, re-published until `withdraw_manifest(repr_key)`.

        The record carries `own_host()`, the only address storing nodes accept it from; raises
        `InvalidArgument` while that is unknown."""
        ttl = ttl_s if ttl_s is not None else self.config.manifest_ttl_s
        params = dict(repr_key=repr_key, content_root=content_root, size=size, block_size=block_size,
                      validator=validator)
        self.announcements.add(KIND_MANIFEST, repr_key, params, ttl, self.monotonic())
        return await self._publish_own(KIND_MANIFEST, repr_key, self._record_of(KIND_MANIFEST, params, ttl))

    async def _publish_own(self, kind: int, key: bytes, record: Record) -> int:
        """Publish one of our announced records and note whether it reached enough storing nodes."""
        accepted, reached = await self._publish(record)
        self.announcements.published(kind, key, reached, self.config.replicas, len(self.routing))
        return accepted

    def _record_of(self, kind: int, params: dict, ttl_s: int) -> Record:
        """A freshly signed record; a manifest gets our address as it is now (it may have changed since the
        announcement was made: a new NAT mapping)."""
        if kind == KIND_PROVIDER:
            return ProviderRecord.create(self.identity, now=self.clock(), ttl_s=ttl_s, **params)
        host = self.own_host()
        if host is None:
            raise InvalidArgument("our address is not known yet (no DHT node has answered): cannot vouch for a "
                                  "manifest, storing nodes accept it only from the address it names")
        return ManifestRecord.create(self.identity, now=self.clock(), ttl_s=ttl_s, host=host, **params)

    async def withdraw(self, root: bytes) -> int:
        """Stop announcing `root` and tell the storers (a TTL-0 record supersedes ours)."""
        return await self._withdraw(KIND_PROVIDER, root)

    async def withdraw_manifest(self, repr_key: bytes) -> int:
        return await self._withdraw(KIND_MANIFEST, repr_key)

    async def _withdraw(self, kind: int, key: bytes) -> int:
        entry = self.announcements.remove(kind, key)
        if entry is None:
            return 0
        return await self.publish(self._record_of(kind, entry.params, 0))

    def _accept_remote_record(self, raw: bytes, kind: int, key: bytes, now: float) -> Record | None:
        try:
            record = decode_record(raw)
        except MalformedRecord:
            self.counters["bad_records_received"] += 1
            return None
        if record.kind != kind or record.key != key or not record.has_valid_signature():
            self.counters["bad_records_received"] += 1
            return None
        if record.is_withdrawal or record.expires_at <= now:
            return None
        return record

    async def _find_copies(self, kind: int, key: bytes
                           ) -> AsyncGenerator[tuple[Record, str | None, str | None], None]:
        """Every valid copy of a (kind, key) record as replies arrive, local store first: (record, the address
        its storer observed it arrive from, the storer's address as we see it — None for our own store)."""
        if len(key) != KEY_BYTES:
            raise InvalidArgument(f"record keys are {KEY_BYTES} bytes")
        method = Method.FIND_PROVIDERS if kind == KIND_PROVIDER else Method.GET_RECORDS
        for held, observed in self.store.get_observed(kind, key, self.clock()):
            yield held, observed, None
        target = dht_key(kind, key)
        # A poll of the same key: one round trip; and not waiting for the last stragglers of the k closest.
        lookup = await self._new_lookup(target, self._warm(target), slack=_READ_SLACK)
        try:
            async for contact, reply in self._drive(lookup, lambda: self._request(method, target=key)):
                now = self.clock()
                observed_from = reply.observed_from + [None] * (len(reply.records) - len(reply.observed_from))
                for raw, observed in zip(reply.records, observed_from):
                    record = self._accept_remote_record(raw, kind, key, now)
                    if record is not None:
                        yield record, observed, contact.host
        finally:
            self._keep_warm(target, lookup)  # for a write of the same key that may follow (publish)

    async def find_records(self, kind: int, key: bytes) -> AsyncGenerator[Record, None]:
        """Yield each publisher's record for (kind, key) once, as replies arrive (local store first)."""
        seen: set[bytes] = set()
        async with contextlib.aclosing(self._find_copies(kind, key)) as copies:
            async for record, _, _ in copies:
                if record.publisher_key not in seen:
                    seen.add(record.publisher_key)
                    yield record

    def find_providers(self, root: bytes) -> AsyncGenerator[ProviderRecord, None]:
        """Providers of `root`, one per publisher, yielded as they arrive. Close it (aclosing) to stop early."""
        return self.find_records(KIND_PROVIDER, root)  # type: ignore[return-value]

    async def get_manifests(self, repr_key: bytes) -> list[tuple[ManifestRecord, str | None, frozenset[str]]]:
        """Every publisher's newest manifest summary for `repr_key`, newest first, each with its host if the
        storing nodes attest it (`dht.attestation`), else None, and the networks that attest it (empty when our
        own store did)."""
        newest: dict[bytes, ManifestRecord] = {}
        attestations = Attestations()
        async with contextlib.aclosing(self._find_copies(KIND_MANIFEST, repr_key)) as copies:
            async for copy, observed, responder in copies:
                record = cast(ManifestRecord, copy)  # _accept_remote_record checked the kind
                attestations.observe(record, observed, responder)
                known = newest.get(record.publisher_key)
                if known is None or record.timestamp_ms > known.timestamp_ms:
                    newest[record.publisher_key] = record
        found = sorted(newest.values(), key=lambda r: r.timestamp_ms, reverse=True)
        return [(record, attestations.host(record), attestations.attesters(record)) for record in found]

    # ------------------------------------------------------------------------------------------ maintenance

    async def maintain(self) -> None:
        """One maintenance round: join again if alone, expire records, refresh due announcements, refresh
        lonely buckets, save."""
        await self._rejoin_if_alone()
        self.store.expire(self.clock())
        due = self.announcements.due(self.monotonic()) + self.announcements.grown(len(self.routing))
        for entry in {(e.kind, e.key): e for e in due}.values():
            try:
                record = self._record_of(entry.kind, entry.params, entry.ttl_s)
            except InvalidArgument as exc:  # our address unknown for now: the next round tries again
                log.debug("DHT: cannot republish yet: %s", exc)
                continue
            await self._publish_own(entry.kind, entry.key, record)
            self.counters["republished"] += 1
        for low, high in self.routing.lonely_bucket_ranges():
            target = random.randint(low, min(high, 2**160 - 1)).to_bytes(NODE_ID_BYTES, "big")
            await self.find_node(target)
        if self.data_dir is not None and self.monotonic() - self._last_save >= self.config.save_interval_s:
            self.save_routing_table()
            self._last_save = self.monotonic()

    async def _maintenance_loop(self) -> None:
        while True:
            wake = self.monotonic() + jittered(self.config.maintenance_interval_s)
            due = self.announcements.next_deadline()
            if due is not None:
                wake = min(wake, due)
            await asyncio.sleep(max(0.05, wake - self.monotonic()))  # a timer, not synchronisation
            try:
                await self.maintain()
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception:  # noqa: BLE001 - background work must survive anything and try again later
                self.counters["maintenance_errors"] += 1
                log.exception("DHT: maintenance round failed")

    # ------------------------------------------------------------------------------------------------ status

    def stats(self) -> dict:
        """What `GET /_swarm/dht` shows."""
        protocol_counters = dict(self._protocol.counters) if self._protocol is not None else {}
        dropped = {k: v for k, v in protocol_counters.items() if k.startswith("dropped_") or k == "handler_errors"}
        return {
            "node_id": self.node_id.hex(),
            "address": f"{self.address[0]}:{self.address[1]}" if self.running else None,
            "routing_table_size": len(self.routing),
            "external_host": self.external_host(),
            "records": self.store.stats(),
            "announcements": len(self.announcements),
            "lan": self.lan.stats() if self.lan is not None else {"running": False},
            "dropped_datagrams": sum(dropped.values()),
            "dropped": dropped,
            "routing_refused_per_ip": self.routing.refused_per_ip,
            "counters": {**protocol_counters, **self.counters},
        }
