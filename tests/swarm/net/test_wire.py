"""Wire codec: round trips, rejects, limits, chunking, and fuzzing (the decoder raises only ProtocolError)."""

import hashlib
import struct
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarm.errors import PeerError, ProtocolError
from swarm.net import wire
from swarm.net.decoder import Decoder
from swarm.net.transport import message_size
from swarm.net.wire import (
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
    MessageType,
    Pex,
    PexPeer,
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

H1, H2 = b"\x11" * 32, b"\x22" * 32
N1, N2 = b"\x5a" * 16, bytes(range(16))  # connect-back nonces
MAX_U32 = 2**32 - 1
CLAIM = ManifestClaim(H2, 1_000_000, 262_144, b'"etag-1"')
# The largest CLAIMS there is: every field at its maximum.
LARGEST_CLAIM = ManifestClaim(H1, wire.MAX_CLAIM_SIZE, MAX_U32, b"v" * MAX_VALIDATOR_BYTES)
LARGEST_CLAIMS = ClaimsResponse(H1, (ClaimEntry(LARGEST_CLAIM, MAX_U32, MAX_U32),) * wire.MAX_CLAIMS_PER_ANSWER)
PEERS = (
    PexPeer(IPv4Address("192.0.2.1"), 6881, Transport.TCP),
    PexPeer(IPv6Address("2001:db8::1"), 443, Transport.QUIC),
    PexPeer(IPv4Address("127.0.0.1"), 65535, Transport.TCP | Transport.QUIC),
)

EXAMPLES = [
    KeepAlive(),
    Handshake(wire.PROTOCOL_VERSION, H1, H2),
    Handshake(0xFFFF, H2, H1),
    Bitfield(0, b""),
    Bitfield.from_blocks(13, [0, 7, 8, 12]),
    Bitfield.from_blocks(16, range(16)),
    Have(0),
    Have(MAX_U32),
    Request(1, 16384, 16384),
    Block(3, 0, b"payload"),
    Block(MAX_U32, MAX_U32, bytes(range(256)) * 64),
    Cancel(1, 16384, 16384),
    Reject(2, 0, 1, RejectReason.NOT_FOUND),
    Reject(2, 0, 1, RejectReason.SHUTTING_DOWN),
    HashRequest(0, 512),
    HashResponse(0, 4, (H1, H2, H1), (H2,)),
    HashResponse(8, 1, (H1,)),
    Pex(()),
    Pex(PEERS),
    Start(42),
    ManifestRequest(),
    ManifestResponse(b"\x01manifest bytes"),
    ClaimsRequest(H1),
    ClaimsResponse(H1),
    ClaimsResponse(H1, (ClaimEntry(CLAIM, 0, 1),)),
    ClaimsResponse(H2, (ClaimEntry(ManifestClaim(bytes(32), 0, 0, b"v"), 30, 120), ClaimEntry(CLAIM, 5, 86_400))),
    LARGEST_CLAIMS,
    ReachRequest(1, Transport.TCP, N1),
    ReachRequest(65535, Transport.TCP | Transport.QUIC, N2),
    ReachProof(wire.reach_proof(N1)),
    ReachResult(N1, Transport.TCP, ReachStatus.CONNECTED),
    ReachResult(N2, Transport.QUIC, ReachStatus.NOT_ATTEMPTED),
    wire.PunchRequest(N1, IPv4Address("55.55.102.2"), 40001),
    wire.PunchRequest(N2, IPv6Address("2001:db8::2"), 65535),
    wire.PunchPeer(N1, wire.PunchStatus.PEER, IPv4Address("55.55.101.2"), 40000),
    wire.PunchPeer(N2, wire.PunchStatus.PEER, IPv6Address("2001:db8::1"), 1),
    wire.PunchPeer(N1, wire.PunchStatus.UNKNOWN_PEER),
    wire.PunchPeer(N2, wire.PunchStatus.NOT_ATTEMPTED),
]

# Byte for byte, as the table in swarm/net/wire.py lays them out.
VECTORS = {
    "claims-request": (ClaimsRequest(H1), struct.pack(">IB", 33, 14) + H1),
    "claims-none": (ClaimsResponse(H2), struct.pack(">IB", 34, 15) + H2 + b"\x00"),
    "claims-one": (
        ClaimsResponse(H1, (ClaimEntry(CLAIM, 7, 3600),)),
        struct.pack(">IB", 1 + 33 + 53 + 8, 15) + H1 + b"\x01"
        + H2 + struct.pack(">QIIIB", 1_000_000, 262_144, 7, 3600, 8) + b'"etag-1"',
    ),
    "reach-request": (ReachRequest(5000, Transport.TCP | Transport.QUIC, N2),
                      struct.pack(">IBHB", 20, 16, 5000, 3) + N2),
    "reach-proof": (ReachProof(wire.reach_proof(N2)),
                    struct.pack(">IB", 17, 17) + hashlib.sha256(b"swarmproxy-reach-v1" + N2).digest()[:16]),
    "reach-result": (ReachResult(N2, Transport.QUIC, ReachStatus.TIMED_OUT),
                     struct.pack(">IB", 19, 18) + N2 + b"\x02\x03"),
    "punch-request": (wire.PunchRequest(N1, IPv4Address("55.55.101.2"), 40000),
                      struct.pack(">IB", 25, 19) + N1 + b"\x00\x04" + bytes((55, 55, 101, 2))
                      + struct.pack(">H", 40000)),
    "punch-peer-v4": (wire.PunchPeer(N1, wire.PunchStatus.PEER, IPv4Address("55.55.101.2"), 40000),
                      struct.pack(">IB", 25, 20) + N1 + b"\x01\x04" + bytes((55, 55, 101, 2))
                      + struct.pack(">H", 40000)),
    "punch-peer-refused": (wire.PunchPeer(N2, wire.PunchStatus.UNKNOWN_PEER),
                           struct.pack(">IB", 25, 20) + N2 + b"\x02\x04" + bytes(6)),
}


@pytest.mark.parametrize("message,encoded", VECTORS.values(), ids=VECTORS.keys())
def test_vectors(message, encoded):
    assert wire.encode(message) == encoded
    assert Decoder().feed(encoded) == [message]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message):
    frame = wire.encode(message)
    assert struct.unpack_from(">I", frame)[0] == len(frame) - 4
    assert Decoder().feed(frame) == [message]


