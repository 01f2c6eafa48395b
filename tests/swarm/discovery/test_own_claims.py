"""OwnClaims: this node's own claims by key, one per key, with expiry by `now` and a bound on the keys (pure)."""

from __future__ import annotations

import pytest

from swarm.discovery.own_claims import MAX_KEYS, OwnClaim, OwnClaims
from swarm.discovery.seam import IN_PROGRESS_ROOT, MAX_TTL_S, MAX_VALIDATOR_BYTES, ManifestClaim

K1, K2, K3 = b"\x01" * 32, b"\x02" * 32, b"\x03" * 32
CLAIM = ManifestClaim(b"r" * 32, 1000, 16384, b'"etag"')
OTHER = ManifestClaim(b"s" * 32, 2000, 16384, b'"etag-2"')
FETCHING = ManifestClaim(IN_PROGRESS_ROOT, 1000, 0, b'"etag"')


def key(index: int) -> bytes:
    return index.to_bytes(32, "big")


# (what is done, in order, as (call, key, claim-or-None, now, ttl)), then get(K1, at) → [(claim, age ms, left s)]
SCENARIOS = {
    "never put": ([], 0.0, []),
    "put": ([("put", K1, CLAIM, 100.0, 60)], 100.0, [(CLAIM, 0, 60)]),
    # Ages are told in milliseconds: they order claimers who claimed within the same second.
    "a quarter second": ([("put", K1, CLAIM, 100.0, 60)], 100.25, [(CLAIM, 250, 60)]),
    "aged": ([("put", K1, CLAIM, 100.0, 60)], 130.5, [(CLAIM, 30_500, 30)]),
    "last second": ([("put", K1, CLAIM, 100.0, 60)], 159.9, [(CLAIM, 59_900, 1)]),
    "expired at its end": ([("put", K1, CLAIM, 100.0, 60)], 160.0, []),
    "expired after": ([("put", K1, CLAIM, 100.0, 60)], 1000.0, []),
    "another key": ([("put", K2, CLAIM, 100.0, 60)], 100.0, []),
    "replaced": ([("put", K1, FETCHING, 100.0, 120), ("put", K1, CLAIM, 110.0, 60)], 115.0, [(CLAIM, 5_000, 55)]),
    "replaced by a shorter life": ([("put", K1, CLAIM, 100.0, 600), ("put", K1, OTHER, 100.0, 10)], 200.0, []),
    "withdrawn": ([("put", K1, CLAIM, 100.0, 60), ("withdraw", K1, None, 0, 0)], 100.0, []),
    "withdrawn then put again": ([("put", K1, CLAIM, 100.0, 60), ("withdraw", K1, None, 0, 0),
                                  ("put", K1, OTHER, 120.0, 60)], 120.0, [(OTHER, 0, 60)]),
    "another withdrawn": ([("put", K1, CLAIM, 100.0, 60), ("withdraw", K2, None, 0, 0)], 100.0, [(CLAIM, 0, 60)]),
    # The caller's clock stepped: neither the age nor the time left leaves the claim's life.
    "clock stepped back": ([("put", K1, CLAIM, 100.0, 60)], 40.0, [(CLAIM, 0, 60)]),
    "fractional ttl": ([("put", K1, CLAIM, 100.0, 1.5)], 101.0, [(CLAIM, 1_000, 1)]),
}


