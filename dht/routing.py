"""Routing: `kademlia.routing.RoutingTable` behind a small typed facade, persisted as JSON.

We reuse only the `kademlia` package's k-bucket table (`RoutingTable`, `KBucket`, `Node`): its bucket splitting,
LRU order and replacement cache are sound. Its network side (`KademliaProtocol`, `Server`, rpcudp) is not used;
see `dht.protocol` for why, nor is its `add_contact` (see `RoutingTableFacade.add`): a contact that finds its
bucket full waits in the replacement cache, and the bucket's oldest contact is pinged (through the `ping` and
`spawn` the node gives) only when it has been silent for `GOOD_CONTACT_SECONDS`, one ping at a time; one that
does not answer gives its place to the newest waiting contact. A contact that leaves our requests unanswered
leaves the table by `unanswered`'s rule: not when we are the one who cannot be heard. No I/O here: the ping and
the requests are the node's.

Persistence is JSON (`encode_contacts`, `decode_contacts`) — never pickle, which executes code on load — read
defensively: any malformed entry is skipped, a malformed document refused (a routing table is a cache; losing it
costs one bootstrap). The file itself (``dht_routing.json``, written atomically) is `dht.routing_file`'s.
"""

from __future__ import annotations

import bisect
import ipaddress
import json
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

from kademlia.node import Node as KadNode
from kademlia.routing import RoutingTable

from dht.identity import NODE_ID_BYTES
from dht.wire import Contact

log = logging.getLogger(__name__)

_MAX_SAVED_CONTACTS = 500
_CLOSEST_CACHE_TARGETS = 16  # targets whose answer closest() keeps; a crowd asks about a handful of keys
# A contact heard from this recently is "good" (BEP 5's 15 minutes): a newcomer to its full bucket waits in the
# replacement cache rather than costing it a ping. Dead contacts still leave sooner (`unanswered`).
GOOD_CONTACT_SECONDS = 15 * 60
# A contact that left this many of our requests in a row unanswered is stale (one lost datagram or one stall of a
# busy peer should not cost a good contact).
FAILURES_BEFORE_EVICTION = 2
# Our latest requests whose outcome (answered or not) says whether we ourselves are heard (`unanswered`).
OUTCOMES_KEPT = 32
_ID_BITS = NODE_ID_BYTES * 8


def _shared_prefix_bits(nodes: Iterable[Any]) -> int:  # kademlia's untyped Node objects
    """How many leading bits all these node ids share: kademlia's `KBucket.depth`, on integers. Its own
    version spells every id as a 160-character string of '0' and '1' on each call."""
    first, differing = None, 0
    for node in nodes:
        if first is None:
            first = node.long_id
        differing |= node.long_id ^ first
    return _ID_BITS - differing.bit_length()