def test_every_message_type_has_an_example():
    kinds = {bytes(wire.encode(message))[4] for message in EXAMPLES}
    assert kinds == {int(kind) for kind in MessageType}


def test_decoded_enums_are_enums():
    (reject,) = Decoder().feed(Reject(1, 2, 3, RejectReason.BUSY).encode())
    assert reject.reason is RejectReason.BUSY
    (pex,) = Decoder().feed(Pex(PEERS).encode())
    assert isinstance(pex.peers[0].transports, Transport)


def test_bitfield_membership():
    bitfield = Bitfield.from_blocks(13, [0, 7, 8, 12])
    assert bitfield.bits == bytes([0b10000001, 0b10001000])
    assert [block for block in range(-1, 15) if block in bitfield] == [0, 7, 8, 12]
    assert list(bitfield.blocks()) == [0, 7, 8, 12]


def test_block_header_then_payload_equals_whole_frame():
    payload = bytes(range(200)) * 100
    header = wire.encode_block_header(5, 16384, len(payload))
    assert len(header) == wire.BLOCK_HEADER_SIZE
    assert header + payload == Block(5, 16384, payload).encode()
    decoder = Decoder()
    assert decoder.feed(header) == []
    assert decoder.feed(memoryview(payload)) == [Block(5, 16384, payload)]


def test_many_frames_in_one_feed_and_a_partial_tail():
    stream = b"".join(message.encode() for message in EXAMPLES)
    tail = Have(9).encode()
    decoder = Decoder()
    assert decoder.feed(stream + tail[:3]) == EXAMPLES
    assert decoder.buffered == 3
    assert decoder.feed(tail[3:]) == [Have(9)]
    assert decoder.buffered == 0


def test_a_caller_buffer_is_not_pinned_after_feed():
    buffer = bytearray(Have(1).encode() + Have(2).encode()[:2])
    Decoder().feed(buffer)
    buffer.extend(b"more")  # would raise BufferError if the decoder still exported the buffer
    header_error = bytearray(struct.pack(">IB", 1, 200))
    with pytest.raises(ProtocolError):
        Decoder().feed(header_error)
    header_error.clear()
    body_error = bytearray(frame(10, struct.pack(">H", 1) + pex_entry(5, b"\x01\x02\x03\x04")))
    with pytest.raises(ProtocolError) as caught:
        Decoder().feed(body_error)
    body_error.clear()  # even while the exception (and its traceback) is still alive
    assert caught.value


def test_block_payload_from_a_mutable_buffer_is_copied():
    payload = bytes(range(256)) * 300
    encoded = Block(1, 2, payload).encode()
    decoder = Decoder()
    reused = bytearray(encoded[:1000])
    assert decoder.feed(reused) == []
    assert decoder.buffered == 1000
    reused[:] = bytes(len(reused))  # a transport reusing its read buffer
    reused = bytearray(encoded[1000:])
    (block,) = decoder.feed(reused)
    reused[:] = bytes(len(reused))
    assert block == Block(1, 2, payload)


