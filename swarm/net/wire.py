"""The peer wire codec: bytes ↔ messages, sans-I/O, with a hard limit on every length.

One message set for every transport (a TCP stream, a QUIC stream, the in-memory test transport). Framing::

    u32  frame length (big-endian), counting the type byte and the body; never 0
    u8   message type
    ...  body (integers big-endian; blocks and offsets are u32)

| type | name             | body                                                                          |
|------|------------------|-------------------------------------------------------------------------------|
| 0    | KEEPALIVE        | empty                                                                         |
| 1    | HANDSHAKE        | u16 protocol version, 32 node id, 32 content root                             |
| 2    | BITFIELD         | u32 bit count, ceil(count/8) bytes, block 0 = high bit of byte 0; spare bits 0 |
| 3    | HAVE             | u32 block                                                                     |
| 4    | REQUEST          | u32 block, u32 offset, u32 length (≥ 1)                                       |
| 5    | BLOCK            | u32 block, u32 offset, data (≥ 1 byte)                                        |
| 6    | CANCEL           | u32 block, u32 offset, u32 length (≥ 1)                                       |
| 7    | REJECT           | u32 block, u32 offset, u32 length (≥ 1), u8 reason (`RejectReason`)           |
| 8    | HASH_REQUEST     | u32 first, u32 count (≥ 1): block layer entries first..first+count           |
| 9    | HASH_RESPONSE    | u32 first, u32 count, u8 proof length p, n ≥ 1 hashes (n ≤ count), p hashes   |
| 10   | PEX              | u16 n, n × (u8 family 4|6, 4|16 address, u16 port ≠ 0, u8 `Transport` flags)  |
| 11   | START            | u32 block: "I am fetching this one from the origin" (others pick another)     |
| 12   | MANIFEST_REQUEST | empty (the content root is the handshake's)                                   |
| 13   | MANIFEST         | an encoded `swarm.content.manifest.Manifest`, opaque here                             |
| 14   | CLAIMS_REQUEST   | 32 key: the answerer's own claims under it, please (query sessions only)      |
| 15   | CLAIMS           | 32 key, u8 n ≤ 8, n × (32 content root, u64 size < 2**63, u32 block size,     |
|      |                  | u32 age ms, u32 seconds left ≥ 1, u8 validator length v (1..200), v bytes)    |
| 16   | REACH_REQUEST    | u16 port ≠ 0, u8 `Transport` flags (≥ 1), 16 nonce: connect back (query only) |
| 17   | REACH_PROOF      | 16 proof: `reach_proof(nonce)`; first message after a HANDSHAKE on QUERY_ROOT |
| 18   | REACH_RESULT     | 16 nonce, u8 one `Transport` flag, u8 status (`ReachStatus`)                  |
| 19   | PUNCH_REQUEST    | 16 nonce, u8 0 (flags: none yet), u8 family 4|6, 4|16 address, u16 port ≠ 0:  |
|      |                  | meet the peer whose query session to you comes from there (query only)        |
| 20   | PUNCH_PEER       | 16 nonce, u8 status (`PunchStatus`), u8 family 4|6, 4|16 address, u16 port:   |
|      |                  | PEER: punch to it now (port ≠ 0); else family 4, address 0.0.0.0, port 0      |

The codec checks syntax and limits only; what a message means in a session (handshake first, blocks within the
manifest, hash ranges aligned) is the session's business — except for one question that cannot wait: whether a
BLOCK is wanted at all, which its receiver answers from its 13-byte header before a byte of payload is held (see
`swarm.net.decoder`). Decoding lives in `swarm.net.decoder.Decoder`:
it raises nothing but `ProtocolError`, and rejects a frame as soon as its header shows it cannot be valid — a
declared length never makes us allocate more than has arrived. After an error the decoder is dead: the peer is to
be dropped.

**Query sessions.** A HANDSHAKE whose root is `QUERY_ROOT` (all ones: not all zeros, which is the empty content's
root, `merkle.ZERO_HASH`, served like any other; every other root is a SHA-256 output) asks for no content: it
opens a session for CLAIMS_REQUESTs only, each answered by one CLAIMS carrying the answering node's *own* claims
under the key (`swarm.trust.claims.ManifestClaim`; none: n = 0). It exists for discovery backends that store only
an address under a key (BitTorrent's Mainline DHT): the asker learns from the address it connected to who vouches,
which is what makes the claim first-hand. Only durations cross the wire (how long ago the claim was made, how long
it has left), so the two clocks need not agree. The protocol version did not change for it: a node older than these
two types looks `QUERY_ROOT` up, finds it not shared and closes the session at its HANDSHAKE; and its decoder
takes an unknown type for a malformed frame (`ProtocolError`, "unknown message type"), which drops the connection.
So an old node is one that answers no query, never one that misreads one: to an asker, a node that is not there.
After a CLAIMS, the asker may send one PEX of at most one entry (its own peer port if it claims under the key too;
the entry's address is not read: the connection's is), answered by a PEX of the other claimers the node heard of
(`swarm.core.claimers`); a node from before this closes the session at that PEX, which to the asker is a node that
knows no others. A CLAIMS's ages are in milliseconds (they order a crowd's claimers); a node from before that
change sends seconds, which read as claims made about now.

**Connect-backs** (reachability: is this node's peer port open to the Internet, or behind a NAT?). On a query
session, REACH_REQUEST(port, transports, nonce) asks the answering node to connect back, by each transport named,
to *the address the request came from* on `port`: the address of the connection it arrived on, never one the
requester names, so nobody can make a node connect to a third party (the requester's own address is one its
transport handshake proved it holds). Each connect-back is one connection: a HANDSHAKE on `QUERY_ROOT`, then one
REACH_PROOF carrying `reach_proof(nonce)`, then the connection is closed; the answerer then sends one REACH_RESULT
per transport on the requester's session: connected, refused, timed out, or not attempted (over the answerer's
limits, a transport it does not speak, a port below 1024, a source that is not public), so a requester can tell
"the peer could not reach me" from "the peer did not try". The proof is a hash of the nonce, not the nonce, so no
byte of a connect-back is the requester's choice but the port: a requester cannot make a node write a command of
its choosing to whatever listens at its address (a text protocol would read a nonce of "FLUSHALL\r\n" as one).
Nothing is amplified: a connect-back sends 92 bytes (HANDSHAKE, REACH_PROOF) for the 95 of the requester's
HANDSHAKE and REACH_REQUEST, and each REACH_RESULT (23 bytes) is smaller than the request. The requester's node
takes a query session whose first message after the HANDSHAKE is a REACH_PROOF as a connect-back and closes it.
How many connect-backs a node makes is bounded per source and in all (`swarm.core.reach`). An older node drops
the connection at a REACH_REQUEST (an unknown type): to the requester, a peer that did not answer.

**Hole punching** (`swarm.core.punch`): on a query session, PUNCH_REQUEST(nonce, address) asks the coordinator to
send the requester and the peer whose query session to it comes from that address (as the transport saw it: not a
name anyone can take) each other's address as it sees their own connections (PUNCH_PEER, status PEER, to both; else
one refusal to the requester, no address), only when both are of the request's address family: 29 or 41 bytes each,
as large as the request, which carries a flags byte where PUNCH_PEER has its status: nothing is amplified. An older
node drops the connection at it (an unknown type).

BLOCK is the one large message; `encode_block_header` lets a transport write the 13-byte header and then the
payload (or a `sendfile` range) without concatenating them.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from ipaddress import IPv4Address, IPv6Address

from swarm.content.manifest import MAX_BLOCK_SIZE, MAX_BLOCKS, MAX_ENCODED_SIZE
from swarm.content.merkle import HASH_SIZE, MAX_PROOF_LENGTH
from swarm.trust.claims import MAX_VALIDATOR_BYTES, ManifestClaim

__all__ = ["PROTOCOL_VERSION", "FRAME_HEADER_SIZE", "BLOCK_HEADER_SIZE", "MessageType", "RejectReason", "Transport",
           "Limits", "KeepAlive", "Handshake", "Bitfield", "Have", "Request", "Block", "Cancel", "Reject",
           "HashRequest", "HashResponse", "PexPeer", "Pex", "Start", "ManifestRequest", "ManifestResponse",
           "QUERY_ROOT", "MAX_CLAIMS_PER_ANSWER", "MAX_CLAIM_SIZE", "ClaimEntry", "ClaimsRequest", "ClaimsResponse",
           "NONCE_SIZE", "ReachStatus", "ReachRequest", "ReachProof", "ReachResult", "reach_proof", "PunchStatus",
           "PunchRequest", "PunchPeer", "Message", "encode", "encode_block_header"]

PROTOCOL_VERSION = 1

_FRAME = struct.Struct(">IB")
FRAME_HEADER_SIZE = _FRAME.size
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_HANDSHAKE = struct.Struct(">H32s32s")
_SPAN = struct.Struct(">III")
_REJECT = struct.Struct(">IIIB")
_BLOCK_POSITION = struct.Struct(">II")
_HASH_RESPONSE = struct.Struct(">IIB")
_BLOCK_HEADER = struct.Struct(">IBII")
BLOCK_HEADER_SIZE = _BLOCK_HEADER.size
_CLAIMS_HEAD = struct.Struct(">32sB")  # key, entry count
_CLAIM_ENTRY = struct.Struct(">32sQIIIB")  # root, size, block size, age ms, seconds left, validator length
NONCE_SIZE = 16  # a connect-back's nonce, and its proof: random to the requester, unguessable to anyone else
_REACH_REQUEST = struct.Struct(">HB16s")  # port, transport flags, nonce
_REACH_RESULT = struct.Struct(">16sBB")  # nonce, one transport flag, status
_REACH_PROOF_TAG = b"swarmproxy-reach-v1"
_PUNCH_REQUEST_HEAD = struct.Struct(">16sBB")  # nonce, flags (0), address family; then the address and a u16 port
_PUNCH_PEER_HEAD = struct.Struct(">16sBB")  # nonce, status, address family; then the address and a u16 port

# The root of a HANDSHAKE that opens a query session (module docstring). No content has it: the empty content's
# root is all zeros, and any other is a SHA-256 output, all ones with a chance of 2**-256.
QUERY_ROOT = b"\xff" * HASH_SIZE
# Claims in one CLAIMS. A node answers with its own claims only, and holds one per key (the claim store's rule: its
# next claim replaces the last), so one is the rule; the rest is room to grow without a new version, and a bound.
MAX_CLAIMS_PER_ANSWER = 8
MAX_CLAIM_SIZE = 2**63 - 1  # a claim's size fits a signed 64-bit file offset, as every store's does


class MessageType(IntEnum):
    KEEPALIVE = 0
    HANDSHAKE = 1
    BITFIELD = 2
    HAVE = 3
    REQUEST = 4
    BLOCK = 5
    CANCEL = 6
    REJECT = 7
    HASH_REQUEST = 8
    HASH_RESPONSE = 9
    PEX = 10
    START = 11
    MANIFEST_REQUEST = 12
    MANIFEST = 13
    CLAIMS_REQUEST = 14
    CLAIMS = 15
    REACH_REQUEST = 16
    REACH_PROOF = 17
    REACH_RESULT = 18
    PUNCH_REQUEST = 19
    PUNCH_PEER = 20


class RejectReason(IntEnum):
    NOT_FOUND = 1  # content root, block or range not held (or not shared) here
    BUSY = 2  # too many outstanding requests from this peer
    RATE_LIMITED = 3  # upload budget exhausted; retry later or elsewhere
    INVALID = 4  # outside the manifest (block, offset or length)
    SHUTTING_DOWN = 5


class Transport(IntFlag):
    TCP = 1
    QUIC = 2


_ALL_TRANSPORTS = int(Transport.TCP | Transport.QUIC)
_ONE_TRANSPORT = frozenset(int(flag) for flag in Transport)  # a REACH_RESULT names exactly one


class ReachStatus(IntEnum):
    """What became of one connect-back (REACH_RESULT)."""

    CONNECTED = 1  # the connection was made and the proof sent
    REFUSED = 2  # something answered no: nothing listens there, or a firewall rejects (a reset, an ICMP error)
    TIMED_OUT = 3  # nothing answered: what a NAT or a firewall that drops does
    NOT_ATTEMPTED = 4  # not tried: the answerer's limits, a transport it lacks, a port below 1024, a private source


@dataclass(frozen=True, slots=True)
class Limits:
    """What a decoder accepts. Defaults fit the largest block a manifest may have (4 MiB); a control-only stream
    can use much less."""

    max_frame_size: int = 1 + _BLOCK_POSITION.size + MAX_BLOCK_SIZE
    max_block_payload: int = MAX_BLOCK_SIZE  # also bounds REQUEST/CANCEL/REJECT lengths
    max_bitfield_bits: int = MAX_BLOCKS
    max_hashes: int = 16 * 1024
    max_pex_peers: int = 200
    max_manifest_size: int = MAX_ENCODED_SIZE


# --- messages ---------------------------------------------------------------------------------------------


def _pack(layout: struct.Struct, *values: object) -> bytes:
    try:
        return layout.pack(*values)
    except struct.error as exc:
        raise ValueError(f"field out of range: {exc}") from None


def _frame(kind: MessageType, body: bytes = b"") -> bytes:
    return _FRAME.pack(1 + len(body), kind) + body


def _check_hash(value: bytes, what: str) -> None:
    if len(value) != HASH_SIZE:
        raise ValueError(f"{what} must be {HASH_SIZE} bytes")


@dataclass(frozen=True, slots=True)
class KeepAlive:
    def encode(self) -> bytes:
        return _frame(MessageType.KEEPALIVE)


@dataclass(frozen=True, slots=True)
class Handshake:
    version: int
    node_id: bytes
    root: bytes

    def encode(self) -> bytes:
        _check_hash(self.node_id, "node id")
        _check_hash(self.root, "root")
        return _frame(MessageType.HANDSHAKE, _pack(_HANDSHAKE, self.version, self.node_id, self.root))


@dataclass(frozen=True, slots=True)
class Bitfield:
    """Which of `count` blocks the sender holds; `bits` packs block 0 into the high bit of byte 0."""

    count: int
    bits: bytes

    @classmethod
    def from_blocks(cls, count: int, blocks: Iterable[int]) -> Bitfield:
        bits = bytearray(-(-count // 8))
        for block in blocks:
            if not 0 <= block < count:
                raise ValueError(f"block {block} outside 0..{count - 1}")
            bits[block >> 3] |= 0x80 >> (block & 7)
        return cls(count, bytes(bits))

    def __contains__(self, block: int) -> bool:
        return 0 <= block < self.count and bool(self.bits[block >> 3] & (0x80 >> (block & 7)))

    def blocks(self) -> Iterator[int]:
        for index, byte in enumerate(self.bits):
            if byte:
                for bit in range(8):
                    if byte & (0x80 >> bit):
                        yield index * 8 + bit

    def encode(self) -> bytes:
        if len(self.bits) != -(-self.count // 8) or (self.count % 8 and self.bits[-1] & (0xFF >> (self.count % 8))):
            raise ValueError("bits must be ceil(count/8) bytes with the spare bits clear")
        return _frame(MessageType.BITFIELD, _pack(_U32, self.count) + self.bits)


@dataclass(frozen=True, slots=True)
class Have:
    block: int

    def encode(self) -> bytes:
        return _frame(MessageType.HAVE, _pack(_U32, self.block))


@dataclass(frozen=True, slots=True)
class Start:
    block: int

    def encode(self) -> bytes:
        return _frame(MessageType.START, _pack(_U32, self.block))


def _check_length(length: int) -> None:
    if length < 1:
        raise ValueError("length must be >= 1")


@dataclass(frozen=True, slots=True)
class Request:
    block: int
    offset: int
    length: int

    def encode(self) -> bytes:
        _check_length(self.length)
        return _frame(MessageType.REQUEST, _pack(_SPAN, self.block, self.offset, self.length))


@dataclass(frozen=True, slots=True)
class Cancel:
    block: int
    offset: int
    length: int

    def encode(self) -> bytes:
        _check_length(self.length)
        return _frame(MessageType.CANCEL, _pack(_SPAN, self.block, self.offset, self.length))


@dataclass(frozen=True, slots=True)
class Reject:
    block: int
    offset: int
    length: int
    reason: RejectReason

    def encode(self) -> bytes:
        _check_length(self.length)
        reason = RejectReason(self.reason)
        return _frame(MessageType.REJECT, _pack(_REJECT, self.block, self.offset, self.length, reason))


def encode_block_header(block: int, offset: int, length: int) -> bytes:
    """The first `BLOCK_HEADER_SIZE` bytes of a BLOCK frame carrying `length` bytes of data.

    Write the payload right after it (a memoryview, an mmap slice or a `sendfile` range): no concatenation.
    """
    _check_length(length)
    return _pack(_BLOCK_HEADER, 1 + _BLOCK_POSITION.size + length, MessageType.BLOCK, block, offset)


@dataclass(frozen=True, slots=True)
class Block:
    block: int
    offset: int
    # bytes, or the bytearray a payload was received into (`Decoder.get_buffer`): nothing writes to it after.
    data: bytes | bytearray = field(repr=False)

    def encode(self) -> bytes:
        return encode_block_header(self.block, self.offset, len(self.data)) + self.data


@dataclass(frozen=True, slots=True)
class HashRequest:
    """Ask for block layer entries `first..first+count` (with the proof up to the root)."""

    first: int
    count: int

    def encode(self) -> bytes:
        _check_length(self.count)
        return _frame(MessageType.HASH_REQUEST, _pack(_BLOCK_POSITION, self.first, self.count))


@dataclass(frozen=True, slots=True)
class HashResponse:
    """Layer entries from `first` for a request of `count` (fewer where the layer ends) and their proof."""

    first: int
    count: int
    hashes: tuple[bytes, ...]
    proof: tuple[bytes, ...] = ()

    def encode(self) -> bytes:
        if not 1 <= len(self.hashes) <= self.count:
            raise ValueError("a hash response carries 1..count hashes")
        if len(self.proof) > MAX_PROOF_LENGTH:
            raise ValueError(f"a proof has at most {MAX_PROOF_LENGTH} hashes")
        for value in (*self.hashes, *self.proof):
            _check_hash(value, "hash")
        head = _pack(_HASH_RESPONSE, self.first, self.count, len(self.proof))
        return _frame(MessageType.HASH_RESPONSE, head + b"".join(self.hashes) + b"".join(self.proof))


@dataclass(frozen=True, slots=True)
class PexPeer:
    ip: IPv4Address | IPv6Address
    port: int
    transports: Transport

    def _encode(self) -> bytes:
        if not 1 <= self.port <= 0xFFFF:
            raise ValueError("port must be in 1..65535")
        if not self.transports or int(self.transports) & ~_ALL_TRANSPORTS:
            raise ValueError("transports must name at least one known transport")
        return bytes((self.ip.version,)) + self.ip.packed + _pack(_U16, self.port) + bytes((int(self.transports),))


@dataclass(frozen=True, slots=True)
class Pex:
    peers: tuple[PexPeer, ...]

    def encode(self) -> bytes:
        body = _pack(_U16, len(self.peers)) + b"".join(peer._encode() for peer in self.peers)
        return _frame(MessageType.PEX, body)


@dataclass(frozen=True, slots=True)
class ManifestRequest:
    def encode(self) -> bytes:
        return _frame(MessageType.MANIFEST_REQUEST)


@dataclass(frozen=True, slots=True)
class ManifestResponse:
    """An encoded manifest; decode it with `swarm.content.manifest.decode` and check it against the wanted root."""

    data: bytes

    def encode(self) -> bytes:
        if not self.data:
            raise ValueError("manifest must not be empty")
        return _frame(MessageType.MANIFEST, self.data)


@dataclass(frozen=True, slots=True)
class ClaimsRequest:
    """On a query session: the answering node's own claims under `key`, please."""

    key: bytes

    def encode(self) -> bytes:
        _check_hash(self.key, "key")
        return _frame(MessageType.CLAIMS_REQUEST, self.key)


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    """One claim of a CLAIMS answer: what its publisher vouches for, made `age_ms` milliseconds ago and living `ttl`
    whole seconds more, by the publisher's clock: durations, which the asker adds to its own clock. The age is in
    milliseconds because it orders claimers (`swarm.trust.ahead_of`): a flash crowd claims within a second, and ages
    in whole seconds shuffled that order at every lookup, so that eight claimers each saw one or none ahead and none
    left the origin to the others."""

    claim: ManifestClaim
    age_ms: int
    ttl: int

    def _encode(self) -> bytes:
        claim = self.claim
        _check_hash(claim.content_root, "content root")
        if not 0 <= claim.size <= MAX_CLAIM_SIZE:
            raise ValueError(f"claim size out of range: {claim.size}")
        if self.ttl < 1:
            raise ValueError("a claim's ttl must be >= 1")
        if not 1 <= len(claim.validator) <= MAX_VALIDATOR_BYTES:
            raise ValueError(f"a validator has 1..{MAX_VALIDATOR_BYTES} bytes")
        head = _pack(_CLAIM_ENTRY, claim.content_root, claim.size, claim.block_size, self.age_ms, self.ttl,
                     len(claim.validator))
        return head + claim.validator


