"""Manifests: what a representation is (size, block size, content root, metadata) and how it travels.

Pure: no I/O, no clock. Hashing lives in `swarm.content.merkle`; this module adds the block-size rule, the
manifest record with its compact binary encoding, and checks of hash layers and blocks against a manifest.

Block size rule (`choose_block_size`): the smallest power of two ≥ 16 KiB that cuts the content into at most
2,048 blocks, capped at 4 MiB — so 16 KiB up to 32 MiB, 1,025..2,048 blocks from there to 8 GiB, then 4 MiB
blocks whose count grows, up to `MAX_BLOCKS` of them: 64 TiB, the largest content a manifest describes. 4 MiB is
also the largest block any manifest may have: the largest a peer is asked for and sends in one message
(`swarm.net.wire.Limits`), so a manifest with larger blocks could never be fetched from peers.
The lab will tune the constants; manifests carry their block size, so a change never breaks old ones.

Encoding, version 1 (all integers big-endian)::

    u8   version = 1
    u64  size                      ≤ MAX_SIZE (2**46: MAX_BLOCKS blocks of MAX_BLOCK_SIZE)
    u8   log2(block_size)          block size in [16 KiB, 4 MiB]; at most MAX_BLOCKS blocks
    32   root                      the zero hash iff size == 0
    u8   optional fields present: bit 0 url, 1 validator, 2 content_type, 3 content_encoding; others 0
    then per present field, in bit order: u16 length, UTF-8 bytes
         (non-empty; url ≤ 8 KiB, others ≤ 1 KiB encoded; no control characters)

Every manifest has exactly one encoding and `decode` accepts nothing else: unknown versions or flags, truncation,
trailing bytes, out-of-range numbers, invalid UTF-8 or control characters (which could smuggle a header line
into a proxied response) all raise `ManifestError`.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from swarm.content import merkle
from swarm.errors import ManifestError

__all__ = [
    "VERSION",
    "MIN_BLOCK_SIZE",
    "MAX_BLOCK_SIZE",
    "MAX_SIZE",
    "MAX_BLOCKS",
    "MAX_URL_LENGTH",
    "MAX_STRING_LENGTH",
    "MAX_ENCODED_SIZE",
    "Manifest",
    "choose_block_size",
    "READ_SIZE",
    "build_manifest",
    "encode",
    "decode",
    "HEADER",
    "HINT_HEADER",
    "HINT_SWARM",
    "ACCEPT_HEADER",
    "ACCEPT_HINT",
    "accepts_hint",
    "OriginManifest",
    "format_header",
    "parse_header",
]

VERSION = 1
MIN_BLOCK_SIZE = merkle.LEAF_SIZE
MAX_BLOCK_SIZE = 4 * 1024 * 1024  # what one wire message carries: see the module docstring
# Bounds the bitfield (2 MiB) and the hash layer a peer may have to hold for one content root.
MAX_BLOCKS = 2**24
MAX_SIZE = MAX_BLOCKS * MAX_BLOCK_SIZE
MAX_URL_LENGTH = 8 * 1024
MAX_STRING_LENGTH = 1024

TARGET_MAX_BLOCKS = 2048

_HEADER = struct.Struct(">BQB32sB")
_LENGTH = struct.Struct(">H")
_OPTIONAL_FIELDS = ("url", "validator", "content_type", "content_encoding")
_MAX_LENGTHS = {
    "url": MAX_URL_LENGTH,
    "validator": MAX_STRING_LENGTH,
    "content_type": MAX_STRING_LENGTH,
    "content_encoding": MAX_STRING_LENGTH,
}
MAX_ENCODED_SIZE = _HEADER.size + sum(_LENGTH.size + limit for limit in _MAX_LENGTHS.values())
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def choose_block_size(size: int) -> int:
    """Block size for content of `size` bytes (see the module docstring for the rule)."""
    if not 0 <= size <= MAX_SIZE:
        raise ValueError(f"size must be in [0, {MAX_SIZE}], got {size}")
    return max(MIN_BLOCK_SIZE, min(_next_power_of_two(-(-size // TARGET_MAX_BLOCKS)), MAX_BLOCK_SIZE))


@dataclass(frozen=True, slots=True)
class Manifest:
    """One representation's identity. Construction validates like `decode` and raises `ManifestError`.

    Manifests are built from untrusted input too (server plugin headers, DHT records), hence a peer-error type
    even from the constructor.
    """

    size: int
    block_size: int
    root: bytes
    url: str | None = None
    validator: str | None = None
    content_type: str | None = None
    content_encoding: str | None = None

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def num_blocks(self) -> int:
        return merkle.block_count(self.size, self.block_size)

    @property
    def layer_height(self) -> int:
        """Height of the block layer above the 16 KiB leaves (see `swarm.content.merkle.layer_height`)."""
        return merkle.layer_height(self.size, self.block_size)

    def block_span(self, index: int) -> tuple[int, int]:
        """`(offset, length)` of block `index` in the content."""
        if not 0 <= index < self.num_blocks:
            raise IndexError(f"block {index} out of range 0..{self.num_blocks - 1}")
        offset = index * self.block_size
        return offset, min(self.block_size, self.size - offset)

    def encode(self) -> bytes:
        return encode(self)

    def verify_layer(self, layer: Sequence[bytes]) -> None:
        """Raise `HashMismatch` unless `layer` is this content's block layer."""
        merkle.verify_layer(self.root, layer, self.size, self.block_size)

    def verify_layer_range(self, first: int, count: int, hashes: Sequence[bytes], proof: Sequence[bytes]) -> None:
        """Raise `HashMismatch` unless `hashes` are layer entries `first..first+count`, proven by `proof`."""
        merkle.verify_layer_range(self.root, self.size, self.block_size, first, count, hashes, proof)

    def verify_block(self, layer: Sequence[bytes], index: int, data: bytes | bytearray | memoryview) -> None:
        """Raise `HashMismatch` unless `data` is block `index` according to an already verified `layer`."""
        merkle.verify_block(layer, index, data, self.size, self.block_size)


