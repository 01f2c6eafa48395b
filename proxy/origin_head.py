"""What an origin's response head means for a fallback download (pure functions, no I/O).

The asyncio shell (`proxy.download.fallback`) turns aiohttp's response head into an `OriginHead` once; the download's
core (`proxy.download.core`) decides on that summary alone, so its tests need no server. The head of our own
answer when the swarm answers before the origin has said anything is made here too.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import logging
from collections.abc import Iterable

from multidict import MultiMapping

import addresses
from swarm.content.manifest import (
    HEADER,
    HINT_HEADER,
    HINT_SWARM,
    METADATA_HEADERS,
    Manifest,
    OriginManifest,
    parse_header,
)
from swarm.content.peer_field import PEERS_HEADER, parse_peers
from swarm.errors import PeerError

from . import headers as hdr
from .publish_gate import gate_and_length
from .ranges import content_range, parse_content_range, parse_range

log = logging.getLogger("swarmproxy.origin_manifest")
Fields = MultiMapping[str]  # a request's or response's header fields, as aiohttp gives them (a repeated one stays)

# The RFC 9530 digest algorithms a body is checked against, in order of preference (the registry's active ones).
DIGESTS = {"sha-256": hashlib.sha256, "sha-512": hashlib.sha512}

# What a headless answer from a DHT manifest is labelled with (and `nosniff`) while the origin has not said what it
# serves: a peer's manifest names a Content-Type that nothing verifies (the root covers only the bytes), and a
# type chosen by a stranger, such as text/html for an http:// URL, would run its script in the origin's name.
UNVOUCHED_TYPE = "application/octet-stream"


def manifest_validator(headers: Fields) -> str | None:
    """What the manifest records as validator: the strong ETag as sent, else Last-Modified."""
    etag = headers.get("ETag")
    if etag and not etag.strip().startswith("W/"):
        return str(etag).strip()
    modified = headers.get("Last-Modified")
    return modified.strip() if modified else None


def published(headers: Fields, size: int | None) -> OriginManifest | None:
    """The origin's manifest from a response's fields, if it published a usable one for `size` bytes."""
    values = headers.getall(HEADER, [])  # a multidict: a repeated field must not hide behind its first copy
    if not values:  # an object store's copy of it (S3, GCS user metadata); two of them are a repeat too
        values = [value for name in METADATA_HEADERS for value in headers.getall(name, [])]
    if not values:
        return None
    if len(values) > 1 or headers.get("Content-Encoding") or size is None:
        log.info("ignoring %s: %s", HEADER, "repeated" if len(values) > 1 else
                 "the response is encoded" if size is not None else "the size is unknown")
        return None
    try:
        manifest = parse_header(values[0])
    except PeerError as exc:
        log.info("ignoring a malformed %s field: %s", HEADER, exc)
        return None
    if manifest.size != size:
        log.info("ignoring %s: it describes %d bytes, the response %d", HEADER, manifest.size, size)
        return None
    return manifest


def hinted(headers: Fields) -> bool:
    """The origin asks us to take the rest from peers now (`Swarm-Hint: swarm`)."""
    return (headers.get(HINT_HEADER) or "").strip().lower() == HINT_SWARM



@dataclasses.dataclass(frozen=True)
class OriginHead:
    """An origin's response head as the download's decisions see it."""

    status: int
    swarmable: bool  # the publish gate's answer for this request/response pair
    reason: str | None  # why not, when not swarmable
    size: int | None  # of the whole representation
    validator: str | None
    start: int  # of the body within the representation (a 206 starts where its Content-Range says)
    end: int | None
    content_type: str | None = None
    content_encoding: str | None = None
    ranges: bool = False  # Accept-Ranges: bytes
    published: OriginManifest | None = None  # the origin's own manifest (server plugin), if it sent one
    hinted: bool = False  # ... and it asks clients to swarm at once
    peers: tuple[tuple[str, int], ...] = ()  # ... from these peers (`Swarm-Peers`, on a hinted head only)
    head_size: int = 0  # the status line and fields, approximately: headers count as bytes for T and R
    digest: tuple[str, bytes] | None = None  # the origin's Repr-Digest (algorithm, digest), if we can check it


def describe(url: str, request_headers: Fields, status: int, headers: Fields,
             raw_headers: Iterable[tuple[bytes, bytes]] = (), origin_address: str | None = None) -> OriginHead:
    """The summary of one origin answer to a GET for `url` sent with `request_headers`, from the origin at
    `origin_address` (where the connection went: it decides which listed peers may be dialled; None: unknown)."""
    decision, size = gate_and_length("GET", url, request_headers.items(), status, headers.items())
    start, end = 0, size
    if status == 206 and (parsed := parse_content_range(headers.get("Content-Range"))) is not None:
        start, end, _ = parsed  # a swarmable 206 always has one: the gate checked it
    manifest = published(headers, size)
    hint = manifest is not None and hinted(headers)
    return OriginHead(
        status=status, swarmable=decision.swarmable, reason=decision.reason, size=size,
        validator=manifest_validator(headers), start=start, end=end,
        content_type=headers.get("Content-Type"), content_encoding=headers.get("Content-Encoding"),
        ranges=headers.get("Accept-Ranges", "").strip().lower() == "bytes",
        published=manifest, hinted=hint,
        peers=dialable_peers(parse_peers(", ".join(headers.getall(PEERS_HEADER, []))), origin_address) if hint else (),
        head_size=16 + sum(len(k) + len(v) + 4 for k, v in raw_headers),
        digest=repr_digest(", ".join(headers.getall("Repr-Digest", []))))


def dialable_peers(peers: Iterable[tuple[str, int]], origin_address: str | None) -> tuple[tuple[str, int], ...]:
    """The peers an origin listed (`Swarm-Peers`) that this node may dial: public addresses; from an origin on a
    private address (shared only when the user listed it) private ones too; from an origin on this machine (a lab,
    a test) loopback ones too; never link-local or special-purpose ones. So a site on the Internet cannot make
    its visitors' nodes dial their LAN, their loopback or a cloud's metadata service, nor can an intranet site
    behind a reverse proxy (whose plugin sees the proxy's address, and lists it with a port a client chose) make
    them dial their own loopback; what it can make them dial is what its pages can make their browsers fetch
    (SECURITY.md). An origin known only by a name, or at an address of another kind, is treated as public."""
    origin = addresses.kind_of(origin_address)
    allowed = {addresses.Kind.PUBLIC}
    if origin in (addresses.Kind.PRIVATE, addresses.Kind.LOOPBACK):
        allowed.add(addresses.Kind.PRIVATE)
    if origin is addresses.Kind.LOOPBACK:
        allowed.add(addresses.Kind.LOOPBACK)
    return tuple((host, port) for host, port in peers if addresses.kind_of(host) in allowed)


class BodyDigest:
    """A body hashed as it goes out, to compare with the origin's Repr-Digest `(algorithm, digest)` at its end."""

    def __init__(self, expected: tuple[str, bytes]) -> None:
        self.algorithm, self.expected = expected
        self.hasher = DIGESTS[self.algorithm]()

    def update(self, piece: bytes) -> None:
        self.hasher.update(piece)

    def disagrees(self) -> bool:
        return self.hasher.digest() != self.expected


def repr_digest(value: str | None) -> tuple[str, bytes] | None:
    """The Repr-Digest (RFC 9530, a structured-field dictionary such as `sha-256=:BASE64:`) to check a body
    against, as (algorithm, digest): the first of `DIGESTS` present and well formed; None when there is none."""
    found: dict[str, bytes] = {}
    for member in (value or "").split(","):
        key, equals, item = member.partition("=")
        key, item = key.strip().lower(), item.split(";")[0].strip()  # parameters after ';' say nothing we use
        if not equals or key not in DIGESTS or len(item) < 2 or item[0] != ":" or item[-1] != ":":
            continue
        try:
            digest = base64.b64decode(item[1:-1], validate=True)
        except (binascii.Error, ValueError):
            continue
        if len(digest) == DIGESTS[key]().digest_size:
            found[key] = digest
    return next(((name, found[name]) for name in DIGESTS if name in found), None)


def same_version(head: OriginHead, manifest: Manifest) -> bool:
    """Does a HEAD answer describe the representation the manifest is of (as far as it says)?"""
    return (head.size is None or head.size == manifest.size) and \
        (head.validator is None or head.validator == manifest.validator)


def late_start(head: OriginHead, manifest: Manifest, promised_start: int) -> int | str:
    """Where a late origin answer's body starts, if it is the representation we serve from `promised_start`
    on; else why it cannot be used (a string)."""
    return resumed_start(head, manifest.size, manifest.validator, promised_start)


def resumed_start(head: OriginHead, size: int | None, validator: str | None, promised_start: int) -> int | str:
    """Where an origin answer's body starts, if it is the version of `size` bytes labelled `validator` and
    reaches back to `promised_start`; else why it cannot be used (a string)."""
    if head.status not in (200, 206):
        return f"origin answered {head.status}"
    if not head.swarmable:  # e.g. private after all: do not keep, store or announce any of it
        return f"the origin's answer may not be shared ({head.reason})"
    if head.size != size or (validator and head.validator != validator):
        return "the origin now serves another version than the one being served"
    if head.start > promised_start:
        return f"the origin answered from byte {head.start}, we serve from {promised_start}"
    return head.start


def piece_refused(head: OriginHead, size: int | None, validator: str | None, encoding: str | None, lo: int,
                  hi: int) -> str | None:
    """Why an origin answer to a Range request for bytes `lo..hi` of the representation (`size` bytes, `validator`,
    `encoding`) cannot be used as exactly those bytes (`proxy.download.ranged_origin`); None when it can. Stricter
    than `resumed_start`: a piece's bytes go out between others', so its answer must start where it was asked."""
    if head.status != 206:
        return f"origin answered {head.status} to a Range request"
    if not head.swarmable:
        return f"the origin's answer may not be shared ({head.reason})"
    if head.size != size or head.validator != validator or head.content_encoding != encoding:
        return "the origin now serves another version than the one being served"
    if head.start != lo or head.end is None or head.end < hi:
        return f"the origin answered bytes {head.start}-{head.end} for {lo}-{hi}"
    return None


def client_range(range_header: str | None, if_range: str | None, size: int,
                 validator: str | None) -> tuple[int, int, int]:
    """(status, start, end) of our own answer to the client's Range for a representation of `size` bytes."""
    spec = parse_range(range_header)
    if spec is None or (if_range is not None and if_range.strip() != (validator or "")):
        return 200, 0, size
    resolved = spec.resolve(size)
    if resolved is None:
        return 416, 0, 0
    return 206, resolved[0], resolved[1]


def synthesized_headers(manifest: Manifest, status: int, start: int, end: int,
                        described: tuple[str | None, str | None] | None = None) -> list[tuple[str, str]]:
    """Our own response head for the manifest's bytes. Content-Type and -Encoding come from the origin's HEAD
    when it answered (`described`): the origin says what it serves now, a manifest only what one publisher was
    once sent (or claims it was)."""
    if status == 416:
        return [("Content-Range", f"bytes */{manifest.size}")]
    fields = [("Content-Length", str(end - start)), ("Accept-Ranges", "bytes")]
    if status == 206:
        fields.append(("Content-Range", content_range(start, end, manifest.size)))
    if manifest.validator:
        name = "ETag" if manifest.validator.startswith('"') else "Last-Modified"
        fields.append((name, manifest.validator))
    content_type, content_encoding = described or (manifest.content_type, manifest.content_encoding)
    if content_type:
        fields.append(("Content-Type", content_type))
    if content_encoding:
        fields.append(("Content-Encoding", content_encoding))
    if content_type == UNVOUCHED_TYPE:
        fields.append(("X-Content-Type-Options", "nosniff"))
    return hdr.add_via(fields, (1, 1))


def range_request(headers: list[tuple[str, str]], start: int, end: int,
                  validator: str | None) -> list[tuple[str, str]]:
    """The request's fields for bytes `start..end` of the representation `validator` names (RFC 9110 §13.1.5:
    a changed representation comes back whole, as a 200, which `late_start` then refuses)."""
    fields = [(k, v) for k, v in headers if k.lower() not in ("range", "if-range")]
    fields.append(("Range", f"bytes={start}-{end - 1}"))
    if validator:
        fields.append(("If-Range", validator))
    return fields
