"""A magnet or a .torrent is a stranger's input: what we read of it agrees with libtorrent, what could send the
session somewhere is dropped with a reason, and anything malformed is a `BadTarget`, never another exception."""

from __future__ import annotations

import base64
import copy
import hashlib
import random
from urllib.parse import quote

import libtorrent
import pytest

from bittorrent.errors import BadTarget, BridgeError
from bittorrent.target import (
    MAX_NAME_BYTES,
    MAX_NOTES,
    MAX_PEERS,
    MAX_TORRENT,
    MAX_WEB_SEEDS,
    parse_info,
    parse_magnet,
    parse_torrent,
    safe_name,
)
from swarm.content.manifest import build_manifest
from swarm.content.torrent import PIECE_LENGTH, bencode, magnet_link, piece_layer, torrent_of, v1_pieces

KIB = 1024
V2, V1 = bytes(range(32)), bytes(range(100, 120))
BTMH = "xt=urn:btmh:1220" + V2.hex()


def magnet(*params: str) -> str:
    return "magnet:?" + "&".join([BTMH, *params])


# ---------------------------------------------------------------------------------------------------- magnets

@pytest.mark.parametrize(("params", "v1"), [
    ([BTMH], None),
    ([f"xt=urn:btih:{V1.hex()}", BTMH], V1),  # a hybrid's link names both
    ([f"xt=urn:btih:{base64.b32encode(V1).decode()}", BTMH], V1),  # BEP 9's base32 form of a v1 hash
    ([f"xt.1=urn:btih:{V1.hex().upper()}", "xt.2=URN:BTMH:1220" + V2.hex().upper()], V1),  # numbered, upper case
    (["xt=urn:ed2k:31d6cfe0d16ae931b73c59d7e0c089c0", BTMH], None),  # another network's URN: ignored
    ([BTMH, BTMH, "so=0", "x.unknown=1"], None),  # the same hash twice is one; unknown parameters ignored
], ids=["v2", "hybrid", "hybrid-base32", "numbered", "ed2k", "repeated"])
def test_a_magnets_info_hashes(params, v1):
    target = parse_magnet("magnet:?" + "&".join(params), allow_private=False)
    assert (target.info_hash_v2, target.info_hash_v1) == (V2, v1)
    assert (target.display_name, target.peers, target.web_seeds, target.needs_resolution, target.notes) == (
        None, [], [], [], [])


@pytest.mark.parametrize(("text", "why"), [
    (f"magnet:?xt=urn:btih:{V1.hex()}&dn=x", "a v1-only magnet: swarmproxy verifies by the BitTorrent v2 pieces "
                                             "root; ask for a v2 or hybrid link"),
    ("magnet:?dn=x", "no info-hash"),
    ("magnet:?xt=urn:btmh:1320" + V2.hex(), "not a v2 info-hash"),  # not SHA-256
    ("magnet:?xt=urn:btmh:1220" + V2.hex()[:-2], "not a v2 info-hash"),
    ("magnet:?xt=urn:btmh:1220" + "g" * 64, "not a v2 info-hash"),
    ("magnet:?xt=urn:btmh:1220" + "\u0661" * 64, "not a v2 info-hash"),  # Arabic-Indic digits are no hex
    (magnet("xt=urn:btmh:1220" + bytes(32).hex()), "several torrents"),
    (magnet(f"xt=urn:btih:{V1.hex()}", f"xt=urn:btih:{bytes(20).hex()}"), "several torrents"),
    (magnet("xt=urn:btih:xyz"), "not a v1 info-hash"),
    ("https://example.com/?" + BTMH, "not a magnet link"),
    ("", "not a magnet link"),
    (magnet("dn=" + "a" * 9000), "at most 8,192"),
])
def test_a_magnet_that_names_no_one_v2_torrent_is_refused(text, why):
    with pytest.raises(BadTarget, match=why.replace("?", r"\?")):
        parse_magnet(text, allow_private=True)


def test_a_magnet_is_text():
    with pytest.raises(BadTarget):
        parse_magnet(magnet().encode(), allow_private=False)  # type: ignore[arg-type]


