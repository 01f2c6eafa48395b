"""Records: canonical encoding round trips, size caps, malformed input, signatures, representation keys."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dht.errors import BadSignature, InvalidArgument, MalformedRecord, PeerError
from dht.identity import NodeIdentity
from dht.records import (
    KIND_MANIFEST,
    KIND_PROVIDER,
    MAX_RECORD_BYTES,
    MAX_TTL_S,
    ManifestRecord,
    ProviderRecord,
    Transport,
    decode_record,
    dht_key,
    representation_key,
)

ALICE = NodeIdentity.generate()
ROOT = bytes(range(32))
RKEY = representation_key("https://example.org/file.iso", '"etag-1"')


def provider(identity=ALICE, **overrides):
    args = dict(root=ROOT, host="192.0.2.7", port=6881, transports=Transport.TCP | Transport.QUIC, now=1000.0,
                ttl_s=1800)
    args.update(overrides)
    return ProviderRecord.create(identity, **args)


def manifest(identity=ALICE, **overrides):
    args = dict(repr_key=RKEY, content_root=ROOT, size=10**9, block_size=1 << 20, validator='"etag-1"',
                host="198.51.100.7", now=1000.0, ttl_s=3600)
    args.update(overrides)
    return ManifestRecord.create(identity, **args)


@pytest.mark.parametrize("host", ["192.0.2.7", "2001:db8::1", "::1", "127.0.0.1"])
def test_provider_round_trip(host):
    record = provider(host=host)
    decoded = decode_record(record.encode())
    assert decoded == record
    assert decoded.address == (host, 6881)
    assert decoded.node_id == ALICE.node_id
    assert decoded.kind == KIND_PROVIDER and decoded.key == ROOT
    assert decoded.expires_at == 1000.0 + 1800
    decoded.verify()
    assert len(record.encode()) <= 162


def test_manifest_round_trip_and_size():
    record = manifest(validator="v" * 200)
    decoded = decode_record(record.encode())
    assert decoded == record and decoded.kind == KIND_MANIFEST
    assert decoded.publisher_id == ALICE.node_id
    assert decoded.validator == b"v" * 200
    decoded.verify()
    assert len(record.encode()) <= MAX_RECORD_BYTES


@pytest.mark.parametrize("block_size", [0, 1000, 3 * 16384, 1 << 30, (1 << 32) - 1])
def test_manifest_block_size_is_opaque_to_the_dht(block_size):
    # The block engine's rule is checked by the records' readers (swarm.trust.quorum, swarm.content.manifest),
    # not here.
    record = manifest(block_size=block_size)
    assert decode_record(record.encode()).block_size == block_size


@pytest.mark.parametrize(
    "factory, overrides",
    [
        (provider, dict(root=b"short")),
        (provider, dict(port=0)),
        (provider, dict(port=70000)),
        (provider, dict(host="example.org")),
        (provider, dict(transports=0)),
        (provider, dict(transports=8)),
        (provider, dict(ttl_s=MAX_TTL_S + 1)),
        (provider, dict(ttl_s=-1)),
        (manifest, dict(block_size=-1)),
        (manifest, dict(block_size=1 << 32)),
        (manifest, dict(size=-1)),
        (manifest, dict(validator="")),
        (manifest, dict(validator="v" * 201)),
        (manifest, dict(content_root=b"x" * 31)),
    ],
)
def test_invalid_arguments_are_local_errors(factory, overrides):
    with pytest.raises(InvalidArgument):
        factory(**overrides)


def _resign(body_tamper):
    """Return bytes of a provider record altered by body_tamper (signature no longer matches)."""
    return body_tamper(bytearray(provider().encode()))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",
        b"\x01\x01" + b"\x00" * 50,
        b"\x09" + provider().encode()[1:],  # unknown version
        b"\x01" + manifest().encode()[1:],  # version 1: a manifest without its publisher's host
        provider().encode()[:1] + b"\x09" + provider().encode()[2:],  # unknown kind
        provider().encode() + b"\x00",  # trailing byte
        provider().encode()[:-1],  # truncated
        b"\x00" * (MAX_RECORD_BYTES + 1),
        manifest().encode()[:50],
    ],
    ids=lambda data: f"{len(data)}-bytes",  # the records hold random keys: ids of their bytes would differ per run
)
def test_decode_rejects_malformed(data):
    with pytest.raises(MalformedRecord) as info:
        decode_record(data)
    assert isinstance(info.value, PeerError)


def test_decode_rejects_wrong_type():
    with pytest.raises(MalformedRecord):
        decode_record("not bytes")  # type: ignore[arg-type]


def test_decode_rejects_out_of_range_fields():
    wire = bytearray(provider().encode())
    struct.pack_into(">I", wire, 42, MAX_TTL_S + 1)  # ttl field
    with pytest.raises(MalformedRecord, match="ttl"):
        decode_record(bytes(wire))
    wire = bytearray(provider().encode())
    wire[34 + 12 + 32] = 5  # address family
    with pytest.raises(MalformedRecord, match="family"):
        decode_record(bytes(wire))


def test_tampered_record_fails_signature():
    wire = bytearray(provider().encode())
    wire[80] ^= 1  # inside the body
    record = decode_record(bytes(wire))
    assert not record.has_valid_signature()
    with pytest.raises(BadSignature):
        record.verify()


def test_record_under_another_publishers_key_fails():
    """Mallory takes Alice's record and puts her own key in: the signature no longer verifies."""
    mallory = NodeIdentity.generate()
    wire = bytearray(provider().encode())
    wire[2:34] = mallory.public_key
    with pytest.raises(BadSignature):
        decode_record(bytes(wire)).verify()


def test_representation_key():
    a = representation_key("https://example.org/a", '"v1"')
    assert len(a) == 32
    assert a == representation_key("https://example.org/a#fragment", '"v1"')  # fragment is not part of it
    assert a == representation_key("https://example.org/a", b'"v1"')
    assert a != representation_key("https://example.org/a", '"v2"')
    assert a != representation_key("https://example.org/", 'a"v1"')  # no ambiguity from shifting bytes
    assert b"example" not in a
    with pytest.raises(InvalidArgument):
        representation_key("https://example.org/a", "")


def test_dht_key_separates_kinds():
    assert len(dht_key(KIND_PROVIDER, ROOT)) == 20
    assert dht_key(KIND_PROVIDER, ROOT) != dht_key(KIND_MANIFEST, ROOT)
    assert provider().dht_key == dht_key(KIND_PROVIDER, ROOT)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=MAX_RECORD_BYTES + 10))
def test_decode_random_bytes_only_raises_malformed(data):
    try:
        record = decode_record(data)
    except MalformedRecord:
        return
    assert not record.has_valid_signature()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(provider().encode()) - 1), st.integers(1, 255))
def test_any_single_byte_flip_is_rejected(position, flip):
    wire = bytearray(provider().encode())
    wire[position] ^= flip
    try:
        record = decode_record(bytes(wire))
    except MalformedRecord:
        return
    assert not record.has_valid_signature()
