"""Byte ranges (RFC 9110 §14): `Range` parsing and resolving, `Content-Range` parsing and formatting. Table-driven,
plus properties over arbitrary text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.ranges import RangeSpec, content_range, parse_content_range, parse_range

# (Range value, (first, last, suffix) or None when the header is not served by us)
PARSE_CASES = [
    pytest.param("bytes=0-0", (0, 0, None), id="first-byte"),
    pytest.param("bytes=0-499", (0, 499, None), id="first-500"),
    pytest.param("bytes=500-999", (500, 999, None), id="middle"),
    pytest.param("bytes=007-009", (7, 9, None), id="leading-zeros"),
    pytest.param("bytes=9500-", (9500, None, None), id="open-ended"),
    pytest.param("bytes=0-", (0, None, None), id="open-from-zero"),
    pytest.param("bytes=-500", (None, None, 500), id="suffix"),
    pytest.param("bytes=-0", (None, None, 0), id="zero-suffix"),
    pytest.param("bytes=5-5", (5, 5, None), id="one-byte"),
    pytest.param("bytes=5-4", None, id="last-before-first"),
    pytest.param("bytes=10-9", None, id="last-before-first-two-digits"),
    pytest.param("bytes=0-1,3-4", None, id="two-ranges"),
    pytest.param("bytes=0-1, 3-4", None, id="two-ranges-space"),
    pytest.param("bytes=0-1,", None, id="trailing-comma"),
    pytest.param("bytes=-", None, id="dash-only"),
    pytest.param("bytes=", None, id="no-range"),
    pytest.param("bytes", None, id="unit-only"),
    pytest.param("bytes 0-1", None, id="no-equals"),
    pytest.param("bytes=0-1-2", None, id="three-numbers"),
    pytest.param("bytes=--1", None, id="double-dash"),
    pytest.param("bytes=+1-2", None, id="plus-sign"),
    pytest.param("bytes=1.5-2", None, id="fraction"),
    pytest.param("bytes=0x10-", None, id="hex"),
    pytest.param("bytes=a-b", None, id="letters"),
    pytest.param("items=0-1", None, id="other-unit"),
    pytest.param("byte=0-1", None, id="singular-unit"),
    pytest.param("bytesx=0-1", None, id="unit-prefix"),
    pytest.param("BYTES=0-1", (0, 1, None), id="upper-case-unit"),
    pytest.param("Bytes=-3", (None, None, 3), id="mixed-case-unit"),
    pytest.param("  bytes=1-2  ", (1, 2, None), id="outer-whitespace"),
    pytest.param("bytes = 1 - 2", (1, 2, None), id="inner-whitespace"),
    pytest.param("\tbytes=-7\t", (None, None, 7), id="tabs"),
    pytest.param("", None, id="empty"),
    pytest.param("   ", None, id="blank"),
    pytest.param(None, None, id="absent"),
    pytest.param("garbage", None, id="garbage"),
    pytest.param("bytes=0-1\x00", None, id="nul"),
    pytest.param("bytes=" + "9" * 30 + "-", None, id="30-digit-first"),  # beyond any 63-bit size
    pytest.param("bytes=\u0660-\u0663", None, id="arabic-indic-digits"),
    pytest.param("bytes=\uff11-\uff12", None, id="fullwidth-digits"),
    pytest.param("bytes\u3000=0-1", None, id="ideographic-space"),
    pytest.param("bytes=0-" + "9" * 5000, None, id="5000-digit-last"),
    pytest.param("bytes=-" + "9" * 5000, None, id="5000-digit-suffix"),
]


def _fields(spec: RangeSpec | None):
    return None if spec is None else (spec.first, spec.last, spec.suffix)


@pytest.mark.parametrize("value,expected", PARSE_CASES)
def test_parse_range(value, expected):
    assert _fields(parse_range(value)) == expected


# (Range value, {size: resolve(size)}) — end exclusive, None = unsatisfiable (416)
RESOLVE_CASES = [
    pytest.param("bytes=0-0", {0: None, 1: (0, 1), 10: (0, 1)}, id="first-byte"),
    pytest.param("bytes=0-4", {0: None, 1: (0, 1), 5: (0, 5), 10: (0, 5)}, id="first-five"),
    pytest.param("bytes=3-6", {0: None, 1: None, 3: None, 4: (3, 4), 7: (3, 7), 10: (3, 7)}, id="middle"),
    pytest.param("bytes=9-9", {9: None, 10: (9, 10), 11: (9, 10)}, id="last-byte-exactly"),
    pytest.param("bytes=5-", {0: None, 1: None, 5: None, 6: (5, 6), 10: (5, 10)}, id="open-ended"),
    pytest.param("bytes=0-", {0: None, 1: (0, 1), 10: (0, 10)}, id="open-from-zero"),
    pytest.param("bytes=2-100", {0: None, 2: None, 3: (2, 3), 10: (2, 10), 101: (2, 101), 200: (2, 101)},
                 id="last-beyond-size-clamped"),
    pytest.param("bytes=10-20", {10: None, 11: (10, 11)}, id="first-equals-size"),
    pytest.param("bytes=100-200", {0: None, 1: None, 10: None, 100: None, 150: (100, 150)},
                 id="first-beyond-size"),
    pytest.param("bytes=-3", {0: None, 1: (0, 1), 3: (0, 3), 10: (7, 10)}, id="suffix"),
    pytest.param("bytes=-1", {0: None, 1: (0, 1), 10: (9, 10)}, id="suffix-one"),
    pytest.param("bytes=-100", {0: None, 1: (0, 1), 10: (0, 10), 100: (0, 100), 101: (1, 101)},
                 id="suffix-larger-than-size"),
    pytest.param("bytes=-0", {0: None, 1: None, 10: None}, id="zero-suffix"),
]


@pytest.mark.parametrize("value,by_size", RESOLVE_CASES)
def test_resolve(value, by_size):
    spec = parse_range(value)
    assert spec is not None
    assert {size: spec.resolve(size) for size in by_size} == by_size


def test_resolve_is_repeatable_and_spec_has_a_repr():
    spec = parse_range("bytes=2-5")
    assert spec.resolve(4) == spec.resolve(4) == (2, 4)
    assert spec.resolve(100) == (2, 6)  # resolving for one size does not change the spec
    assert repr(spec) == "RangeSpec(2, 5, None)"


# (Content-Range value, (start, end exclusive, size) or None)
CONTENT_RANGE_CASES = [
    pytest.param("bytes 0-1/10", (0, 2, 10), id="first-two"),
    pytest.param("bytes 0-9/10", (0, 10, 10), id="whole"),
    pytest.param("bytes 9-9/10", (9, 10, 10), id="last-byte"),
    pytest.param("bytes 0-0/1", (0, 1, 1), id="size-one"),
    pytest.param("BYTES 2-3/4", (2, 4, 4), id="upper-case"),
    pytest.param("  bytes  2 - 3 / 4  ", (2, 4, 4), id="whitespace"),
    pytest.param("bytes 5-4/10", None, id="last-before-first"),
    pytest.param("bytes 0-10/10", None, id="last-equals-size"),
    pytest.param("bytes 3-20/10", None, id="last-beyond-size"),
    pytest.param("bytes 0-0/0", None, id="size-zero"),
    pytest.param("bytes */10", None, id="unsatisfied"),
    pytest.param("bytes 0-1/*", None, id="unknown-size"),
    pytest.param("bytes 0-1", None, id="no-size"),
    pytest.param("bytes=0-1/10", None, id="equals-sign"),
    pytest.param("bytes0-1/10", None, id="no-space"),
    pytest.param("items 0-1/10", None, id="other-unit"),
    pytest.param("bytes -1/10", None, id="no-first"),
    pytest.param("bytes 0-1/10, 2-3/10", None, id="two-ranges"),
    pytest.param("bytes 0-1/-10", None, id="negative-size"),
    pytest.param("garbage", None, id="garbage"),
    pytest.param("", None, id="empty"),
    pytest.param(None, None, id="absent"),
    pytest.param("bytes 0-1/" + "9" * 5000, None, id="5000-digit-size"),
]


@pytest.mark.parametrize("value,expected", CONTENT_RANGE_CASES)
def test_parse_content_range(value, expected):
    assert parse_content_range(value) == expected


@pytest.mark.parametrize("start,end,size,text", [
    pytest.param(0, 1, 1, "bytes 0-0/1", id="one-byte"),
    pytest.param(0, 10, 10, "bytes 0-9/10", id="whole"),
    pytest.param(7, 10, 10, "bytes 7-9/10", id="tail"),
    pytest.param(16384, 32768, 10**6, "bytes 16384-32767/1000000", id="block"),
])
def test_content_range_format(start, end, size, text):
    assert content_range(start, end, size) == text
    assert parse_content_range(text) == (start, end, size)


@st.composite
def _bounds(draw):
    size = draw(st.integers(1, 2**48))
    start = draw(st.integers(0, size - 1))
    end = draw(st.integers(start + 1, size))
    return start, end, size


@given(_bounds())
def test_content_range_round_trips(bounds):
    assert parse_content_range(content_range(*bounds)) == bounds


# Arbitrary text, plus text shaped like a Range header so that the parsing branches are reached too.
_RANGE_LIKE = st.builds(
    lambda ws1, unit, ws2, first, ws3, last, ws4: f"{ws1}{unit}{ws2}={first}{ws3}-{last}{ws4}",
    st.sampled_from(["", " ", "\t"]), st.sampled_from(["bytes", "BYTES", "Bytes", "items", "byte"]),
    st.sampled_from(["", " "]), st.one_of(st.just(""), st.integers(0, 10**12).map(str)),
    st.sampled_from(["", " "]), st.one_of(st.just(""), st.integers(0, 10**12).map(str)),
    st.sampled_from(["", " ", ",0-1", ",", "x"]),
)
_HEADER_TEXT = st.one_of(st.text(), st.text(alphabet="bytes=-0123456789 ,*/\t"), _RANGE_LIKE)


@settings(max_examples=400, deadline=None)
@given(_HEADER_TEXT, st.integers(0, 10**13))
def test_parse_range_never_raises_and_resolves_inside_the_content(value, size):
    spec = parse_range(value)
    if spec is None:
        return
    resolved = spec.resolve(size)
    if resolved is not None:
        start, end = resolved
        assert 0 <= start < end <= size
        if spec.suffix is None:
            assert start == spec.first  # a first-pos range never moves its start
        else:
            assert end == size and end - start == min(spec.suffix, size)
    else:
        # unsatisfiable only for an empty representation, a zero suffix or a first byte beyond the end
        assert size == 0 or spec.suffix == 0 or (spec.first is not None and spec.first >= size)


@settings(max_examples=300, deadline=None)
@given(_HEADER_TEXT)
def test_parse_content_range_never_raises(value):
    parsed = parse_content_range(value)
    if parsed is not None:
        start, end, size = parsed
        assert 0 <= start < end <= size
