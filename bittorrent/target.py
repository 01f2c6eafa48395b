"""What `swarmproxy get` is asked to fetch: a magnet link or a .torrent file, read as a stranger's input. Pure.

Magnets and torrents come from web pages, so this is a security boundary: every field is checked, bounded and
refused or dropped with a reason (`BadTarget` for what makes the whole target unusable, a note for a dropped
peer or web seed), and nothing that could make the session reach somewhere on its own passes unchecked.

* We verify by BitTorrent v2's `pieces root` (BEP 52), which is our content root: a v1-only magnet or torrent is
  refused with a message saying so; a hybrid keeps its v1 info-hash beside the v2 one.
* A magnet's peers (`x.pe`, BEP 9) are IP literals only: a host name would be resolved by libtorrent itself, out
  of our control. Non-public addresses are dropped unless the caller allows private ones (a lab, a LAN); a
  special-purpose one (unspecified, multicast, documentation...) always, since it reaches no ordinary host, or,
  for `0.0.0.0`, this one. Web seeds (`ws`, BEP 19) are plain http(s) URLs; a literal host is judged like a peer,
  a host name is kept but listed in `needs_resolution`, for the caller to check where it resolves. Trackers are
  dropped (no tracker until the Internet mode).
* A torrent's info-hash is SHA-256 of its info dict's bytes as they are (`bdecode_dict`), and the info dict must be
  in canonical form, so no two readers can see different torrents under one hash. One file is selected (BEP 52's
  file tree); its piece layer, when the torrent carries it, must reduce to its pieces root.

`parse_info` reads an info dict libtorrent fetched from peers for a magnet (BEP 9), checked against the magnet's
info-hash; its piece layer may come later from peers.
"""

from __future__ import annotations

import base64
import hashlib
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import unquote_plus

import addresses
from swarm.content import merkle
from swarm.content.manifest import MAX_SIZE
from swarm.content.torrent import MULTIHASH_SHA256, Bencodable, bdecode, bdecode_dict, bencode
from swarm.errors import BencodeError, HashMismatch

from .errors import BadTarget

__all__ = ["MagnetTarget", "TorrentTarget", "parse_info", "parse_magnet", "parse_peer", "parse_torrent",
           "safe_name"]

MAX_MAGNET = 8 * 1024  # characters; a real magnet with a few peers and web seeds is well under 1 KiB
MAX_PEERS = 50
MAX_WEB_SEEDS = 8
MAX_NOTES = 20  # notes kept about dropped parameters; one more says how many were not listed
MAX_NAME_BYTES = 255  # one file-name component on every common file system
MAX_TORRENT = 16 * 1024 * 1024  # a .torrent, or an info dict from peers: piece layers of a 16 KiB-piece 8 GiB file
MIN_PIECE_LENGTH = merkle.LEAF_SIZE  # BEP 52: a power of two of at least 16 KiB
MAX_PIECE_LENGTH = 256 * 1024 * 1024
MAX_FILES = 100_000  # files in a torrent's tree: far more than real torrents hold, and a bound on our walk
MAX_LISTED = 10  # paths named when a torrent holds several files and none was chosen

V1_ONLY = "a v1-only {}: swarmproxy verifies by the BitTorrent v2 pieces root; ask for a v2 or hybrid {}"

