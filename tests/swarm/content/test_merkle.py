"""Merkle trees, block layers, proofs: hand-built vectors, streaming invariance, and tampering."""

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.content import merkle
from swarm.errors import HashMismatch, PeerError

KIB = 1024
LEAF = merkle.LEAF_SIZE
Z = merkle.ZERO_HASH


def h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def pair(left: bytes, right: bytes) -> bytes:
    return h(left + right)


A, B, C = b"a" * LEAF, b"b" * LEAF, b"c" * 5

# (content, root built by hand from BEP 52's rules)
HAND_BUILT = [
    (b"", Z),
    (b"x", h(b"x")),  # one short leaf: no padding, the leaf hash is the root
    (A, h(A)),
    (A + C, pair(h(A), h(C))),  # a short last leaf is hashed as is
    (A + B + C, pair(pair(h(A), h(B)), pair(h(C), Z))),  # pad leaves are zero hashes, not hashes of zeros
    (A * 5, pair(pair(pair(h(A), h(A)), pair(h(A), h(A))), pair(pair(h(A), Z), pair(Z, Z)))),
]


@pytest.mark.parametrize("data, expected", HAND_BUILT, ids=lambda v: str(len(v)) if isinstance(v, bytes) else None)
def test_merkle_root_matches_hand_built_tree(data, expected):
    assert merkle.merkle_root(data) == expected


def test_pad_hash_is_the_root_of_zero_leaves():
    assert merkle.pad_hash(0) == Z
    assert merkle.pad_hash(1) == pair(Z, Z)
    assert merkle.pad_hash(2) == pair(pair(Z, Z), pair(Z, Z))


@pytest.mark.parametrize(
    "size, block_size, height",
    [
        (1, 16 * KIB, 0),
        (1, 64 * KIB, 0),  # content smaller than a block: the layer is the (shallower) root
        (3 * LEAF, 64 * KIB, 2),
        (4 * LEAF, 64 * KIB, 2),
        (4 * LEAF + 1, 64 * KIB, 2),
        (10 * 1024 * KIB, 16 * KIB, 0),
        (10 * 1024 * KIB, 1024 * KIB, 6),
    ],
)
def test_layer_height(size, block_size, height):
    assert merkle.layer_height(size, block_size) == height


@pytest.mark.parametrize("block_size", [0, 8 * KIB, 48 * KIB])
def test_block_size_must_be_a_power_of_two_of_at_least_a_leaf(block_size):
    with pytest.raises(ValueError):
        merkle.layer_height(1, block_size)


def test_block_layer_of_two_blocks_pads_the_last_block_to_full_height():
    data = A * 4 + B  # blocks of 4 leaves: [A A A A] [B 0 0 0]
    root, layer = merkle.block_layer([data], len(data), 64 * KIB)
    first = pair(pair(h(A), h(A)), pair(h(A), h(A)))
    second = pair(pair(h(B), Z), pair(Z, Z))
    assert layer == [first, second]
    assert root == pair(first, second) == merkle.merkle_root(data)


def test_empty_content_has_zero_root_and_empty_layer():
    assert merkle.block_layer([], 0, 16 * KIB) == (Z, [])
    merkle.verify_layer(Z, [], 0, 16 * KIB)


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(0, 6 * LEAF + 7),
    cuts=st.lists(st.integers(0, 6 * LEAF + 7), max_size=8),
    block_size=st.sampled_from([16 * KIB, 32 * KIB, 64 * KIB, 256 * KIB]),
)
def test_streaming_is_independent_of_chunking(size, cuts, block_size):
    data = bytes(i % 251 for i in range(size))
    bounds = sorted({0, size, *(c for c in cuts if c <= size)})
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    root, layer = merkle.block_layer(pieces, size, block_size)
    assert root == merkle.merkle_root(data)
    merkle.verify_layer(root, layer, size, block_size)
    for index in range(len(layer)):
        merkle.verify_block(layer, index, data[index * block_size : (index + 1) * block_size], size, block_size)


def test_one_byte_chunks():
    data = bytes(range(256)) * 100
    hasher = merkle.MerkleHasher(len(data), 16 * KIB)
    for i in range(len(data)):
        hasher.update(data[i : i + 1])
    assert hasher.finish() == merkle.block_layer([data], len(data), 16 * KIB)


def test_hasher_refuses_more_or_fewer_bytes_than_announced():
    hasher = merkle.MerkleHasher(10, 16 * KIB)
    with pytest.raises(ValueError):
        hasher.update(b"x" * 11)
    hasher = merkle.MerkleHasher(10, 16 * KIB)
    hasher.update(b"x" * 9)
    with pytest.raises(ValueError):
        hasher.finish()


