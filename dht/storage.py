"""The record store: a pure object (time comes in as `now`) holding signed, expiring records.

What it guarantees, and why (each point answers a defect of `kademlia.storage.ForgetfulStorage`):

* Several records per key: one slot per (kind, key, publisher). A publisher can only ever occupy its own slot,
  so nobody can overwrite anybody else's record.
* A newer record (higher timestamp) from the same publisher replaces the older one; an older or equal one is
  refused. The highest timestamp seen per slot is remembered (a *tombstone*) until every record ever accepted
  for that slot would have expired anyway, so a replayed old record cannot resurrect after the newer one expired
  or was withdrawn (TTL 0).
* Caps: per key (providers and manifests separately), per publisher key, per source (whatever string the network
  layer passes — an IP address by default), and in total. A full key refuses new publishers rather than evicting
  old ones, so a flood cannot flush honest records out; the per-source cap bounds what one address can fill.
* Expiry: records past `timestamp + ttl` are never returned and are dropped by `expire(now)`; records dated too
  far in the future are refused (a long-lived far-future timestamp would pin a slot forever).
* Where a record came from: the store keeps the address each record was observed arriving from and refuses a
  manifest record from anywhere but the host it claims (`dht.attestation` says why), so a reader can count the
  publisher's network from what storing nodes observed rather than from what the publisher wrote.
* Signatures checked on store and again on read (the check is cached by record bytes in `dht.records`, so the
  read-side check costs a dict lookup; it guards against a bug that lets an unverified record in).
"""

from __future__ import annotations

import enum
import heapq
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from addresses import canonical_host
from dht.records import KIND_MANIFEST, KIND_PROVIDER, MAX_TTL_S, Record

SlotId = tuple[int, bytes, bytes]  # (kind, key, publisher key)
KeyId = tuple[int, bytes]  # (kind, key)


class StoreResult(enum.IntEnum):
    """Outcome of `RecordStore.put`; also the status code a STORE response carries on the wire."""

    STORED = 0
    REPLACED = 1
    WITHDRAWN = 2  # a TTL-0 record removed (or pre-empted) the publisher's record
    STALE = 3  # not newer than what this publisher already stored (replay or duplicate)
    EXPIRED = 4
    FUTURE = 5  # timestamp too far ahead of our clock
    BAD_SIGNATURE = 6
    KEY_FULL = 7
    PUBLISHER_FULL = 8
    SOURCE_FULL = 9
    STORE_FULL = 10
    RATE_LIMITED = 11  # never returned by the store; used by the network layer
    ADDRESS_MISMATCH = 12  # a manifest record that did not arrive from the host it claims

    @property
    def accepted(self) -> bool:
        return self in (StoreResult.STORED, StoreResult.REPLACED, StoreResult.WITHDRAWN)


@dataclass(frozen=True)
class StoreLimits:
    providers_per_key: int = 64
    manifests_per_key: int = 16
    per_publisher: int = 256
    per_source: int = 1024
    total: int = 50_000
    max_future_skew_s: float = 300.0

    def per_key(self, kind: int) -> int:
        return self.providers_per_key if kind == KIND_PROVIDER else self.manifests_per_key


@dataclass
class _Entry:
    record: Record
    source: str
    observed: str | None  # the IP the record arrived from; None when published here


@dataclass
class _Tombstone:
    timestamp_ms: int
    keep_until: float  # latest expiry of any record accepted for the slot