def test_block_split_across_feeds_then_more_frames_in_the_last_chunk():
    payload = b"p" * 50_000
    stream = Block(7, 0, payload).encode() + Have(3).encode() + Block(8, 0, b"q" * 20).encode()
    decoder = Decoder()
    assert decoder.feed(stream[:20]) == []
    assert decoder.buffered == 20
    assert decoder.feed(stream[20:30_000]) == []
    assert decoder.feed(stream[30_000:-5]) == [Block(7, 0, payload), Have(3)]
    assert decoder.feed(stream[-5:]) == [Block(8, 0, b"q" * 20)]
    assert decoder.buffered == 0


def frame(kind: int, body: bytes = b"") -> bytes:
    return struct.pack(">IB", 1 + len(body), kind) + body


def pex_entry(family: int, address: bytes, port: int = 80, flags: int = 1) -> bytes:
    return bytes([family]) + address + struct.pack(">H", port) + bytes([flags])


def claim_entry(size: int = 10, ttl: int = 60, validator: bytes = b"v") -> bytes:
    return H2 + struct.pack(">QIIIB", size, 16384, 0, ttl, len(validator)) + validator


REJECTED = {
    "zero-length": struct.pack(">I", 0),
    "unknown-type": frame(len(MessageType)),
    "unknown-type-255": frame(255),
    "keepalive-with-body": frame(0, b"x"),
    "handshake-short": frame(1, b"\x00\x01" + H1 + H2[:31]),
    "handshake-long": frame(1, b"\x00\x01" + H1 + H2 + b"x"),
    "bitfield-too-few-bytes": frame(2, struct.pack(">I", 9) + b"\xff"),
    "bitfield-too-many-bytes": frame(2, struct.pack(">I", 8) + b"\xff\x00"),
    "bitfield-spare-bit": frame(2, struct.pack(">I", 9) + b"\xff\x40"),
    "bitfield-over-limit": frame(2, struct.pack(">I", wire.Limits().max_bitfield_bits + 1) + b"\x00"),
    "have-short": frame(3, b"\x00\x00\x01"),
    "request-zero-length": frame(4, struct.pack(">III", 0, 0, 0)),
    "request-too-long": frame(4, struct.pack(">III", 0, 0, 4 * 1024 * 1024 + 1)),
    "cancel-long-body": frame(6, struct.pack(">IIII", 0, 0, 1, 0)),
    "block-no-data": frame(5, struct.pack(">II", 0, 0)),
    "reject-reason-0": frame(7, struct.pack(">IIIB", 0, 0, 1, 0)),
    "reject-reason-99": frame(7, struct.pack(">IIIB", 0, 0, 1, 99)),
    "reject-zero-length": frame(7, struct.pack(">IIIB", 0, 0, 0, 1)),
    "hash-request-zero": frame(8, struct.pack(">II", 0, 0)),
    "hash-request-over-limit": frame(8, struct.pack(">II", 0, wire.Limits().max_hashes + 1)),
    "hash-response-partial-hash": frame(9, struct.pack(">IIB", 0, 1, 0) + H1 + b"x"),
    "hash-response-no-hashes": frame(9, struct.pack(">IIB", 0, 1, 1) + H1),
    "hash-response-more-than-count": frame(9, struct.pack(">IIB", 0, 1, 0) + H1 + H2),
    "hash-response-proof-too-long": frame(9, struct.pack(">IIB", 0, 1, 65) + H1 * 66),
    "pex-count-over-limit": frame(10, struct.pack(">H", 201)),
    "pex-truncated": frame(10, struct.pack(">H", 2) + pex_entry(4, b"\x01\x02\x03\x04")),
    "pex-entry-cut": frame(10, struct.pack(">H", 1) + pex_entry(6, b"\x01\x02\x03\x04")),
    "pex-trailing": frame(10, struct.pack(">H", 1) + pex_entry(4, b"\x01\x02\x03\x04") + b"\x00"),
    "pex-family-5": frame(10, struct.pack(">H", 1) + pex_entry(5, b"\x01\x02\x03\x04")),
    "pex-port-0": frame(10, struct.pack(">H", 1) + pex_entry(4, b"\x01\x02\x03\x04", port=0)),
    "pex-no-transport": frame(10, struct.pack(">H", 1) + pex_entry(4, b"\x01\x02\x03\x04", flags=0)),
    "pex-unknown-transport": frame(10, struct.pack(">H", 1) + pex_entry(4, b"\x01\x02\x03\x04", flags=4)),
    "start-long": frame(11, b"\x00" * 5),
    "manifest-request-with-body": frame(12, b"\x00"),
    "manifest-empty": frame(13),
    "manifest-oversized": frame(13, b"m" * (wire.Limits().max_manifest_size + 1)),
    "claims-request-short": frame(14, H1[:31]),
    "claims-request-long": frame(14, H1 + b"x"),
    "claims-no-count": frame(15, H1),
    "claims-count-over-limit": frame(15, H1 + bytes([wire.MAX_CLAIMS_PER_ANSWER + 1])),
    "claims-count-without-entries": frame(15, H1 + b"\x01"),
    "claims-entry-cut": frame(15, H1 + b"\x01" + claim_entry()[:40]),
    "claims-validator-cut": frame(15, H1 + b"\x01" + claim_entry()[:-1]),
    "claims-trailing": frame(15, H1 + b"\x01" + claim_entry() + b"\x00"),
    "claims-fewer-than-count": frame(15, H1 + b"\x02" + claim_entry()),
    "claims-ttl-0": frame(15, H1 + b"\x01" + claim_entry(ttl=0)),
    "claims-validator-empty": frame(15, H1 + b"\x01" + claim_entry(validator=b"")),
    "claims-validator-too-long": frame(15, H1 + b"\x01" + claim_entry(validator=b"v" * (MAX_VALIDATOR_BYTES + 1))),
    "claims-size-2**63": frame(15, H1 + b"\x01" + claim_entry(size=2**63)),
    "claims-size-u64-max": frame(15, H1 + b"\x01" + claim_entry(size=2**64 - 1)),
    "reach-request-short": frame(16, struct.pack(">HB", 5000, 1) + N1[:15]),
    "reach-request-long": frame(16, struct.pack(">HB", 5000, 1) + N1 + b"x"),
    "reach-request-port-0": frame(16, struct.pack(">HB", 0, 1) + N1),
    "reach-request-no-transport": frame(16, struct.pack(">HB", 5000, 0) + N1),
    "reach-request-unknown-transport": frame(16, struct.pack(">HB", 5000, 4) + N1),
    "reach-proof-short": frame(17, N1[:15]),
    "reach-proof-long": frame(17, N1 + b"x"),
    "reach-result-short": frame(18, N1 + b"\x01"),
    "reach-result-long": frame(18, N1 + b"\x01\x01\x00"),
    "reach-result-two-transports": frame(18, N1 + b"\x03\x01"),
    "reach-result-no-transport": frame(18, N1 + b"\x00\x01"),
    "reach-result-status-0": frame(18, N1 + b"\x01\x00"),
    "reach-result-status-5": frame(18, N1 + b"\x01\x05"),
    "punch-request-short": frame(19, N1 + b"\x00\x04" + bytes((1, 2, 3, 4, 0))),
    "punch-request-v4-long": frame(19, N1 + b"\x00\x04" + bytes((1, 2, 3, 4, 0, 80, 0))),
    "punch-request-v6-body-for-v4": frame(19, N1 + b"\x00\x04" + bytes(16) + b"\x00\x50"),
    "punch-request-family-5": frame(19, N1 + b"\x00\x05" + bytes((1, 2, 3, 4, 0, 80))),
    "punch-request-port-0": frame(19, N1 + b"\x00\x04" + bytes((1, 2, 3, 4, 0, 0))),
    "punch-request-flags": frame(19, N1 + b"\x01\x04" + bytes((1, 2, 3, 4, 0, 80))),
    "punch-request-old-node-id-form": frame(19, H1 + N1),
    "punch-peer-short": frame(20, N1 + b"\x01\x04" + bytes(5)),
    "punch-peer-v4-long": frame(20, N1 + b"\x01\x04" + bytes(7)),
    "punch-peer-v6-short": frame(20, N1 + b"\x01\x06" + bytes(17)),
    "punch-peer-v6-long": frame(20, N1 + b"\x01\x06" + bytes(19)),
    "punch-peer-v6-body-for-v4": frame(20, N1 + b"\x01\x04" + bytes(18)),
    "punch-peer-family-5": frame(20, N1 + b"\x01\x05" + bytes(6)),
    "punch-peer-status-0": frame(20, N1 + b"\x00\x04" + bytes((1, 2, 3, 4, 0, 80))),
    "punch-peer-status-4": frame(20, N1 + b"\x04\x04" + bytes(6)),
    "punch-peer-port-0": frame(20, N1 + b"\x01\x04" + bytes((1, 2, 3, 4, 0, 0))),
    "punch-peer-refused-with-port": frame(20, N1 + b"\x02\x04" + bytes((0, 0, 0, 0, 0, 80))),
    "punch-peer-refused-with-address": frame(20, N1 + b"\x03\x04" + bytes((1, 2, 3, 4, 0, 0))),
    "punch-peer-refused-v6": frame(20, N1 + b"\x02\x06" + bytes(18)),
    "good-then-bad": Have(1).encode() + frame(3, b"\x00"),
}


