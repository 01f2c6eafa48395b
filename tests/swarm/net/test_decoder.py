"""The decoder holds what a peer sent, never what it announced (issue 19, item 2).

A 13-byte BLOCK header used to make the decoder allocate the whole payload buffer (4 MiB) before any payload came,
and a 5-byte BITFIELD header its 2 MiB; 400 such connections pinned 1.5 GiB. Now a BLOCK is admitted (or refused)
from its header by the receiver, and everything else grows as it arrives. The fuzz test holds the decoder to that
bound on arbitrary streams cut at arbitrary points, on both ways in (`feed` and in place).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarm.errors import ProtocolError
from swarm.net import wire
from swarm.net.decoder import _SCRATCH_READ, Decoder
from swarm.net.wire import Block, Have, Limits, MessageType

MiB = 1024 * 1024


def header(kind: int, body_length: int) -> bytes:
    return struct.pack(">IB", 1 + body_length, kind)


def receive_in_place(decoder: Decoder, data: bytes) -> list:
    """Put `data` into the decoder as a socket read loop would, as far as the decoder asks."""
    messages, position = [], 0
    while position < len(data):
        buffer = decoder.get_buffer()
        n = min(len(buffer), len(data) - position)
        buffer[:n] = data[position:position + n]
        position += n
        messages += decoder.buffer_updated(n)
    return messages


def test_a_block_header_alone_no_longer_allocates_its_payload():
    # The attack: 14 bytes, of which 13 announce a 4 MiB BLOCK nobody asked for.
    attack = wire.encode_block_header(0, 0, 4 * MiB) + b"x"
    decoder = Decoder(admit_block=lambda block, offset, length: False)
    with pytest.raises(ProtocolError, match="answers no request"):
        receive_in_place(decoder, attack)
    assert decoder.allocated == 0
    with pytest.raises(ProtocolError):
        Decoder(admit_block=lambda *_: False).feed(attack)


def test_an_admitted_block_gets_its_payload_buffer_and_only_the_length_admitted():
    asked: list[tuple[int, int, int]] = []

    def admit(block: int, offset: int, length: int) -> bool:
        asked.append((block, offset, length))
        return length <= 1000

    decoder = Decoder(admit_block=admit)
    assert receive_in_place(decoder, wire.encode_block_header(3, 0, 1000) + b"y" * 10) == []
    assert decoder.allocated <= 1000 + _SCRATCH_READ
    assert receive_in_place(decoder, b"y" * 990) == [Block(3, 0, b"y" * 1000)]
    with pytest.raises(ProtocolError):  # longer than admitted: refused from the header
        receive_in_place(decoder, wire.encode_block_header(4, 0, 1001))
    assert asked == [(3, 0, 1000), (4, 0, 1001)]  # once per frame


def test_a_long_control_frame_is_collected_as_it_arrives():
    bits = Limits().max_bitfield_bits
    announced = header(MessageType.BITFIELD, 4 + bits // 8)  # 2 MiB announced by 5 bytes
    decoder = Decoder()
    receive_in_place(decoder, announced)
    assert decoder.allocated <= 2 * _SCRATCH_READ  # was 2 MiB before a byte of it arrived
    frame = wire.Bitfield.from_blocks(bits, [0, bits - 1]).encode()
    received = receive_in_place(decoder, frame[len(announced):] + Have(1).encode())
    assert received == [wire.Bitfield.from_blocks(bits, [0, bits - 1]), Have(1)]
    assert decoder.allocated <= 2 * _SCRATCH_READ  # and its room is given back


# --- fuzzing ---------------------------------------------------------------------------------------------------

ADMITTED = 3000  # the longest BLOCK the fuzzed receiver admits (it "asked" for blocks of up to this length)


def admit(block: int, offset: int, length: int) -> bool:
    return block % 3 != 0 and length <= ADMITTED


@st.composite
def frames(draw):
    """A plausible frame: a valid header of any type and length, then fewer or as many body bytes."""
    kind = draw(st.sampled_from([*MessageType, len(MessageType)]))  # and the first unknown type
    limit = Limits().max_frame_size - 1
    body_length = draw(st.one_of(st.integers(0, 64), st.integers(0, limit), st.just(limit)))
    body = draw(st.binary(max_size=min(body_length, 200)))
    return header(kind, body_length) + body


@st.composite
def blocks(draw):
    """A BLOCK frame, admitted or not, whole or cut short."""
    length = draw(st.integers(1, ADMITTED + 10))
    payload = draw(st.binary(min_size=length, max_size=length))
    frame = wire.encode_block_header(draw(st.integers(0, 5)), 0, length) + payload
    return frame[:draw(st.integers(0, len(frame)))] if draw(st.booleans()) else frame


chunks = st.one_of(st.binary(max_size=40), frames(), blocks())


def fed(decoder: Decoder, piece: bytes, in_place: bool) -> None:
    if in_place:
        receive_in_place(decoder, piece)
    else:
        decoder.feed(piece)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(chunks, min_size=1, max_size=8), st.lists(st.integers(0, 1 << 16), max_size=12), st.booleans())
def test_random_streams_cut_anywhere_decode_or_raise_protocol_error_within_the_bound(parts, cuts, in_place):
    stream = b"".join(parts)
    bounds = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    decoder = Decoder(admit_block=admit)
    received = 0
    try:
        for start, end in zip(bounds, bounds[1:]):
            fed(decoder, stream[start:end], in_place)
            received += end - start
            assert decoder.buffered <= received
            # What is held grows with what arrived; only an admitted BLOCK is given its full buffer up front.
            assert decoder.allocated <= 2 * decoder.buffered + 3 * _SCRATCH_READ + ADMITTED
    except ProtocolError:
        assert decoder.allocated == 0
        with pytest.raises(ProtocolError):  # and dead from then on
            fed(decoder, Have(1).encode(), in_place)
        assert decoder.allocated == 0