# Unicode categories dropped from a name: controls (NUL, terminal escapes, newlines), format characters (a
# right-to-left override shows "evil\u202etxt.exe" as "evilexe.txt"; zero-width ones), surrogates (undecodable
# bytes in argv), and line or paragraph separators.
_UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
_KEEP_EXTENSION = 32  # bytes of a ".ext" kept when a long name is cut

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_HEX40 = re.compile(r"[0-9a-fA-F]{40}")
_BASE32 = re.compile(r"[A-Za-z2-7]{32}")
_NUMBERED = re.compile(r"(xt|dn|tr|ws|x\.pe)\.[0-9]{1,3}")  # BEP 9's `xt.1=…` for several values
_PEER = re.compile(r"\[([0-9A-Fa-f:.]+)\]:([0-9]{1,5})|([0-9A-Za-z.-]+):([0-9]{1,5})")
# A web seed's start, strictly: a host of letters, digits, dots and hyphens or a bracketed IPv6 literal, no user
# name, then a path or nothing. URL parsers disagree on the rest (a backslash, `@`, `%` in a host), and the host
# we judge must be the host libtorrent connects to.
_WEB_SEED = re.compile(r"(?i)(https?)://(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::([0-9]{1,5}))?(?:/|\Z)")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
# A name whose last label is a number is an IPv4 address to `inet_aton` (`127.1`, `0x7f.1`, `2130706433`) and a
# name to us: refused rather than resolved two ways.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")


@dataclass(frozen=True)
class MagnetTarget:
    """A magnet link as we will use it: the info-hashes, and what survived of its hints."""

    info_hash_v2: bytes  # 32 bytes: SHA-256 of the info dict
    info_hash_v1: bytes | None  # 20 bytes for a hybrid's link, which names its SHA-1 info-hash too
    display_name: str | None  # `dn`, as `safe_name` leaves it
    peers: list[tuple[str, int]]  # (IP literal, port), at most MAX_PEERS
    web_seeds: list[str]  # http(s) URLs, at most MAX_WEB_SEEDS
    needs_resolution: list[str]  # the web seeds' host names, which the caller must find public before using them
    notes: list[str]  # why each dropped parameter was dropped, for the user


@dataclass(frozen=True)
class TorrentTarget:
    """The one file of a v2 torrent to fetch, and what checks it."""

    info_hash_v2: bytes  # SHA-256 of the info dict's bytes
    info_hash_v1: bytes | None  # SHA-1 of the same bytes for a hybrid (one with v1 `pieces`), else None
    root: bytes  # the file's pieces root: our content root
    size: int
    piece_length: int
    # The file's piece layer (our block layer with block size `piece_length`), verified against `root`: [root] for
    # a file of one piece, None when an info dict came without it (a magnet's: fetched from peers later).
    piece_layer: list[bytes] | None
    display_name: str | None  # the file's name, as `safe_name` leaves it
    file_path: tuple[str, ...]  # its path in the file tree
    file_index: int  # its index among libtorrent's files, pad files included
    info: bytes  # the info dict's bytes, as hashed
    data: bytes | None  # the .torrent file's bytes; None from `parse_info`


def _show(text: str | bytes, limit: int = 80) -> str:
    """A stranger's text in a message: quoted, escapes visible (a terminal never sees a raw control), cut short."""
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


def _brief(value: Bencodable | None) -> str:
    """A decoded value in a message: a number or a string as it is, anything else by its kind."""
    return str(value) if isinstance(value, int) or value is None else _show(value) if isinstance(value, bytes) \
        else type(value).__name__


def safe_name(text: str | None) -> str | None:
    """One safe file-name component made of `text`, or None: separators (`/`, `\\`) become `_`, control and format
    characters go, spaces around go, `.` and `..` are no name, and a name is cut to `MAX_NAME_BYTES` of UTF-8
    (keeping a short extension). So `../x` is `.._x`: what the name said stays readable, and it escapes nowhere."""
    if text is None:
        return None
    kept = (("_" if char in "/\\" else char) for char in text if unicodedata.category(char) not in _UNSAFE_CATEGORIES)
    name = "".join(kept).strip()
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        stem, dot, extension = name.rpartition(".")
        tail = dot + extension if stem and len((dot + extension).encode("utf-8")) <= _KEEP_EXTENSION else ""
        room = MAX_NAME_BYTES - len(tail.encode("utf-8"))
        head = name[:len(name) - len(tail)].encode("utf-8")[:room].decode("utf-8", "ignore")  # no half character
        name = head.rstrip() + tail
    return None if name in ("", ".", "..") else name


# ---------------------------------------------------------------------------------------------------- magnets