@pytest.mark.parametrize("data", REJECTED.values(), ids=REJECTED.keys())
def test_rejects(data):
    decoder = Decoder()
    with pytest.raises(ProtocolError) as caught:
        decoder.feed(data)
    assert isinstance(caught.value, PeerError)
    # Dead afterwards, whatever comes next.
    with pytest.raises(ProtocolError):
        decoder.feed(KeepAlive().encode())
    with pytest.raises(ProtocolError):
        decoder.feed(b"")


OVERSIZED_HEADERS = {
    "frame-over-max": struct.pack(">I", Limits().max_frame_size + 1),
    "frame-u32-max": struct.pack(">I", MAX_U32),
    "block-over-payload": struct.pack(">IB", 1 + 8 + Limits().max_block_payload + 1, MessageType.BLOCK),
    "have-declares-1000": struct.pack(">IB", 1000, MessageType.HAVE),
    "keepalive-declares-2": struct.pack(">IB", 2, MessageType.KEEPALIVE),
    "manifest-over-limit": struct.pack(">IB", 2 + Limits().max_manifest_size, MessageType.MANIFEST),
    "pex-over-limit": struct.pack(">IB", 1 + 2 + 20 * 200 + 1, MessageType.PEX),
    "hashes-over-limit": struct.pack(">IB", 1 + 9 + 32 * (Limits().max_hashes + 65), MessageType.HASH_RESPONSE),
    "claims-request-declares-34": struct.pack(">IB", 1 + 33, MessageType.CLAIMS_REQUEST),
    "claims-over-the-largest": struct.pack(">IB", len(LARGEST_CLAIMS.encode()) - 4 + 1, MessageType.CLAIMS),
    "reach-request-declares-21": struct.pack(">IB", 1 + 20, MessageType.REACH_REQUEST),
    "reach-proof-declares-17": struct.pack(">IB", 1 + 17, MessageType.REACH_PROOF),
    "reach-result-declares-19": struct.pack(">IB", 1 + 19, MessageType.REACH_RESULT),
    "punch-request-declares-37": struct.pack(">IB", 1 + 37, MessageType.PUNCH_REQUEST),
    "punch-peer-declares-37": struct.pack(">IB", 1 + 37, MessageType.PUNCH_PEER),
}


