"""The peer wire decoder: a byte stream from one peer → `swarm.net.wire` messages, sans-I/O.

What a peer can make us hold is bounded by what it has sent, never by what a header declares:

* every frame is judged from its 5-byte header (type known, length within `Limits` and the type's bounds)
  before its body is kept;
* a BLOCK, the one frame large enough to matter (up to 4 MiB), is judged from its 13-byte header by the
  receiver's `admit_block(block, offset, length)` — in practice "does it answer a REQUEST we sent, at most as
  long" (`swarm.net.transport.ExpectedReplies`). An unwanted BLOCK is a `ProtocolError` before a byte of its payload
  is held; only an admitted one gets its payload buffer, whose size we chose when we asked;
* any other long frame (a layer, a bitfield, a manifest) is collected as it arrives: receiving in place, the
  buffer grows read by read (doubling, so the copying stays linear), and shrinks back once the frame is done.

So `allocated` stays within twice what is buffered plus one read, plus an admitted BLOCK's payload.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from ipaddress import IPv4Address, IPv6Address
from typing import NoReturn

from swarm.content.merkle import HASH_SIZE, MAX_PROOF_LENGTH
from swarm.errors import ProtocolError
from swarm.net.wire import (
    _ALL_TRANSPORTS,
    _BLOCK_POSITION,
    _CLAIM_ENTRY,
    _CLAIMS_HEAD,
    _FRAME,
    _HANDSHAKE,
    _HASH_RESPONSE,
    _NO_ADDRESS,
    _ONE_TRANSPORT,
    _PUNCH_PEER_HEAD,
    _PUNCH_REQUEST_HEAD,
    _REACH_REQUEST,
    _REACH_RESULT,
    _REJECT,
    _SPAN,
    _U16,
    _U32,
    BLOCK_HEADER_SIZE,
    MAX_CLAIM_SIZE,
    MAX_CLAIMS_PER_ANSWER,
    NONCE_SIZE,
    Bitfield,
    Block,
    Cancel,
    ClaimEntry,
    ClaimsRequest,
    ClaimsResponse,
    Handshake,
    HashRequest,
    HashResponse,
    Have,
    KeepAlive,
    Limits,
    ManifestRequest,
    ManifestResponse,
    Message,
    MessageType,
    Pex,
    PexPeer,
    PunchPeer,
    PunchRequest,
    PunchStatus,
    ReachProof,
    ReachRequest,
    ReachResult,
    ReachStatus,
    Reject,
    RejectReason,
    Request,
    Start,
    Transport,
)
from swarm.trust.claims import MAX_VALIDATOR_BYTES, ManifestClaim

__all__ = ["AdmitBlock", "Decoder"]

# (block, offset, payload length) of a BLOCK whose header has just arrived → whether to receive its payload.
AdmitBlock = Callable[[int, int, int], bool]

_SCRATCH_READ = 64 * 1024  # bytes asked for per read when no BLOCK payload is expected


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
        MessageType.CLAIMS_REQUEST: (HASH_SIZE, HASH_SIZE),
        MessageType.CLAIMS: (
            _CLAIMS_HEAD.size,
            _CLAIMS_HEAD.size + MAX_CLAIMS_PER_ANSWER * (_CLAIM_ENTRY.size + MAX_VALIDATOR_BYTES),
        ),
        MessageType.REACH_REQUEST: (_REACH_REQUEST.size, _REACH_REQUEST.size),
        MessageType.REACH_PROOF: (NONCE_SIZE, NONCE_SIZE),
        MessageType.REACH_RESULT: (_REACH_RESULT.size, _REACH_RESULT.size),
        MessageType.PUNCH_REQUEST: (_PUNCH_REQUEST_HEAD.size + 4 + _U16.size,
                                    _PUNCH_REQUEST_HEAD.size + 16 + _U16.size),
        MessageType.PUNCH_PEER: (_PUNCH_PEER_HEAD.size + 4 + _U16.size, _PUNCH_PEER_HEAD.size + 16 + _U16.size),
    }


class Decoder:
    """Turns a byte stream from one peer into messages. Feed it whatever the transport delivered.

    Two ways in. `feed(data)`: copies are kept to one per payload byte: complete frames decode straight from
    the caller's buffer, and an incomplete BLOCK collects its payload as parts (views of the caller's `bytes`,
    which cannot change, or copies of anything mutable) joined once when the frame completes. Only other
    partial frames, which are small, go through the pending buffer. `get_buffer()` / `buffer_updated(n)`
    (TCP): the transport reads into the decoder's buffers, BLOCK payloads in place (see `get_buffer`).

    `admit_block` (module docstring) is asked once per BLOCK frame; None admits every BLOCK (the codec alone).
    """

    def __init__(self, limits: Limits | None = None, *, admit_block: AdmitBlock | None = None) -> None:
        self.limits = limits or Limits()
        self._admit_block = admit_block
        self._bounds = _body_bounds(self.limits)
        self._pending = bytearray()
        self._block_position = (0, 0)
        self._block_parts: list[bytes | memoryview] = []
        self._block_remaining = 0  # payload bytes still due for an incomplete BLOCK; 0 when none
        self._block_held = 0
        # Only the message is kept: an exception's traceback would pin the caller's buffer.
        self._error: str | None = None
        # `get_buffer` / `buffer_updated` state: unparsed bytes are _scratch[_begin:_end]; a BLOCK whose
        # payload is being received in place is _direct (filled up to _direct_filled).
        self._scratch = bytearray()
        self._begin = self._end = 0
        self._direct: bytearray | None = None
        self._direct_filled = 0
        self._after_block = False

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        direct = BLOCK_HEADER_SIZE + self._direct_filled if self._direct is not None else 0
        return len(self._pending) + self._block_held + self._end - self._begin + direct

    @property
    def allocated(self) -> int:
        """Bytes of buffer memory held: `buffered` plus room reserved for what has not arrived yet."""
        direct = len(self._direct) if self._direct is not None else 0
        return len(self._pending) + self._block_held + len(self._scratch) + direct

    # -- receiving into the decoder's own buffers (a transport that can read into memory it is given) ----------

    def get_buffer(self) -> memoryview:
        """Where the next received bytes should go; then call `buffer_updated(nbytes)`. Don't mix with `feed`.

        Each BLOCK payload is received straight into the `bytearray` it is delivered in (`Block.data`), so the
        kernel's copy is the only one: no per-read `bytes`, no joining of parts. Everything else lands in a
        scratch buffer. Right after a BLOCK only one BLOCK header is asked for, so that the next payload is not
        read into scratch (and copied again) but found by its header and received in place too.
        """
        if self._error is not None:  # dead: `buffer_updated` will say so; nothing more is held for this peer
            return memoryview(bytearray(1))
        if self._direct is not None:
            return memoryview(self._direct)[self._direct_filled :]
        pending = self._end - self._begin
        kind = self._scratch[self._begin + _U32.size] if pending >= _FRAME.size else None
        if pending < BLOCK_HEADER_SIZE and (kind == MessageType.BLOCK or kind is None and self._after_block):
            want = BLOCK_HEADER_SIZE - pending
        else:  # a long control frame (layer, bitfield) grows the buffer read by read, never by its header alone
            want = _SCRATCH_READ
        if len(self._scratch) - self._end < want:
            if self._begin:
                self._scratch[:pending] = self._scratch[self._begin : self._end]
                self._begin, self._end = 0, pending
            if len(self._scratch) - self._end < want:  # a new one: the last view handed out may still be alive
                # Doubling keeps the copying of a long frame linear, holding at most twice what has arrived.
                grown = bytearray(max(self._end + want, 2 * self._end))
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
            with memoryview(self._scratch) as scratch, scratch[self._begin : self._end] as view:
                self._begin += self._decode_frames(view, False, messages, in_place=True)
        except ProtocolError as exc:
            self._die(str(exc))
        pending = self._end - self._begin
        if len(self._scratch) > 2 * max(pending, _SCRATCH_READ):  # a long frame is done: give its room back
            self._scratch = bytearray(self._scratch[self._begin : self._end])
            self._begin, self._end = 0, pending
        elif not pending:
            self._begin = self._end = 0
        if messages or self._direct is not None:
            self._after_block = self._direct is not None or type(messages[-1]) is Block
        return messages

    def _die(self, error: str) -> NoReturn:
        self._error = error
        self._pending = bytearray()
        self._block_parts = []
        self._scratch = bytearray()
        self._begin = self._end = 0
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
            if kind == MessageType.BLOCK:
                if end - position < BLOCK_HEADER_SIZE:
                    break
                self._admit(view, position, length)  # once per frame: past here it completes or is started
            if end - position < _U32.size + length:
                if kind == MessageType.BLOCK:
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

    def _admit(self, view: memoryview, position: int, length: int) -> None:
        if self._admit_block is None:
            return
        block, offset = _BLOCK_POSITION.unpack_from(view, position + _FRAME.size)
        payload = length - 1 - _BLOCK_POSITION.size
        if not self._admit_block(block, offset, payload):
            raise ProtocolError(f"BLOCK {block} at {offset} of {payload} bytes answers no request of ours")

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

    def _claims_request(self, body: memoryview) -> Message:
        return ClaimsRequest(bytes(body))

    def _claims(self, body: memoryview) -> Message:
        key, count = _CLAIMS_HEAD.unpack_from(body)
        if count > MAX_CLAIMS_PER_ANSWER:
            raise ProtocolError(f"CLAIMS of {count} claims exceeds the {MAX_CLAIMS_PER_ANSWER} limit")
        position = _CLAIMS_HEAD.size
        entries = []
        for _ in range(count):
            if position + _CLAIM_ENTRY.size > len(body):
                raise ProtocolError("CLAIMS truncated")
            root, size, block_size, age_ms, ttl, length = _CLAIM_ENTRY.unpack_from(body, position)
            position += _CLAIM_ENTRY.size
            if size > MAX_CLAIM_SIZE:
                raise ProtocolError(f"claim of size {size} beyond {MAX_CLAIM_SIZE}")
            if ttl == 0:
                raise ProtocolError("claim with no time left to live")
            if not 1 <= length <= MAX_VALIDATOR_BYTES:
                raise ProtocolError(f"claim validator of {length} bytes outside 1..{MAX_VALIDATOR_BYTES}")
            if position + length > len(body):
                raise ProtocolError("CLAIMS truncated")
            validator = bytes(body[position : position + length])
            position += length
            entries.append(ClaimEntry(ManifestClaim(root, size, block_size, validator), age_ms, ttl))
        if position != len(body):
            raise ProtocolError(f"{len(body) - position} trailing bytes after CLAIMS entries")
        return ClaimsResponse(key, tuple(entries))

    def _reach_request(self, body: memoryview) -> Message:
        port, flags, nonce = _REACH_REQUEST.unpack(body)
        if port == 0:
            raise ProtocolError("REACH_REQUEST for port 0")
        if not flags or flags & ~_ALL_TRANSPORTS:
            raise ProtocolError(f"REACH_REQUEST with transport flags {flags:#04x}")
        return ReachRequest(port, Transport(flags), nonce)

    def _reach_proof(self, body: memoryview) -> Message:
        return ReachProof(bytes(body))

    def _reach_result(self, body: memoryview) -> Message:
        nonce, flag, status = _REACH_RESULT.unpack(body)
        if flag not in _ONE_TRANSPORT:
            raise ProtocolError(f"REACH_RESULT with transport flags {flag:#04x}: one transport, please")
        if status not in _REACH_STATUSES:
            raise ProtocolError(f"unknown REACH_RESULT status {status}")
        return ReachResult(nonce, Transport(flag), ReachStatus(status))

    def _punch_request(self, body: memoryview) -> Message:
        nonce, flags, family = _PUNCH_REQUEST_HEAD.unpack_from(body)
        ip, port = _address(body, _PUNCH_REQUEST_HEAD.size, family, "PUNCH_REQUEST")
        if flags:
            raise ProtocolError(f"PUNCH_REQUEST with flags {flags:#04x}: none are defined")
        if port == 0:
            raise ProtocolError("PUNCH_REQUEST for port 0")
        return PunchRequest(nonce, ip, port)

    def _punch_peer(self, body: memoryview) -> Message:
        nonce, status, family = _PUNCH_PEER_HEAD.unpack_from(body)
        ip, port = _address(body, _PUNCH_PEER_HEAD.size, family, "PUNCH_PEER")
        if status not in _PUNCH_STATUSES:
            raise ProtocolError(f"unknown PUNCH_PEER status {status}")
        if status == PunchStatus.PEER:
            if port == 0:
                raise ProtocolError("PUNCH_PEER for port 0")
        elif port or ip != _NO_ADDRESS:
            raise ProtocolError(f"PUNCH_PEER of status {status} names an address")
        return PunchPeer(nonce, PunchStatus(status), ip, port)


def _address(body: memoryview, start: int, family: int, what: str) -> tuple[IPv4Address | IPv6Address, int]:
    """The address of `family` and the u16 port after it at `start`, which end the body."""
    size = {4: 4, 6: 16}.get(family)
    if size is None:
        raise ProtocolError(f"{what} with address family {family}")
    if len(body) != start + size + _U16.size:
        raise ProtocolError(f"{what} of {len(body)} bytes for an IPv{family} address")
    packed = bytes(body[start : start + size])
    (port,) = _U16.unpack_from(body, start + size)
    return (IPv4Address(packed) if family == 4 else IPv6Address(packed)), port


_REJECT_REASONS = frozenset(int(reason) for reason in RejectReason)
_PUNCH_STATUSES = frozenset(int(status) for status in PunchStatus)
_REACH_STATUSES = frozenset(int(status) for status in ReachStatus)

_DECODERS: dict[int, Callable[[Decoder, memoryview], Message]] = {  # by the frame's kind byte
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
    MessageType.CLAIMS_REQUEST: Decoder._claims_request,
    MessageType.CLAIMS: Decoder._claims,
    MessageType.REACH_REQUEST: Decoder._reach_request,
    MessageType.REACH_PROOF: Decoder._reach_proof,
    MessageType.REACH_RESULT: Decoder._reach_result,
    MessageType.PUNCH_REQUEST: Decoder._punch_request,
    MessageType.PUNCH_PEER: Decoder._punch_peer,
}
