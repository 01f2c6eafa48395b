"""Which DHT manifest to believe: prefixes, weights, quorum, conflicts (pure, table-driven)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addresses import network_prefix
from swarm.discovery import IN_PROGRESS_ROOT
from swarm.trust import (
    ManifestClaim,
    TrustDecision,
    TrustPolicy,
    Vouch,
    ahead_of,
    decide,
    leading,
    parse_trust,
    working,
)
from swarm.trust import quorum as mt

ROOT_A = b"A" * 32
ROOT_B = b"B" * 32
FETCHING = IN_PROGRESS_ROOT
V1 = b'"v1"'
V2 = b'"v2"'
SIZE = 1_000_000
BLOCK = 65536


def v(pid: str, host: str | None, root: bytes = ROOT_A, size: int = SIZE, block: int = BLOCK,
      validator: bytes = V1, at: float = 0.0, by: tuple[str, ...] = ()) -> Vouch:
    """A vouch; `by`: the networks that attested its host (none: our own store saw it)."""
    return Vouch.seen(ManifestClaim(root, size, block, validator), pid.encode(), host, frozenset(by), at)


def agreed(root: bytes = ROOT_A, size: int = SIZE, block: int = BLOCK, validator: bytes = V1) -> ManifestClaim:
    return ManifestClaim(root, size, block, validator)


LIARS = ("192.52.193.0/24", "100.64.0.1/32")  # two networks of lying storing nodes
STORERS = ("8.8.8.0/24", "9.9.9.0/24", "1.1.1.0/24", "2620:4f:9::/48")  # honest storing nodes (strings only)
LIAR_24 = [v(f"liar{i}", f"192.31.196.{i}", root=ROOT_B) for i in range(1, 21)]  # 20 keys, one /24

# "Far public" hosts are from ranges `addresses` calls public (AS112 192.31.196/24 and 192.175.48/24, AMT
# 192.52.193/24, 2620:4f::/32): the documentation ranges are special-purpose and weigh nothing. Nothing here sends
# a packet; they are only hosts written in vouches.

# (policy, vouches, extra kwargs, expected decision)
ROWS = {
    "two-independent-publishers": (
        "quorum:2", [v("a", "192.31.196.1"), v("b", "192.175.48.1")], {},
        TrustDecision(agreed(), "quorum", "ok", 2)),
    "one-publisher-below-quorum": (
        "quorum:2", [v("a", "192.31.196.1")], {}, TrustDecision(None, "none", "below-quorum", 1)),
    "quorum-1-accepts-one": (
        "quorum:1", [v("a", "192.31.196.1")], {}, TrustDecision(agreed(), "quorum", "ok", 1)),
    "liar-many-ids-one-public-24": (
        "quorum:2", LIAR_24, {}, TrustDecision(None, "none", "below-quorum", 1)),
    "liar-cannot-outvote-two-honest": (
        "quorum:2", LIAR_24 + [v("a", "192.52.193.10"), v("b", "192.175.48.9")], {},
        TrustDecision(agreed(), "quorum", "ok", 2)),
    "liar-against-one-honest-is-no-quorum": (
        "quorum:2", LIAR_24 + [v("a", "192.52.193.10")], {}, TrustDecision(None, "none", "below-quorum", 1)),
    "same-id-two-prefixes-counts-once": (
        "quorum:2", [v("a", "192.31.196.1"), v("a", "192.175.48.1")], {},
        TrustDecision(None, "none", "below-quorum", 1)),
    "ids-matched-to-distinct-prefixes": (
        # a is seen on both networks, b only on the first: a↔203.0.113, b↔198.51.100 makes two
        "quorum:2", [v("a", "192.31.196.1"), v("a", "192.175.48.1"), v("b", "192.31.196.2")], {},
        TrustDecision(agreed(), "quorum", "ok", 2)),
    "two-quorums-conflict": (
        "quorum:2", [v("a", "192.31.196.1"), v("b", "192.175.48.1"),
                     v("c", "192.52.193.1", root=ROOT_B), v("d", "100.64.0.1", root=ROOT_B)], {},
        TrustDecision(None, "none", "conflict", 2)),
    "heavier-quorum-wins-when-other-is-below": (
        "quorum:3", [v("a", "192.31.196.1"), v("b", "192.175.48.1"), v("e", "8.8.8.8"),
                     v("c", "192.52.193.1", root=ROOT_B), v("d", "100.64.0.1", root=ROOT_B)], {},
        TrustDecision(agreed(), "quorum", "ok", 3)),
    "mixed-validators-conflict": (
        "quorum:2", [v("a", "192.31.196.1"), v("b", "192.175.48.1"),
                     v("c", "192.52.193.1", root=ROOT_B, validator=V2), v("d", "8.8.8.8", root=ROOT_B, validator=V2)],
        {}, TrustDecision(None, "none", "conflict", 2)),
    "known-validator-picks-its-group": (
        "quorum:2", [v("a", "192.31.196.1"), v("b", "192.175.48.1"),
                     v("c", "192.52.193.1", root=ROOT_B, validator=V2), v("d", "8.8.8.8", root=ROOT_B, validator=V2)],
        {"known_validator": V2}, TrustDecision(agreed(ROOT_B, validator=V2), "quorum", "ok", 2)),
    "known-size-drops-liars": (
        "quorum:2", [v("a", "192.31.196.1"), v("b", "192.175.48.1"),
                     v("c", "192.52.193.1", root=ROOT_B, size=5), v("d", "8.8.8.8", root=ROOT_B, size=5)],
        {"known_size": SIZE}, TrustDecision(agreed(), "quorum", "ok", 2)),
    "nothing-matches-what-origin-said": (
        "quorum:1", [v("a", "192.31.196.1")], {"known_size": SIZE + 1}, TrustDecision(None, "none", "inconsistent", 0)),
    "block-size-splits-groups": (
        "quorum:2", [v("a", "192.31.196.1"), v("b", "192.175.48.1", block=BLOCK * 2)], {},
        TrustDecision(None, "none", "below-quorum", 1)),
    "unattested-hosts-weigh-nothing": (
        "quorum:1", [v("a", None), v("b", None), v("c", ""), v("d", "files.example.org")], {},
        TrustDecision(None, "none", "below-quorum", 0)),
    "unattested-add-nothing-to-an-attested-one": (  # one address plus a key it planted in its own store
        "quorum:2", [v("a", None), v("b", None), v("c", "192.31.196.1")], {},
        TrustDecision(None, "none", "below-quorum", 1)),
    "special-purpose-hosts-weigh-nothing": (  # documentation, benchmarking, multicast: no sender sits there
        "quorum:1", [v("a", "198.51.100.1"), v("b", "203.0.113.1"), v("c", "192.0.2.1"), v("d", "198.18.0.1"),
                     v("e", "2001:db8::1"), v("f", "224.0.0.1"), v("g", "0.0.0.0")], {},
        TrustDecision(None, "none", "below-quorum", 0)),
    "carrier-nat-per-address": (
        "quorum:2", [v("a", "100.64.0.1"), v("b", "100.64.0.2")], {}, TrustDecision(agreed(), "quorum", "ok", 2)),
    "embedded-ipv4-is-that-host": (  # NAT64 and 6to4 spellings of one /24 are that /24
        "quorum:2", [v("a", "64:ff9b::c01f:c401"), v("b", "2002:c01f:c402::1"), v("c", "192.31.196.3")],
        {},
        TrustDecision(None, "none", "below-quorum", 1)),
    "ipv6-same-48": (
        "quorum:2", [v("a", "2620:4f:1:a::1"), v("b", "2620:4f:1:b::1")], {},
        TrustDecision(None, "none", "below-quorum", 1)),
    "ipv6-distinct-48s": (
        "quorum:2", [v("a", "2620:4f:1::1"), v("b", "2620:4f:2::1")], {},
        TrustDecision(agreed(), "quorum", "ok", 2)),
    "ipv4-mapped-is-ipv4": (
        "quorum:2", [v("a", "::ffff:192.31.196.1"), v("b", "192.31.196.2")], {},
        TrustDecision(None, "none", "below-quorum", 1)),
    "loopback-counts-per-address": (
        "quorum:3", [v("a", "127.0.0.1"), v("b", "127.0.0.2"), v("c", "127.0.0.3")], {},
        TrustDecision(agreed(), "quorum", "ok", 3)),
    "same-loopback-address-counts-once": (
        "quorum:2", [v("a", "127.0.0.1"), v("b", "127.0.0.1")], {}, TrustDecision(None, "none", "below-quorum", 1)),
    "lan-counts-per-address": (
        "quorum:2", [v("a", "192.168.1.2"), v("b", "192.168.1.3")], {}, TrustDecision(agreed(), "quorum", "ok", 2)),
    "ula-and-link-local-per-address": (
        "quorum:4", [v("a", "fd00::1"), v("b", "fd00::2"), v("c", "fe80::1"), v("d", "169.254.0.9")], {},
        TrustDecision(agreed(), "quorum", "ok", 4)),
    "equivocating-publisher-counts-for-nobody": (
        "quorum:2", [v("a", "192.31.196.1"), v("a", "192.31.196.1", root=ROOT_B), v("b", "192.175.48.1")], {},
        TrustDecision(None, "none", "below-quorum", 1)),
    "two-versions-is-not-equivocation": (
        "quorum:2", [v("a", "192.31.196.1"), v("a", "192.31.196.1", root=ROOT_B, validator=V2),
                     v("b", "192.175.48.1")], {},
        TrustDecision(agreed(), "quorum", "ok", 2)),
    "malformed-dropped": (
        "quorum:1", [v("a", "192.31.196.1", root=b"short"), v("b", "192.31.196.2", block=1000),
                     v("c", "192.31.196.3", block=8192), v("d", "192.31.196.4", validator=b""),
                     v("e", "192.31.196.5", size=-1),
                     Vouch.seen(ManifestClaim(ROOT_A, SIZE, BLOCK, V1), b"", "192.31.196.6", frozenset())], {},
        TrustDecision(None, "none", "no-candidates", 0)),
    "no-candidates": ("quorum:2", [], {}, TrustDecision(None, "none", "no-candidates", 0)),
    "any-accepts-a-lone-publisher": (
        "any", [v("a", "192.31.196.1")], {}, TrustDecision(agreed(), "any", "ok", 1)),
    "any-refuses-an-unattested-one": (
        "any", [v("a", None)], {}, TrustDecision(None, "none", "below-quorum", 0)),
    "any-takes-the-heaviest": (
        "any", [v("a", "192.31.196.1"), v("b", "192.175.48.1"), v("c", "192.52.193.1", root=ROOT_B)], {},
        TrustDecision(agreed(), "any", "ok", 2)),
    "any-tie-is-conflict": (
        "any", [v("a", "192.31.196.1"), v("c", "192.52.193.1", root=ROOT_B)], {},
        TrustDecision(None, "none", "conflict", 1)),
    "any-liar-24-weighs-one": (
        "any", LIAR_24 + [v("a", "192.52.193.10"), v("b", "192.175.48.9")], {},
        TrustDecision(agreed(), "any", "ok", 2)),
    "origin-never-believes-the-dht": (
        "origin", [v("a", "192.31.196.1"), v("b", "192.175.48.1")], {}, TrustDecision(None, "none", "trust=origin", 0)),
    # Hosts attested by other storing nodes: never more weight than the fewest networks a party needs to show them
    # (each host where it is, or every network that attested it lying).
    "two-lying-networks-attest-three-hosts-weigh-two": (
        "quorum:3", [v("a", "192.31.196.1", by=LIARS), v("b", "192.175.48.1", by=LIARS),
                     v("c", "2620:4f:1::1", by=LIARS)], {},
        TrustDecision(None, "none", "below-quorum", 2)),
    "attesters-that-publish-lend-nothing": (  # the liars publish from their own networks too: still two
        "quorum:3", [v("a", "192.52.193.1"), v("b", "100.64.0.1"),
                     v("c", "192.31.196.1", by=LIARS), v("d", "192.175.48.1", by=LIARS)], {},
        TrustDecision(None, "none", "below-quorum", 2)),
    "honest-storers-attest-a-remote-quorum": (  # the same storing nodes attest every honest publisher
        "quorum:3", [v("a", "192.31.196.1", by=STORERS), v("b", "192.175.48.1", by=STORERS),
                     v("c", "2620:4f:1::1", by=STORERS)], {},
        TrustDecision(agreed(), "quorum", "ok", 3)),
    "first-hand-and-remote-together": (
        "quorum:2", [v("a", "192.31.196.1"), v("b", "192.175.48.1", by=("192.52.193.0/24", "2620:4f:2::/48"))],
        {}, TrustDecision(agreed(), "quorum", "ok", 2)),
    "one-attester-for-two-hosts-counts-one": (
        "quorum:2", [v("a", "192.31.196.1", by=("192.52.193.0/24",)), v("b", "192.175.48.1", by=("192.52.193.0/24",))],
        {}, TrustDecision(None, "none", "below-quorum", 1)),
    "a-claim-beside-a-first-hand-host-needs-its-own-network": (
        # a is seen first-hand in b's /24 and attested elsewhere by liars: true or not, two networks stand behind it
        "quorum:3", [v("a", "192.31.196.1"), v("a", "192.175.48.1", by=LIARS), v("b", "192.31.196.2")], {},
        TrustDecision(None, "none", "below-quorum", 2)),
    # A small DHT: the storing nodes are the publishers. Two of them could have made the third up (both attest it).
    "three-publishers-that-attest-each-other-weigh-two": (
        "quorum:2", [v("a", "192.31.196.1", by=("192.175.48.0/24", "192.52.193.0/24")),
                     v("b", "192.175.48.1", by=("192.31.196.0/24", "192.52.193.0/24")),
                     v("c", "192.52.193.1", by=("192.31.196.0/24", "192.175.48.0/24"))], {},
        TrustDecision(agreed(), "quorum", "ok", 2)),
    "more-claimed-hosts-than-attesting-networks": (  # three storing nodes attest five hosts: at most three
        "quorum:4", [v(f"h{i}", host, by=STORERS[:3]) for i, host in enumerate(
            ["192.31.196.1", "192.175.48.1", "192.52.193.1", "2620:4f:1::1", "2620:4f:2::1"])], {},
        TrustDecision(None, "none", "below-quorum", 3)),
    "in-progress-claims-are-never-a-manifest": (
        "quorum:2", [v("a", "192.31.196.1", root=FETCHING), v("b", "192.175.48.1", root=FETCHING)], {},
        TrustDecision(None, "none", "no-candidates", 0)),
    "in-progress-beside-a-vouch-is-no-equivocation": (  # a fetcher that finished: both copies seen at once
        "quorum:2", [v("a", "192.31.196.1", root=FETCHING), v("a", "192.31.196.1"), v("b", "192.175.48.1")], {},
        TrustDecision(agreed(), "quorum", "ok", 2)),
}

# (vouches, exclude, weight of the others holding or fetching SIZE bytes labelled V1)
WORKING = {
    "two-fetchers": ([v("a", "192.31.196.1", root=FETCHING), v("b", "192.175.48.1", root=FETCHING)], b"", 2),
    "a-fetcher-and-a-holder": ([v("a", "192.31.196.1", root=FETCHING), v("b", "192.175.48.1")], b"", 2),
    "not-counting-ourselves": ([v("a", "192.31.196.1", root=FETCHING), v("b", "192.175.48.1")], b"b", 1),
    "one-network-many-keys": ([v(f"s{i}", f"192.52.193.{i}", root=FETCHING) for i in range(1, 30)], b"", 1),
    "unattested-weigh-nothing": ([v("a", None, root=FETCHING), v("b", None, root=FETCHING)], b"", 0),
    "unattested-add-nothing": ([v("a", None, root=FETCHING), v("b", "192.175.48.1", root=FETCHING)], b"", 1),
    "another-version": ([v("a", "192.31.196.1", root=FETCHING, validator=V2)], b"", 0),
    "another-size": ([v("a", "192.31.196.1", root=FETCHING, size=SIZE + 1)], b"", 0),
    "malformed-block-size": ([v("a", "192.31.196.1", root=FETCHING, block=1000)], b"", 0),
}


# (vouches, our id, when we claimed by our own clock, the publishers we step back for)
AHEAD = {
    "earlier-claims-are-ahead": (
        [v("a", "192.31.196.1", root=FETCHING, at=10.0), v("z", "192.175.48.1", root=FETCHING, at=11.0)], b"m", 12.0,
        [b"a", b"z"]),
    "a-later-claim-with-a-smaller-id-is-not": (  # the order of ids alone made the earlier claimer step back
        [v("a", "192.31.196.1", root=FETCHING, at=13.0), v("z", "192.175.48.1", root=FETCHING, at=11.0)], b"m", 12.0,
        [b"z"]),
    "holders-are-always-ahead": ([v("z", "192.175.48.1", at=99.0)], b"m", 12.0, [b"z"]),
    "our-own-record-rules-once-found": (  # landed: everyone judges us by it, so do we
        [v("m", "192.52.193.9", root=FETCHING, at=10.5), v("a", "192.31.196.1", root=FETCHING, at=11.0)], b"m", 12.0,
        []),
    "same-time-then-id": (
        [v("a", "192.31.196.1", root=FETCHING, at=12.0), v("z", "192.175.48.1", root=FETCHING, at=12.0)], b"m", 12.0,
        [b"a"]),
    "not-claimed-yet-everyone-is-ahead": (
        [v("z", "192.175.48.1", root=FETCHING, at=1e12)], b"m", float("inf"), [b"z"]),
}


@pytest.mark.parametrize("vouches,own,claimed_at,ahead", AHEAD.values(), ids=AHEAD.keys())
def test_ahead_of(vouches, own, claimed_at, ahead):
    assert [x.publisher_id for x in ahead_of(vouches, own, claimed_at) if x.publisher_id != own] == ahead


def test_two_claimers_never_both_step_back_for_each_other():
    # Whatever the times and ids, of two claims seen alike by both, exactly one is ahead of the other.
    import itertools

    for (ta, tb), (ia, ib) in itertools.product(itertools.product([1.0, 2.0], repeat=2), [(b"a", b"b"), (b"b", b"a")]):
        claims = [v(ia.decode(), "192.31.196.1", root=FETCHING, at=ta),
                  v(ib.decode(), "192.175.48.1", root=FETCHING, at=tb)]
        a_steps_back = any(x.publisher_id == ib for x in ahead_of(claims, ia, ta))
        b_steps_back = any(x.publisher_id == ia for x in ahead_of(claims, ib, tb))
        assert a_steps_back != b_steps_back


@pytest.mark.parametrize("vouches,exclude,weight", WORKING.values(), ids=WORKING.keys())
def test_working(vouches, exclude, weight):
    assert working(vouches, size=SIZE, validator=V1, exclude=exclude) == weight


@pytest.mark.parametrize("policy,vouchers", [("quorum:3", 3), ("any", 1), ("origin", 0)])
def test_vouchers_needed(policy, vouchers):
    assert parse_trust(policy).vouchers == vouchers


@pytest.mark.parametrize("policy,vouches,kwargs,expected", ROWS.values(), ids=ROWS.keys())
def test_decide(policy, vouches, kwargs, expected):
    assert decide(vouches, parse_trust(policy), **kwargs) == expected


# (vouches, what the origin said (size, validator), the claim a waiting download may prepare for)
LEADING = {
    "one-network": ([v("a", "192.31.196.1")], (SIZE, V1), agreed()),
    "none": ([], (SIZE, V1), None),
    "only-claims": ([v("a", "192.31.196.1", root=FETCHING)], (SIZE, V1), None),
    "unattested-weighs-nothing": ([v("a", None)], (SIZE, V1), None),
    "tie-between-two-roots": ([v("a", "192.31.196.1"), v("b", "192.175.48.1", root=ROOT_B)], (SIZE, V1), None),
    "heavier-root-leads": ([v("a", "192.31.196.1"), v("b", "192.175.48.1"), v("c", "192.52.193.1", root=ROOT_B)],
                           (SIZE, V1), agreed()),
    "many-keys-one-network-do-not-outweigh": (LIAR_24 + [v("a", "192.175.48.1")], (SIZE, V1), None),
    "another-version-than-the-origins": ([v("a", "192.31.196.1", validator=V2)], (SIZE, V1), None),
    "another-size-than-the-origins": ([v("a", "192.31.196.1")], (SIZE - 1, V1), None),
    "origin-not-heard-yet": ([v("a", "192.31.196.1")], (None, None), agreed()),
}


@pytest.mark.parametrize("vouches,known,expected", LEADING.values(), ids=LEADING.keys())
def test_leading(vouches, known, expected):
    assert leading(vouches, known_size=known[0], known_validator=known[1]) == expected


@pytest.mark.parametrize("host,prefix", [
    ("192.31.196.77", "192.31.196.0/24"),
    (" 8.8.8.8 ", "8.8.8.0/24"),
    ("100.64.3.4", "100.64.3.4/32"),  # carrier-grade NAT (shared address space): reachable only from inside it
    ("2620:4f:1:2:3::5", "2620:4f:1::/48"),
    ("[2620:4f:1::5]", "2620:4f:1::/48"),
    ("::ffff:192.31.196.7", "192.31.196.0/24"),
    ("127.0.0.5", "127.0.0.5/32"),
    ("10.1.2.3", "10.1.2.3/32"),
    ("172.16.9.9", "172.16.9.9/32"),
    ("172.32.9.9", "172.32.9.0/24"),  # just outside 172.16.0.0/12
    ("192.168.0.1", "192.168.0.1/32"),
    ("169.254.1.1", "169.254.1.1/32"),
    ("::1", "::1/128"),
    ("fd12:3456::1", "fd12:3456::1/128"),
    ("fe80::1", "fe80::1/128"),
    ("fe80::1%eth0", "fe80::1/128"),
    ("198.51.100.7", "unknown"),  # documentation, benchmarking: special-purpose, no sender sits there
    ("198.18.0.1", "unknown"),
    ("2001:db8::1", "unknown"),
    ("64:ff9b::c01f:c401", "192.31.196.0/24"),  # NAT64 reaches that IPv4 host
    ("::ffff:10.1.2.3", "10.1.2.3/32"),
    ("0.0.0.0", "unknown"),
    ("::", "unknown"),
    ("224.0.0.1", "unknown"),
    ("example.org", "unknown"),
    ("", "unknown"),
    (None, "unknown"),
    ("1.2.3", "unknown"),
], ids=str)
def test_network_prefix(host, prefix):
    assert network_prefix(host) == prefix


@pytest.mark.parametrize("text,policy", [
    ("origin", TrustPolicy("origin")),
    ("any", TrustPolicy("any")),
    (" ANY ", TrustPolicy("any")),
    ("quorum:1", TrustPolicy("quorum", 1)),
    ("Quorum:2", TrustPolicy("quorum", 2)),
    ("quorum:16", TrustPolicy("quorum", 16)),
], ids=str)
def test_parse_trust(text, policy):
    assert parse_trust(text) == policy
    assert parse_trust(str(policy)) == policy  # str() is the canonical spelling


@pytest.mark.parametrize("text", ["", "none", "quorum", "quorum:", "quorum:0", "quorum:17", "quorum:-1",
                                  "quorum:+2", "quorum:2.0", "quorum:two", "quorum: 2", "quorum:002", "any:1"])
def test_parse_trust_refuses(text):
    with pytest.raises(ValueError, match="'origin', 'any' or 'quorum:N' with N from 1 to 16"):
        parse_trust(text)


@pytest.mark.parametrize("policy, headless", [
    ("quorum:2", TrustPolicy("quorum", 3)),
    ("quorum:16", TrustPolicy("quorum", 17)),
    ("any", TrustPolicy("any")),
    ("origin", TrustPolicy("origin")),
])
def test_headless_policy_asks_one_more_network(policy, headless):
    assert parse_trust(policy).headless() == headless


def test_constants_match_swarm_and_dht():
    from dht import records
    from swarm.content import manifest

    assert mt.MIN_BLOCK_SIZE == manifest.MIN_BLOCK_SIZE
    assert mt.ROOT_BYTES == records.KEY_BYTES


hosts = st.one_of(st.none(), st.sampled_from(["192.31.196.1", "192.31.196.2", "192.175.48.5", "127.0.0.1",
                                              "127.0.0.2", "2620:4f:1::1", "2620:4f:2::1", "example.org"]))
vouches = st.lists(st.builds(
    lambda pid, host, root, validator: v(pid, host, root=root, validator=validator),
    st.sampled_from(["a", "b", "c", "d", "e"]), hosts, st.sampled_from([ROOT_A, ROOT_B]), st.sampled_from([V1, V2]),
), max_size=12)


@settings(max_examples=300, deadline=None)
@given(candidates=vouches, policy=st.sampled_from(["quorum:1", "quorum:2", "quorum:3", "any"]), seed=st.randoms())
def test_decision_is_order_independent_and_sound(candidates, policy, seed):
    parsed = parse_trust(policy)
    decision = decide(candidates, parsed)
    shuffled = list(candidates)
    seed.shuffle(shuffled)
    assert decide(shuffled, parsed) == decision
    if decision.accepted is None:
        assert decision.source == "none"
        return
    assert decision.source == parsed.mode
    backers = [c for c in candidates if ManifestClaim(c.content_root, c.size, c.block_size, c.validator)
               == decision.accepted]
    # never more weight than distinct ids, nor than distinct prefixes, behind the accepted manifest
    assert decision.publishers <= len({c.publisher_id for c in backers})
    assert decision.publishers <= len({network_prefix(c.publisher_host) for c in backers})
    if parsed.mode == "quorum":
        assert decision.publishers >= parsed.quorum


ATTACKER_HOSTS = ["192.31.196.1", "192.175.48.1", "192.52.193.1", "2620:4f:1::1", "127.0.0.9"]
CLAIMABLE = ["192.31.197.1", "8.8.8.8", "9.9.9.9", "2620:4f:7::1", "127.0.0.10", "100.64.0.3"]


@settings(max_examples=300, deadline=None)
@given(owned=st.integers(1, len(ATTACKER_HOSTS)), choices=st.lists(st.tuples(
    st.booleans(), st.integers(0, 20), st.sampled_from(CLAIMABLE), st.sets(st.integers(0, 20), max_size=4)),
    max_size=12))
def test_a_party_weighs_at_most_its_own_networks(owned, choices):
    """Whatever keys, claimed hosts and attestations a party with `owned` real networks makes up (each publisher
    seen first-hand at one of its hosts, or at a claimed host attested by storing nodes in its networks), it
    never weighs more than `owned`."""
    mine = ATTACKER_HOSTS[:owned]
    networks = [network_prefix(host) for host in mine]
    forged = [v(f"k{i}", mine[pick % owned]) if first_hand else
              v(f"k{i}", claimed, by=tuple(networks[a % owned] for a in attesters) or (networks[0],))
              for i, (first_hand, pick, claimed, attesters) in enumerate(choices)]
    assert mt._weight(forged) <= owned
