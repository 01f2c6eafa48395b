"""Signed DHT records and their canonical binary encoding.

Two kinds of record, both signed by their publisher (Ed25519) and carrying a timestamp and a TTL:

* `ProviderRecord`: content root (32 bytes) → how to reach a peer holding it (IP address, port, transport flags).
  The provider's node id is *derived* from the publisher key (see `dht.identity`), so it is not carried
  separately: nobody can announce a node id they do not hold the key of.
* `ManifestRecord`: representation key (32 bytes, `representation_key(url, validator)`) → a small manifest
  summary (content root, size, block size, validator) and the host the publisher claims to send it from.
  The block size means something to the block engine only: the DHT carries it as an opaque u32, and readers
  check it against the engine's rule before using it.
  Publisher id = node id of the publisher key. Plain URLs never enter the DHT; only their salted hash does.
  The host is only a claim: storing nodes accept the record only from that address, and readers count it
  only when storing nodes vouch for having observed it there (`dht.attestation`).

Wire layout (all integers big-endian; the signature covers ``_SIGNING_DOMAIN`` + every byte before it)::

    version u8 (=2) | kind u8 | publisher_key 32 | timestamp_ms u64 | ttl_s u32 | body | signature 64
    provider body:  root 32 | family u8 (4|6) | address 4|16 | port u16 | transports u8
    manifest body:  repr_key 32 | content_root 32 | size u64 | block_size u32 | family u8 (4|6) | address 4|16 |
                    validator_len u8 | validator

Exactly one encoding per record (no optional fields, no padding, trailing bytes rejected), so a record's bytes
identify it and signature results can be cached by bytes. Sizes: provider ≤ 162 bytes, manifest ≤ 404 bytes,
both far below the ~1.4 KB datagram budget of `dht.wire`. A TTL of 0 is a *withdrawal*: it supersedes the
publisher's earlier record for that key and then disappears.
"""

from __future__ import annotations

import hashlib
import ipaddress
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar
from urllib.parse import urldefrag

from dht.errors import BadSignature, InvalidArgument, MalformedRecord
from dht.identity import NODE_ID_BYTES, PUBLIC_KEY_BYTES, SIGNATURE_BYTES, NodeIdentity, node_id_for, verify_signature
from swarm.discovery.seam import KEY_BYTES, MAX_TTL_S, claim_problem
from swarm.discovery.seam import TransportFlags as Transport

# The claim's vocabulary is the discovery seam's, which this DHT implements: its sizes and bounds are those of
# every backend. A manifest record's block size is the block engine's field, carried opaquely for its readers
# (`swarm.trust` and then `swarm.content.manifest` check it against the engine's rule before anything is fetched).

RECORD_VERSION = 2  # 2: a manifest carries its publisher's host
KIND_PROVIDER = 1
KIND_MANIFEST = 2
MAX_RECORD_BYTES = 512  # hard cap on any encoded record; decode rejects anything longer

_SIGNING_DOMAIN = b"swarmproxy-dht-record-v1\x00"
_HEADER = struct.Struct(">BB32sQI")  # version, kind, publisher key, timestamp ms, ttl s
_PROVIDER_TAIL = struct.Struct(">HB")  # port, transports
_MANIFEST_FIXED = struct.Struct(">32s32sQI")  # repr key, content root, size, block size


_ALL_TRANSPORTS = int(Transport.TCP | Transport.QUIC)


def representation_key(url: str, validator: str | bytes) -> bytes:
    """The 32-byte DHT key of a representation (URL without fragment + validator). The URL itself never leaves.

    Length-prefixed fields so that no (url, validator) pair can collide with another by shifting bytes between
    them; a domain string so these hashes cannot be confused with any other SHA-256 we compute.
    """
    if not isinstance(url, str) or not url:
        raise InvalidArgument("url must be a non-empty str")
    url_bytes = urldefrag(url)[0].encode("utf-8")
    validator_bytes = validator.encode("utf-8") if isinstance(validator, str) else bytes(validator)
    if not validator_bytes:
        raise InvalidArgument("a representation needs a validator (strong ETag or Last-Modified+length)")
    digest = hashlib.sha256(b"swarmproxy-repr-v1\x00")
    digest.update(struct.pack(">I", len(url_bytes)) + url_bytes)
    digest.update(struct.pack(">I", len(validator_bytes)) + validator_bytes)
    return digest.digest()


def dht_key(kind: int, key: bytes) -> bytes:
    """The 160-bit position in the Kademlia id space where records of `kind` under `key` are stored."""
    return hashlib.sha256(b"swarmproxy-dht-key\x00" + bytes([kind]) + key).digest()[:NODE_ID_BYTES]


