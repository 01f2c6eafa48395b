"""RecordStore: table-driven with a fake clock (plain numbers for `now`)."""

import pytest

from dht.identity import NodeIdentity
from dht.records import KIND_MANIFEST, KIND_PROVIDER, ManifestRecord, ProviderRecord, decode_record
from dht.storage import RecordStore, StoreLimits, StoreResult

IDS = [NodeIdentity.generate() for _ in range(8)]
ROOT = b"\x11" * 32
OTHER_ROOT = b"\x22" * 32


def prov(who=0, at=1000.0, ttl=600, root=ROOT, port=7000):
    return ProviderRecord.create(IDS[who], root=root, host="192.0.2.1", port=port, now=at, ttl_s=ttl)


def man(who=0, at=1000.0, ttl=600, key=ROOT):
    return ManifestRecord.create(IDS[who], repr_key=key, content_root=ROOT, size=1, block_size=16384,
                                 validator="v", host="192.0.2.1", now=at, ttl_s=ttl)


def ports(store, now, root=ROOT):
    return sorted(r.port for r in store.get(KIND_PROVIDER, root, now))


# Each case: a list of (record, source, now, expected result), then the provider ports expected at `check_at`.
CASES = {
    "several publishers per key": (
        [(prov(0, port=1), "a", 1000, StoreResult.STORED), (prov(1, port=2), "b", 1000, StoreResult.STORED)],
        1001, [1, 2]),
    "newer replaces older": (
        [(prov(0, port=1), "a", 1000, StoreResult.STORED), (prov(0, at=1001, port=2), "a", 1001, StoreResult.REPLACED)],
        1002, [2]),
    "replayed older refused": (
        [(prov(0, at=1001, port=2), "a", 1001, StoreResult.STORED),
         (prov(0, at=1000, port=1), "x", 1002, StoreResult.STALE)],
        1002, [2]),
    "duplicate refused": (
        [(prov(0, port=1), "a", 1000, StoreResult.STORED), (prov(0, port=1), "a", 1000, StoreResult.STALE)],
        1000, [1]),
    "older never resurrects after newer expired": (
        [(prov(0, at=1000, ttl=3600, port=1), "a", 1000, StoreResult.STORED),
         (prov(0, at=1010, ttl=10, port=2), "a", 1010, StoreResult.REPLACED),
         (prov(0, at=1000, ttl=3600, port=1), "a", 1100, StoreResult.STALE)],
        1100, []),
    "withdrawal removes and blocks replay": (
        [(prov(0, at=1000, port=1), "a", 1000, StoreResult.STORED),
         (prov(0, at=1005, ttl=0, port=1), "a", 1005, StoreResult.WITHDRAWN),
         (prov(0, at=1000, port=1), "a", 1006, StoreResult.STALE)],
        1006, []),
    "withdrawal before the record arrives": (
        [(prov(0, at=1005, ttl=0), "a", 1005, StoreResult.WITHDRAWN),
         (prov(0, at=1000, port=1), "a", 1006, StoreResult.STALE)],
        1006, []),
    "expired refused": ([(prov(0, at=1000, ttl=10), "a", 1010, StoreResult.EXPIRED)], 1010, []),
    "far future refused": ([(prov(0, at=5000), "a", 1000, StoreResult.FUTURE)], 1000, []),
    "small clock skew tolerated": ([(prov(0, at=1100, port=3), "a", 1000, StoreResult.STORED)], 1000, [3]),
    "expiry hides records": ([(prov(0, at=1000, ttl=10, port=1), "a", 1000, StoreResult.STORED)], 1010, []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_store_cases(name):
    steps, check_at, expected_ports = CASES[name]
    store = RecordStore()
    for record, source, now, expected in steps:
        assert store.put(record, source, now) == expected, name
    assert ports(store, check_at) == expected_ports


LIMIT_CASES = {
    # limits, records to put (who, root, source), expected results
    "per-key cap": (StoreLimits(providers_per_key=2),
                    [(0, ROOT, "a"), (1, ROOT, "b"), (2, ROOT, "c"), (3, OTHER_ROOT, "d")],
                    [StoreResult.STORED, StoreResult.STORED, StoreResult.KEY_FULL, StoreResult.STORED]),
    "per-publisher cap": (StoreLimits(per_publisher=1),
                          [(0, ROOT, "a"), (0, OTHER_ROOT, "a"), (1, OTHER_ROOT, "a")],
                          [StoreResult.STORED, StoreResult.PUBLISHER_FULL, StoreResult.STORED]),
    "per-source cap": (StoreLimits(per_source=2),
                       [(0, ROOT, "a"), (1, ROOT, "a"), (2, ROOT, "a"), (3, ROOT, "b")],
                       [StoreResult.STORED, StoreResult.STORED, StoreResult.SOURCE_FULL, StoreResult.STORED]),
    "total cap": (StoreLimits(total=3),
                  [(0, ROOT, "a"), (1, ROOT, "b"), (2, OTHER_ROOT, "c"), (3, OTHER_ROOT, "d")],
                  [StoreResult.STORED, StoreResult.STORED, StoreResult.STORED, StoreResult.STORE_FULL]),
}


@pytest.mark.parametrize("name", sorted(LIMIT_CASES))
def test_caps(name):
    limits, puts, expected = LIMIT_CASES[name]
    store = RecordStore(limits)
    results = [store.put(prov(who, root=root), source, 1000) for who, root, source in puts]
    assert results == expected
    assert len(store) == sum(r.accepted for r in results)


def test_full_key_still_accepts_refresh_from_existing_publisher():
    store = RecordStore(StoreLimits(providers_per_key=1))
    assert store.put(prov(0), "a", 1000) == StoreResult.STORED
    assert store.put(prov(1), "b", 1000) == StoreResult.KEY_FULL
    assert store.put(prov(0, at=1001, port=9), "a", 1001) == StoreResult.REPLACED
    assert ports(store, 1001) == [9]


def test_caps_count_only_live_records_after_expire():
    store = RecordStore(StoreLimits(per_source=1))
    assert store.put(prov(0, ttl=10), "a", 1000) == StoreResult.STORED
    assert store.put(prov(1), "a", 1000) == StoreResult.SOURCE_FULL
    assert store.next_deadline() == 1010
    assert store.expire(1010) == 1
    assert len(store) == 0
    assert store.put(prov(1, at=1010), "a", 1010) == StoreResult.STORED


def test_expire_ignores_heap_entries_of_replaced_records():
    store = RecordStore()
    store.put(prov(0, at=1000, ttl=10), "a", 1000)
    store.put(prov(0, at=1005, ttl=100), "a", 1005)
    assert store.expire(1011) == 0
    assert ports(store, 1011) == [7000]


def test_kinds_are_separate():
    store = RecordStore()
    assert store.put(prov(0), "a", 1000) == StoreResult.STORED
    assert store.put(man(0), "a", 1000) == StoreResult.STORED  # same key bytes, other kind: own slot
    assert [r.kind for r in store.get(KIND_MANIFEST, ROOT, 1000)] == [KIND_MANIFEST]
    assert store.stats()["providers"] == 1 and store.stats()["manifests"] == 1


def test_bad_signature_refused_on_store():
    wire = bytearray(prov(0).encode())
    wire[2:34] = IDS[1].public_key  # claims another publisher
    assert RecordStore().put(decode_record(bytes(wire)), "a", 1000) == StoreResult.BAD_SIGNATURE


def test_signature_checked_on_read():
    """Even if an unverified record got past `put` (a bug), `get` does not hand it out."""
    store = RecordStore()
    store.put(prov(0), "a", 1000)
    wire = bytearray(prov(1).encode())
    wire[-1] ^= 1
    forged = decode_record(bytes(wire))
    store._insert((KIND_PROVIDER, ROOT), forged, "a", None)  # bypass put on purpose
    assert [r.publisher_key for r in store.get(KIND_PROVIDER, ROOT, 1000)] == [IDS[0].public_key]


def test_get_returns_newest_first():
    store = RecordStore()
    store.put(prov(0, at=1000, port=1), "a", 1000)
    store.put(prov(1, at=1002, port=2), "a", 1002)
    store.put(prov(2, at=1001, port=3), "a", 1002)
    assert [r.port for r in store.get(KIND_PROVIDER, ROOT, 1003)] == [2, 3, 1]


def test_tombstones_are_bounded():
    store = RecordStore(StoreLimits(total=2))
    for i in range(8):
        store.put(prov(i, at=1000 + i, ttl=0), "a", 1000 + i)
    assert store.stats()["tombstones"] <= 4


# ------------------------------------------------------------------------------------------- observed address


def test_manifest_only_from_the_host_it_claims():
    """A storing node takes a manifest record only from the address it names, and remembers where it came from."""
    store = RecordStore()
    record = man(0)  # claims 192.0.2.1
    assert store.put(record, "198.51.100.9", 1000, observed="198.51.100.9") == StoreResult.ADDRESS_MISMATCH
    assert store.get(KIND_MANIFEST, ROOT, 1000) == []
    # The relayed copy did not take the slot: the publisher's own put of the same record still goes in.
    assert store.put(record, "192.0.2.1", 1000, observed="::ffff:192.0.2.1") == StoreResult.STORED
    assert store.get_observed(KIND_MANIFEST, ROOT, 1000) == [(record, "192.0.2.1")]


def test_own_records_are_kept_unobserved_and_providers_are_not_checked():
    store = RecordStore()
    assert store.put(man(0), "self", 1000) == StoreResult.STORED
    assert store.get_observed(KIND_MANIFEST, ROOT, 1000) == [(man(0), None)]
    # A provider's host is where to connect, not a vote: not compared (a peer port may sit on another address).
    assert store.put(prov(1), "198.51.100.9", 1000, observed="198.51.100.9") == StoreResult.STORED


def _uncached(store, kind, key, now):
    publishers = store._by_key.get((kind, key), {})
    live = [(e.record, e.observed) for e in publishers.values() if e.record.expires_at > now]
    return sorted(live, key=lambda pair: pair[0].timestamp_ms, reverse=True)


@pytest.mark.parametrize("seed", range(10))
def test_reads_between_writes_and_expiries_see_the_store_as_it_is(seed):
    # get_observed keeps its answer per key until a write or the first expiry: every read between puts,
    # replacements, withdrawals, expiries and a clock stepping back must equal a fresh scan.
    import random

    rng = random.Random(seed)
    store = RecordStore()
    now = 1000.0
    for _ in range(200):
        step = rng.random()
        if step < 0.4:
            who, ttl = rng.randrange(len(IDS)), rng.choice([0, 5, 20, 600])
            store.put(prov(who, at=now, ttl=ttl, port=rng.randrange(1, 9)), "abcd"[who % 4], now)
        elif step < 0.5:
            store.expire(now)
        elif step < 0.55:
            now -= rng.uniform(0, 3)  # the wall clock stepped back
        else:
            now += rng.uniform(0, 4)
        answer = store.get_observed(KIND_PROVIDER, ROOT, now)
        assert answer == _uncached(store, KIND_PROVIDER, ROOT, now)
        answer.reverse()  # the responder shuffles what it gets: that must not reach the next reader
        assert store.get_observed(KIND_PROVIDER, ROOT, now) == _uncached(store, KIND_PROVIDER, ROOT, now)