def _validate(manifest: Manifest) -> None:
    size, block_size, root = manifest.size, manifest.block_size, manifest.root
    if type(size) is not int or not 0 <= size <= MAX_SIZE:
        raise ManifestError(f"size must be an int in [0, {MAX_SIZE}]")
    if (
        type(block_size) is not int
        or not MIN_BLOCK_SIZE <= block_size <= MAX_BLOCK_SIZE
        or block_size & (block_size - 1)
    ):
        raise ManifestError(f"block size must be a power of two in [{MIN_BLOCK_SIZE}, {MAX_BLOCK_SIZE}]")
    if merkle.block_count(size, block_size) > MAX_BLOCKS:
        raise ManifestError(f"more than {MAX_BLOCKS} blocks; use a larger block size")
    if type(root) is not bytes or len(root) != merkle.HASH_SIZE:
        raise ManifestError("root must be 32 bytes")
    if size == 0 and root != merkle.ZERO_HASH:
        raise ManifestError("empty content must have the zero root")
    for name in _OPTIONAL_FIELDS:
        value = getattr(manifest, name)
        if value is None:
            continue
        if type(value) is not str or not value:
            raise ManifestError(f"{name} must be a non-empty string or None")
        if _CONTROL_CHARACTERS.search(value):
            raise ManifestError(f"{name} contains a control character")
        try:
            encoded_length = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ManifestError(f"{name} is not encodable as UTF-8") from None
        if encoded_length > _MAX_LENGTHS[name]:
            raise ManifestError(f"{name} longer than {_MAX_LENGTHS[name]} bytes")


def encode(manifest: Manifest) -> bytes:
    flags = 0
    tail = []
    for bit, name in enumerate(_OPTIONAL_FIELDS):
        value = getattr(manifest, name)
        if value is not None:
            flags |= 1 << bit
            raw = value.encode("utf-8")
            tail.append(_LENGTH.pack(len(raw)))
            tail.append(raw)
    shift = manifest.block_size.bit_length() - 1
    return _HEADER.pack(VERSION, manifest.size, shift, manifest.root, flags) + b"".join(tail)