# (x.pe value, kept without allow_private, kept with it, why it is dropped)
PEERS = [
    ("1.1.1.1:6881", ("1.1.1.1", 6881), ("1.1.1.1", 6881), None),
    ("[2606:4700::1111]:443", ("2606:4700::1111", 443), ("2606:4700::1111", 443), None),
    ("127.0.0.1:6881", None, ("127.0.0.1", 6881), "a loopback address"),
    ("[::1]:6881", None, ("::1", 6881), "a loopback address"),
    ("[::ffff:127.0.0.1]:1", None, ("127.0.0.1", 1), "a loopback address"),  # IPv4-mapped: the host it reaches
    ("192.168.1.2:6881", None, ("192.168.1.2", 6881), "a private address"),
    ("[fd00::1]:6881", None, ("fd00::1", 6881), "a private address"),
    ("169.254.1.1:80", None, ("169.254.1.1", 80), "a link-local address"),
    ("[fe80::1]:80", None, ("fe80::1", 80), "a link-local address"),
    ("0.0.0.0:6881", None, None, "special-purpose"),  # reaches this host on Linux: never
    ("224.0.0.1:6881", None, None, "special-purpose"),
    ("example.com:6881", None, None, "a host name"),  # libtorrent would resolve it itself
    ("127.1:6881", None, None, "a host name"),  # inet_aton's 127.0.0.1: a name to us, so dropped
    ("1.1.1.1:0", None, None, "no TCP port"),
    ("1.1.1.1:65536", None, None, "no TCP port"),
    ("1.1.1.1:x", None, None, "not an address and port"),
    ("1.1.1.1:\u0668\u0660", None, None, "not an address and port"),  # Arabic-Indic digits
    ("1.1.1.1", None, None, "not an address and port"),
    ("::1:6881", None, None, "not an address and port"),  # IPv6 without brackets: ambiguous
    ("[fe80::1%eth0]:6881", None, None, "not an address and port"),
    ("", None, None, "not an address and port"),
]


@pytest.mark.parametrize(("value", "public", "private", "why"), PEERS, ids=[p[0] or "empty" for p in PEERS])
@pytest.mark.parametrize("allow_private", [False, True])
def test_a_magnets_peers(value, public, private, why, allow_private):
    target = parse_magnet(magnet("x.pe=" + quote(value, safe=":[]")), allow_private=allow_private)
    kept = private if allow_private else public
    assert target.peers == ([kept] if kept else [])
    if kept:
        assert target.notes == []
    else:
        assert len(target.notes) == 1 and why in target.notes[0] and "dropped" in target.notes[0]


# (ws value, allow_private, kept, host name to resolve, why it is dropped)
WEB_SEEDS = [
    ("http://example.com/f.iso", False, True, "example.com", None),
    ("HTTPS://Example.COM.:8443/a b.iso", False, True, "example.com", None),  # spaces in a path: libtorrent's
    ("http://1.1.1.1/f", False, True, None, None),
    ("http://[2606:4700::1111]:8080/f", False, True, None, None),
    ("http://127.0.0.1:8080/f", False, False, None, "a loopback address"),
    ("http://127.0.0.1:8080/f", True, True, None, None),
    ("http://[::1]/f", False, False, None, "a loopback address"),
    ("http://[::1]/f", True, True, None, None),
    ("http://10.1.2.3/f", False, False, None, "a private address"),
    ("http://0.0.0.0/f", True, False, None, "special-purpose"),
    ("http://localhost/f", False, True, "localhost", None),  # a name: the caller resolves and judges it
    ("ftp://example.com/f", False, False, None, "not an http or https URL"),
    ("javascript:alert(1)", False, False, None, "not an http or https URL"),
    ("http://user:pw@example.com/f", False, False, None, "a user name or password"),
    ("http://example.com@127.0.0.1/f", True, False, None, "a user name or password"),
    ("http://evil.example\\@good.example/", False, False, None, "backslash"),
    ("http://example.com/\r\nX-Injected: 1", False, False, None, "control or format characters"),
    ("http://example.com:99999/f", False, False, None, "no TCP port"),
    ("http://exa mple.com/f", False, False, None, "not an http or https URL"),
    ("http://example.com?x=1", False, False, None, "not an http or https URL"),
    ("http://[fe80::1%25eth0]/f", True, False, None, "not an http or https URL"),
    ("http://127.1/f", True, False, None, "only some resolvers read"),
    ("http://2130706433/f", True, False, None, "only some resolvers read"),
    ("http://0x7f.1/f", True, False, None, "only some resolvers read"),
    ("http://-bad-.example/f", False, False, None, "not a host name"),
    ("http://a..b/f", False, False, None, "not a host name"),
    ("http://" + "a" * 64 + ".example/f", False, False, None, "not a host name"),
]


