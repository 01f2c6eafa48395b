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
| 13   | MANIFEST         | an encoded `swarm.manifest.Manifest`, opaque here                             |

The codec checks syntax and limits only; what a message means in a session (handshake first, blocks within the
manifest, hash ranges aligned) is the session's business. `Decoder.feed` raises nothing but `ProtocolError`, and
rejects a frame as soon as its 5-byte header shows it cannot be valid — an oversized length never makes us buffer
its body. After an error the decoder is dead: the peer is to be dropped.

BLOCK is the one large message; `encode_block_header` lets a transport write the 13-byte header and then the
payload (or a `sendfile` range) without concatenating them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import NoReturn
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from ipaddress import IPv4Address, IPv6Address

from swarm.errors import ProtocolError
from swarm.manifest import MAX_BLOCKS, MAX_ENCODED_SIZE
from swarm.merkle import HASH_SIZE, MAX_PROOF_LENGTH

__all__ = [
    "PROTOCOL_VERSION",
    "FRAME_HEADER_SIZE",
    "BLOCK_HEADER_SIZE",
    "MessageType",
    "RejectReason",
    "Transport",
    "Limits",
    "KeepAlive",
    "Handshake",
    "Bitfield",
    "Have",
    "Request",
    "Block",
    "Cancel",
    "Reject",
    "HashRequest",
    "HashResponse",
    "PexPeer",
    "Pex",
    "Start",
    "ManifestRequest",
    "ManifestResponse",
    "Message",
    "Decoder",
    "encode",
    "encode_block_header",
]

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
_SCRATCH_READ = 64 * 1024  # bytes asked for per read when no BLOCK payload is expected


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


@dataclass(frozen=True, slots=True)
class Limits:
    """What a decoder accepts. Defaults fit a 4 MiB block; a control-only stream can use much less."""

    max_frame_size: int = 1 + _BLOCK_POSITION.size + 4 * 1024 * 1024
    max_block_payload: int = 4 * 1024 * 1024  # also bounds REQUEST/CANCEL/REJECT lengths
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
    """An encoded manifest; decode it with `swarm.manifest.decode` and check it against the wanted root."""

    data: bytes

    def encode(self) -> bytes:
        if not self.data:
            raise ValueError("manifest must not be empty")
        return _frame(MessageType.MANIFEST, self.data)


Message = (
    KeepAlive | Handshake | Bitfield | Have | Request | Block | Cancel | Reject | HashRequest | HashResponse | Pex
    | Start | ManifestRequest | ManifestResponse
)


def encode(message: Message) -> bytes:
    """One complete frame; raises `ValueError` for a field the format cannot carry (a local bug)."""
    return message.encode()


# --- decoding ---------------------------------------------------------------------------------------------


_PEX_ENTRY_SIZES = {4: 1 + 4 + 2 + 1, 6: 1 + 16 + 2 + 1}