@dataclass(frozen=True)
class _RecordBase:
    publisher_key: bytes
    timestamp_ms: int
    ttl_s: int
    signature: bytes
    wire: bytes = field(repr=False, compare=False)

    kind: ClassVar[int]

    @property
    def key(self) -> bytes:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def publisher_id(self) -> bytes:
        return node_id_for(self.publisher_key)

    @property
    def dht_key(self) -> bytes:
        return dht_key(self.kind, self.key)

    @property
    def timestamp(self) -> float:
        return self.timestamp_ms / 1000.0

    @property
    def expires_at(self) -> float:
        return self.timestamp + self.ttl_s

    @property
    def is_withdrawal(self) -> bool:
        return self.ttl_s == 0

    def encode(self) -> bytes:
        return self.wire

    def has_valid_signature(self) -> bool:
        return _wire_signature_ok(self.wire)

    def verify(self) -> None:
        """Raise `BadSignature` unless the publisher key signed exactly these bytes."""
        if not self.has_valid_signature():
            raise BadSignature(f"bad signature on {type(self).__name__} from {self.publisher_id.hex()}")


@dataclass(frozen=True)
class ProviderRecord(_RecordBase):
    root: bytes = b""
    host: str = ""
    port: int = 0
    transports: int = 0

    kind: ClassVar[int] = KIND_PROVIDER

    @property
    def key(self) -> bytes:
        return self.root

    @property
    def node_id(self) -> bytes:
        return self.publisher_id

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @classmethod
    def create(
        cls,
        identity: NodeIdentity,
        *,
        root: bytes,
        host: str,
        port: int,
        transports: int = Transport.TCP,
        now: float,
        ttl_s: int,
    ) -> ProviderRecord:
        _check_key("root", root)
        _check_common(now, ttl_s)
        if not 1 <= port <= 0xFFFF:
            raise InvalidArgument(f"port out of range: {port}")
        if not 0 < int(transports) <= _ALL_TRANSPORTS:
            raise InvalidArgument(f"transports must be a non-empty combination of Transport flags: {transports}")
        packed_address = _pack_address(host)
        body = root + packed_address + _PROVIDER_TAIL.pack(port, int(transports))
        return decode_record(_sign(identity, KIND_PROVIDER, now, ttl_s, body))  # type: ignore[return-value]


@dataclass(frozen=True)
class ManifestRecord(_RecordBase):
    repr_key: bytes = b""
    content_root: bytes = b""
    size: int = 0
    block_size: int = 0
    validator: bytes = b""
    host: str = ""  # where the publisher says it is; see the module docstring

    kind: ClassVar[int] = KIND_MANIFEST

    @property
    def key(self) -> bytes:
        return self.repr_key

    @classmethod
    def create(
        cls,
        identity: NodeIdentity,
        *,
        repr_key: bytes,
        content_root: bytes,
        size: int,
        block_size: int,
        validator: str | bytes,
        host: str,
        now: float,
        ttl_s: int,
    ) -> ManifestRecord:
        _check_key("repr_key", repr_key)
        _check_key("content_root", content_root)
        _check_common(now, ttl_s)
        validator_bytes = validator.encode("utf-8") if isinstance(validator, str) else bytes(validator)
        problem = claim_problem(size, block_size, validator_bytes)
        if problem:
            raise InvalidArgument(problem)
        body = (_MANIFEST_FIXED.pack(repr_key, content_root, size, block_size) + _pack_address(host)
                + bytes([len(validator_bytes)]) + validator_bytes)
        return decode_record(_sign(identity, KIND_MANIFEST, now, ttl_s, body))  # type: ignore[return-value]


Record = ProviderRecord | ManifestRecord