@pytest.mark.parametrize(("url", "allow_private", "kept", "name", "why"), WEB_SEEDS,
                         ids=[f"{w[0][:40]}-{w[1]}" for w in WEB_SEEDS])
def test_a_magnets_web_seeds(url, allow_private, kept, name, why):
    target = parse_magnet(magnet("ws=" + quote(url, safe="")), allow_private=allow_private)
    assert target.web_seeds == ([url] if kept else [])
    assert target.needs_resolution == ([name] if name else [])
    if why:
        assert len(target.notes) == 1 and why in target.notes[0] and "dropped" in target.notes[0]
    else:
        assert target.notes == []


@pytest.mark.parametrize(("dn", "name"), [
    ("ubuntu%2024.04.iso", "ubuntu 24.04.iso"),
    ("a+b", "a b"),  # `+` is a space in a magnet, as libtorrent reads it
    ("..%2Fx", ".._x"),  # a separator is no separator
    ("..%2F..%2Fetc%2Fpasswd", ".._.._etc_passwd"),
    ("a%2Fb%5Cc", "a_b_c"),
    ("..", None), (".", None), ("%20%20", None), ("", None), ("%00", None),
    ("a%00b%1B%5B31m%0A", "ab[31m"),  # NUL, an escape, a newline
    ("evil%E2%80%AEtxt.exe", "eviltxt.exe"),  # U+202E would show it as "evilexe.txt"
    ("%FF", "\ufffd"),  # no UTF-8: a replacement character
    ("%E6%97%A5%E6%9C%AC.iso", "日本.iso"),
])
def test_a_magnets_display_name(dn, name):
    assert parse_magnet(magnet("dn=" + dn), allow_private=False).display_name == name


