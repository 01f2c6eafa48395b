"""Which of our own records to refresh, and when. Pure; time comes in as `now`.

A record we publish lives `ttl_s` seconds on the nodes that store it. While the content is still shared we
publish a fresh copy (new timestamp, new signature) after `refresh_fraction` of the TTL, so storers never see
it lapse even if one refresh is lost; when the content stops being shared the entry is removed and the record
is withdrawn (TTL 0) or simply left to expire. Fresh records rather than re-sending old bytes: a stored record
can only be replaced by a newer one, and `kademlia`'s habit of republishing whatever it holds is exactly the
stale-republish defect we avoid.

A record that reached fewer storing nodes than wanted while the routing table itself knew fewer (a small or young
network), or that reached fewer than half of them, is also published again as soon as the routing table has grown:
Kademlia's rule of handing a key's values to a node that joins close to it, for our own records. It matters for
manifests most, which count only once storing nodes other than the publisher have seen them arrive
(`dht.attestation`). A few of the closest nodes that did not answer in time are not worth it: with "any shortfall"
as the rule, in the lab's crowd of 1,000 nodes on two cores such republishes grew from 10 to 55 per 5 s within 40 s
(394 beside 1,000 announcements), as every busy node's timeouts made its records thin, and each republish made
the nodes busier.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

AnnouncementKey = tuple[int, bytes]  # (record kind, key)


@dataclass
class Announcement:
    kind: int
    key: bytes
    params: dict[str, Any]  # what the node needs to re-create the record (address, manifest fields, ...)
    ttl_s: int
    next_refresh: float = 0.0
    thin_at: int | None = None  # routing-table size when it last reached too few storing nodes, else None


@dataclass
class AnnouncementSchedule:
    refresh_fraction: float = 0.5
    _entries: dict[AnnouncementKey, Announcement] = field(default_factory=dict, init=False, repr=False)
    _heap: list[tuple[float, AnnouncementKey]] = field(default_factory=list, init=False, repr=False)

    def add(self, kind: int, key: bytes, params: dict[str, Any], ttl_s: int, now: float) -> Announcement:
        """Register (or replace) an announcement just published at `now`."""
        entry = Announcement(kind, key, params, ttl_s)
        self._entries[(kind, key)] = entry
        self._schedule(entry, now)
        return entry

    def _schedule(self, entry: Announcement, now: float) -> None:
        entry.next_refresh = now + max(1.0, entry.ttl_s * self.refresh_fraction)
        heapq.heappush(self._heap, (entry.next_refresh, (entry.kind, entry.key)))

    def published(self, kind: int, key: bytes, stored: int, wanted: int, table_size: int) -> None:
        """The record of (kind, key) was just stored on `stored` nodes of the `wanted`, with `table_size`
        contacts known."""
        entry = self._entries.get((kind, key))
        if entry is not None:
            thin = stored < wanted and (table_size < wanted or 2 * stored < wanted)
            entry.thin_at = table_size if thin else None

    def grown(self, table_size: int) -> list[Announcement]:
        """Entries that reached too few storing nodes while the routing table was smaller than `table_size`:
        to publish again now (each is asked for once per growth; `published` says whether it is still thin)."""
        grown = [e for e in self._entries.values() if e.thin_at is not None and table_size > e.thin_at]
        for entry in grown:
            entry.thin_at = None
        return grown

    def remove(self, kind: int, key: bytes) -> Announcement | None:
        return self._entries.pop((kind, key), None)

    def due(self, now: float) -> list[Announcement]:
        """Entries whose refresh time came; each is rescheduled as if refreshed at `now`."""
        due = []
        while self._heap and self._heap[0][0] <= now:
            when, key = heapq.heappop(self._heap)
            entry = self._entries.get(key)
            if entry is None or entry.next_refresh != when:
                continue  # removed or re-added since; a stale heap item
            due.append(entry)
            self._schedule(entry, now)
        return due

    def next_deadline(self) -> float | None:
        while self._heap:
            when, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry.next_refresh == when:
                return when
            heapq.heappop(self._heap)
        return None

    def __contains__(self, item: AnnouncementKey) -> bool:
        return item in self._entries

    def __len__(self) -> int:
        return len(self._entries)