@pytest.mark.parametrize("header", OVERSIZED_HEADERS.values(), ids=OVERSIZED_HEADERS.keys())
def test_oversized_lengths_are_rejected_from_the_header_alone(header):
    decoder = Decoder()
    with pytest.raises(ProtocolError):
        decoder.feed(header)
    assert decoder.buffered == 0


def test_header_bytes_one_at_a_time_reject_at_the_first_decisive_byte():
    header = struct.pack(">I", MAX_U32)
    decoder = Decoder()
    for byte in header[:-1]:
        assert decoder.feed(bytes([byte])) == []
    with pytest.raises(ProtocolError):
        decoder.feed(header[-1:])


def test_configured_limits_apply():
    small = Limits(max_frame_size=64, max_block_payload=16, max_bitfield_bits=8, max_hashes=1, max_pex_peers=1)
    for message in [Block(0, 0, b"x" * 17), Request(0, 0, 17), Bitfield(9, b"\x00\x00"), HashRequest(0, 2),
                    Pex((PexPeer(ip_address("::1"), 1, Transport.TCP),) * 2), Bitfield.from_blocks(8 * 64, [])]:
        with pytest.raises(ProtocolError):
            Decoder(small).feed(message.encode())
    for message in [Block(0, 0, b"x" * 16), Request(0, 0, 16), Bitfield(8, b"\x01"), HashRequest(0, 1)]:
        assert Decoder(small).feed(message.encode()) == [message]