class RecordStore:
    """Signed records by (kind, key), several publishers per key, with caps and expiry. No I/O, no clock."""

    def __init__(self, limits: StoreLimits | None = None) -> None:
        self.limits = limits or StoreLimits()
        self._by_key: dict[KeyId, dict[bytes, _Entry]] = {}
        self._tombstones: dict[SlotId, _Tombstone] = {}
        self._per_publisher: Counter[bytes] = Counter()
        self._per_source: Counter[str] = Counter()
        self._count_by_kind: Counter[int] = Counter()
        self._expiry_heap: list[tuple[float, SlotId]] = []  # lazy: entries may be stale
        # get_observed's answer per key, until the first of its records expires; dropped by any write to the key.
        # A flash crowd asks a storer for the same key hundreds of times a second, and filtering and sorting up
        # to `per_key` records each time was 3 % of a lab worker's CPU at 1,000 nodes (py-spy).
        self._live: dict[KeyId, tuple[float, float, list[tuple[Record, str | None]]]] = {}  # (from, until, answer)
        self.rejected: Counter[StoreResult] = Counter()

    # ------------------------------------------------------------------------------------------------- write

    def put(self, record: Record, source: str, now: float, observed: str | None = None) -> StoreResult:
        """Try to store `record` received from `source` at time `now`; `observed` is the IP it arrived from
        (None: published by this node itself)."""
        result = self._put(record, source, now, canonical_host(observed))
        if not result.accepted:
            self.rejected[result] += 1
        return result

    def _put(self, record: Record, source: str, now: float, observed: str | None) -> StoreResult:
        if not record.has_valid_signature():
            return StoreResult.BAD_SIGNATURE
        if record.kind == KIND_MANIFEST and observed is not None and canonical_host(record.host) != observed:
            # Refused rather than stored unattested: a relayed copy must not take the slot before the
            # publisher's own put, which would then be refused as stale.
            return StoreResult.ADDRESS_MISMATCH
        if record.timestamp > now + self.limits.max_future_skew_s:
            return StoreResult.FUTURE
        slot: SlotId = (record.kind, record.key, record.publisher_key)
        tombstone = self._tombstones.get(slot)
        if tombstone is not None and tombstone.keep_until <= now:
            del self._tombstones[slot]
            tombstone = None
        if tombstone is not None and record.timestamp_ms <= tombstone.timestamp_ms:
            return StoreResult.STALE
        if not record.is_withdrawal and record.expires_at <= now:
            return StoreResult.EXPIRED

        key_id: KeyId = (record.kind, record.key)
        publishers = self._by_key.get(key_id, {})
        existing = publishers.get(record.publisher_key)

        if record.is_withdrawal:
            if existing is not None:
                self._remove(key_id, record.publisher_key)
            self._remember(slot, record, now)
            return StoreResult.WITHDRAWN

        if existing is None:
            problem = self._cap_problem(record, source, len(publishers))
            if problem is not None:
                return problem
        elif existing.source != source and self._per_source[source] >= self.limits.per_source:
            return StoreResult.SOURCE_FULL

        if existing is not None:
            self._remove(key_id, record.publisher_key)
        self._insert(key_id, record, source, observed)
        self._remember(slot, record, now)
        return StoreResult.REPLACED if existing is not None else StoreResult.STORED

    def _cap_problem(self, record: Record, source: str, publishers_for_key: int) -> StoreResult | None:
        limits = self.limits
        if publishers_for_key >= limits.per_key(record.kind):
            return StoreResult.KEY_FULL
        if self._per_publisher[record.publisher_key] >= limits.per_publisher:
            return StoreResult.PUBLISHER_FULL
        if self._per_source[source] >= limits.per_source:
            return StoreResult.SOURCE_FULL
        if len(self) >= limits.total:
            return StoreResult.STORE_FULL
        return None

    def _insert(self, key_id: KeyId, record: Record, source: str, observed: str | None) -> None:
        self._live.pop(key_id, None)
        self._by_key.setdefault(key_id, {})[record.publisher_key] = _Entry(record, source, observed)
        self._per_publisher[record.publisher_key] += 1
        self._per_source[source] += 1
        self._count_by_kind[record.kind] += 1
        heapq.heappush(self._expiry_heap, (record.expires_at, (record.kind, record.key, record.publisher_key)))

    def _remove(self, key_id: KeyId, publisher_key: bytes) -> None:
        self._live.pop(key_id, None)
        publishers = self._by_key[key_id]
        entry = publishers.pop(publisher_key)
        if not publishers:
            del self._by_key[key_id]
        _decrement(self._per_publisher, publisher_key)
        _decrement(self._per_source, entry.source)
        _decrement(self._count_by_kind, entry.record.kind)

    def _remember(self, slot: SlotId, record: Record, now: float) -> None:
        # Keep the slot's high-water timestamp until no record ever accepted for it can still be live; the
        # withdrawal case keeps it for the longest TTL anyone could have used, since we may never have seen the
        # record it withdraws (a replay of that one must still fail).
        old = self._tombstones.get(slot)
        keep_until = record.timestamp + MAX_TTL_S if record.is_withdrawal else record.expires_at
        if old is not None:
            keep_until = max(keep_until, old.keep_until)
        self._tombstones[slot] = _Tombstone(record.timestamp_ms, keep_until)
        if len(self._tombstones) > 2 * self.limits.total:
            self._trim_tombstones(now)

    def _trim_tombstones(self, now: float) -> None:
        # Bounded memory even under a stream of withdrawals: drop expired tombstones, then those for slots that
        # no longer hold a record, soonest-expiring first.
        self._tombstones = {s: t for s, t in self._tombstones.items() if t.keep_until > now}
        excess = len(self._tombstones) - 2 * self.limits.total
        if excess > 0:
            orphans = sorted(
                (t.keep_until, s) for s, t in self._tombstones.items() if s[2] not in self._by_key.get(s[:2], {})
            )
            for _, slot in orphans[:excess]:
                del self._tombstones[slot]

    # -------------------------------------------------------------------------------------------------- read

    def get(self, kind: int, key: bytes, now: float) -> list[Record]:
        """Live records for (kind, key), newest first."""
        return [record for record, _ in self.get_observed(kind, key, now)]

    def get_observed(self, kind: int, key: bytes, now: float) -> list[tuple[Record, str | None]]:
        """Live records for (kind, key) with the IP each arrived from (None: published here), newest first.
        A new list each call: callers may reorder it."""
        cached = self._live.get((kind, key))
        if cached is not None and cached[0] <= now < cached[1]:  # a clock stepped back asks afresh
            return list(cached[2])
        publishers = self._by_key.get((kind, key))
        if not publishers:
            return []
        live = [
            (entry.record, entry.observed)
            for entry in publishers.values()
            if entry.record.expires_at > now and entry.record.has_valid_signature()
        ]
        live.sort(key=lambda pair: pair[0].timestamp_ms, reverse=True)
        self._live[kind, key] = (now, min((record.expires_at for record, _ in live), default=now), live)
        return list(live)

    def records(self, now: float) -> Iterator[Record]:
        for publishers in self._by_key.values():
            for entry in publishers.values():
                if entry.record.expires_at > now:
                    yield entry.record

    def __len__(self) -> int:
        return sum(self._count_by_kind.values())

    def count(self, kind: int) -> int:
        return self._count_by_kind[kind]

    def stats(self) -> dict[str, int]:
        return {
            "providers": self._count_by_kind[KIND_PROVIDER],
            "manifests": self._count_by_kind[KIND_MANIFEST],
            "keys": len(self._by_key),
            "tombstones": len(self._tombstones),
            "rejected": sum(self.rejected.values()),
        }

    # ------------------------------------------------------------------------------------------------ expiry

    def next_deadline(self) -> float | None:
        """When `expire` next has something to do (may be early: the heap is lazily cleaned)."""
        return self._expiry_heap[0][0] if self._expiry_heap else None

    def expire(self, now: float) -> int:
        """Drop records whose TTL ran out and tombstones no longer needed. Returns how many records went."""
        dropped = 0
        while self._expiry_heap and self._expiry_heap[0][0] <= now:
            expires_at, slot = heapq.heappop(self._expiry_heap)
            key_id = slot[:2]
            entry = self._by_key.get(key_id, {}).get(slot[2])
            # The heap entry may belong to a record since replaced; only drop the one that really expired.
            if entry is not None and entry.record.expires_at == expires_at:
                self._remove(key_id, slot[2])
                dropped += 1
        if self._tombstones:
            self._tombstones = {s: t for s, t in self._tombstones.items() if t.keep_until > now}
        return dropped


def _decrement(counter: Counter, key: object) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]