@dataclass(frozen=True, slots=True)
class ClaimsResponse:
    """The answer to a CLAIMS_REQUEST for `key`: the answering node's own claims under it (none: empty)."""

    key: bytes
    entries: tuple[ClaimEntry, ...] = ()

    def encode(self) -> bytes:
        _check_hash(self.key, "key")
        if len(self.entries) > MAX_CLAIMS_PER_ANSWER:
            raise ValueError(f"a CLAIMS carries at most {MAX_CLAIMS_PER_ANSWER} claims")
        body = _pack(_CLAIMS_HEAD, self.key, len(self.entries)) + b"".join(e._encode() for e in self.entries)
        return _frame(MessageType.CLAIMS, body)


class PunchStatus(IntEnum):  # a coordinator's answer to a PUNCH_REQUEST (PUNCH_PEER)
    PEER = 1  # here is the other side's address: punch to it now
    UNKNOWN_PEER = 2  # no live query session to the coordinator under that node id (or it is the requester's own)
    NOT_ATTEMPTED = 3  # over the coordinator's limits


def reach_proof(nonce: bytes) -> bytes:
    """What a connect-back carries for `nonce`: a hash of it, never the requester's bytes (module docstring)."""
    if len(nonce) != NONCE_SIZE:
        raise ValueError(f"a nonce is {NONCE_SIZE} bytes")
    return hashlib.sha256(_REACH_PROOF_TAG + nonce).digest()[:NONCE_SIZE]