BAD_ENCODINGS = [
    Handshake(1, H1[:31], H2),
    Handshake(1 << 16, H1, H2),
    Have(-1),
    Have(2**32),
    Request(0, 0, 0),
    Cancel(0, 0, 0),
    Reject(0, 0, 1, 0),
    Block(0, 0, b""),
    Bitfield(9, b"\x00"),
    Bitfield(9, b"\x00\x01"),
    HashRequest(0, 0),
    HashResponse(0, 1, ()),
    HashResponse(0, 1, (H1, H2)),
    HashResponse(0, 1, (H1[:5],)),
    HashResponse(0, 1, (H1,), (H2,) * 65),
    Pex((PexPeer(ip_address("10.0.0.1"), 0, Transport.TCP),)),
    Pex((PexPeer(ip_address("10.0.0.1"), 1, Transport(0)),)),
    Pex((PexPeer(ip_address("10.0.0.1"), 1, Transport.TCP),) * 65536),
    ManifestResponse(b""),
    ClaimsRequest(H1[:31]),
    ClaimsResponse(H1[:31]),
    ClaimsResponse(H1, (ClaimEntry(CLAIM, 0, 1),) * (wire.MAX_CLAIMS_PER_ANSWER + 1)),
    ClaimsResponse(H1, (ClaimEntry(CLAIM, 0, 0),)),
    ClaimsResponse(H1, (ClaimEntry(CLAIM, -1, 1),)),
    ClaimsResponse(H1, (ClaimEntry(CLAIM, 2**32, 1),)),
    ClaimsResponse(H1, (ClaimEntry(ManifestClaim(H1[:31], 1, 1, b"v"), 0, 1),)),
    ClaimsResponse(H1, (ClaimEntry(ManifestClaim(H1, 2**63, 1, b"v"), 0, 1),)),
    ClaimsResponse(H1, (ClaimEntry(ManifestClaim(H1, 1, 2**32, b"v"), 0, 1),)),
    ClaimsResponse(H1, (ClaimEntry(ManifestClaim(H1, 1, 1, b""), 0, 1),)),
    ClaimsResponse(H1, (ClaimEntry(ManifestClaim(H1, 1, 1, b"v" * (MAX_VALIDATOR_BYTES + 1)), 0, 1),)),
    ReachRequest(0, Transport.TCP, N1),
    ReachRequest(65536, Transport.TCP, N1),
    ReachRequest(5000, Transport(0), N1),
    ReachRequest(5000, Transport.TCP, N1[:15]),
    ReachProof(N1 + b"x"),
    ReachResult(N1, Transport.TCP | Transport.QUIC, ReachStatus.CONNECTED),
    ReachResult(N1, Transport(0), ReachStatus.CONNECTED),
    ReachResult(N1, Transport.TCP, 0),
    ReachResult(N1[:8], Transport.TCP, ReachStatus.REFUSED),
    wire.PunchRequest(N1, IPv4Address("1.2.3.4"), 0),
    wire.PunchRequest(N1, IPv4Address("1.2.3.4"), 65536),
    wire.PunchRequest(N1[:15], IPv4Address("1.2.3.4"), 80),
    wire.PunchPeer(N1, wire.PunchStatus.PEER, IPv4Address("1.2.3.4"), 0),
    wire.PunchPeer(N1, wire.PunchStatus.PEER, IPv4Address("1.2.3.4"), 65536),
    wire.PunchPeer(N1, wire.PunchStatus.UNKNOWN_PEER, IPv4Address("1.2.3.4"), 0),
    wire.PunchPeer(N1, wire.PunchStatus.NOT_ATTEMPTED, IPv4Address(0), 80),
    wire.PunchPeer(N1, 0, IPv4Address("1.2.3.4"), 80),
    wire.PunchPeer(N1[:15], wire.PunchStatus.PEER, IPv4Address("1.2.3.4"), 80),
]


def test_a_punch_introduction_is_no_larger_than_its_request():
    """No amplification (wire docstring, "Hole punching"): each PUNCH_PEER, to either side, is no larger than the
    PUNCH_REQUEST that caused it; the coordinator introduces only two sessions of the request's address family."""
    for ip in (IPv4Address("55.55.1.2"), IPv6Address("2001:db8::1")):
        request = wire.PunchRequest(N1, ip, 1).encode()
        assert len(wire.PunchPeer(N1, wire.PunchStatus.PEER, ip, 65535).encode()) <= len(request)
        assert len(wire.PunchPeer(N1, wire.PunchStatus.NOT_ATTEMPTED).encode()) <= len(request)


@pytest.mark.parametrize("message", BAD_ENCODINGS, ids=lambda m: type(m).__name__)
def test_encoding_a_field_the_format_cannot_carry_is_a_local_value_error(message):
    with pytest.raises(ValueError):
        wire.encode(message)


def test_the_largest_claims_fits_the_decoder_bound_exactly():
    """The CLAIMS bound is computed from the maxima: the largest answer passes, one byte more is refused (above)."""
    frame_bytes = LARGEST_CLAIMS.encode()
    assert len(frame_bytes) == 4 + 1 + 33 + wire.MAX_CLAIMS_PER_ANSWER * (53 + MAX_VALIDATOR_BYTES)
    assert Decoder().feed(frame_bytes) == [LARGEST_CLAIMS]


def test_a_received_claims_is_charged_its_size():
    """A stranger can send CLAIMS to a served connection: the receive bound counts its bytes, not a small message's."""
    assert message_size(LARGEST_CLAIMS) == len(LARGEST_CLAIMS.encode())
    assert message_size(ClaimsResponse(H1)) == len(ClaimsResponse(H1).encode())


def test_a_connect_back_sends_no_more_than_its_request_and_none_of_its_bytes():
    """No amplification, and nothing of the requester's choosing but the port (wire docstring, "Connect-backs"): the
    connect-back (HANDSHAKE, REACH_PROOF) is no longer than what asked for it (HANDSHAKE, REACH_REQUEST), each answer
    is shorter than the request, and the proof is a hash of the nonce, not the nonce."""
    handshake = Handshake(wire.PROTOCOL_VERSION, H1, wire.QUERY_ROOT).encode()
    request = ReachRequest(5000, Transport.TCP | Transport.QUIC, N1).encode()
    proof = ReachProof(wire.reach_proof(N1)).encode()
    assert len(handshake + proof) <= len(handshake + request)
    assert len(ReachResult(N1, Transport.TCP, ReachStatus.CONNECTED).encode()) < len(request)
    assert N1 not in proof and wire.reach_proof(N1) != wire.reach_proof(N2)
    with pytest.raises(ValueError):
        wire.reach_proof(N1[:15])


