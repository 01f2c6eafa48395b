"""SHA-256 merkle trees over 16 KiB leaves, exactly as BitTorrent v2 (BEP 52) builds a file's `pieces root`.

Pure functions, no I/O. The tree, as BEP 52 and libtorrent 2.x build it (checked by
tests/swarm/content/test_merkle_libtorrent.py against libtorrent's `create_torrent`):

* leaves are SHA-256 of consecutive 16 KiB slices of the content; the last slice may be short and is hashed as is
  (not padded with zero bytes);
* the leaf layer is padded up to the next power of two *of the file's own leaf count* with 32 zero bytes (the
  zero hash is used directly as a pad leaf, it is not the hash of a zero block). So a file of one leaf has its
  leaf hash as root, even when the piece size is larger;
* an inner node is SHA-256(left || right).

The **block layer** (BEP 52's "piece layer") is the row of the tree whose nodes cover one block each. For a file
that fits in one block the tree is shallower than a block subtree, so the layer is the root alone — BEP 52 likewise
sends no piece layer for such files. Its height above the leaves is therefore
`min(log2(block_size / 16 KiB), tree height)`; see `layer_height`.

Empty content has no BEP 52 root (libtorrent refuses to make a torrent of it); our convention is the zero hash
and an empty block layer.

Verifying a layer received from a peer pads it to a power of two with the root of an all-zero-leaf subtree of the
layer's height and reduces it; verifying a sub-range uses sibling hashes ("proof", uncle hashes) as BEP 52's hash
requests do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from hashlib import sha256

from swarm.errors import HashMismatch

__all__ = [
    "LEAF_SIZE",
    "HASH_SIZE",
    "MAX_PROOF_LENGTH",
    "ZERO_HASH",
    "MerkleHasher",
    "pad_hash",
    "leaf_count",
    "block_count",
    "tree_height",
    "layer_height",
    "reduce_layer",
    "subtree_root",
    "merkle_root",
    "block_layer",
    "block_hash",
    "verify_layer",
    "verify_block",
    "layer_range_proof",
    "verify_layer_range",
]

LEAF_SIZE = 16 * 1024
HASH_SIZE = 32
ZERO_HASH = bytes(HASH_SIZE)

# A proof never needs more sibling hashes than the tree is high; 2**64 leaves is far beyond any size we accept.
MAX_PROOF_LENGTH = 64


def _ceil_log2(n: int) -> int:
    return (n - 1).bit_length() if n > 1 else 0


def _hash_pair(left: bytes, right: bytes) -> bytes:
    return sha256(left + right).digest()


@lru_cache(maxsize=MAX_PROOF_LENGTH + 1)
def pad_hash(height: int) -> bytes:
    """Root of a subtree of `2**height` zero-hash leaves: the filler for a layer at that height."""
    if height < 0:
        raise ValueError("height must be >= 0")
    node = ZERO_HASH
    for _ in range(height):
        node = _hash_pair(node, node)
    return node


def leaf_count(size: int) -> int:
    """Number of 16 KiB leaves of content of `size` bytes (the last may be short)."""
    return -(-size // LEAF_SIZE)


def block_count(size: int, block_size: int) -> int:
    return -(-size // block_size)


def tree_height(size: int) -> int:
    """Height of the whole tree above its leaves (0 for content of at most one leaf)."""
    return _ceil_log2(leaf_count(size))


def _check_block_size(block_size: int) -> None:
    if block_size < LEAF_SIZE or block_size & (block_size - 1):
        raise ValueError(f"block size must be a power of two >= {LEAF_SIZE}, got {block_size}")


def layer_height(size: int, block_size: int) -> int:
    """Height above the leaves of the block layer; smaller than a block's subtree when the file fits in a block."""
    _check_block_size(block_size)
    return min((block_size // LEAF_SIZE).bit_length() - 1, tree_height(size))


def reduce_layer(nodes: Sequence[bytes], height: int) -> bytes:
    """Root of the tree whose row at `height` is `nodes`, padded to a power of two with `pad_hash(height)`."""
    if not nodes:
        return pad_hash(height)
    row = list(nodes)
    while len(row) > 1:
        if len(row) % 2:
            row.append(pad_hash(height))
        row = [_hash_pair(row[i], row[i + 1]) for i in range(0, len(row), 2)]
        height += 1
    return row[0]


def subtree_root(nodes: Sequence[bytes], span: int, height: int = 0) -> bytes:
    """Root of a subtree `2**span` nodes wide at `height`, starting with `nodes`, the rest padding.

    Unlike `reduce_layer`, which stops at the smallest power of two covering `nodes`, this reaches the full
    width: a block cut short by the end of the content, or a layer range running past the end of the layer.
    """
    if len(nodes) > 1 << span:
        raise ValueError("more nodes than the subtree holds")
    root = reduce_layer(nodes, height)
    for level in range(_ceil_log2(len(nodes)), span):
        root = _hash_pair(root, pad_hash(height + level))
    return root


def _leaf_hashes(data: bytes | bytearray | memoryview) -> list[bytes]:
    view = memoryview(data).cast("B")
    return [sha256(view[i : i + LEAF_SIZE]).digest() for i in range(0, len(view), LEAF_SIZE)]


class MerkleHasher:
    """Streaming hasher: feed the content in chunks of any size, get the root and the block layer.

    Memory is one partial leaf, the leaf hashes of the current block, and one hash per finished block; the
    content itself is never kept. The total size is needed up front because it fixes the layer height.
    """

    def __init__(self, size: int, block_size: int) -> None:
        if size < 0:
            raise ValueError("size must be >= 0")
        self.size = size
        self.block_size = block_size
        self._height = layer_height(size, block_size)
        self._leaves_per_block = block_size // LEAF_SIZE
        self._partial = bytearray()
        self._block_leaves: list[bytes] = []
        self._layer: list[bytes] = []
        self._received = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        self._received += len(view)
        if self._received > self.size:
            raise ValueError(f"more than the announced {self.size} bytes")
        if self._partial:
            take = LEAF_SIZE - len(self._partial)
            self._partial += view[:take]
            view = view[take:]
            if len(self._partial) < LEAF_SIZE:
                return
            self._add_leaf(sha256(self._partial).digest())
            self._partial.clear()
        whole = len(view) - len(view) % LEAF_SIZE
        for start in range(0, whole, LEAF_SIZE):
            # Hash straight from the caller's buffer: no copy for full leaves.
            self._add_leaf(sha256(view[start : start + LEAF_SIZE]).digest())
        self._partial += view[whole:]

    def _add_leaf(self, leaf: bytes) -> None:
        self._block_leaves.append(leaf)
        if len(self._block_leaves) == self._leaves_per_block:
            self._close_block()

    def _close_block(self) -> None:
        self._layer.append(subtree_root(self._block_leaves, self._height))
        self._block_leaves = []

    def finish(self) -> tuple[bytes, list[bytes]]:
        """Return `(root, block_layer)`; the hasher must have received exactly `size` bytes."""
        if self._received != self.size:
            raise ValueError(f"got {self._received} bytes, expected {self.size}")
        if self._partial:
            self._add_leaf(sha256(self._partial).digest())
            self._partial.clear()
        if self._block_leaves:
            self._close_block()
        if not self._layer:
            return ZERO_HASH, []
        return reduce_layer(self._layer, self._height), list(self._layer)


def merkle_root(data: bytes | bytearray | memoryview) -> bytes:
    """BEP 52 `pieces root` of `data` held in memory (the zero hash for empty data)."""
    leaves = _leaf_hashes(data)
    if not leaves:
        return ZERO_HASH
    return subtree_root(leaves, _ceil_log2(len(leaves)))


def block_layer(
    chunks: Iterable[bytes | bytearray | memoryview], size: int, block_size: int
) -> tuple[bytes, list[bytes]]:
    """`(root, block_layer)` of content given as an iterable of chunks totalling `size` bytes."""
    hasher = MerkleHasher(size, block_size)
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.finish()


def block_hash(data: bytes | bytearray | memoryview, height: int) -> bytes:
    """Hash of one block's bytes as it appears in a block layer of the given height."""
    return subtree_root(_leaf_hashes(data), height)


def _expected_block_length(size: int, block_size: int, index: int) -> int:
    return min(block_size, size - index * block_size)


def verify_layer(root: bytes, layer: Sequence[bytes], size: int, block_size: int) -> None:
    """Raise `HashMismatch` unless `layer` is the block layer of content of `size` bytes with this root."""
    expected = block_count(size, block_size)
    if len(layer) != expected:
        raise HashMismatch(f"hash layer has {len(layer)} entries, expected {expected}")
    if any(len(node) != HASH_SIZE for node in layer):
        raise HashMismatch("hash layer entry is not 32 bytes")
    if reduce_layer(layer, layer_height(size, block_size)) != root:
        raise HashMismatch("hash layer does not reduce to the content root")


def verify_block(
    layer: Sequence[bytes], index: int, data: bytes | bytearray | memoryview, size: int, block_size: int
) -> None:
    """Raise `HashMismatch` unless `data` is block `index` according to an already verified layer."""
    if not 0 <= index < len(layer):
        raise HashMismatch(f"block {index} is outside the content's {len(layer)} blocks")
    length = len(memoryview(data).cast("B"))
    expected = _expected_block_length(size, block_size, index)
    if length != expected:
        raise HashMismatch(f"block {index} has {length} bytes, expected {expected}")
    if block_hash(data, layer_height(size, block_size)) != layer[index]:
        raise HashMismatch(f"block {index} does not match its hash")


def _check_range(first: int, count: int, num_blocks: int) -> int:
    """Validate an aligned power-of-two range inside the padded layer; return log2(count)."""
    if count < 1 or count & (count - 1) or count > 1 << _ceil_log2(num_blocks):
        raise ValueError("range length must be a power of two no wider than the padded layer")
    if not 0 <= first < num_blocks or first % count:
        raise ValueError("range start must be inside the layer and aligned to the range length")
    return count.bit_length() - 1


def layer_range_proof(layer: Sequence[bytes], first: int, count: int, height: int) -> list[bytes]:
    """Sibling hashes proving `layer[first:first+count]` against the root, nearest sibling first.

    `count` is a power of two and `first` a multiple of it, so the range is one subtree of the padded layer.
    """
    span = _check_range(first, count, len(layer))
    proof = []
    for level in range(span, _ceil_log2(len(layer))):
        width = 1 << level
        sibling = (first >> level) ^ 1
        proof.append(subtree_root(layer[sibling * width : (sibling + 1) * width], level, height))
    return proof


def verify_layer_range(
    root: bytes, size: int, block_size: int, first: int, count: int, hashes: Sequence[bytes], proof: Sequence[bytes]
) -> None:
    """Raise `HashMismatch` unless `hashes` are block layer entries `first..first+count`, proven by `proof`.

    `count` is the requested power-of-two range length; `hashes` is shorter only where the range runs past the
    end of the layer (the padding is implied).
    """
    num_blocks = block_count(size, block_size)
    height = layer_height(size, block_size)
    try:
        span = _check_range(first, count, num_blocks)
    except ValueError as exc:
        raise HashMismatch(f"bad hash range: {exc}") from None
    if len(hashes) != min(count, num_blocks - first):
        raise HashMismatch(f"expected {min(count, num_blocks - first)} hashes, got {len(hashes)}")
    if any(len(node) != HASH_SIZE for node in hashes) or any(len(node) != HASH_SIZE for node in proof):
        raise HashMismatch("hash is not 32 bytes")
    expected_proof = _ceil_log2(num_blocks) - span
    if len(proof) != expected_proof:
        raise HashMismatch(f"proof has {len(proof)} hashes, expected {expected_proof}")
    node = subtree_root(hashes, span, height)
    position = first >> span
    for sibling in proof:
        node = _hash_pair(sibling, node) if position & 1 else _hash_pair(node, sibling)
        position >>= 1
    if node != root:
        raise HashMismatch("hash range does not prove up to the content root")