SIZE = 5 * 64 * KIB + 3  # 6 blocks of 64 KiB, padded layer of 8
DATA = random.Random(7).randbytes(SIZE)
BLOCK = 64 * KIB
ROOT, LAYER = merkle.block_layer([DATA], SIZE, BLOCK)


def flipped(value: bytes, index: int = 0) -> bytes:
    return value[:index] + bytes([value[index] ^ 1]) + value[index + 1 :]


@pytest.mark.parametrize(
    "layer",
    [
        LAYER[:-1],
        LAYER + [Z],
        [flipped(LAYER[0])] + LAYER[1:],
        LAYER[:-1] + [flipped(LAYER[-1], 31)],
        LAYER[:2] + [LAYER[2][:31]] + LAYER[3:],
        list(reversed(LAYER)),
    ],
    ids=["short", "long", "first-tampered", "last-tampered", "short-hash", "reordered"],
)
def test_verify_layer_rejects(layer):
    with pytest.raises(HashMismatch):
        merkle.verify_layer(ROOT, layer, SIZE, BLOCK)


def test_verify_layer_rejects_the_wrong_root():
    with pytest.raises(HashMismatch):
        merkle.verify_layer(flipped(ROOT), LAYER, SIZE, BLOCK)


@pytest.mark.parametrize(
    "index, data",
    [
        (0, flipped(DATA[:BLOCK], 5000)),
        (0, DATA[:BLOCK - 1]),
        (5, DATA[5 * BLOCK :] + b"\0"),  # the last block is short; zero bytes are not padding
        (1, DATA[:BLOCK]),
        (6, DATA[:3]),
        (-1, DATA[5 * BLOCK :]),
    ],
    ids=["flipped", "short", "padded-last", "wrong-index", "past-end", "negative"],
)
def test_verify_block_rejects(index, data):
    with pytest.raises(HashMismatch) as caught:
        merkle.verify_block(LAYER, index, data, SIZE, BLOCK)
    assert isinstance(caught.value, PeerError)


def aligned_ranges(num_blocks: int):
    count = 1
    while count <= 1 << (num_blocks - 1).bit_length():
        for first in range(0, num_blocks, count):
            yield first, count
        count *= 2


@pytest.mark.parametrize("first, count", list(aligned_ranges(len(LAYER))))
def test_every_aligned_layer_range_proves_to_the_root(first, count):
    height = merkle.layer_height(SIZE, BLOCK)
    proof = merkle.layer_range_proof(LAYER, first, count, height)
    merkle.verify_layer_range(ROOT, SIZE, BLOCK, first, count, LAYER[first : first + count], proof)


def test_single_block_content_range_needs_no_proof():
    root, layer = merkle.block_layer([b"abc"], 3, BLOCK)
    assert merkle.layer_range_proof(layer, 0, 1, 0) == []
    merkle.verify_layer_range(root, 3, BLOCK, 0, 1, layer, [])


GOOD_PROOF = merkle.layer_range_proof(LAYER, 4, 2, 2)


@pytest.mark.parametrize(
    "first, count, hashes, proof",
    [
        (4, 2, [flipped(LAYER[4]), LAYER[5]], GOOD_PROOF),
        (4, 2, LAYER[4:6], [flipped(GOOD_PROOF[0])] + GOOD_PROOF[1:]),
        (4, 2, LAYER[4:6], GOOD_PROOF[:-1]),
        (4, 2, LAYER[4:6], GOOD_PROOF + [Z]),
        (4, 2, LAYER[4:5], GOOD_PROOF),
        (2, 2, LAYER[4:6], GOOD_PROOF),  # right hashes, claimed at the wrong place
        (3, 2, LAYER[3:5], GOOD_PROOF),  # unaligned
        (4, 3, LAYER[4:6], GOOD_PROOF),  # not a power of two
        (6, 2, [Z, Z], GOOD_PROOF),  # wholly past the end of the layer
        (0, 16, LAYER, []),  # wider than the padded layer
    ],
    ids=["tampered-hash", "tampered-proof", "short-proof", "long-proof", "missing-hash", "misplaced", "unaligned",
         "not-power-of-two", "past-end", "too-wide"],
)
def test_verify_layer_range_rejects(first, count, hashes, proof):
    with pytest.raises(HashMismatch):
        merkle.verify_layer_range(ROOT, SIZE, BLOCK, first, count, hashes, proof)