def test_bitfield_from_blocks_rejects_out_of_range_blocks():
    with pytest.raises(ValueError):
        Bitfield.from_blocks(8, [8])


# --- fuzzing --------------------------------------------------------------------------------------------

u32 = st.integers(0, MAX_U32)
length = st.integers(1, 4096)
hash_ = st.binary(min_size=32, max_size=32)
nonce = st.binary(min_size=16, max_size=16)
peer = st.builds(
    PexPeer,
    ip=st.ip_addresses(),
    port=st.integers(1, 65535),
    transports=st.sampled_from([Transport.TCP, Transport.QUIC, Transport.TCP | Transport.QUIC]),
)


@st.composite
def bitfields(draw):
    count = draw(st.integers(0, 100))
    return Bitfield.from_blocks(count, draw(st.sets(st.integers(0, count - 1))) if count else ())


@st.composite
def hash_responses(draw):
    hashes = draw(st.lists(hash_, min_size=1, max_size=8))
    count = draw(st.integers(len(hashes), 16))
    return HashResponse(draw(u32), count, tuple(hashes), tuple(draw(st.lists(hash_, max_size=4))))


claim = st.builds(
    ManifestClaim,
    content_root=hash_,
    size=st.integers(0, wire.MAX_CLAIM_SIZE),
    block_size=u32,
    validator=st.binary(min_size=1, max_size=MAX_VALIDATOR_BYTES),
)
claim_entries = st.builds(ClaimEntry, claim, u32, st.integers(1, MAX_U32))

messages = st.one_of(
    st.just(KeepAlive()),
    st.builds(Handshake, st.integers(0, 0xFFFF), hash_, hash_),
    bitfields(),
    st.builds(Have, u32),
    st.builds(Request, u32, u32, length),
    st.builds(Block, u32, u32, st.binary(min_size=1, max_size=3000)),
    st.builds(Cancel, u32, u32, length),
    st.builds(Reject, u32, u32, length, st.sampled_from(RejectReason)),
    st.builds(HashRequest, u32, st.integers(1, 512)),
    hash_responses(),
    st.builds(Pex, st.lists(peer, max_size=5).map(tuple)),
    st.builds(Start, u32),
    st.just(ManifestRequest()),
    st.builds(ManifestResponse, st.binary(min_size=1, max_size=300)),
    st.builds(ClaimsRequest, hash_),
    st.builds(ClaimsResponse, hash_, st.lists(claim_entries, max_size=wire.MAX_CLAIMS_PER_ANSWER).map(tuple)),
    st.builds(ReachRequest, st.integers(1, 65535), st.sampled_from([Transport.TCP, Transport.QUIC,
                                                                   Transport.TCP | Transport.QUIC]), nonce),
    st.builds(ReachProof, nonce),
    st.builds(ReachResult, nonce, st.sampled_from([Transport.TCP, Transport.QUIC]), st.sampled_from(ReachStatus)),
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode_all(decoder: Decoder, pieces) -> list:
    out = []
    for piece in pieces:
        out.extend(decoder.feed(piece))
    return out


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_random_bytes_raise_only_protocol_error(pieces):
    decoder = Decoder(Limits(max_frame_size=4096))
    try:
        decode_all(decoder, pieces)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            decoder.feed(b"\x00")


@st.composite
def framed_noise(draw):
    """Plausible frames (valid header, random body) so the fuzzer reaches every body parser."""
    kind = draw(st.integers(0, len(MessageType)))  # and the first unknown type
    body = draw(st.binary(max_size=80))
    return struct.pack(">IB", 1 + len(body), kind) + body


@FUZZ
@given(st.lists(framed_noise(), min_size=1, max_size=6))
def test_random_bodies_raise_only_protocol_error(frames):
    try:
        messages = Decoder().feed(b"".join(frames))
    except ProtocolError:
        return
    # Whatever is accepted re-encodes to the very same bytes: there is one encoding per message.
    assert b"".join(message.encode() for message in messages) == b"".join(frames)


@FUZZ
@given(st.builds(ClaimsResponse, hash_, st.lists(claim_entries, max_size=wire.MAX_CLAIMS_PER_ANSWER).map(tuple)),
       st.data())
def test_mutated_claims_decode_to_what_they_encode_or_raise_protocol_error(claims, data):
    """The CLAIMS parser, reached with its counts and lengths cut, grown and flipped (the frame length kept
    consistent, so the body parser and not the header check is what answers)."""
    body = bytearray(claims.encode()[5:])
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(body)))
        action = data.draw(st.sampled_from(["flip", "cut", "grow"]))
        if action == "flip" and position < len(body):
            body[position] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del body[position:position + data.draw(st.integers(1, 60))]
        else:
            body[position:position] = data.draw(st.binary(min_size=1, max_size=60))
    frame_bytes = frame(MessageType.CLAIMS, bytes(body))
    try:
        decoded = Decoder().feed(frame_bytes)
    except ProtocolError:
        return
    assert [message.encode() for message in decoded] == [frame_bytes]