class RoutingTableFacade:
    """Typed access to kademlia's table, plus a cap on contacts per IP address.

    The cap (`max_per_ip`) is the cheap part of Sybil resistance: without it one host can fill a victim's
    table with contacts on many ports claiming ids near a key, and then answer lookups for that key with
    nothing (records are signed, so it cannot forge them, but it can hide them). With it, that takes many IPs.
    `None` disables it (many test nodes on 127.0.0.1; several nodes behind one NAT address on purpose).
    """

    def __init__(
        self, self_id: bytes, k: int, ping: Callable[[Contact], Awaitable[bool]],
        spawn: Callable[[Coroutine[Any, Any, None]], object], max_per_ip: int | None = None
    ) -> None:
        """`ping(contact)`: does it still answer? `spawn(coroutine)`: run it in the background (a task)."""
        self.self_id = self_id
        self.k = k
        self.max_per_ip = max_per_ip
        self._ping, self._spawn = ping, spawn
        self._table = RoutingTable(None, k, KadNode(self_id))  # its protocol is only for add_contact's ping
        self._seen: dict[bytes, float] = {}  # table members: when each last sent us anything
        self._pinging: dict[bytes, object] = {}  # heads being asked whether they still live, and the task asking
        self._flat: list[tuple[int, Contact]] | None = None  # cache for closest(); None when stale
        self._per_ip: Counter[str] | None = None  # contacts per IP in the table; None when stale
        # closest() answers by (target, count): the count+1 nearest (distance, contact), sorted. Kept across new
        # contacts (each is merged in), dropped with the flat list.
        self._nearest: dict[tuple[int, int], list[tuple[int, Contact]]] = {}
        self.refused_per_ip = 0
        self._failures: dict[bytes, int] = {}  # table members -> our requests they left unanswered in a row
        self._outcomes: deque[bool] = deque(maxlen=OUTCOMES_KEPT)  # our latest requests: answered?

    def _invalidate(self) -> None:
        self._flat = None
        self._per_ip = None
        self._nearest.clear()

    def add(self, contact: Contact, now: float) -> None:
        """`contact` sent us a message at `now` (monotonic seconds)."""
        if contact.node_id == self.self_id or len(contact.node_id) != NODE_ID_BYTES:
            return
        self._failures.pop(contact.node_id, None)  # it speaks: not stale
        node = KadNode(contact.node_id, contact.host, contact.port)
        bucket = self._table.buckets[self._table.get_bucket_for(node)]
        known = bucket.nodes.get(contact.node_id)
        if known is not None and known.ip == contact.host and known.port == contact.port:
            bucket.add_node(node)  # only an LRU touch: the cached flat list stays valid
            self._seen[node.id] = now
            return
        if known is None and self.max_per_ip is not None:
            if self._per_ip is None:
                self._per_ip = Counter(c.host for _, c in self._flat_contacts())
            if self._per_ip[contact.host] >= self.max_per_ip:
                self.refused_per_ip += 1
                return
        # kademlia's `RoutingTable.add_contact`, done here: it pays for `KBucket.depth` (every id spelt as a
        # 160-character string) and schedules a ping on every call that meets a full bucket. On a busy node nearly
        # every datagram from a stranger does: that was a tenth of a lab worker's CPU at 1,000 nodes (py-spy).
        split = False
        while known is None and len(bucket) >= self.k:
            if not self._splits(bucket):
                bucket.add_node(node)  # into the replacement cache
                self._ping_if_silent(bucket.head(), now)
                if split:
                    self._invalidate()  # the split may have promoted replacement contacts
                return
            index = self._table.get_bucket_for(node)
            self._table.split_bucket(index)  # rare: once per level of the table
            split = True
            bucket = self._table.buckets[self._table.get_bucket_for(node)]
        bucket.add_node(node)
        self._seen[node.id] = now
        if known is None and not split:
            # One new contact: extend the caches. While a crowd joins, nearly every request brings a new one,
            # and rebuilding both per datagram was about a quarter of a lab worker's loop at 1,000 nodes.
            if self._flat is not None:
                added = Contact(node.id, node.ip, node.port)
                self._flat.append((node.long_id, added))
                for (position, count), nearest in self._nearest.items():
                    entry = (node.long_id ^ position, added)
                    if len(nearest) <= count:  # the table had no more than count+1 contacts: all are kept
                        bisect.insort(nearest, entry)
                    elif entry < nearest[-1]:
                        bisect.insort(nearest, entry)
                        nearest.pop()
            if self._per_ip is not None:
                self._per_ip[contact.host] += 1
        else:
            self._invalidate()

    def _splits(self, bucket: Any) -> bool:  # a kademlia KBucket (untyped)
        """kademlia's rule (its paper's section 4.2): a full bucket splits if our own id falls in its range,
        or if its contacts' shared prefix is not a multiple of 5 bits."""
        return bucket.has_in_range(self._table.node) or _shared_prefix_bits(bucket.nodes.values()) % 5 != 0

    def _ping_if_silent(self, head: KadNode, now: float) -> None:
        """Ask a full bucket's oldest contact whether it still lives, unless it spoke within
        `GOOD_CONTACT_SECONDS` or is being asked already; if it does not answer, the replacement cache's newest
        contact takes its place."""
        if now - self._seen.get(head.id, float("-inf")) < GOOD_CONTACT_SECONDS or head.id in self._pinging:
            return
        self._pinging[head.id] = None
        task = self._spawn(self._ask(Contact(head.id, head.ip, head.port)))
        if head.id in self._pinging:  # still asking (a task run eagerly may be over already)
            self._pinging[head.id] = task

    async def _ask(self, head: Contact) -> None:
        try:
            alive = await self._ping(head)
        except Exception:  # noqa: BLE001 - runs as a detached task; must never raise
            log.exception("DHT: eviction ping failed")
            alive = False
        finally:
            self._pinging.pop(head.node_id, None)
        if not alive:
            self.remove(head)  # kademlia promotes the newest contact of its replacement cache

    def answered(self) -> None:
        """A request of ours was answered (the answer's `add` clears its sender's failures)."""
        self._outcomes.append(True)

    def unanswered(self, contact: Contact) -> bool:
        """A request of ours to `contact` went unanswered; True when that made it leave the table.

        After FAILURES_BEFORE_EVICTION in a row it leaves if its bucket has a replacement waiting (the Kademlia paper's
        section 4.1), or if we ourselves are heard: at least half of our latest OUTCOMES_KEPT requests were answered. A
        node whose own link is full or down times out on everyone, and evicting them all for it emptied whole buckets:
        in the lab's flash crowd at 20/s, busy nodes (replies queued behind the blocks they served) dropped every
        contact of the far half of the id space, and in one traced run 14 of the 31 provider lookups made 10 s in had no
        contact in the target's half and found no provider. Kept, a stale contact costs a lookup one request timeout
        until it answers again (any message from it clears its count) or a replacement arrives. One that never answers
        cannot stay by this rule unless most of the contacts we ask do not answer either."""
        self._outcomes.append(False)
        bucket = self._table.buckets[self._table.get_bucket_for(KadNode(contact.node_id))]
        if contact.node_id not in bucket.nodes:
            return False  # a lookup's candidate that is not (or no longer) ours to judge
        failures = self._failures.get(contact.node_id, 0) + 1
        self._failures[contact.node_id] = failures
        if failures < FAILURES_BEFORE_EVICTION \
                or not bucket.replacement_nodes and sum(self._outcomes) * 2 < len(self._outcomes):
            return False
        self.remove(contact)
        return True

    def remove(self, contact: Contact) -> None:
        self._table.remove_contact(KadNode(contact.node_id, contact.host, contact.port))
        self._seen.pop(contact.node_id, None)
        self._failures.pop(contact.node_id, None)
        self._invalidate()

    def _flat_contacts(self) -> list[tuple[int, Contact]]:
        if self._flat is None:
            self._flat = [
                (node.long_id, Contact(node.id, node.ip, node.port))
                for bucket in self._table.buckets
                for node in bucket.nodes.values()
            ]
        return self._flat

    def closest(self, target: bytes, k: int | None = None, exclude: tuple[str, int] | None = None) -> list[Contact]:
        """The k known contacts closest to `target` (XOR metric), optionally leaving out one address.

        Our own exact scan over a cached flat list rather than `RoutingTable.find_neighbors` (an approximate
        bucket walk with a heap push and an address comparison per node): this runs for every request a node
        answers and was a quarter of a busy node's CPU time. Distances are unique, so tuples never compare
        their contacts. The answers for the last few targets are kept too: in a flash crowd nearly every
        request a node answers is about the same one or two keys (the content root, the URL), and the scan
        was still 12 % of a lab worker's loop at 600 nodes (py-spy).
        """
        position = int.from_bytes(target, "big")
        count = k or self.k
        nearest = self._nearest.get((position, count))
        if nearest is None:
            scored = [(long_id ^ position, contact) for long_id, contact in self._flat_contacts()]
            scored.sort()  # C sort of ~100 int-keyed tuples beats heapq.nsmallest's Python-level loop here
            nearest = scored[: count + 1]  # one spare for `exclude`
            if len(self._nearest) >= _CLOSEST_CACHE_TARGETS:
                del self._nearest[next(iter(self._nearest))]  # the oldest question
            self._nearest[position, count] = nearest
        result = [contact for _, contact in nearest if exclude is None or contact[1:] != exclude]
        return result[:count]

    def contacts(self) -> list[Contact]:
        return [Contact(n.id, n.ip, n.port) for bucket in self._table.buckets for n in bucket.get_nodes()]

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._table.buckets)

    def touch(self, target: bytes) -> None:
        """A lookup for `target` is starting: its bucket counts as refreshed (kademlia does this inside
        `find_neighbors`, which `closest` does not use)."""
        self._table.buckets[self._table.get_bucket_for(KadNode(target))].touch_last_updated()

    def lonely_bucket_ranges(self) -> list[tuple[int, int]]:
        """Buckets no lookup went into for an hour (the paper's refresh rule)."""
        return [bucket.range for bucket in self._table.lonely_buckets()]