def parse_magnet(text: str, *, allow_private: bool) -> MagnetTarget:
    """Read a magnet link (BEP 9, BEP 53's v2 form): `xt=urn:btmh:1220<64 hex>` is required (with a hybrid's
    `xt=urn:btih:` beside it, kept); `dn`, `x.pe` and `ws` are vetted (see the module docstring), `tr` dropped,
    anything else ignored. Raises `BadTarget` for a link that names no one v2 torrent."""
    if not isinstance(text, str):
        raise BadTarget("a magnet link is text")
    text = text.strip()
    if len(text) > MAX_MAGNET:
        raise BadTarget(f"a magnet link of {len(text):,} characters; at most {MAX_MAGNET:,} are read")
    if text[:8].lower() != "magnet:?":
        raise BadTarget(f"not a magnet link (magnet:?…): {_show(text, 40)}")
    params: dict[str, list[str]] = {}
    for part in text[8:].split("&"):
        key, _, value = part.partition("=")
        if numbered := _NUMBERED.fullmatch(key):
            key = numbered.group(1)
        # `+` is a space in a magnet, as libtorrent reads it; bytes that are no UTF-8 become U+FFFD, and the
        # value then fails its own check (a hash, an address) or stays a harmless character in a name.
        params.setdefault(key, []).append(unquote_plus(value, errors="replace"))
    info_hash_v2, info_hash_v1 = _exact_topics(params.get("xt", []))
    notes: list[str] = []
    peers = _vetted(params.get("x.pe", []), "peer", MAX_PEERS, notes, lambda v: _peer(v, allow_private))
    seeds = _vetted(params.get("ws", []), "web seed", MAX_WEB_SEEDS, notes, lambda v: _web_seed(v, allow_private))
    if trackers := params.get("tr"):
        notes.append(f"{len(trackers)} tracker{'s' * (len(trackers) > 1)} dropped: trackers are off until the "
                     "Internet mode")
    if len(notes) > MAX_NOTES:
        notes[MAX_NOTES:] = [f"… and {len(notes) - MAX_NOTES} more dropped"]
    names = list(dict.fromkeys(host for _, host in seeds if host is not None))
    display = params.get("dn")
    return MagnetTarget(info_hash_v2, info_hash_v1, safe_name(display[0]) if display else None, peers,
                        [url for url, _ in seeds], names, notes)


def _exact_topics(values: list[str]) -> tuple[bytes, bytes | None]:
    """The v2 info-hash (and a hybrid's v1 one) of the `xt` parameters; other URNs (ed2k, sha1...) name copies on
    other networks and are ignored."""
    v2: set[bytes] = set()
    v1: set[bytes] = set()
    for value in values:
        scheme, digest = value[:9].lower(), value[9:]
        if scheme == "urn:btmh:":
            if not (digest[:4] == MULTIHASH_SHA256.hex() and _HEX64.fullmatch(digest[4:])):
                raise BadTarget(f"xt={_show(value)} is not a v2 info-hash (urn:btmh:1220 and 64 hex digits)")
            v2.add(bytes.fromhex(digest[4:]))
        elif scheme == "urn:btih:":
            if _HEX40.fullmatch(digest):
                v1.add(bytes.fromhex(digest))
            elif _BASE32.fullmatch(digest):
                v1.add(base64.b32decode(digest.upper()))
            else:
                raise BadTarget(f"xt={_show(value)} is not a v1 info-hash (urn:btih: and 40 hex or 32 base32)")
    if not v2:
        raise BadTarget(V1_ONLY.format("magnet", "link") if v1 else "the magnet names no info-hash (xt=urn:btmh:…)")
    if len(v2) > 1 or len(v1) > 1:
        raise BadTarget("the magnet names several torrents (more than one xt of a kind); give a link to one")
    return v2.pop(), v1.pop() if v1 else None


@dataclass(frozen=True)
class _Dropped:
    reason: str


T = TypeVar("T")