@pytest.mark.parametrize("steps,at,expected", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_get_returns_the_one_live_claim_with_its_age_and_time_left(steps, at, expected):
    claims = OwnClaims()
    for call, k, claim, now, ttl in steps:
        if call == "put":
            claims.put(k, claim, now=now, ttl=ttl)
        else:
            claims.withdraw(k)
    got = claims.get(K1, at)
    assert [(own.claim, own.age_ms(at), own.seconds_left(at)) for own in got] == expected


def test_put_returns_the_claim_with_its_times():
    assert OwnClaims().put(K1, CLAIM, now=5.0, ttl=10) == OwnClaim(CLAIM, 5.0, 15.0)


def test_withdraw_says_whether_there_was_a_claim():
    claims = OwnClaims()
    claims.put(K1, CLAIM, now=0.0, ttl=10)
    assert claims.withdraw(K1) is True
    assert claims.withdraw(K1) is False
    assert len(claims) == 0


@pytest.mark.parametrize("k,claim,ttl", [
    (K1[:31], CLAIM, 60),  # a key is 32 bytes
    (K1, ManifestClaim(b"r" * 31, 1, 1, b"v"), 60),  # so is a root
    (K1, ManifestClaim(b"r" * 32, 2**63, 1, b"v"), 60),  # sizes fit a signed 64-bit offset
    (K1, ManifestClaim(b"r" * 32, -1, 1, b"v"), 60),
    (K1, ManifestClaim(b"r" * 32, 1, 2**32, b"v"), 60),  # block sizes a u32
    (K1, ManifestClaim(b"r" * 32, 1, 1, b""), 60),  # a validator 1..200 bytes
    (K1, ManifestClaim(b"r" * 32, 1, 1, b"v" * (MAX_VALIDATOR_BYTES + 1)), 60),
    (K1, CLAIM, 0),  # a life of 1 s .. a day
    (K1, CLAIM, 0.5),
    (K1, CLAIM, MAX_TTL_S + 1),
])
def test_a_claim_the_peer_protocol_could_not_carry_is_refused(k, claim, ttl):
    claims = OwnClaims()
    with pytest.raises(ValueError):
        claims.put(k, claim, now=0.0, ttl=ttl)
    assert len(claims) == 0


def test_expire_drops_what_is_due_and_only_that():
    claims = OwnClaims()
    claims.put(K1, CLAIM, now=0.0, ttl=10)
    claims.put(K2, CLAIM, now=0.0, ttl=20)
    claims.put(K3, FETCHING, now=0.0, ttl=10)
    claims.put(K3, CLAIM, now=5.0, ttl=100)  # replaced: its first entry's expiry is stale
    assert claims.expire(9.9) == 0
    assert claims.expire(10.0) == 1
    assert len(claims) == 2 and claims.get(K3, 10.0) != []
    assert claims.expire(1000.0) == 2
    assert len(claims) == 0


def test_put_expires_what_is_due_before_it_counts_the_bound():
    claims = OwnClaims(max_keys=2)
    claims.put(K1, CLAIM, now=0.0, ttl=10)
    claims.put(K2, CLAIM, now=5.0, ttl=100)
    claims.put(K3, CLAIM, now=10.0, ttl=100)  # K1 expired: room without evicting K2
    assert [k for k in (K1, K2, K3) if claims.get(k, 10.0)] == [K2, K3]


def test_the_bound_evicts_the_oldest_put_and_a_put_again_is_young():
    claims = OwnClaims(max_keys=3)
    for index in range(3):
        claims.put(key(index), CLAIM, now=float(index), ttl=1000)
    claims.put(key(0), OTHER, now=3.0, ttl=1000)  # refreshed: now the youngest
    claims.put(key(3), CLAIM, now=4.0, ttl=1000)  # evicts key 1, the oldest put
    assert len(claims) == 3
    assert [index for index in range(4) if claims.get(key(index), 5.0)] == [0, 2, 3]


def test_the_default_bound_holds_and_the_expiry_queue_stays_proportionate():
    claims = OwnClaims()
    assert claims.max_keys == MAX_KEYS
    small = OwnClaims(max_keys=50)
    for turn in range(2000):  # the same few keys refreshed over and over, and a stream of new ones
        small.put(key(turn % 10), CLAIM, now=float(turn), ttl=MAX_TTL_S)
        small.put(key(1000 + turn), CLAIM, now=float(turn), ttl=MAX_TTL_S)
    assert len(small) == 50
    assert len(small._expiries) <= 2 * len(small) + 64 + 1
