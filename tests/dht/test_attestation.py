"""`dht.attestation` and `addresses.canonical_host`: a host written in a record counts only where storing nodes
saw it. (`network_prefix`'s table is in tests/swarm/trust/test_quorum.py, beside the quorum that uses it.)"""

from __future__ import annotations

import pytest

from addresses import canonical_host
from dht.attestation import MIN_ATTESTING_NETWORKS, Attestations
from dht.identity import NodeIdentity
from dht.records import ManifestRecord

ALICE, MALLORY = NodeIdentity.generate(), NodeIdentity.generate()


def manifest(identity=ALICE, host="192.31.196.7") -> ManifestRecord:
    return ManifestRecord.create(identity, repr_key=b"k" * 32, content_root=b"r" * 32, size=10, block_size=1 << 14,
                                 validator='"v"', host=host, now=1000.0, ttl_s=600)


@pytest.mark.parametrize("host, canonical", [
    ("192.175.48.7", "192.175.48.7"),
    ("::ffff:192.175.48.7", "192.175.48.7"),  # how a dual-stack socket reports an IPv4 sender
    ("[::1]", "::1"),
    ("0:0::1", "::1"),
    ("2620:4F::5", "2620:4f::5"),
    ("example.org", None),
    ("", None),
    (None, None),
])
def test_canonical_host(host, canonical):
    assert canonical_host(host) == canonical


# Each row: what storing nodes reported about ALICE's record claiming 192.31.196.7, as (observed, responder);
# responder None is our own store. Then: the host the reader may count, or None.
CLAIM = "192.31.196.7"
ROWS = [
    ("nobody said anything", [], None),
    ("our own store saw it arrive from the claimed host", [(CLAIM, None)], CLAIM),
    ("our own store has it but did not observe it (we published it)", [(None, None)], None),
    ("one remote storer: one network is not enough", [(CLAIM, "192.52.193.1")], None),
    ("two storers in one /24: still one network", [(CLAIM, "192.52.193.1"), (CLAIM, "192.52.193.200")], None),
    ("two storers in two networks", [(CLAIM, "192.52.193.1"), (CLAIM, "192.175.48.5")], CLAIM),
    ("two networks, but one saw another address", [(CLAIM, "192.52.193.1"), ("192.175.48.66", "192.175.48.5")], None),
    ("the mapped spelling of the same address counts", [("::ffff:" + CLAIM, "192.52.193.1"), (CLAIM, "192.175.48.5")],
     CLAIM),
    ("storers that did not observe it vouch for nothing", [(None, "192.52.193.1"), (None, "192.175.48.5")], None),
    ("two loopback storers are two machines", [(CLAIM, "127.0.0.2"), (CLAIM, "127.0.0.3")], CLAIM),
]


@pytest.mark.parametrize("what, reports, expected", ROWS, ids=[row[0] for row in ROWS])
def test_attested_host(what, reports, expected):
    record = manifest()
    attestations = Attestations()
    for observed, responder in reports:
        attestations.observe(record, observed, responder)
    assert attestations.host(record) == expected


@pytest.mark.parametrize("reports, attesters", [
    ([(CLAIM, None), (CLAIM, "192.52.193.1"), (CLAIM, "192.175.48.5")], set()),  # our store saw it: first-hand
    ([(CLAIM, "192.52.193.1"), (CLAIM, "192.52.193.9"), (CLAIM, "192.175.48.5")], {"192.52.193.0/24",
                                                                                 "192.175.48.0/24"}),
    ([(CLAIM, "192.52.193.1")], set()),  # not attested at all: nothing to spend
])
def test_attesters_are_the_networks_a_quorum_spends(reports, attesters):
    record = manifest()
    attestations = Attestations()
    for observed, responder in reports:
        attestations.observe(record, observed, responder)
    assert attestations.attesters(record) == attesters


def test_minimum_is_two_networks():
    assert MIN_ATTESTING_NETWORKS == 2  # the module docstring's argument needs more than one storer's word


def test_attestation_is_per_publisher_and_host():
    honest, forged = manifest(ALICE), manifest(MALLORY, host="192.175.48.9")
    attestations = Attestations()
    for responder in ("192.52.193.1", "192.175.48.5"):
        attestations.observe(honest, CLAIM, responder)
    # Mallory's record is carried by the same storers, but they saw it come from Mallory's real address.
    for responder in ("192.52.193.1", "192.175.48.5"):
        attestations.observe(forged, "192.52.193.66", responder)
    assert attestations.host(honest) == CLAIM
    assert attestations.host(forged) is None
    # ALICE's key observed at her address says nothing for a record of hers that claims another one.
    assert attestations.host(manifest(ALICE, host="192.175.48.9")) is None
