"""The `Swarm-Manifest` field: what server_plugin writes is what the proxy reads, and nothing malformed parses."""

from __future__ import annotations

import base64

import pytest

from swarm.content.manifest import INLINE_HASHES, build_manifest, format_header, parse_header
from swarm.errors import HashMismatch, ManifestError, PeerError

SMALL = bytes(range(256)) * 400  # 102,400 bytes: 7 blocks of 16 KiB, inline
LARGE = bytes(range(256)) * 4096 * 5  # 5 MiB: 320 blocks, at a path
SMALL_M, SMALL_L = build_manifest([SMALL], len(SMALL))
LARGE_M, LARGE_L = build_manifest([LARGE], len(LARGE))


def test_a_short_layer_travels_inline_and_parses_back_checked():
    value = format_header(SMALL_M, SMALL_L, "/unused")
    assert "hashes=" in value and "layer=" not in value
    parsed = parse_header(value)
    assert (parsed.root, parsed.size, parsed.block_size) == (SMALL_M.root, SMALL_M.size, SMALL_M.block_size)
    assert list(parsed.hashes) == SMALL_L and parsed.layer_path is None
    assert parsed.manifest(url="http://o/x", validator='"e"').url == "http://o/x"


def test_a_long_layer_is_a_path_on_the_same_origin():
    value = format_header(LARGE_M, LARGE_L, "/.well-known/swarm-layer/" + LARGE_M.root.hex())
    parsed = parse_header(value)
    assert len(LARGE_L) > INLINE_HASHES
    assert parsed.hashes is None and parsed.layer_path == "/.well-known/swarm-layer/" + LARGE_M.root.hex()


def _field(**params: str) -> str:
    base = {"root": SMALL_M.root.hex(), "size": str(SMALL_M.size), "block-size": str(SMALL_M.block_size),
            "hashes": base64.urlsafe_b64encode(b"".join(SMALL_L)).decode()}
    base.update(params)
    return "; ".join(f"{k}={v}" for k, v in base.items() if v is not None)


BAD = [
    ("missing root", _field(root=None)),
    ("root not hex", _field(root="z" * 64)),
    ("root upper-case", _field(root=SMALL_M.root.hex().upper())),
    ("root short", _field(root=SMALL_M.root.hex()[:62])),
    ("size negative", _field(size="-1")),
    ("size not decimal", _field(size="0x10")),
    ("size with a sign", _field(size="+102400")),
    ("block size not a power of two", _field(**{"block-size": "20000"})),
    ("both layer and hashes", _field(layer="/l")),
    ("neither layer nor hashes", _field(hashes=None)),
    ("unknown parameter", _field(extra="1")),
    ("hashes not base64", _field(hashes="!!!")),
    ("one hash too few", _field(hashes=base64.urlsafe_b64encode(b"".join(SMALL_L[:-1])).decode())),
    ("layer not absolute", _field(hashes=None, layer="relative/path")),
    ("layer to another host", _field(hashes=None, layer="//evil.example/x")),
    ("empty", ""),
    ("garbage", "\x00\xff;;;="),
]


@pytest.mark.parametrize("value", [v for _, v in BAD], ids=[n for n, _ in BAD])
def test_malformed_fields_raise_a_peer_error(value):
    with pytest.raises(PeerError):
        parse_header(value)


def test_a_repeated_parameter_is_refused():
    with pytest.raises(ManifestError):
        parse_header(_field() + f"; size={SMALL_M.size}")


def test_an_inline_layer_that_does_not_hash_to_the_root_is_refused():
    wrong = list(SMALL_L)
    wrong[3] = bytes(32)
    with pytest.raises(HashMismatch):
        parse_header(_field(hashes=base64.urlsafe_b64encode(b"".join(wrong)).decode()))


def test_a_layer_path_that_could_smuggle_a_header_line_is_never_written():
    with pytest.raises(ValueError):
        format_header(LARGE_M, LARGE_L, "/x\r\nSet-Cookie: a=b")
