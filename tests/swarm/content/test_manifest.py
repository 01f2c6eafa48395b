"""Manifest: block-size rule, strict canonical encoding, and checks against a manifest."""

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.content import manifest as mf
from swarm.content import merkle
from swarm.content.manifest import Manifest
from swarm.errors import HashMismatch, ManifestError, PeerError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
ROOT = bytes(range(32))


@pytest.mark.parametrize(
    "size, block_size",
    [
        (0, 16 * KIB),
        (1, 16 * KIB),
        (32 * MIB, 16 * KIB),  # 2,048 blocks of 16 KiB
        (32 * MIB + 1, 32 * KIB),  # 1,025 blocks
        (100 * MIB, 64 * KIB),
        (1 * GIB, 512 * KIB),
        (8 * GIB, 4 * MIB),
        (8 * GIB + 1, 4 * MIB),  # capped: the block count grows instead
        (1024 * GIB, 4 * MIB),
        (mf.MAX_SIZE, 4 * MIB),  # MAX_BLOCKS blocks of the largest size: 64 TiB
    ],
)
def test_choose_block_size(size, block_size):
    assert mf.choose_block_size(size) == block_size
    Manifest(size=size, block_size=block_size, root=ROOT if size else bytes(32))  # always a valid manifest


@settings(max_examples=200, deadline=None)
@given(st.integers(0, mf.MAX_SIZE))
def test_chosen_block_size_is_a_power_of_two_in_range_with_few_blocks(size):
    block_size = mf.choose_block_size(size)
    assert block_size & (block_size - 1) == 0
    assert mf.MIN_BLOCK_SIZE <= block_size <= mf.MAX_BLOCK_SIZE
    blocks = -(-size // block_size)
    assert blocks <= mf.MAX_BLOCKS
    if block_size < 4 * MIB:
        assert blocks <= 2048


@pytest.mark.parametrize("size", [-1, mf.MAX_SIZE + 1])
def test_choose_block_size_rejects_impossible_sizes(size):
    with pytest.raises(ValueError):
        mf.choose_block_size(size)


FULL = Manifest(
    size=10 * MIB + 3,
    block_size=16 * KIB,
    root=ROOT,
    url="https://example.org/a/b.iso?x=1",
    validator='"abc-123"',
    content_type="application/octet-stream",
    content_encoding="gzip",
)
MINIMAL = Manifest(size=1, block_size=16 * KIB, root=ROOT)
LIMITS = Manifest(
    size=mf.MAX_SIZE,
    block_size=mf.MAX_BLOCK_SIZE,
    root=ROOT,
    url="u" * mf.MAX_URL_LENGTH,
    validator="é" * (mf.MAX_STRING_LENGTH // 2),
    content_type="t" * mf.MAX_STRING_LENGTH,
    content_encoding="e" * mf.MAX_STRING_LENGTH,
)


@pytest.mark.parametrize("manifest", [FULL, MINIMAL, LIMITS, Manifest(0, 16 * KIB, bytes(32), validator="W/x")])
def test_round_trip(manifest):
    encoded = manifest.encode()
    assert mf.decode(encoded) == manifest
    assert mf.decode(memoryview(bytearray(encoded))) == manifest
    assert len(encoded) <= mf.MAX_ENCODED_SIZE


def test_limits_manifest_is_the_largest_encoding():
    assert len(LIMITS.encode()) == mf.MAX_ENCODED_SIZE


def test_minimal_encoding_layout():
    assert MINIMAL.encode() == bytes([1]) + (1).to_bytes(8, "big") + bytes([14]) + ROOT + bytes([0])


text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40)


@settings(max_examples=100, deadline=None)
@given(
    size=st.integers(1, mf.MAX_SIZE),
    root=st.binary(min_size=32, max_size=32),
    url=st.none() | text,
    validator=st.none() | text,
    content_type=st.none() | text,
    content_encoding=st.none() | text,
)
def test_round_trip_property(size, root, url, validator, content_type, content_encoding):
    manifest = Manifest(size, mf.choose_block_size(size), root, url, validator, content_type, content_encoding)
    assert mf.decode(manifest.encode()) == manifest


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_manifest_error(data):
    try:
        manifest = mf.decode(data)
    except ManifestError:
        return
    assert manifest.encode() == data  # whatever is accepted is canonical


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_encodings_raise_only_manifest_error(data):
    encoded = bytearray(FULL.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    try:
        manifest = mf.decode(bytes(encoded))
    except ManifestError:
        return
    assert manifest.encode() == bytes(encoded)


def header(version=1, size=1, shift=14, root=ROOT, flags=0) -> bytes:
    return struct.pack(">BQB32sB", version, size, shift, root, flags)


def field(raw: bytes) -> bytes:
    return len(raw).to_bytes(2, "big") + raw


REJECTED = {
    "empty": b"",
    "truncated-header": header()[:-1],
    "version-0": header(version=0),
    "version-2": header(version=2),
    "block-8KiB": header(shift=13),
    "block-32MiB": header(shift=25),
    "block-shift-255": header(shift=255),
    "size-over-limit": header(size=mf.MAX_SIZE + 1),
    "size-u64-max": header(size=2**64 - 1),
    "too-many-blocks": header(size=mf.MAX_BLOCKS * 16 * KIB + 1),
    "empty-with-nonzero-root": header(size=0),
    "unknown-flag": header(flags=0x10),
    "flag-without-field": header(flags=0x01),
    "field-length-truncated": header(flags=0x01) + b"\x00",
    "field-body-truncated": header(flags=0x01) + b"\x00\x05abc",
    "empty-field": header(flags=0x01) + field(b""),
    "url-too-long": header(flags=0x01) + field(b"u" * (mf.MAX_URL_LENGTH + 1)),
    "validator-too-long": header(flags=0x02) + field(b"v" * (mf.MAX_STRING_LENGTH + 1)),
    "invalid-utf8": header(flags=0x04) + field(b"\xff\xfe"),
    "utf8-surrogate": header(flags=0x04) + field(b"\xed\xa0\x80"),
    "header-injection": header(flags=0x04) + field(b"text/html\r\nSet-Cookie: a=b"),
    "nul-byte": header(flags=0x08) + field(b"gz\x00ip"),
    "trailing-byte": header() + b"\x00",
    "trailing-after-field": header(flags=0x01) + field(b"u") + b"x",
    "oversized": header() + b"\x00" * mf.MAX_ENCODED_SIZE,
}


@pytest.mark.parametrize("encoded", REJECTED.values(), ids=REJECTED.keys())
def test_decode_rejects(encoded):
    with pytest.raises(ManifestError) as caught:
        mf.decode(encoded)
    assert isinstance(caught.value, PeerError)


BAD_FIELDS = {
    "negative-size": dict(size=-1),
    "bool-size": dict(size=True),
    "float-block": dict(block_size=16384.0),
    "block-not-power-of-two": dict(block_size=48 * KIB),
    "root-short": dict(root=ROOT[:31]),
    "root-str": dict(root="0" * 32),
    "empty-url": dict(url=""),
    "bytes-validator": dict(validator=b"x"),
    "control-in-type": dict(content_type="a\nb"),
    "lone-surrogate": dict(content_encoding="\udc80"),
    "long-url": dict(url="é" * (mf.MAX_URL_LENGTH // 2 + 1)),
}


@pytest.mark.parametrize("changes", BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
def test_constructor_rejects(changes):
    fields = dict(size=1, block_size=16 * KIB, root=ROOT) | changes
    with pytest.raises(ManifestError):
        Manifest(**fields)


def test_block_span():
    manifest = Manifest(size=5 * 16 * KIB + 3, block_size=32 * KIB, root=ROOT)
    assert manifest.num_blocks == 3
    assert [manifest.block_span(i) for i in range(3)] == [(0, 32 * KIB), (32 * KIB, 32 * KIB), (64 * KIB, 16 * KIB + 3)]
    for index in (-1, 3):
        with pytest.raises(IndexError):
            manifest.block_span(index)


def test_build_manifest_and_verify_blocks_through_it():
    size = 3 * 16 * KIB + 100
    data = random.Random(1).randbytes(size)
    manifest, layer = mf.build_manifest(
        (data[i : i + 1000] for i in range(0, size, 1000)), size, url="http://h/f", validator='"v"'
    )
    assert (manifest.size, manifest.block_size) == (size, 16 * KIB)
    assert (manifest.url, manifest.validator) == ("http://h/f", '"v"')
    assert manifest.num_blocks == len(layer) == 4
    manifest.verify_layer(layer)
    for index in range(manifest.num_blocks):
        offset, length = manifest.block_span(index)
        manifest.verify_block(layer, index, data[offset : offset + length])
    proof = merkle.layer_range_proof(layer, 2, 2, manifest.layer_height)
    manifest.verify_layer_range(2, 2, layer[2:], proof)
    with pytest.raises(HashMismatch):
        manifest.verify_block(layer, 3, data[-100:-1] + b"?")
    with pytest.raises(HashMismatch):
        manifest.verify_layer(layer[::-1])


def test_build_manifest_honours_an_explicit_block_size():
    manifest, layer = mf.build_manifest([b"x" * 70_000], 70_000, block_size=64 * KIB)
    assert (manifest.block_size, len(layer)) == (64 * KIB, 2)