def _body_bounds(limits: Limits) -> dict[int, tuple[int, int]]:
    """Smallest and largest body per message type, so a header alone can be judged."""
    return {
        MessageType.KEEPALIVE: (0, 0),
        MessageType.HANDSHAKE: (_HANDSHAKE.size, _HANDSHAKE.size),
        MessageType.BITFIELD: (_U32.size, _U32.size + -(-limits.max_bitfield_bits // 8)),
        MessageType.HAVE: (_U32.size, _U32.size),
        MessageType.REQUEST: (_SPAN.size, _SPAN.size),
        MessageType.BLOCK: (_BLOCK_POSITION.size + 1, _BLOCK_POSITION.size + limits.max_block_payload),
        MessageType.CANCEL: (_SPAN.size, _SPAN.size),
        MessageType.REJECT: (_REJECT.size, _REJECT.size),
        MessageType.HASH_REQUEST: (_BLOCK_POSITION.size, _BLOCK_POSITION.size),
        MessageType.HASH_RESPONSE: (
            _HASH_RESPONSE.size + HASH_SIZE,
            _HASH_RESPONSE.size + HASH_SIZE * (limits.max_hashes + MAX_PROOF_LENGTH),
        ),
        MessageType.PEX: (_U16.size, _U16.size + max(_PEX_ENTRY_SIZES.values()) * limits.max_pex_peers),
        MessageType.START: (_U32.size, _U32.size),
        MessageType.MANIFEST_REQUEST: (0, 0),
        MessageType.MANIFEST: (1, limits.max_manifest_size),
    }


class Decoder:
    """Turns a byte stream from one peer into messages. Feed it whatever the transport delivered.

    Two ways in. `feed(data)`: copies are kept to one per payload byte: complete frames decode straight from
    the caller's buffer, and an incomplete BLOCK collects its payload as parts (views of the caller's `bytes`,
    which cannot change, or copies of anything mutable) joined once when the frame completes. Only other
    partial frames, which are small, go through the pending buffer. `get_buffer()` / `buffer_updated(n)`
    (TCP): the transport reads into the decoder's buffers, BLOCK payloads in place (see `get_buffer`).
    """

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._bounds = _body_bounds(self.limits)
        self._pending = bytearray()
        self._block_position = (0, 0)
        self._block_parts: list[bytes | memoryview] = []
        self._block_remaining = 0  # payload bytes still due for an incomplete BLOCK; 0 when none
        self._block_held = 0
        # Only the message is kept: an exception's traceback would pin the caller's buffer.
        self._error: str | None = None
        # `get_buffer` / `buffer_updated` state: unparsed bytes are _scratch[_start:_end]; a BLOCK whose
        # payload is being received in place is _direct (filled up to _direct_filled).
        self._scratch = bytearray()
        self._start = self._end = 0
        self._direct: bytearray | None = None
        self._direct_filled = 0
        self._after_block = False

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        direct = BLOCK_HEADER_SIZE + self._direct_filled if self._direct is not None else 0
        return len(self._pending) + self._block_held + self._end - self._start + direct

    # -- receiving into the decoder's own buffers (a transport that can read into memory it is given) ----------

    def get_buffer(self) -> memoryview:
        """Where the next received bytes should go; then call `buffer_updated(nbytes)`. Don't mix with `feed`.

        Each BLOCK payload is received straight into the `bytearray` it is delivered in (`Block.data`), so the
        kernel's copy is the only one: no per-read `bytes`, no joining of parts. Everything else lands in a
        scratch buffer. Right after a BLOCK only one BLOCK header is asked for, so that the next payload is not
        read into scratch (and copied again) but found by its header and received in place too.
        """
        if self._direct is not None:
            return memoryview(self._direct)[self._direct_filled :]
        pending = self._end - self._start
        kind = self._scratch[self._start + _U32.size] if pending >= _FRAME.size else None
        if pending < BLOCK_HEADER_SIZE and (kind == MessageType.BLOCK or kind is None and self._after_block):
            want = BLOCK_HEADER_SIZE - pending
        else:
            want = _SCRATCH_READ
            if kind is not None:  # a large control frame (layer, bitfield) is held whole; its size was checked
                (length,) = _U32.unpack_from(self._scratch, self._start)
                want = max(want, _U32.size + length - pending)
        if len(self._scratch) - self._end < want:
            if self._start:
                self._scratch[:pending] = self._scratch[self._start : self._end]
                self._start, self._end = 0, pending
            if len(self._scratch) - self._end < want:  # a new one: the last view handed out may still be alive
                grown = bytearray(self._end + want)
                grown[: self._end] = self._scratch[: self._end]
                self._scratch = grown
        return memoryview(self._scratch)[self._end : self._end + want]

    def buffer_updated(self, nbytes: int) -> list[Message]:
        """`nbytes` were written at the start of the last `get_buffer()`: decode what is complete."""
        if self._error is not None:
            raise ProtocolError(f"decoder closed by an earlier error: {self._error}")
        direct = self._direct
        if direct is not None:
            self._direct_filled += nbytes
            if self._direct_filled < len(direct):
                return []
            self._direct = None
            self._after_block = True
            return [Block(*self._block_position, direct)]
        self._end += nbytes
        messages: list[Message] = []
        try:
            with memoryview(self._scratch) as scratch, scratch[self._start : self._end] as view:
                self._start += self._decode_frames(view, False, messages, in_place=True)
        except ProtocolError as exc:
            self._die(str(exc))
        if self._start == self._end:
            self._start = self._end = 0
        if messages or self._direct is not None:
            self._after_block = self._direct is not None or type(messages[-1]) is Block
        return messages

    def _die(self, error: str) -> NoReturn:
        self._error = error
        self._pending = bytearray()
        self._block_parts = []
        self._scratch = bytearray()
        self._start = self._end = 0
        self._direct = None
        raise ProtocolError(error)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Message]:
        """Decode every complete frame; raise `ProtocolError` (and die) on malformed or oversized input."""
        if self._error is not None:
            raise ProtocolError(f"decoder closed by an earlier error: {self._error}")
        messages: list[Message] = []
        try:
            with memoryview(data) as source, source.cast("B") as view:
                self._feed(view, type(data) is bytes, messages)
        except ProtocolError as exc:
            error = str(exc)
        else:
            return messages
        # Raised outside the handler so that no traceback of the parsers (holding views of `data`) survives.
        self._die(error)

    def _feed(self, view: memoryview, immutable: bool, messages: list[Message]) -> None:
        if self._block_remaining:
            take = min(self._block_remaining, len(view))
            self._keep_block_part(view[:take], immutable)
            if self._block_remaining:
                return
            messages.append(self._finish_block())
            view = view[take:]
        if self._pending:
            self._pending += view
            with memoryview(self._pending) as pending:
                consumed = self._decode_frames(pending, False, messages)
            del self._pending[:consumed]
        else:
            consumed = self._decode_frames(view, immutable, messages)
            self._pending += view[consumed:]

    def _decode_frames(self, view: memoryview, immutable: bool, messages: list[Message], in_place: bool = False) -> int:
        position = 0
        end = len(view)
        while end - position >= _U32.size:
            (length,) = _U32.unpack_from(view, position)
            if length == 0:
                raise ProtocolError("empty frame")
            if length > self.limits.max_frame_size:
                raise ProtocolError(f"frame of {length} bytes exceeds the {self.limits.max_frame_size} limit")
            if end - position < _FRAME.size:
                break
            kind = view[position + _U32.size]
            bounds = self._bounds.get(kind)
            if bounds is None:
                raise ProtocolError(f"unknown message type {kind}")
            if not bounds[0] <= length - 1 <= bounds[1]:
                raise ProtocolError(f"{MessageType(kind).name} body of {length - 1} bytes outside {bounds}")
            if end - position < _U32.size + length:
                if kind == MessageType.BLOCK and end - position >= BLOCK_HEADER_SIZE:
                    if in_place:
                        self._start_direct(view[position:end], length)
                    else:
                        self._start_block(view[position:end], length, immutable)
                    return end
                break
            body = view[position + _FRAME.size : position + _U32.size + length]
            messages.append(_DECODERS[kind](self, body))
            position += _U32.size + length
        return position

    def _start_direct(self, frame: memoryview, length: int) -> None:
        self._block_position = _BLOCK_POSITION.unpack_from(frame, _FRAME.size)
        self._direct = bytearray(length - 1 - _BLOCK_POSITION.size)
        self._direct_filled = len(frame) - BLOCK_HEADER_SIZE
        self._direct[: self._direct_filled] = frame[BLOCK_HEADER_SIZE:]

    def _start_block(self, frame: memoryview, length: int, immutable: bool) -> None:
        self._block_position = _BLOCK_POSITION.unpack_from(frame, _FRAME.size)
        self._block_remaining = length - 1 - _BLOCK_POSITION.size
        self._block_held = BLOCK_HEADER_SIZE
        self._keep_block_part(frame[BLOCK_HEADER_SIZE:], immutable)

    def _keep_block_part(self, part: memoryview, immutable: bool) -> None:
        if part:
            self._block_parts.append(part if immutable else bytes(part))
            self._block_remaining -= len(part)
            self._block_held += len(part)

    def _finish_block(self) -> Block:
        parts = self._block_parts
        data = parts[0] if len(parts) == 1 and type(parts[0]) is bytes else b"".join(parts)
        self._block_parts = []
        self._block_held = 0
        return Block(*self._block_position, data)

    # Bodies reach these already checked against `_body_bounds`; each checks what its bounds cannot.

    def _keepalive(self, body: memoryview) -> Message:
        return KeepAlive()

    def _handshake(self, body: memoryview) -> Message:
        version, node_id, root = _HANDSHAKE.unpack(body)
        return Handshake(version, node_id, root)

    def _bitfield(self, body: memoryview) -> Message:
        (count,) = _U32.unpack_from(body)
        if count > self.limits.max_bitfield_bits:
            raise ProtocolError(f"bitfield of {count} bits exceeds the {self.limits.max_bitfield_bits} limit")
        bits = body[_U32.size :]
        if len(bits) != -(-count // 8):
            raise ProtocolError(f"bitfield of {count} bits carries {len(bits)} bytes")
        if count % 8 and bits[-1] & (0xFF >> (count % 8)):
            raise ProtocolError("bitfield spare bits set")
        return Bitfield(count, bytes(bits))

    def _have(self, body: memoryview) -> Message:
        return Have(*_U32.unpack(body))

    def _start(self, body: memoryview) -> Message:
        return Start(*_U32.unpack(body))

    def _span(self, body: memoryview, layout: struct.Struct) -> tuple[int, ...]:
        values = layout.unpack(body)
        if not 1 <= values[2] <= self.limits.max_block_payload:
            raise ProtocolError(f"length {values[2]} outside 1..{self.limits.max_block_payload}")
        return values

    def _request(self, body: memoryview) -> Message:
        return Request(*self._span(body, _SPAN))

    def _cancel(self, body: memoryview) -> Message:
        return Cancel(*self._span(body, _SPAN))

    def _reject(self, body: memoryview) -> Message:
        block, offset, length, reason = self._span(body, _REJECT)
        if reason not in _REJECT_REASONS:
            raise ProtocolError(f"unknown reject reason {reason}")
        return Reject(block, offset, length, RejectReason(reason))

    def _block(self, body: memoryview) -> Message:
        block, offset = _BLOCK_POSITION.unpack_from(body)
        return Block(block, offset, bytes(body[_BLOCK_POSITION.size :]))

    def _hash_request(self, body: memoryview) -> Message:
        first, count = _BLOCK_POSITION.unpack(body)
        if not 1 <= count <= self.limits.max_hashes:
            raise ProtocolError(f"hash request count {count} outside 1..{self.limits.max_hashes}")
        return HashRequest(first, count)

    def _hash_response(self, body: memoryview) -> Message:
        first, count, proof_length = _HASH_RESPONSE.unpack_from(body)
        payload = body[_HASH_RESPONSE.size :]
        if len(payload) % HASH_SIZE:
            raise ProtocolError("hash response is not a whole number of hashes")
        if proof_length > MAX_PROOF_LENGTH:
            raise ProtocolError(f"proof of {proof_length} hashes exceeds {MAX_PROOF_LENGTH}")
        total = len(payload) // HASH_SIZE
        hash_count = total - proof_length
        if not 1 <= hash_count <= min(count, self.limits.max_hashes):
            raise ProtocolError(f"hash response carries {hash_count} hashes for a range of {count}")
        raw = bytes(payload)
        hashes = tuple(raw[i : i + HASH_SIZE] for i in range(0, len(raw), HASH_SIZE))
        return HashResponse(first, count, hashes[:hash_count], hashes[hash_count:])

    def _pex(self, body: memoryview) -> Message:
        (count,) = _U16.unpack_from(body)
        if count > self.limits.max_pex_peers:
            raise ProtocolError(f"PEX of {count} peers exceeds the {self.limits.max_pex_peers} limit")
        position = _U16.size
        peers = []
        for _ in range(count):
            if position >= len(body):
                raise ProtocolError("PEX truncated")
            family = body[position]
            size = _PEX_ENTRY_SIZES.get(family)
            if size is None:
                raise ProtocolError(f"unknown PEX address family {family}")
            if position + size > len(body):
                raise ProtocolError("PEX truncated")
            address = bytes(body[position + 1 : position + size - 3])
            (port,) = _U16.unpack_from(body, position + size - 3)
            flags = body[position + size - 1]
            if port == 0:
                raise ProtocolError("PEX peer with port 0")
            if not flags or flags & ~_ALL_TRANSPORTS:
                raise ProtocolError(f"PEX peer with transport flags {flags:#04x}")
            ip = IPv4Address(address) if family == 4 else IPv6Address(address)
            peers.append(PexPeer(ip, port, Transport(flags)))
            position += size
        if position != len(body):
            raise ProtocolError(f"{len(body) - position} trailing bytes after PEX entries")
        return Pex(tuple(peers))

    def _manifest_request(self, body: memoryview) -> Message:
        return ManifestRequest()

    def _manifest(self, body: memoryview) -> Message:
        return ManifestResponse(bytes(body))


_REJECT_REASONS = frozenset(int(reason) for reason in RejectReason)

_DECODERS = {
    MessageType.KEEPALIVE: Decoder._keepalive,
    MessageType.HANDSHAKE: Decoder._handshake,
    MessageType.BITFIELD: Decoder._bitfield,
    MessageType.HAVE: Decoder._have,
    MessageType.REQUEST: Decoder._request,
    MessageType.BLOCK: Decoder._block,
    MessageType.CANCEL: Decoder._cancel,
    MessageType.REJECT: Decoder._reject,
    MessageType.HASH_REQUEST: Decoder._hash_request,
    MessageType.HASH_RESPONSE: Decoder._hash_response,
    MessageType.PEX: Decoder._pex,
    MessageType.START: Decoder._start,
    MessageType.MANIFEST_REQUEST: Decoder._manifest_request,
    MessageType.MANIFEST: Decoder._manifest,
}