@pytest.mark.parametrize(("text", "name"), [
    (None, None),
    ("x" * 300 + ".iso", "x" * (MAX_NAME_BYTES - 4) + ".iso"),  # cut, the extension kept
    ("x" * 300, "x" * MAX_NAME_BYTES),
    ("é" * 200, "é" * (MAX_NAME_BYTES // 2)),  # two bytes each: no half character
    ("a" + "\udcff" + "b", "ab"),  # a surrogate (an undecodable byte of argv) goes
    ("\u2028x\u2029", "x"),
])
def test_safe_name(text, name):
    assert safe_name(text) == name
    assert name is None or len(name.encode("utf-8")) <= MAX_NAME_BYTES


def test_trackers_are_dropped_with_one_note():
    target = parse_magnet(magnet("tr=http%3A%2F%2Ft.example%2Fannounce", "tr.1=udp%3A%2F%2Fu.example%3A80"),
                          allow_private=False)
    assert target.notes == ["2 trackers dropped: trackers are off until the Internet mode"]


def test_peers_and_web_seeds_are_bounded():
    peers = [f"x.pe=1.1.{i}.1:6881" for i in range(MAX_PEERS + 10)]
    seeds = [f"ws=http%3A%2F%2Fs{i}.example%2Ff" for i in range(MAX_WEB_SEEDS + 2)]
    target = parse_magnet(magnet(*peers, "x.pe=1.1.0.1:6881", "x.pe=%5B%3A%3Affff%3A1.1.0.1%5D:6881", *seeds),
                          allow_private=False)
    assert target.peers == [(f"1.1.{i}.1", 6881) for i in range(MAX_PEERS)]  # the same peer thrice is one
    assert target.web_seeds == [f"http://s{i}.example/f" for i in range(MAX_WEB_SEEDS)]
    assert target.needs_resolution == [f"s{i}.example" for i in range(MAX_WEB_SEEDS)]
    assert len(target.notes) == 12 and all("at most" in note for note in target.notes)
    noisy = parse_magnet(magnet(*(f"x.pe=10.0.0.{i}:1" for i in range(100))), allow_private=False)
    assert len(noisy.notes) == MAX_NOTES + 1 and noisy.notes[-1] == f"… and {100 - MAX_NOTES} more dropped"


def test_our_magnet_reads_as_libtorrent_reads_it():
    torrent = torrent_of(*build_manifest([b"x" * 100_000], 100_000), v1=v1_pieces([b"x" * 100_000]))
    link = magnet_link(torrent, display_name="ubuntu 24.04.iso", peers=[("127.0.0.2", 6881), ("::1", 6882)],
                       web_seeds=["http://o.example/a b.iso"])
    ours, theirs = parse_magnet(link, allow_private=True), libtorrent.parse_magnet_uri(link)
    assert ours.info_hash_v2 == theirs.info_hashes.v2.to_bytes() == torrent.info_hash
    assert ours.info_hash_v1 == theirs.info_hashes.v1.to_bytes() == torrent.info_hash_v1
    assert ours.display_name == theirs.name and ours.web_seeds == theirs.url_seeds
    assert sorted(ours.peers) == sorted(theirs.peers)


# ------------------------------------------------------------------------------------------------ torrents

MULTI = {"a.bin": 16 * KIB, "b.bin": 40_000, "empty": 0, "sub/c.bin": 5, "sub/deeper/d.bin": 100_000,
         "z.bin": 70_000}
SINGLE = {"one.iso": 50_000}
FLAGS = {"v2": libtorrent.create_torrent.v2_only, "hybrid": 0, "v1": libtorrent.create_torrent.v1_only}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """libtorrent's own torrent of a layout: `made(layout, kind, piece_length)` → (decoded dict, bytes)."""
    cache: dict = {}

    def make(files: dict[str, int], kind: str, piece_length: int = 16 * KIB):
        key = (tuple(files), kind, piece_length)
        if key not in cache:
            base = tmp_path_factory.mktemp("lt")
            top = base / "d" if len(files) > 1 else base
            for path, size in files.items():
                (top / path).parent.mkdir(parents=True, exist_ok=True)
                (top / path).write_bytes(random.Random(path).randbytes(size))
            creator = libtorrent.create_torrent(libtorrent.list_files(str(base / ("d" if len(files) > 1 else
                                                                                 next(iter(files))))),
                                                piece_length, FLAGS[kind])
            libtorrent.set_piece_hashes(creator, str(base))
            generated = creator.generate()
            cache[key] = generated, libtorrent.bencode(generated)
        return copy.deepcopy(cache[key][0]), cache[key][1]

    return make


def _layer(generated: dict, root: bytes, size: int, piece_length: int) -> list[bytes]:
    if size <= piece_length:
        return [root]
    joined = generated[b"piece layers"][root]
    return [joined[i:i + 32] for i in range(0, len(joined), 32)]


@pytest.mark.parametrize(("files", "kind", "piece_length"), [
    (MULTI, "v2", 16 * KIB), (MULTI, "hybrid", 16 * KIB), (MULTI, "hybrid", 64 * KIB),
    (SINGLE, "v2", 16 * KIB), (SINGLE, "hybrid", 16 * KIB), (SINGLE, "v2", 64 * KIB),
])
def test_each_file_is_read_as_libtorrent_reads_it(made, files, kind, piece_length):
    generated, data = made(files, kind, piece_length)
    info = libtorrent.torrent_info(data)
    layout, hashes = info.layout(), info.info_hashes()
    for path, size in files.items():
        if not size:
            continue
        target = parse_torrent(data, file=path if len(files) > 1 else None)
        assert target.info_hash_v2 == hashes.v2.to_bytes()
        assert target.info_hash_v1 == (hashes.v1.to_bytes() if kind == "hybrid" else None)
        assert layout.file_path(target.file_index) == (f"d/{path}" if len(files) > 1 else path)
        assert (target.root, target.size) == (layout.root(target.file_index).to_bytes(), size)
        assert target.piece_length == piece_length == info.piece_length()
        assert target.piece_layer == _layer(generated, target.root, size, piece_length)
        assert (target.file_path, target.display_name) == (tuple(path.split("/")), path.rpartition("/")[2])
        assert (target.info, target.data) == (info.info_section(), data)
        # A magnet's info dict, fetched from peers: the same file, its piece layer known only when given.
        fetched = parse_info(info.info_section(), expected_v2=target.info_hash_v2, expected_v1=target.info_hash_v1,
                             file=path if len(files) > 1 else None)
        assert (fetched.root, fetched.file_index, fetched.data) == (target.root, target.file_index, None)
        assert fetched.piece_layer == (target.piece_layer if size <= piece_length else None)
        given = parse_info(info.info_section(), file=path if len(files) > 1 else None,
                           piece_layers=generated.get(b"piece layers", {}))
        assert given.piece_layer == target.piece_layer


def test_several_files_need_a_choice(made):
    _, data = made(MULTI, "hybrid")
    message = "this torrent holds 5 files: 'a.bin', 'b.bin', 'sub/c.bin', 'sub/deeper/d.bin', 'z.bin': pick one " \
              "with --file PATH"
    with pytest.raises(BadTarget, match=message.replace(".", r"\.")):
        parse_torrent(data)
    with pytest.raises(BadTarget, match="no file 'sub' in this torrent; it holds 6 files"):
        parse_torrent(data, file="sub")
    with pytest.raises(BadTarget, match="no file '.pad/9152'"):  # libtorrent's pad files are none of ours
        parse_torrent(data, file=".pad/9152")
    with pytest.raises(BadTarget, match="'empty' is empty: a zero-length file has no pieces root"):
        parse_torrent(data, file="empty")


def test_many_files_are_listed_in_part(made):
    _, data = made({f"f{i:02}": 1 for i in range(25)}, "v2")
    with pytest.raises(BadTarget, match=r"holds 25 files: 'f00', .*'f09' and 15 more: pick one with --file PATH"):
        parse_torrent(data)


def test_a_symbolic_link_is_an_empty_file_as_libtorrent_reads_it(made):
    generated, _ = made(MULTI, "v2")
    entry = generated[b"info"][b"file tree"][b"b.bin"][b""]
    generated[b"piece layers"].pop(entry[b"pieces root"])
    entry.update({b"attr": b"l", b"symlink path": [b"a.bin"]})  # its length and root stay: a lie to ignore
    data = bencode(generated)
    layout = libtorrent.torrent_info(data).layout()
    for path in ("sub/c.bin", "z.bin"):
        assert layout.file_path(parse_torrent(data, file=path).file_index) == f"d/{path}"
    with pytest.raises(BadTarget, match="'b.bin' is a symbolic link"):
        parse_torrent(data, file="b.bin")


@pytest.mark.parametrize("size", [1, PIECE_LENGTH, PIECE_LENGTH + 1])
@pytest.mark.parametrize("hybrid", [False, True])
def test_our_own_torrents_read_back_to_the_content_root(size, hybrid):
    data = random.Random(size).randbytes(size)
    manifest, layer = build_manifest([data], size)
    torrent = torrent_of(manifest, layer, v1=v1_pieces([data]) if hybrid else None)
    target = parse_torrent(torrent.data)
    assert (target.root, target.size, target.piece_length) == (manifest.root, size, PIECE_LENGTH)
    assert (target.info_hash_v2, target.info_hash_v1) == (torrent.info_hash, torrent.info_hash_v1)
    assert target.piece_layer == (piece_layer(manifest, layer) or [manifest.root])
    assert (target.display_name, target.file_index) == (manifest.root.hex(), 0)
    link = parse_magnet(magnet_link(torrent, display_name="f.iso"), allow_private=False)
    fetched = parse_info(target.info, expected_v2=link.info_hash_v2, expected_v1=link.info_hash_v1)
    assert fetched.root == manifest.root


def test_a_piece_layer_with_one_flipped_byte_is_refused(made):
    generated, _ = made(MULTI, "hybrid")
    root = generated[b"info"][b"file tree"][b"z.bin"][b""][b"pieces root"]
    flipped = bytearray(generated[b"piece layers"][root])
    flipped[37] ^= 1
    generated[b"piece layers"][root] = bytes(flipped)
    with pytest.raises(BadTarget, match="the piece layer of 'z.bin' does not match its pieces root"):
        parse_torrent(bencode(generated), file="z.bin")
    with pytest.raises(BadTarget, match="does not match its pieces root"):
        parse_info(bencode(generated[b"info"]), file="z.bin", piece_layers=generated[b"piece layers"])
    assert parse_torrent(bencode(generated), file="b.bin").size == 40_000  # another file's layer is not read


def test_an_info_dict_that_is_not_the_magnets_is_refused(made):
    _, data = made(SINGLE, "hybrid")
    info = libtorrent.torrent_info(data).info_section()
    with pytest.raises(BadTarget, match="its SHA-256 differs from the v2 info-hash"):
        parse_info(info, expected_v2=hashlib.sha256(info + b" ").digest())
    with pytest.raises(BadTarget, match="its SHA-1 differs from the v1 info-hash"):
        parse_info(info, expected_v1=bytes(20))


def _tree(generated: dict) -> dict:
    return generated[b"info"][b"file tree"]


# (the torrent it starts from, what is done to its decoded form, why it is refused)
MALFORMED = [
    ("v1", lambda t: None, "a v1-only torrent: swarmproxy verifies by the BitTorrent v2 pieces root; ask for a v2 "
                           "or hybrid torrent"),
    ("v2", lambda t: t[b"info"].update({b"meta version": 3}), "meta version 3"),
    ("v2", lambda t: t[b"info"].pop(b"meta version"), "meta version None"),
    ("v2", lambda t: t[b"info"].update({b"meta version": [2]}), "meta version list"),
    ("v2", lambda t: t[b"info"].pop(b"file tree"), "no v2 file tree"),
    ("v2", lambda t: t[b"info"].update({b"file tree": [b"a"]}), "no v2 file tree"),
    ("v2", lambda t: t[b"info"].update({b"piece length": 8 * KIB}), "a piece length must be a power of two"),
    ("v2", lambda t: t[b"info"].update({b"piece length": 24 * KIB}), "a piece length must be a power of two"),
    ("v2", lambda t: t[b"info"].update({b"piece length": 2**29}), "a piece length must be a power of two"),
    ("v2", lambda t: t[b"info"].update({b"piece length": b"16384"}), "not b'16384'"),
    ("v2", lambda t: t[b"info"].update({b"name": 1}), "its name is not a string"),
    ("v2", lambda t: t.pop(b"piece layers"), "the torrent has no piece layer for 'z.bin'"),
    ("v2", lambda t: t.update({b"piece layers": [b"x"]}), "its piece layers are not a dictionary"),
    ("v2", lambda t: t[b"piece layers"].update({k: v[:-32] for k, v in t[b"piece layers"].items()}),
     "hash layer has 4 entries, expected 5"),
    ("v2", lambda t: t[b"piece layers"].update({k: v[:-1] for k, v in t[b"piece layers"].items()}),
     "is not 32-byte hashes"),
    ("v2", lambda t: t[b"piece layers"].update({k: 5 for k in t[b"piece layers"]}), "is not 32-byte hashes"),
    ("v2", lambda t: _tree(t).update({b"..": _tree(t)[b"a.bin"]}), "an unsafe file name '..'"),
    ("v2", lambda t: _tree(t).update({b"x/y": _tree(t)[b"a.bin"]}), "an unsafe file name 'x/y'"),
    ("v2", lambda t: _tree(t).update({b"\xff": _tree(t)[b"a.bin"]}), "a file name that is not UTF-8"),
    ("v2", lambda t: _tree(t)[b"a.bin"].update({b"x": {}}), "a malformed file entry 'a.bin'"),
    ("v2", lambda t: _tree(t).update({b"": _tree(t)[b"a.bin"][b""]}), "a malformed file entry"),
    ("v2", lambda t: _tree(t)[b"a.bin"].update({b"": [1]}), "a malformed file entry 'a.bin'"),
    ("v2", lambda t: _tree(t).update({b"x": b"y"}), "a malformed directory 'x'"),
    ("v2", lambda t: _tree(t)[b"a.bin"][b""].update({b"length": -1}), "a bad length or attributes for 'a.bin'"),
    ("v2", lambda t: _tree(t)[b"a.bin"][b""].update({b"length": b"1"}), "a bad length or attributes for 'a.bin'"),
    ("v2", lambda t: _tree(t)[b"a.bin"][b""].update({b"attr": 1}), "a bad length or attributes for 'a.bin'"),
    ("v2", lambda t: _tree(t)[b"a.bin"][b""].update({b"pieces root": bytes(31)}), "no 32-byte pieces root"),
    ("v2", lambda t: _tree(t)[b"a.bin"][b""].pop(b"pieces root"), "no 32-byte pieces root for 'a.bin'"),
    ("v2", lambda t: _tree(t)[b"a.bin"][b""].update({b"attr": b"p"}), "a pad file in the v2 file tree"),
    ("v2", lambda t: _tree(t)[b"z.bin"][b""].update({b"length": 2**62}), "swarmproxy holds files of up to"),
    ("v2", lambda t: t.update({b"info": [1]}), "no info dictionary"),
    ("v2", lambda t: t.pop(b"info"), "no info dictionary"),
    ("hybrid", lambda t: t[b"info"].update({b"pieces": t[b"info"][b"pieces"][:-20]}), "are not 17 SHA-1 hashes"),
    ("hybrid", lambda t: t[b"info"].update({b"pieces": 1}), "are not 17 SHA-1 hashes"),
    ("hybrid", lambda t: t[b"info"][b"files"][1].update({b"length": 40_001}), "v1 and v2 parts list different"),
    ("hybrid", lambda t: t[b"info"][b"files"].pop(0), "v1 and v2 parts list different"),
    ("hybrid", lambda t: t[b"info"][b"files"][0].update({b"path": b"a.bin"}), "a v1 file entry without a path"),
    ("hybrid", lambda t: t[b"info"][b"files"][0].update({b"path": []}), "a v1 file entry without a path"),
    ("hybrid", lambda t: t[b"info"][b"files"].append(3), "a v1 file entry without a path"),
    ("hybrid", lambda t: t[b"info"].update({b"files": 3}), "a v1 file entry without a path"),
    ("hybrid", lambda t: t[b"info"].pop(b"files"), "its v1 part has neither files nor a length"),
]


@pytest.mark.parametrize(("kind", "change", "why"), MALFORMED, ids=[f"{i}-{m[2][:30]}" for i, m in
                                                                      enumerate(MALFORMED)])
def test_a_malformed_torrent_is_refused(made, kind, change, why):
    generated, _ = made(MULTI, kind)
    change(generated)
    with pytest.raises(BadTarget, match=why.replace("(", r"\(").replace(".", r"\.")):
        parse_torrent(bencode(generated), file="z.bin")


@pytest.mark.parametrize("tree", [{b"e": {b"": {b"length": 0}}, b"dir": {}}, {}])
def test_a_torrent_of_empty_files_has_nothing_to_fetch(made, tree):
    generated, _ = made(SINGLE, "v2")
    generated[b"info"][b"file tree"] = tree
    with pytest.raises(BadTarget, match="nothing to fetch: every file of this torrent is empty"):
        parse_torrent(bencode(generated))


def _unsorted(info: dict) -> bytes:
    """An info dict encoded with its keys in reverse order: the same values, another info-hash."""
    return b"d" + b"".join(bencode(key) + bencode(info[key]) for key in sorted(info, reverse=True)) + b"e"


def test_bytes_that_are_no_torrent_are_refused(made):
    generated, data = made(SINGLE, "v2")
    info = libtorrent.torrent_info(data).info_section()
    refused = {
        b"": "not a torrent file: bencode: truncated",
        b"garbage": "not a torrent file: bencode: not a dictionary",
        data[:-1]: "truncated",
        data + b"x": "trailing bytes",
        b"l" * 40 + b"e" * 40: "not a dictionary",
        b"d4:info" + b"d1:a" * 40 + b"i1e" + b"e" * 41: "nested deeper than 32",
        b"d4:info" + info + b"4:info" + info + b"e": "a duplicate dictionary key b'info'",
        b"d4:info" + info.replace(b"i16384e", b"i016384e") + b"e": "not an integer in canonical form",
        b"d4:info" + _unsorted(generated[b"info"]) + b"e": "not in canonical form \\(keys out of order\\)",
        b"d4:info" + b"i1e" * 10 + b"e": "a dictionary key that is not a string",
        b"d" + b"0:" * (MAX_TORRENT // 2): "a torrent file of 16,777,217 bytes; at most 16,777,216",
    }
    for raw, why in refused.items():
        with pytest.raises(BadTarget, match=why):
            parse_torrent(raw)
    for raw, why in {_unsorted(generated[b"info"]): "canonical form", info + b"e": "trailing", b"le": "dictionary",
                     info[:-1]: "truncated"}.items():
        with pytest.raises(BadTarget, match=why):
            parse_info(raw)
    with pytest.raises(BadTarget):
        parse_torrent("d4:infode")  # type: ignore[arg-type]
    assert issubclass(BadTarget, BridgeError)


# ------------------------------------------------------------------------------------------------ fuzzing

def _mutate(rng: random.Random, data: bytes, alphabet: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out) + 1)
        match rng.randrange(6):
            case 0 if out:  # flip a bit
                at = min(at, len(out) - 1)
                out[at] ^= 1 << rng.randrange(8)
            case 1:  # insert a byte that means something to bencode or a URL
                out[at:at] = bytes([rng.choice(alphabet)])
            case 2:  # cut a range out
                del out[at:at + rng.randint(1, 16)]
            case 3:  # repeat a range
                out[at:at] = out[at:at + rng.randint(1, 32)]
            case 4:  # truncate
                del out[at:]
            case _:  # change a digit, so that lengths and counts lie
                digits = [i for i, b in enumerate(out) if 0x30 <= b <= 0x39]
                if digits:
                    out[rng.choice(digits)] = rng.choice(b"0123456789")
    return bytes(out)


def test_mutated_torrents_and_info_dicts_only_ever_raise_bad_target(made):
    generated, data = made(MULTI, "hybrid")
    info = libtorrent.torrent_info(data).info_section()
    rng, read = random.Random(52), 0
    for case in range(3000):
        mutated = _mutate(rng, data if case % 3 else info, b"ilde:0123456789-\x00\xff")
        try:
            if case % 3:
                parse_torrent(mutated, file=rng.choice([None, "z.bin", "b.bin"]))
            else:
                parse_info(mutated, file="sub/deeper/d.bin", piece_layers=generated[b"piece layers"])
            read += 1
        except BadTarget:
            pass
    assert 0 < read < 3000  # some mutations leave a readable torrent (a flipped bit in a name), most do not


def test_mutated_magnets_only_ever_raise_bad_target():
    link = magnet(f"xt=urn:btih:{V1.hex()}", "dn=a%20b.iso", "x.pe=1.1.1.1:6881", "x.pe=%5B%3A%3A1%5D:1",
                  "ws=http%3A%2F%2Fexample.com%2Ff", "tr=http%3A%2F%2Ft%2Fa")
    rng, read = random.Random(9), 0
    for _ in range(3000):
        mutated = _mutate(rng, link.encode(), b"%&=:[]/.@\\+0123456789abcdefx\x00 \xc3\xa9\xe2\x80\xae")
        try:
            parse_magnet(mutated.decode("utf-8", "surrogateescape"), allow_private=rng.random() < 0.5)
            read += 1
        except BadTarget:
            pass
    assert 0 < read < 3000
