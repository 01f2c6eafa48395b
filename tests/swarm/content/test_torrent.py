"""A content's v2 torrent: libtorrent's own `create_torrent` gives the same info-hash and piece layers, and every
block size gives one info-hash."""

from __future__ import annotations

import functools
import random

import libtorrent
import pytest

from swarm.content import merkle
from swarm.content import torrent as torrent_module
from swarm.content.manifest import build_manifest
from swarm.content.torrent import (
    MAX_DEPTH,
    PIECE_LENGTH,
    bdecode,
    bdecode_dict,
    bencode,
    magnet_link,
    piece_layer,
    torrent_of,
    v1_pieces,
)
from swarm.errors import BencodeError, HashMismatch, ManifestError, PeerError

KIB, MIB = 1024, 1024 * 1024
SIZES = [1, 16 * KIB + 1, PIECE_LENGTH, PIECE_LENGTH + 1, 3 * PIECE_LENGTH + 16 * KIB + 5]


def content(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def ours(data: bytes, block_size: int | None = None):
    manifest, layer = build_manifest([data], len(data), block_size=block_size)
    return manifest, layer


def libtorrents(tmp_path, data: bytes, name: str) -> dict:
    """The torrent libtorrent makes of one file `name` holding `data`, decoded."""
    (tmp_path / name).write_bytes(data)
    creator = libtorrent.create_torrent(libtorrent.list_files(str(tmp_path / name)), PIECE_LENGTH,
                                        libtorrent.create_torrent.v2_only)
    libtorrent.set_piece_hashes(creator, str(tmp_path))
    return creator.generate()


@pytest.mark.parametrize("size", SIZES)
def test_the_info_hash_and_piece_layers_are_libtorrents(tmp_path, size):
    data = content(size)
    manifest, layer = ours(data)
    torrent = torrent_of(manifest, layer)
    theirs = libtorrents(tmp_path, data, manifest.root.hex())
    info = libtorrent.torrent_info(theirs)
    assert torrent.info_hash == info.info_hashes().v2.to_bytes()
    assert libtorrent.bdecode(torrent.data)[b"info"] == theirs[b"info"]
    assert libtorrent.bdecode(torrent.data).get(b"piece layers", {}) == theirs.get(b"piece layers", {})
    parsed = libtorrent.torrent_info(torrent.data)  # libtorrent loads ours, piece layers checked against the root
    assert parsed.info_hashes().v2.to_bytes() == torrent.info_hash and parsed.layout().file_size(0) == size


@pytest.mark.parametrize("block_size", [16 * KIB, 64 * KIB, 1 * MIB, 4 * MIB])
def test_every_block_size_gives_one_info_hash(block_size):
    data = content(3 * PIECE_LENGTH + 16 * KIB + 5)
    reference = torrent_of(*ours(data, 16 * KIB))
    torrent = torrent_of(*ours(data, block_size))
    assert (torrent.info_hash, torrent.data) == (reference.info_hash, reference.data)


def test_a_layer_that_is_not_the_roots_is_refused():
    manifest, layer = ours(content(2 * PIECE_LENGTH + 1), 64 * KIB)
    layer[3] = bytes(32)
    with pytest.raises(HashMismatch):
        piece_layer(manifest, layer)


def test_the_piece_layer_reduces_to_the_root():
    manifest, layer = ours(content(5 * PIECE_LENGTH + 7), 16 * KIB)
    pieces = piece_layer(manifest, layer)
    assert len(pieces) == 6
    assert merkle.reduce_layer(pieces, merkle.layer_height(manifest.size, PIECE_LENGTH)) == manifest.root


def test_an_empty_file_has_no_torrent():
    manifest, layer = ours(b"")
    with pytest.raises(ManifestError):
        torrent_of(manifest, layer)


def test_web_seeds_change_no_info_hash():
    manifest, layer = ours(content(100_000))
    plain, seeded = torrent_of(manifest, layer), torrent_of(manifest, layer, web_seeds=["http://o.example/f.iso"])
    assert plain.info_hash == seeded.info_hash
    assert libtorrent.bdecode(seeded.data)[b"url-list"] == [b"http://o.example/f.iso"]


def test_the_magnet_link_is_libtorrents_to_read():
    manifest, layer = ours(content(100_000))
    torrent = torrent_of(manifest, layer)
    link = magnet_link(torrent, display_name="ubuntu 24.04.iso", peers=[("127.0.0.2", 6881), ("::1", 6882)],
                       web_seeds=["http://o.example/a b.iso"])
    assert link.startswith("magnet:?xt=urn:btmh:1220" + torrent.info_hash.hex())
    params = libtorrent.parse_magnet_uri(link)
    assert params.info_hashes.v2.to_bytes() == torrent.info_hash
    assert params.name == "ubuntu 24.04.iso"
    assert sorted(params.peers) == [("127.0.0.2", 6881), ("::1", 6882)]
    assert params.url_seeds == ["http://o.example/a b.iso"]


@pytest.mark.parametrize(("value", "encoded"), [
    (b"spam", b"4:spam"), ("", b"0:"), (3, b"i3e"), (-3, b"i-3e"), (0, b"i0e"),
    ([b"spam", b"eggs"], b"l4:spam4:eggse"), ({b"cow": b"moo", b"spam": b"eggs"}, b"d3:cow3:moo4:spam4:eggse"),
    ({b"spam": [b"a", b"b"]}, b"d4:spaml1:a1:bee"), ({b"b": 1, b"a": 2}, b"d1:ai2e1:bi1ee"),  # keys sorted
])
def test_bencode_vectors_of_bep_3(value, encoded):
    assert bencode(value) == encoded


@pytest.mark.parametrize("value", [True, 1.5, None, {"str key": 1}])
def test_bencode_refuses_what_it_has_no_form_for(value):
    with pytest.raises(TypeError):
        bencode(value)


@pytest.mark.parametrize("size", [1, PIECE_LENGTH, 2 * PIECE_LENGTH + 12_345])
def test_a_hybrid_is_libtorrents(tmp_path, size):
    """`--hybrid`: the v1 part (one SHA-1 pass over the bytes) beside the v2 fields, as libtorrent makes it."""
    data = content(size)
    manifest, layer = ours(data)
    torrent = torrent_of(manifest, layer, v1=v1_pieces(chunks_of(data, 1_000_003)))
    (tmp_path / manifest.root.hex()).write_bytes(data)
    creator = libtorrent.create_torrent(libtorrent.list_files(str(tmp_path / manifest.root.hex())), PIECE_LENGTH, 0)
    libtorrent.set_piece_hashes(creator, str(tmp_path))
    theirs = creator.generate()
    assert libtorrent.bdecode(torrent.data)[b"info"] == theirs[b"info"]
    hashes = libtorrent.torrent_info(theirs).info_hashes()
    assert (torrent.info_hash, torrent.info_hash_v1) == (hashes.v2.to_bytes(), hashes.v1.to_bytes())
    params = libtorrent.parse_magnet_uri(magnet_link(torrent))
    assert params.info_hashes.v1.to_bytes() == torrent.info_hash_v1


def test_a_hybrid_needs_one_hash_per_piece():
    manifest, layer = ours(content(PIECE_LENGTH + 1))
    with pytest.raises(ValueError):
        torrent_of(manifest, layer, v1=[bytes(20)])


def chunks_of(data: bytes, step: int):
    return (data[i:i + step] for i in range(0, len(data), step))


# The decoder reads strangers' bytes (a .torrent, an info dict from peers): one spelling of everything, bounded.

@pytest.mark.parametrize(("encoded", "value"), [
    (b"i0e", 0), (b"i-42e", -42), (b"i9223372036854775807e", 2**63 - 1), (b"i-9223372036854775808e", -2**63),
    (b"0:", b""), (b"4:spam", b"spam"), (b"le", []), (b"de", {}), (b"l4:spami3ee", [b"spam", 3]),
    (b"d3:cow3:moo4:spaml1:a1:bee", {b"cow": b"moo", b"spam": [b"a", b"b"]}),
    (b"d1:bi1e1:ai2ee", {b"b": 1, b"a": 2}),  # read; where order matters (an info dict) the caller checks it
    (b"l" * MAX_DEPTH + b"e" * MAX_DEPTH, functools.reduce(lambda inner, _: [inner], range(MAX_DEPTH - 1), [])),
])
def test_bdecode_vectors(encoded, value):
    assert bdecode(encoded) == value


@pytest.mark.parametrize(("encoded", "why"), [
    (b"", "truncated"), (b"l", "truncated"), (b"li1e", "truncated"), (b"d1:a", "truncated"),
    (b"i03e", "canonical"), (b"i-0e", "canonical"), (b"ie", "canonical"), (b"i-e", "canonical"),
    (b"i1.5e", "canonical"), (b"i+1e", "canonical"), (b"i 1e", "canonical"), (b"i1", "canonical"),
    (b"i" + b"1" * 20 + b"e", "canonical"), (b"i9223372036854775808e", "int64"),
    (b"03:abc", "string length"), (b"1", "string length"), (b"5:abc", "past the end"), (b"1:", "past the end"),
    (b"i1ei2e", "trailing"), (b"4:spamx", "trailing"), (b"x", "unexpected"), (b"-1:a", "unexpected"),
    (b"\xff", "unexpected"), (b"d1:ae", "unexpected"),
    (b"d1:ai1e1:ai2ee", "duplicate"), (b"d1:ai1e1:bi1e1:ai2ee", "duplicate"), (b"di1ei2ee", "not a string"),
    (b"l" * (MAX_DEPTH + 1) + b"e" * (MAX_DEPTH + 1), "deeper"),
])
def test_bdecode_refuses(encoded, why):
    with pytest.raises(BencodeError, match=why):
        bdecode(encoded)


def test_bdecode_counts_every_value(monkeypatch):
    monkeypatch.setattr(torrent_module, "MAX_TOKENS", 5)
    assert bdecode(b"li1ei2ei3ei4ee") == [1, 2, 3, 4]
    with pytest.raises(BencodeError, match="more than 5 values"):
        bdecode(b"li1ei2ei3ei4ei5ee")
    with pytest.raises(BencodeError, match="more than 5 values"):
        bdecode(b"d1:ai1e1:bi2e1:ci3ee")  # keys count too


def test_bdecode_dict_hands_back_a_values_own_bytes():
    value, raw = bdecode_dict(b"d4:infod1:bi1e1:ai2ee5:otheri7ee", raw=(b"info", b"absent"))
    assert value == {b"info": {b"b": 1, b"a": 2}, b"other": 7}
    assert raw == {b"info": b"d1:bi1e1:ai2ee"}  # as written, unsorted: not re-encoded
    for bad in (b"le", b"i1e", b"d4:infodeee", b"d4:infode", b""):
        with pytest.raises(BencodeError):
            bdecode_dict(bad)


def test_bdecode_reads_what_bencode_and_libtorrent_write():
    manifest, layer = ours(content(PIECE_LENGTH + 1))
    torrent = torrent_of(manifest, layer, web_seeds=["http://o.example/f"], v1=v1_pieces([content(PIECE_LENGTH + 1)]))
    assert bdecode(torrent.data) == libtorrent.bdecode(torrent.data)
    assert bencode(bdecode(torrent.data)) == torrent.data
    assert issubclass(BencodeError, PeerError)