def encode_contacts(self_id: bytes, contacts: list[Contact]) -> str:
    """The routing file's text (`dht.routing_file` writes it): this node's id and up to `_MAX_SAVED_CONTACTS`."""
    return json.dumps({
        "version": 1,
        "node_id": self_id.hex(),
        "contacts": [[c.node_id.hex(), c.host, c.port] for c in contacts[:_MAX_SAVED_CONTACTS]],
    })


def decode_contacts(text: str) -> list[Contact]:
    """The contacts of a routing file's text; ValueError when it is not one. Entries that are not a node id, an IP
    address and a port are skipped: a damaged file costs its bad entries, not the rest."""
    document = json.loads(text)
    if not isinstance(document, dict) or document.get("version") != 1 or not isinstance(document.get("contacts"), list):
        raise ValueError("not a routing table of a known format")
    contacts = []
    for entry in document["contacts"][:_MAX_SAVED_CONTACTS]:
        try:
            node_hex, host, port = entry
            node_id = bytes.fromhex(node_hex)
            ipaddress.ip_address(host)
            if len(node_id) != NODE_ID_BYTES or not isinstance(port, int) or not 0 < port < 65536:
                raise ValueError("out of range")
        except (TypeError, ValueError):
            continue
        contacts.append(Contact(node_id, host, port))
    return contacts