def decode(data: bytes | bytearray | memoryview) -> Manifest:
    """Parse an encoded manifest; raise `ManifestError` on anything but a canonical version-1 encoding."""
    view = memoryview(data).cast("B")
    if len(view) > MAX_ENCODED_SIZE:
        raise ManifestError(f"encoded manifest longer than {MAX_ENCODED_SIZE} bytes")
    if len(view) < _HEADER.size:
        raise ManifestError("encoded manifest truncated")
    version, size, shift, root, flags = _HEADER.unpack_from(view)
    if version != VERSION:
        raise ManifestError(f"unknown manifest version {version}")
    if not MIN_BLOCK_SIZE.bit_length() - 1 <= shift <= MAX_BLOCK_SIZE.bit_length() - 1:
        raise ManifestError("block size out of range")
    if flags >> len(_OPTIONAL_FIELDS):
        raise ManifestError(f"unknown optional field flags {flags:#04x}")
    position = _HEADER.size
    strings: dict[str, str] = {}
    for bit, name in enumerate(_OPTIONAL_FIELDS):
        if not flags & (1 << bit):
            continue
        if position + _LENGTH.size > len(view):
            raise ManifestError(f"encoded manifest truncated before {name}")
        (length,) = _LENGTH.unpack_from(view, position)
        position += _LENGTH.size
        if length > _MAX_LENGTHS[name]:
            raise ManifestError(f"{name} longer than {_MAX_LENGTHS[name]} bytes")
        if position + length > len(view):
            raise ManifestError(f"encoded manifest truncated inside {name}")
        try:
            strings[name] = str(view[position : position + length], "utf-8")
        except UnicodeDecodeError:
            raise ManifestError(f"{name} is not valid UTF-8") from None
        position += length
    if position != len(view):
        raise ManifestError(f"{len(view) - position} trailing bytes after the manifest")
    return Manifest(size=size, block_size=1 << shift, root=root, **strings)


#: Bytes read per call by the callers that stream a file into `build_manifest` (`SwarmNode.seed_file`,
#: `swarmproxy swarm manifest`).
READ_SIZE = 1 << 20


def build_manifest(
    chunks: Iterable[bytes | bytearray | memoryview],
    size: int,
    *,
    block_size: int | None = None,
    url: str | None = None,
    validator: str | None = None,
    content_type: str | None = None,
    content_encoding: str | None = None,
) -> tuple[Manifest, list[bytes]]:
    """Hash content streamed as `chunks` (totalling `size` bytes); return its manifest and block layer.

    Never holds more than one block's leaf hashes plus the layer in memory, whatever the content size.
    """
    if block_size is None:
        block_size = choose_block_size(size)
    root, layer = merkle.block_layer(chunks, size, block_size)
    manifest = Manifest(size=size, block_size=block_size, root=root, url=url, validator=validator,
                        content_type=content_type, content_encoding=content_encoding)
    return manifest, layer



# -- the origin's own manifest, as response header fields (server_plugin writes them, the proxy reads them) --------

#: Response field naming the representation's content root, size and block size, plus where its hash layer is.
HEADER = "Swarm-Manifest"
#: The same field as object stores send it: user metadata `swarm-manifest` set on the object comes back as
#: `x-amz-meta-swarm-manifest` from S3 and S3-compatible stores (and CDNs in front of them), as
#: `x-goog-meta-swarm-manifest` from Google Cloud Storage. Read only when `HEADER` is absent.
METADATA_KEY = "swarm-manifest"
METADATA_HEADERS = ("x-amz-meta-" + METADATA_KEY, "x-goog-meta-" + METADATA_KEY)
#: S3 allows 2 KB of user metadata per object: a field inlines at most this many hashes there (1.5 KB).
METADATA_INLINE_HASHES = 32
#: Response field by which an overloaded origin asks clients to take the rest from peers now.
HINT_HEADER = "Swarm-Hint"
HINT_SWARM = "swarm"
#: Request field by which a client says it leaves at a head carrying the hint (it closes the response and asks for
#: the rest by Range if its peers cannot give it): a busy origin may then hold that response's body for a moment
#: instead of spending its bandwidth on bytes the client will not read (server_plugin's `Publisher.hold`).
ACCEPT_HEADER = "Swarm-Accept"
ACCEPT_HINT = "hint"
#: Layers up to this many hashes travel inline in the header (base64, ~2.7 KB); longer ones at `layer=PATH`.
INLINE_HASHES = 64
MAX_LAYER_PATH = 1024
_HEADER_PARAM = re.compile(r"\s*([a-z-]{1,16})=([^;\s]{1,4096})\s*")
# RFC 3986 path-absolute plus query characters. Its first segment is not empty: "//host/x" would be a
# network-path reference, and the layer must come from the origin that vouched for it.
_PATH = re.compile(r"/(?!/)[!#$&-;=?-\[\]_a-z~]{0,1022}", re.ASCII)


