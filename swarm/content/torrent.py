"""A content as a BitTorrent v2 torrent (BEP 52), made from its manifest and block layer without re-hashing.

Our content root is BEP 52's `pieces root` for the same bytes, and our block layer a layer of the same merkle tree
(`swarm.content.merkle`; `tests/swarm/content/test_merkle_libtorrent.py`), so a torrent is only a re-encoding:

* The info dict is **canonical**: it derives from the content alone, so every node that holds the content exports
  the same info-hash, whatever block size its manifest chose. Its `name` (and its one file's) is the root in hex,
  its `piece length` is `PIECE_LENGTH` whatever the size (the largest block size a manifest may have, so that
  every node can merge its own block layer up to the piece layer), `meta version` 2, and nothing else: no dates,
  no creator, no private flag, no v1 part. The human file name travels beside it (the magnet's `dn`).
* The `piece layers` are our block layer merged up to `PIECE_LENGTH` (a file of one piece has none: its root
  verifies it).

Reading goes the other way too: `bdecode` is a bounded decoder for bencoded bytes from strangers (a .torrent file,
an info dict from peers), strict about the one canonical form, and `bdecode_dict` hands back the exact bytes of a
top-level value, since an info-hash is the hash of the info dict's bytes as sent, never of a re-encoding.

Pure: bytes in, bytes out. The bridge (`bittorrent`) seeds and fetches by it; `tests/swarm/content/test_torrent.py`
checks the info-hash against libtorrent's own `create_torrent`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from swarm.errors import BencodeError, HashMismatch, ManifestError

from . import merkle
from .manifest import MAX_BLOCK_SIZE, Manifest

__all__ = ["PIECE_LENGTH", "Torrent", "bdecode", "bdecode_dict", "bencode", "magnet_link", "piece_layer",
           "torrent_of", "v1_pieces"]

# One piece length for every torrent we make: the largest block a manifest may have, so any node's block layer
# merges up to it (a smaller piece length would need a finer layer than a node with larger blocks holds). BEP 52's
# merkle tree lets clients check 16 KiB blocks within a piece, so a large piece costs no granularity on the wire.
PIECE_LENGTH = MAX_BLOCK_SIZE
MULTIHASH_SHA256 = b"\x12\x20"  # a btmh URN's prefix: SHA-256, 32 bytes (BEP 9 for v2, the multihash format)

Bencodable = int | bytes | str | list["Bencodable"] | dict[bytes, "Bencodable"]


def bencode(value: Bencodable) -> bytes:
    """BitTorrent's encoding (BEP 3): dictionary keys sorted as raw bytes, so an info dict has one encoding."""
    out: list[bytes] = []
    _encode(value, out)
    return b"".join(out)


def _encode(value: Bencodable, out: list[bytes]) -> None:
    if isinstance(value, bool):  # a bool is an int to Python: refuse it rather than write 0 or 1 by accident
        raise TypeError("bencode has no booleans")
    if isinstance(value, int):
        out.append(b"i%de" % value)
    elif isinstance(value, str):
        _encode(value.encode("utf-8"), out)
    elif isinstance(value, bytes):
        out.append(b"%d:" % len(value))
        out.append(value)
    elif isinstance(value, list):
        out.append(b"l")
        for item in value:
            _encode(item, out)
        out.append(b"e")
    elif isinstance(value, dict):
        if not all(isinstance(key, bytes) for key in value):  # sorted as raw bytes: str keys could sort otherwise
            raise TypeError("bencoded dictionary keys must be bytes")
        out.append(b"d")
        for key in sorted(value):
            _encode(key, out)
            _encode(value[key], out)
        out.append(b"e")
    else:
        raise TypeError(f"cannot bencode {type(value).__name__}")


# The decoder's bounds. Nesting: a v2 file tree is a directory per level, and 32 levels is deeper than any real
# torrent's (libtorrent's own decoder stops at 100); it also keeps the recursion far from Python's limit. Tokens
# (every value and key): a 16 MiB .torrent of piece layers is a handful, and a million keeps a hostile file of tiny
# values to about a second of decoding.
MAX_DEPTH = 32
MAX_TOKENS = 1_000_000
# An integer is an int64, as in libtorrent: 19 digits and a sign at most, so `int()` never sees a long string.
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]{0,18})")
_LENGTH = re.compile(rb"0|[1-9][0-9]{0,18}")  # a string's length: no sign, no leading zero (one spelling)
_INT64 = range(-2**63, 2**63)


