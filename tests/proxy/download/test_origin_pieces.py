"""The pieces a claimer's origin is read in (`proxy.download.origin_pieces`), how many at once
(`proxy.download.parking.Parking.streams`) and which answer is a piece (`proxy.origin_head.piece_refused`): table
vectors."""

from __future__ import annotations

import pytest

from proxy.download.origin_pieces import PIECE_MAX, PIECE_MIN, Pieces
from proxy.download.parking import Parking, ParkingSettings
from proxy.download.state import Representation
from proxy.origin_head import piece_refused

from .download_vectors import SIZE, V1, head

KiB = 1024


@pytest.mark.parametrize("start, end, streams, size, count, last", [
    (3000, 100_000, 4, 24_250, 4, (75_750, 100_000)),  # the lab's 100 KB after its first 3000 bytes
    (0, 100_000, 3, 33_334, 3, (66_668, 100_000)),  # equal pieces, the last one shorter
    (0, 10 * 1024 * KiB, 4, PIECE_MAX, 40, (39 * PIECE_MAX, 10 * 1024 * KiB)),  # a large file: capped pieces
    (5, 6, 4, 1, 1, (5, 6)),  # one byte left
])
def test_pieces(start, end, streams, size, count, last):
    pieces = Pieces.cut(start, end, streams)
    assert (pieces.size, pieces.count, pieces.bounds(count - 1)) == (size, count, last)
    covered = [pieces.bounds(i) for i in range(pieces.count)]
    assert covered[0][0] == start and covered[-1][1] == end
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:], strict=False))  # no gap, no overlap


@pytest.mark.parametrize("delivering, window", [(0, range(0, 4)), (37, range(37, 40)), (39, range(39, 40))])
def test_the_window_is_the_piece_delivered_and_those_right_after_it(delivering, window):
    assert Pieces.cut(0, 10 * 1024 * KiB, 4).window(delivering) == window


@pytest.mark.parametrize("start, end, streams", [(10, 10, 4), (10, 5, 4), (0, 10, 0)])
def test_nothing_to_cut_is_an_error(start, end, streams):
    with pytest.raises(ValueError):
        Pieces.cut(start, end, streams)


def test_a_piece_out_of_the_plan_is_an_error():
    with pytest.raises(IndexError):
        Pieces.cut(0, 100, 2).bounds(2)


SERVES = Representation(size=1_000_000, validator='"v1"', ranges=True)


@pytest.mark.parametrize("claimed, known, rest, ranges, streams", [
    (True, SERVES, 97_000, 4, 4),  # a claimer of the lab's file: four at once
    (False, SERVES, 97_000, 4, 1),  # not a claimer: one stream, as a browser would
    (True, Representation(size=1_000_000, validator='"v1"'), 97_000, 4, 1),  # no ranges served
    (True, Representation(size=1_000_000, ranges=True), 97_000, 4, 1),  # no validator: no If-Range
    (True, SERVES, 3 * PIECE_MIN, 4, 3),  # only as many as the rest has PIECE_MIN pieces
    (True, SERVES, 2 * PIECE_MIN - 1, 4, 1),
    (True, SERVES, 97_000, 1, 1),  # turned off
    (True, SERVES, 97_000, 8, 5),
])
def test_how_many_streams_a_download_reads_its_origin_in(claimed, known, rest, ranges, streams):
    parking = Parking(ParkingSettings(after=2, ranges=ranges), claimed=claimed)
    assert parking.streams(known, rest) == streams


@pytest.mark.parametrize("answer, why", [
    (head(206, start=40_000, end=60_000), None),  # exactly the piece
    (head(206, start=40_000, end=SIZE), None),  # more than asked: only the piece is read
    (head(200), "answered 200"),  # Range ignored, or If-Range saw another version
    (head(503), "answered 503"),
    (head(206, start=40_000, end=60_000, validator='"v2"'), "another version"),
    (head(206, start=40_000, end=60_000, size=SIZE + 1), "another version"),
    (head(206, start=40_000, end=60_000, content_encoding="gzip"), "another version"),  # another byte space
    (head(206, start=40_000, end=60_000, swarmable=False, reason="private"), "may not be shared"),
    (head(206, start=39_999, end=60_000), "answered bytes 39999"),  # not where it was asked
    (head(206, start=40_000, end=59_999), "answered bytes 40000"),  # short of the piece
])
def test_a_piece_answer_is_used_only_as_exactly_the_bytes_asked(answer, why):
    got = piece_refused(answer, SIZE, V1, None, 40_000, 60_000)
    assert (got is None) if why is None else (got is not None and why in got)