def _vetted(values: list[str], what: str, limit: int, notes: list[str], vet: Callable[[str], T | _Dropped]
            ) -> list[T]:
    """The values `vet` keeps, at most `limit`, in the link's order; a note in `notes` for each one dropped."""
    kept: list[T] = []
    for value in dict.fromkeys(values):  # the same value twice is one
        verdict = vet(value)
        if isinstance(verdict, _Dropped):
            notes.append(f"{what} {_show(value)} dropped: {verdict.reason}")
        elif verdict in kept:
            continue
        elif len(kept) == limit:
            notes.append(f"{what} {_show(value)} dropped: at most {limit} are used")
        else:
            kept.append(verdict)
    return kept



def _address_refusal(ip: addresses.IPAddress, allow_private: bool) -> _Dropped | None:
    kind = addresses.classify(ip)
    if kind is addresses.Kind.PUBLIC:
        return None
    if kind is addresses.Kind.SPECIAL:
        return _Dropped("a special-purpose address, which reaches no ordinary host")
    return None if allow_private else _Dropped(f"a {kind.value} address; only public ones unless private ones "
                                               "are allowed")


def _peer(value: str, allow_private: bool) -> tuple[str, int] | _Dropped:
    match = _PEER.fullmatch(value)
    if match is None:
        return _Dropped("not an address and port (1.2.3.4:6881 or [2001:db8::1]:6881)")
    host, port = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    ip = addresses.parse(host)
    if ip is None:  # libtorrent would resolve the name itself, where we cannot judge the answer
        return _Dropped("a host name; peers must be IP addresses")
    if not 0 < int(port) < 65536:
        return _Dropped(f"port {port} is no TCP port")
    refusal = _address_refusal(ip, allow_private)
    return refusal or (addresses.canonical_host(host) or host, int(port))


def parse_peer(text: str, *, allow_private: bool) -> tuple[str, int]:
    """A peer given by hand (`swarmproxy get --peer HOST:PORT`), under the rules of a magnet's `x.pe`;
    `BadTarget` says why not."""
    peer = _peer(text, allow_private)
    if isinstance(peer, _Dropped):
        raise BadTarget(f"peer {_show(text)}: {peer.reason}")
    return peer


def _web_seed(url: str, allow_private: bool) -> tuple[str, str | None] | _Dropped:
    """(url, the host name to resolve or None for an IP literal), or why not."""
    if any(unicodedata.category(char) in _UNSAFE_CATEGORIES for char in url) or "\\" in url:
        return _Dropped("control or format characters or a backslash in the URL")
    match = _WEB_SEED.match(url)
    if match is None:
        authority = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
        if "@" in authority:
            return _Dropped("a user name or password in the URL")
        return _Dropped("not an http or https URL with a plain host")
    host, port = match.group(2).lower(), match.group(3)
    if port is not None and not 0 < int(port) < 65536:
        return _Dropped(f"port {port} is no TCP port")
    ip = addresses.parse(host)
    if ip is not None:
        refusal = _address_refusal(ip, allow_private)
        return refusal or (url, None)
    name = host.removesuffix(".")  # a fully qualified name's final dot names the same host
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        return _Dropped("not a host name")
    if _NUMERIC_LABEL.fullmatch(name.rpartition(".")[2]):
        return _Dropped("an IPv4 address in a form only some resolvers read (127.1, 0x7f.1, 2130706433)")
    return url, name


# ------------------------------------------------------------------------------------------------ torrents


@dataclass(frozen=True)
class _File:
    path: tuple[str, ...]
    length: int
    root: bytes | None  # None for an empty file and a symbolic link
    link: bool  # a symbolic link (BEP 47 attribute `l`): no data, whatever length it claims
    index: int  # libtorrent's file index