@dataclass(frozen=True, slots=True)
class OriginManifest:
    """What an origin publishes about a representation in its `Swarm-Manifest` field.

    Either `hashes` (the block layer, inline) or `layer_path` (a same-origin path serving the layer as raw
    32-byte hashes) is set. Only `parse_header`/`format_header` build it; neither trusts the other side.
    """

    root: bytes
    size: int
    block_size: int
    layer_path: str | None = None
    hashes: tuple[bytes, ...] | None = None

    def manifest(self, **metadata: str | None) -> Manifest:
        return Manifest(size=self.size, block_size=self.block_size, root=self.root, **metadata)


def format_header(manifest: Manifest, layer: Sequence[bytes], layer_path: str, *, inline: int = INLINE_HASHES
                  ) -> str:
    """The `Swarm-Manifest` field for `manifest`: the layer inline when it has at most `inline` hashes, else a
    pointer to `layer_path`."""
    fields = [f"root={manifest.root.hex()}", f"size={manifest.size}", f"block-size={manifest.block_size}"]
    if len(layer) <= inline:
        fields.append("hashes=" + base64.urlsafe_b64encode(b"".join(layer)).decode("ascii"))
    else:
        if not _PATH.fullmatch(layer_path):
            raise ValueError(f"layer path {layer_path!r} is not an absolute path of plain characters")
        fields.append(f"layer={layer_path}")
    return "; ".join(fields)


def parse_header(value: str) -> OriginManifest:
    """Parse a `Swarm-Manifest` field; `ManifestError` on anything but one well-formed set of parameters.

    The inline layer is checked against the root here; a layer fetched from `layer_path` must be checked by
    its fetcher (`Manifest.verify_layer`)."""
    params: dict[str, str] = {}
    for part in value.split(";"):
        match = _HEADER_PARAM.fullmatch(part)
        if match is None or match.group(1) in params:
            raise ManifestError(f"malformed {HEADER} field")
        params[match.group(1)] = match.group(2)
    if set(params) - {"root", "size", "block-size", "layer", "hashes"} or \
            {"root", "size", "block-size"} - set(params) or ("layer" in params) == ("hashes" in params):
        raise ManifestError(f"{HEADER} needs root, size, block-size and one of layer or hashes")
    try:
        root = bytes.fromhex(params["root"]) if re.fullmatch(r"[0-9a-f]{64}", params["root"]) else b""
        size, block_size = int(params["size"]), int(params["block-size"])
    except ValueError:
        raise ManifestError(f"{HEADER}: a number is not a number") from None
    if not (params["size"].isdigit() and params["block-size"].isdigit()) or len(params["size"]) > 16:
        raise ManifestError(f"{HEADER}: size and block-size must be plain decimal numbers")
    manifest = Manifest(size=size, block_size=block_size, root=root)  # validates the numbers and the root
    if "layer" in params:
        if not _PATH.fullmatch(params["layer"]):
            raise ManifestError(f"{HEADER}: layer must be an absolute path on the same origin")
        return OriginManifest(root, size, block_size, layer_path=params["layer"])
    try:
        raw = base64.urlsafe_b64decode(params["hashes"].encode("ascii"))
    except (binascii.Error, ValueError):
        raise ManifestError(f"{HEADER}: hashes are not base64") from None
    count = manifest.num_blocks
    if count > INLINE_HASHES or len(raw) != count * merkle.HASH_SIZE:
        raise ManifestError(f"{HEADER}: {len(raw)} bytes of hashes for {count} block(s)")
    hashes = tuple(raw[i:i + merkle.HASH_SIZE] for i in range(0, len(raw), merkle.HASH_SIZE))
    manifest.verify_layer(hashes)
    return OriginManifest(root, size, block_size, hashes=hashes)


def accepts_hint(value: str | None) -> bool:
    """Does a request's `Swarm-Accept` field (a comma-separated list of tokens, any case) name `hint`?"""
    return value is not None and any(token.strip().lower() == ACCEPT_HINT for token in value.split(",")[:16])