def decode_record(data: bytes) -> Record:
    """Parse one record. Raises `MalformedRecord` for anything but a canonical, in-range encoding.

    Does not check the signature (that is `Record.verify()`), so callers can cheaply reject junk first.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedRecord(f"record must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_RECORD_BYTES:
        raise MalformedRecord(f"record of {len(data)} bytes exceeds the {MAX_RECORD_BYTES}-byte cap")
    if len(data) < _HEADER.size + SIGNATURE_BYTES:
        raise MalformedRecord("record too short")
    version, kind, publisher_key, timestamp_ms, ttl_s = _HEADER.unpack_from(data, 0)
    if version != RECORD_VERSION:
        raise MalformedRecord(f"unknown record version {version}")
    if ttl_s > MAX_TTL_S:
        raise MalformedRecord(f"ttl {ttl_s}s exceeds the {MAX_TTL_S}s cap")
    body = data[_HEADER.size : -SIGNATURE_BYTES]
    signature = data[-SIGNATURE_BYTES:]
    common = dict(publisher_key=publisher_key, timestamp_ms=timestamp_ms, ttl_s=ttl_s, signature=signature, wire=data)
    if kind == KIND_PROVIDER:
        return _decode_provider_body(body, common)
    if kind == KIND_MANIFEST:
        return _decode_manifest_body(body, common)
    raise MalformedRecord(f"unknown record kind {kind}")


def _decode_provider_body(body: bytes, common: dict[str, Any]) -> ProviderRecord:
    if len(body) < KEY_BYTES:
        raise MalformedRecord("provider record body too short")
    root = body[:KEY_BYTES]
    host, offset = _unpack_address(body, KEY_BYTES)
    if len(body) != offset + _PROVIDER_TAIL.size:
        raise MalformedRecord(f"provider record body is {len(body)} bytes, expected {offset + _PROVIDER_TAIL.size}")
    port, transports = _PROVIDER_TAIL.unpack_from(body, offset)
    if port == 0:
        raise MalformedRecord("provider port 0")
    if not 0 < transports <= _ALL_TRANSPORTS:
        raise MalformedRecord(f"unknown transport flags {transports:#x}")
    return ProviderRecord(**common, root=root, host=host, port=port, transports=transports)


def _decode_manifest_body(body: bytes, common: dict[str, Any]) -> ManifestRecord:
    if len(body) < _MANIFEST_FIXED.size:
        raise MalformedRecord("manifest record body too short")
    repr_key, content_root, size, block_size = _MANIFEST_FIXED.unpack_from(body, 0)
    host, offset = _unpack_address(body, _MANIFEST_FIXED.size)
    if offset >= len(body) or len(body) != offset + 1 + body[offset]:
        raise MalformedRecord("manifest record length does not match its validator length")
    validator = body[offset + 1 :]
    problem = claim_problem(size, block_size, validator)
    if problem:
        raise MalformedRecord(problem)
    return ManifestRecord(**common, repr_key=repr_key, content_root=content_root, size=size,
                          block_size=block_size, validator=validator, host=host)


def _unpack_address(body: bytes, offset: int) -> tuple[str, int]:
    """The address packed at `offset` (family u8 | 4 or 16 bytes) and the offset after it."""
    if offset >= len(body):
        raise MalformedRecord("record body ends before its address")
    family = body[offset]
    length = {4: 4, 6: 16}.get(family)
    if length is None:
        raise MalformedRecord(f"unknown address family {family}")
    packed = body[offset + 1 : offset + 1 + length]
    if len(packed) != length:
        raise MalformedRecord("record body ends inside its address")
    host = ipaddress.IPv4Address(packed) if family == 4 else ipaddress.IPv6Address(packed)
    return str(host), offset + 1 + length


def verify_record(record: Record) -> None:
    """Raise `BadSignature` unless the record's publisher signed it."""
    record.verify()


@lru_cache(maxsize=8192)
def _wire_signature_ok(wire: bytes) -> bool:
    # Cached by the exact bytes: the encoding is canonical, so equal bytes mean an equal, equally valid record.
    # Storage checks on store and on read, and a lookup client checks every copy it receives; the cache turns the
    # repeats into a dict lookup instead of a ~150 µs verification.
    publisher_key = wire[2 : 2 + PUBLIC_KEY_BYTES]
    return verify_signature(publisher_key, wire[-SIGNATURE_BYTES:], _SIGNING_DOMAIN + wire[:-SIGNATURE_BYTES])


def _sign(identity: NodeIdentity, kind: int, now: float, ttl_s: int, body: bytes) -> bytes:
    unsigned = _HEADER.pack(RECORD_VERSION, kind, identity.public_key, int(now * 1000), ttl_s) + body
    return unsigned + identity.sign(_SIGNING_DOMAIN + unsigned)


def _check_key(name: str, value: bytes) -> None:
    if not isinstance(value, (bytes, bytearray)) or len(value) != KEY_BYTES:
        raise InvalidArgument(f"{name} must be {KEY_BYTES} bytes")


def _check_common(now: float, ttl_s: int) -> None:
    if not 0 <= ttl_s <= MAX_TTL_S:
        raise InvalidArgument(f"ttl_s must be in [0, {MAX_TTL_S}], got {ttl_s}")
    if not 0 <= now < 2**63 / 1000:
        raise InvalidArgument(f"timestamp out of range: {now}")


def _pack_address(host: str) -> bytes:
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise InvalidArgument(f"provider host must be an IP address literal, got {host!r}") from exc
    return (b"\x04" if address.version == 4 else b"\x06") + address.packed