class _Decoder:
    """One pass over `data`; every refusal a `BencodeError` that says what and where."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.tokens = 0

    def fail(self, what: str) -> BencodeError:
        return BencodeError(f"bencode: {what} at offset {self.pos}")

    def peek(self) -> int:
        if self.pos >= len(self.data):
            raise self.fail("truncated")
        return self.data[self.pos]

    def value(self, depth: int) -> Bencodable:
        self.tokens += 1
        if self.tokens > MAX_TOKENS:
            raise self.fail(f"more than {MAX_TOKENS:,} values")
        lead = self.peek()
        if lead == 0x69:  # i
            return self.integer()
        if lead in (0x6C, 0x64):  # l, d
            if depth >= MAX_DEPTH:
                raise self.fail(f"nested deeper than {MAX_DEPTH}")
            self.pos += 1
            return self.items(depth + 1) if lead == 0x6C else self.dictionary(depth + 1)
        if 0x30 <= lead <= 0x39:
            return self.string()
        raise self.fail(f"unexpected byte {lead:#04x}")

    def integer(self) -> int:
        end = self.data.find(b"e", self.pos + 1, self.pos + 22)
        digits = self.data[self.pos + 1:end]
        if end < 0 or not _INTEGER.fullmatch(digits) or digits == b"-0":
            raise self.fail("not an integer in canonical form (i<digits>e, no leading zero, no -0, int64)")
        number = int(digits)
        if number not in _INT64:
            raise self.fail("an integer beyond int64")
        self.pos = end + 1
        return number

    def string(self) -> bytes:
        colon = self.data.find(b":", self.pos, self.pos + 20)
        digits = self.data[self.pos:colon]
        if colon < 0 or not _LENGTH.fullmatch(digits):
            raise self.fail("not a string length in canonical form")
        end = colon + 1 + int(digits)
        if end > len(self.data):
            raise self.fail(f"a string of {int(digits):,} bytes runs past the end")
        self.pos = end
        return self.data[colon + 1:end]

    def items(self, depth: int) -> list[Bencodable]:
        items: list[Bencodable] = []
        while self.peek() != 0x65:  # e
            items.append(self.value(depth))
        self.pos += 1
        return items

    def dictionary(self, depth: int, raw: Collection[bytes] = (), spans: dict[bytes, bytes] | None = None
                   ) -> dict[bytes, Bencodable]:
        out: dict[bytes, Bencodable] = {}
        while (lead := self.peek()) != 0x65:
            if not 0x30 <= lead <= 0x39:
                raise self.fail("a dictionary key that is not a string")
            self.tokens += 1
            key = self.string()
            # Two values under one key: readers disagree on which counts (libtorrent takes the first, a dict the
            # last), so what we check could differ from what libtorrent uses. Order is checked by the caller
            # where it matters (an info dict must re-encode to its own bytes).
            if key in out:
                raise self.fail(f"a duplicate dictionary key {key[:40]!r}")
            start = self.pos
            out[key] = self.value(depth)
            if spans is not None and key in raw:
                spans[key] = self.data[start:self.pos]
        self.pos += 1
        return out


def bdecode(data: bytes) -> Bencodable:
    """The value `data` encodes (BEP 3; strings as bytes). Raises `BencodeError` on truncated or trailing bytes,
    integers or lengths not in their one spelling, duplicate keys, nesting deeper than `MAX_DEPTH` or more than
    `MAX_TOKENS` values. Dictionary keys need not be sorted here (see `bdecode_dict`)."""
    decoder = _Decoder(bytes(data))
    value = decoder.value(0)
    if decoder.pos != len(decoder.data):
        raise decoder.fail("trailing bytes")
    return value


def bdecode_dict(data: bytes, *, raw: Collection[bytes] = ()) -> tuple[dict[bytes, Bencodable], dict[bytes, bytes]]:
    """A bencoded dictionary (as `bdecode`), and the exact bytes each of its values under the keys `raw` was
    encoded as: a .torrent's info-hash is the hash of its info dict's bytes in the file."""
    decoder = _Decoder(bytes(data))
    if decoder.peek() != 0x64:
        raise decoder.fail("not a dictionary")
    decoder.pos, decoder.tokens = 1, 1
    spans: dict[bytes, bytes] = {}
    value = decoder.dictionary(1, raw, spans)
    if decoder.pos != len(decoder.data):
        raise decoder.fail("trailing bytes")
    return value, spans


def piece_layer(manifest: Manifest, layer: Sequence[bytes]) -> list[bytes]:
    """The piece layer of `manifest`'s content for `PIECE_LENGTH` pieces, merged up from its block layer: [] for
    content of one piece, whose root is its piece's hash. Raises `HashMismatch` unless the pieces reduce to the
    root (which checks the block layer too, at a fraction of `merkle.verify_layer`'s cost on top of the merge)."""
    if len(layer) != manifest.num_blocks or any(len(node) != merkle.HASH_SIZE for node in layer):
        raise HashMismatch(f"a block layer of {len(layer)} hashes for {manifest.num_blocks} blocks")
    nodes, height = list(layer), manifest.layer_height
    top = merkle.layer_height(manifest.size, PIECE_LENGTH)
    sha256, pair = hashlib.sha256, 2 * merkle.HASH_SIZE
    while height < top:
        if len(nodes) % 2:
            nodes.append(merkle.pad_hash(height))
        # One buffer hashed 64 bytes at a time: 30 % faster than concatenating each pair (bench/torrent_export.py).
        row = b"".join(nodes)
        nodes = [sha256(row[i:i + pair]).digest() for i in range(0, len(row), pair)]
        height += 1
    if merkle.reduce_layer(nodes, top) != manifest.root:
        raise HashMismatch("the block layer does not reduce to the content root")
    return nodes if manifest.size > PIECE_LENGTH else []


@dataclass(frozen=True)
class Torrent:
    """A content's v2 torrent: the info-hash (SHA-256 of the bencoded info dict) and the .torrent file's bytes."""

    info_hash: bytes
    data: bytes
    name: str  # the info dict's name: the root in hex
    info_hash_v1: bytes | None = None  # a hybrid's SHA-1 info-hash, for v1-only clients

    @property
    def info_hash_hex(self) -> str:
        return self.info_hash.hex()


def v1_pieces(chunks: Iterable[bytes | bytearray | memoryview]) -> list[bytes]:
    """The SHA-1 of each `PIECE_LENGTH` piece of the content given as chunks: a hybrid torrent's v1 part (BEP 3),
    the one thing a torrent of ours needs the bytes for."""
    pieces: list[bytes] = []
    piece, filled = hashlib.sha1(usedforsecurity=False), 0
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            take = view[:PIECE_LENGTH - filled]
            piece.update(take)
            filled += len(take)
            view = view[len(take):]
            if filled == PIECE_LENGTH:
                pieces.append(piece.digest())
                piece, filled = hashlib.sha1(usedforsecurity=False), 0
    if filled:
        pieces.append(piece.digest())
    return pieces


def info_dict(manifest: Manifest, v1: Sequence[bytes] | None = None) -> dict[bytes, Bencodable]:
    """The canonical info dict of `manifest`'s content (see the module docstring); with `v1` (`v1_pieces`), the
    hybrid one, which v1-only clients read too: a single file's `length` and `pieces` beside the v2 fields. A
    single file needs no pad file, so none of the pad-file disagreements between clients arise."""
    if manifest.size == 0:
        raise ManifestError("an empty file has no torrent (BEP 52 gives it no pieces root)")
    name = manifest.root.hex()
    info: dict[bytes, Bencodable] = {
        b"name": name, b"piece length": PIECE_LENGTH, b"meta version": 2,
        b"file tree": {name.encode(): {b"": {b"length": manifest.size, b"pieces root": manifest.root}}}}
    if v1 is not None:
        if len(v1) != -(-manifest.size // PIECE_LENGTH) or any(len(h) != 20 for h in v1):
            raise ValueError(f"{len(v1)} v1 piece hashes for {manifest.size:,} bytes in pieces of {PIECE_LENGTH:,}")
        info[b"length"] = manifest.size
        info[b"pieces"] = b"".join(v1)
    return info


def torrent_of(manifest: Manifest, layer: Sequence[bytes], *, web_seeds: Iterable[str] = (),
               v1: Sequence[bytes] | None = None) -> Torrent:
    """The .torrent of `manifest`'s content, its piece layers from the block layer `layer` (no byte re-read);
    `web_seeds`: BEP 19 URLs that serve the whole file (outside the info dict: they change no info-hash); `v1`:
    the pieces' SHA-1 (`v1_pieces`) for a hybrid torrent, whose info-hashes (v1 and v2) differ from the v2-only
    one's."""
    info = info_dict(manifest, v1)
    encoded_info = bencode(info)
    torrent: dict[bytes, Bencodable] = {b"info": info}
    if pieces := piece_layer(manifest, layer):
        torrent[b"piece layers"] = {manifest.root: b"".join(pieces)}
    seeds: list[Bencodable] = [*web_seeds]
    if seeds:
        torrent[b"url-list"] = seeds
    data = bencode(torrent)
    assert encoded_info in data  # the info dict is encoded alike inside the file: its hash is the info-hash
    return Torrent(hashlib.sha256(encoded_info).digest(), data, manifest.root.hex(),
                   hashlib.sha1(encoded_info, usedforsecurity=False).digest() if v1 is not None else None)


def magnet_link(torrent: Torrent, *, display_name: str | None = None, peers: Iterable[tuple[str, int]] = (),
                web_seeds: Iterable[str] = ()) -> str:
    """A v2 magnet (`xt=urn:btmh:1220…`): `dn` the human name, `x.pe` peers to ask first (BEP 9), `ws` web seeds."""
    parts = [f"xt=urn:btmh:{(MULTIHASH_SHA256 + torrent.info_hash).hex()}"]
    if torrent.info_hash_v1 is not None:  # a hybrid: v1-only clients find it by the SHA-1 one (BEP 9)
        parts.insert(0, f"xt=urn:btih:{torrent.info_hash_v1.hex()}")
    if display_name:
        parts.append("dn=" + quote(display_name, safe=""))
    for host, port in peers:
        parts.append("x.pe=" + quote(f"[{host}]:{port}" if ":" in host else f"{host}:{port}", safe=":[]"))
    for url in web_seeds:
        parts.append("ws=" + quote(url, safe=""))
    return "magnet:?" + "&".join(parts)