@FUZZ
@given(st.lists(messages, min_size=1, max_size=6), st.data())
def test_mutated_streams_raise_only_protocol_error(batch, data):
    stream = bytearray(b"".join(message.encode() for message in batch))
    for _ in range(data.draw(st.integers(1, 3))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    try:
        Decoder().feed(bytes(stream))
    except ProtocolError:
        pass


@FUZZ
@given(st.lists(messages, min_size=1, max_size=8), st.data())
def test_any_chunking_decodes_the_same_messages(batch, data):
    stream = b"".join(message.encode() for message in batch)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=20))))
    bounds = [0, *cuts, len(stream)]
    pieces = [stream[a:b] for a, b in zip(bounds, bounds[1:])]
    assert decode_all(Decoder(), pieces) == batch


@settings(max_examples=40, deadline=None)
@given(st.lists(messages, min_size=1, max_size=4))
def test_one_byte_chunking(batch):
    stream = b"".join(message.encode() for message in batch)
    decoder = Decoder()
    out = decode_all(decoder, (stream[i : i + 1] for i in range(len(stream))))
    assert out == batch
    assert decoder.buffered == 0


@FUZZ
@given(messages, st.data())
def test_truncated_frame_yields_nothing_until_completed(message, data):
    frame_bytes = message.encode()
    cut = data.draw(st.integers(0, len(frame_bytes) - 1))
    decoder = Decoder()
    assert decoder.feed(frame_bytes[:cut]) == []
    assert decoder.buffered == cut
    assert decoder.feed(frame_bytes[cut:]) == [message]


def _receive_in_place(decoder: Decoder, stream: bytes, reads: list[int]) -> list:
    """Feed `stream` as a socket would through get_buffer/buffer_updated, `reads` bounding each read."""
    messages, position, turn = [], 0, 0
    while position < len(stream):
        buffer = decoder.get_buffer()
        n = min(len(buffer), reads[turn % len(reads)], len(stream) - position)
        turn += 1
        buffer[:n] = stream[position:position + n]
        position += n
        messages += decoder.buffer_updated(n)
    return messages


@pytest.mark.parametrize("reads", [[1], [7], [13, 5000], [65536], [1 << 22], [3, 100_000, 17]])
def test_receiving_in_place_decodes_like_feed(reads):
    payload = bytes(range(256)) * 600  # larger than the scratch read: received in place
    messages = [*EXAMPLES, Block(1, 0, payload), Have(3), Block(2, 0, payload[:20]), Block(4, 0, payload),
                ManifestResponse(b"m" * 3000), HashResponse(0, 9000, tuple(bytes([i % 251]) * 32 for i in range(9000)))]
    stream = b"".join(message.encode() for message in messages)
    decoder = Decoder()
    assert _receive_in_place(decoder, stream, reads) == messages
    assert decoder.buffered == 0


def test_receiving_in_place_hands_blocks_over_in_the_buffer_they_were_read_into():
    payload = bytes(range(256)) * 1024
    decoder = Decoder()
    frame = Block(7, 0, payload).encode()
    assert _receive_in_place(decoder, frame[:5000], [5000]) == []
    buffer = decoder.get_buffer()
    assert len(buffer) == len(frame) - 5000  # the rest of the payload, in place
    assert decoder.buffered == 5000
    buffer[:] = frame[5000:]
    (block,) = decoder.buffer_updated(len(buffer))
    assert block == Block(7, 0, payload) and type(block.data) is bytearray
    assert len(decoder.get_buffer()) == wire.BLOCK_HEADER_SIZE  # after a BLOCK: just the next header


def test_receiving_in_place_rejects_like_feed_and_stays_dead():
    decoder = Decoder()
    with pytest.raises(ProtocolError):
        _receive_in_place(decoder, struct.pack(">IB", 5, 99) + bytes(4), [100])
    with pytest.raises(ProtocolError):
        decoder.buffer_updated(0)
    oversized = Decoder(Limits(max_frame_size=100))
    with pytest.raises(ProtocolError):
        _receive_in_place(oversized, struct.pack(">IB", 1000, MessageType.MANIFEST), [100])