def _check_nonce(value: bytes, what: str) -> None:
    if len(value) != NONCE_SIZE:
        raise ValueError(f"{what} must be {NONCE_SIZE} bytes")


@dataclass(frozen=True, slots=True)
class ReachRequest:
    """On a query session: connect back to the address this came from, on `port`, by each of `transports`, and
    prove it with `reach_proof(nonce)` (module docstring, "Connect-backs")."""

    port: int
    transports: Transport
    nonce: bytes

    def encode(self) -> bytes:
        if not 1 <= self.port <= 0xFFFF:
            raise ValueError("port must be in 1..65535")
        if not self.transports or int(self.transports) & ~_ALL_TRANSPORTS:
            raise ValueError("transports must name at least one known transport")
        _check_nonce(self.nonce, "nonce")
        return _frame(MessageType.REACH_REQUEST, _pack(_REACH_REQUEST, self.port, int(self.transports), self.nonce))


@dataclass(frozen=True, slots=True)
class ReachProof:
    """The one message of a connect-back after its HANDSHAKE: `reach_proof` of the requester's nonce."""

    proof: bytes

    def encode(self) -> bytes:
        _check_nonce(self.proof, "proof")
        return _frame(MessageType.REACH_PROOF, self.proof)


@dataclass(frozen=True, slots=True)
class ReachResult:
    """The answer to a REACH_REQUEST for `nonce`, one per transport it named: what the connect-back came to."""

    nonce: bytes
    transport: Transport
    status: ReachStatus

    def encode(self) -> bytes:
        _check_nonce(self.nonce, "nonce")
        if int(self.transport) not in _ONE_TRANSPORT:
            raise ValueError("a REACH_RESULT names exactly one transport")
        status = ReachStatus(self.status)
        return _frame(MessageType.REACH_RESULT, _pack(_REACH_RESULT, self.nonce, int(self.transport), status))