def parse_torrent(data: bytes, *, file: str | None = None) -> TorrentTarget:
    """Read a .torrent file: a v2 or hybrid torrent, the file `file` of it ("/"-joined path in the file tree; may
    be left out when it holds one non-empty file), whose piece layer the torrent must carry (a file of more than
    one piece). Raises `BadTarget` with the reason otherwise."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BadTarget("a torrent file is bytes")
    data = bytes(data)
    if len(data) > MAX_TORRENT:
        raise BadTarget(f"a torrent file of {len(data):,} bytes; at most {MAX_TORRENT:,} are read")
    try:
        torrent, raw = bdecode_dict(data, raw=(b"info",))
    except BencodeError as exc:
        raise BadTarget(f"not a torrent file: {exc}") from exc
    info = torrent.get(b"info")
    if not isinstance(info, dict) or b"info" not in raw:
        raise BadTarget("not a torrent file: it has no info dictionary")
    layers = torrent.get(b"piece layers", {})
    if not isinstance(layers, dict):
        raise BadTarget("malformed torrent: its piece layers are not a dictionary")
    return _target(info, raw[b"info"], file=file, layers=layers, data=data)


def parse_info(info: bytes, *, expected_v2: bytes | None = None, expected_v1: bytes | None = None,
               file: str | None = None, piece_layers: Mapping[bytes, bytes] | None = None) -> TorrentTarget:
    """Read an info dict (a magnet's, fetched from peers): as `parse_torrent`, checked against the magnet's
    info-hashes when given; `piece_layers` (pieces root → concatenated hashes) may lack the file's, which is then
    None (libtorrent fetches it from peers, and checks it against the root as we would)."""
    if not isinstance(info, bytes | bytearray | memoryview):
        raise BadTarget("an info dict is bytes")
    info = bytes(info)
    if len(info) > MAX_TORRENT:
        raise BadTarget(f"an info dict of {len(info):,} bytes; at most {MAX_TORRENT:,} are read")
    if expected_v2 is not None and hashlib.sha256(info).digest() != expected_v2:
        raise BadTarget("the info dict is not the magnet's: its SHA-256 differs from the v2 info-hash")
    if expected_v1 is not None and hashlib.sha1(info, usedforsecurity=False).digest() != expected_v1:
        raise BadTarget("the info dict is not the magnet's: its SHA-1 differs from the v1 info-hash")
    try:
        value = bdecode(info)
    except BencodeError as exc:
        raise BadTarget(f"not an info dict: {exc}") from exc
    if not isinstance(value, dict):
        raise BadTarget("not an info dict: not a dictionary")
    return _target(value, info, file=file, layers=piece_layers, data=None)


def _target(info: dict[bytes, Bencodable], raw: bytes, *, file: str | None,
            layers: Mapping[bytes, Bencodable] | None, data: bytes | None) -> TorrentTarget:
    # The info-hash is of `raw`; a reader that re-encodes (libtorrent's `torrent_info` of a dict, or a client that
    # sorts keys) must get the same bytes, or one hash would name two readings.
    if bencode(info) != raw:
        raise BadTarget("malformed torrent: its info dictionary is not in canonical form (keys out of order)")
    version, tree = info.get(b"meta version"), info.get(b"file tree")
    if version is None and tree is None:
        raise BadTarget(V1_ONLY.format("torrent", "torrent"))
    if version != 2:
        raise BadTarget(f"meta version {_brief(version)}: swarmproxy reads BitTorrent v2 (meta version 2)")
    if not isinstance(tree, dict):
        raise BadTarget("malformed torrent: it has no v2 file tree")
    piece_length = info.get(b"piece length")
    if not (isinstance(piece_length, int) and MIN_PIECE_LENGTH <= piece_length <= MAX_PIECE_LENGTH
            and piece_length & (piece_length - 1) == 0):
        raise BadTarget(f"malformed torrent: a piece length must be a power of two from {MIN_PIECE_LENGTH:,} to "
                        f"{MAX_PIECE_LENGTH:,} bytes, not {_brief(piece_length)}")
    if not isinstance(info.get(b"name", b""), bytes):
        raise BadTarget("malformed torrent: its name is not a string")
    files = _files(tree, piece_length)
    hybrid = b"pieces" in info
    if hybrid:
        _check_v1(info, files, piece_length)
    chosen = _select(files, file)
    assert chosen.root is not None  # `_select` chose a non-empty file, which has one
    return TorrentTarget(
        info_hash_v2=hashlib.sha256(raw).digest(),
        info_hash_v1=hashlib.sha1(raw, usedforsecurity=False).digest() if hybrid else None,
        root=chosen.root, size=chosen.length, piece_length=piece_length,
        piece_layer=_piece_layer(chosen, piece_length, layers, required=data is not None),
        display_name=safe_name(chosen.path[-1]), file_path=chosen.path, file_index=chosen.index, info=raw,
        data=data)


def _component(key: bytes) -> str:
    """One path component of a file: UTF-8 (BEP 52), and no component that a "/"-joined path could misread."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        raise BadTarget(f"malformed torrent: a file name that is not UTF-8: {_show(key)}") from None
    if text in ("", ".", "..") or "/" in text or "\x00" in text:
        raise BadTarget(f"malformed torrent: an unsafe file name {_show(text)}")
    return text


def _files(tree: dict[bytes, Bencodable], piece_length: int) -> list[_File]:
    """The files of a BEP 52 file tree in its order (keys sorted), with the index libtorrent gives each: it puts a
    pad file after every file that does not end on a piece boundary, the last one included, so each file starts
    a piece, and reads a symbolic link as an empty file (tests/bittorrent/test_target.py checks both against
    libtorrent's `files()`). An empty directory holds nothing, as libtorrent reads it."""
    files: list[_File] = []
    index = 0

    def visit(node: Bencodable, path: tuple[str, ...]) -> None:
        nonlocal index
        if not isinstance(node, dict):
            raise BadTarget(f"malformed torrent: a malformed directory {_show('/'.join(path))}")
        if b"" not in node:  # a directory; the decoder bounds the depth
            for key in sorted(node):
                visit(node[key], (*path, _component(key)))
            return
        leaf = node[b""]
        if len(node) != 1 or not path or not isinstance(leaf, dict):
            raise BadTarget(f"malformed torrent: a malformed file entry {_show('/'.join(path))}")
        length, attr, root = leaf.get(b"length"), leaf.get(b"attr", b""), leaf.get(b"pieces root")
        if not isinstance(length, int) or not 0 <= length < 2**63 or not isinstance(attr, bytes):
            raise BadTarget(f"malformed torrent: a bad length or attributes for {_show('/'.join(path))}")
        if b"p" in attr:  # BEP 47 pad files belong to a hybrid's v1 list; libtorrent refuses one in the tree
            raise BadTarget(f"malformed torrent: a pad file in the v2 file tree, {_show('/'.join(path))}")
        link = b"l" in attr
        length = 0 if link else length
        if length and not (isinstance(root, bytes) and len(root) == merkle.HASH_SIZE):
            raise BadTarget(f"malformed torrent: no 32-byte pieces root for {_show('/'.join(path))}")
        files.append(_File(path, length, root if length and isinstance(root, bytes) else None, link, index))
        if len(files) > MAX_FILES:
            raise BadTarget(f"a torrent of more than {MAX_FILES:,} files")
        index += 1 + (length % piece_length != 0)

    visit(tree, ())
    return files


def _check_v1(info: dict[bytes, Bencodable], files: list[_File], piece_length: int) -> None:
    """A hybrid's v1 part must describe the same files (BEP 47 pad files aside) and pieces as its v2 part: a
    session that downloads it checks pieces by both, and refuses a torrent whose two halves disagree."""
    pieces = info.get(b"pieces")
    expected = sum(-(-f.length // piece_length) for f in files)
    if not isinstance(pieces, bytes) or len(pieces) != 20 * expected:
        raise BadTarget(f"malformed hybrid torrent: its v1 pieces are not {expected:,} SHA-1 hashes")
    listed: list[tuple[tuple[str, ...], int]] = []
    if b"files" in info:
        entries = info[b"files"]
        for entry in entries if isinstance(entries, list) else [None]:
            path, length, attr = _v1_entry(entry)
            if b"p" not in attr and path[0] != b".pad":  # BEP 47 pad files: the v2 tree has none
                listed.append((tuple(_component(p) for p in path), length))
    elif isinstance(size := info.get(b"length"), int) and isinstance(name := info.get(b"name"), bytes):
        listed.append(((_component(name),), size))
    else:
        raise BadTarget("malformed hybrid torrent: its v1 part has neither files nor a length")
    if listed != [(f.path, f.length) for f in files]:
        raise BadTarget("malformed hybrid torrent: its v1 and v2 parts list different files")


def _v1_entry(entry: Bencodable | None) -> tuple[list[bytes], int, bytes]:
    """A v1 `files` entry's path, length and attributes."""
    if isinstance(entry, dict):
        path, length, attr = entry.get(b"path"), entry.get(b"length"), entry.get(b"attr", b"")
        if isinstance(path, list) and isinstance(length, int) and isinstance(attr, bytes):
            components = [p for p in path if isinstance(p, bytes)]
            if components and len(components) == len(path):
                return components, length, attr
    raise BadTarget("malformed hybrid torrent: a v1 file entry without a path or length")


def _select(files: list[_File], wanted: str | None) -> _File:
    if wanted is not None:
        chosen = next((f for f in files if "/".join(f.path) == wanted), None)
        if chosen is None:
            raise BadTarget(f"no file {_show(wanted)} in this torrent; it holds {_listing(files)}")
    else:
        candidates = [f for f in files if f.length]
        if len(candidates) != 1:
            raise BadTarget(f"this torrent holds {_listing(candidates)}: pick one with --file PATH" if candidates
                            else "nothing to fetch: every file of this torrent is empty")
        chosen = candidates[0]
    if chosen.link:
        raise BadTarget(f"{_show('/'.join(chosen.path))} is a symbolic link: it has no data to fetch")
    if not chosen.length:
        raise BadTarget(f"{_show('/'.join(chosen.path))} is empty: a zero-length file has no pieces root, and "
                        "nothing to fetch")
    if chosen.length > MAX_SIZE:
        raise BadTarget(f"{_show('/'.join(chosen.path))} has {chosen.length:,} bytes; swarmproxy holds files of up "
                        f"to {MAX_SIZE:,}")
    return chosen


def _listing(files: list[_File]) -> str:
    shown = ", ".join(_show("/".join(f.path)) for f in files[:MAX_LISTED])
    more = f" and {len(files) - MAX_LISTED:,} more" if len(files) > MAX_LISTED else ""
    return f"{len(files):,} file{'s' * (len(files) != 1)}: {shown}{more}"


def _piece_layer(chosen: _File, piece_length: int, layers: Mapping[bytes, Bencodable] | None, *,
                 required: bool) -> list[bytes] | None:
    """The chosen file's piece layer, checked against its root. A file of one piece has none in a torrent (BEP 52):
    its layer is its root."""
    assert chosen.root is not None
    if chosen.length <= piece_length:
        return [chosen.root]
    raw = (layers or {}).get(chosen.root)
    if raw is None:
        if required:
            raise BadTarget(f"the torrent has no piece layer for {_show('/'.join(chosen.path))}, so its pieces "
                            "could not be checked")
        return None
    if not isinstance(raw, bytes) or len(raw) % merkle.HASH_SIZE:
        raise BadTarget(f"malformed torrent: the piece layer of {_show('/'.join(chosen.path))} is not 32-byte hashes")
    hashes = [raw[i:i + merkle.HASH_SIZE] for i in range(0, len(raw), merkle.HASH_SIZE)]
    try:
        merkle.verify_layer(chosen.root, hashes, chosen.length, piece_length)
    except HashMismatch as exc:
        raise BadTarget(f"the piece layer of {_show('/'.join(chosen.path))} does not match its pieces root: "
                        f"{exc}") from exc
    return hashes