@dataclass(frozen=True, slots=True)
class PunchRequest:
    """Introduce me to the peer whose query session to you comes from `ip`:`port`; `nonce` comes back in PUNCH_PEER."""

    nonce: bytes
    ip: IPv4Address | IPv6Address
    port: int

    def encode(self) -> bytes:
        _check_nonce(self.nonce if 1 <= self.port <= 0xFFFF else b"", "nonce and a port in 1..65535")
        head = _pack(_PUNCH_REQUEST_HEAD, self.nonce, 0, self.ip.version)
        return _frame(MessageType.PUNCH_REQUEST, head + self.ip.packed + _pack(_U16, self.port))

_NO_ADDRESS = IPv4Address(0)


@dataclass(frozen=True, slots=True)
class PunchPeer:
    """Status PEER: the other side's address as the coordinator sees its connection; else why not, no address."""

    nonce: bytes
    status: PunchStatus
    ip: IPv4Address | IPv6Address = _NO_ADDRESS
    port: int = 0

    def encode(self) -> bytes:
        _check_nonce(self.nonce, "nonce")
        status = PunchStatus(self.status)
        if (status is PunchStatus.PEER) != (1 <= self.port <= 0xFFFF) or (status is not PunchStatus.PEER
                                                                           and self.ip != _NO_ADDRESS):
            raise ValueError("a PUNCH_PEER of status PEER, and only one, names an address and a port in 1..65535")
        head = _pack(_PUNCH_PEER_HEAD, self.nonce, status, self.ip.version)
        return _frame(MessageType.PUNCH_PEER, head + self.ip.packed + _pack(_U16, self.port))


Message = (
    KeepAlive | Handshake | Bitfield | Have | Request | Block | Cancel | Reject | HashRequest | HashResponse | Pex
    | Start | ManifestRequest | ManifestResponse | ClaimsRequest | ClaimsResponse | ReachRequest | ReachProof
    | ReachResult | PunchRequest | PunchPeer
)


def encode(message: Message) -> bytes:
    """One complete frame; raises `ValueError` for a field the format cannot carry (a local bug)."""
    return message.encode()
