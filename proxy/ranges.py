"""Byte ranges of HTTP (RFC 9110 §14): the client's `Range` and the origin's `Content-Range`. Pure.

Only what the fallback can serve is understood: one range of bytes. Anything else (several ranges, other
units, syntax errors) is reported as None and the request is left to the origin, as a plain proxy would.
"""

from __future__ import annotations

import re

# ASCII digits only (RFC 9110), at most 19 of them: every offset fits in 63 bits, and a 5,000-digit number
# would make int() itself refuse.
_RANGE = re.compile(r"^[ \t]*bytes[ \t]*=[ \t]*(\d{0,19})[ \t]*-[ \t]*(\d{0,19})[ \t]*$", re.IGNORECASE | re.ASCII)
_CONTENT_RANGE = re.compile(r"^[ \t]*bytes[ \t]+(\d{1,19})[ \t]*-[ \t]*(\d{1,19})[ \t]*/[ \t]*(\d{1,19})[ \t]*$",
                            re.IGNORECASE | re.ASCII)


class RangeSpec:
    """One `bytes=` range as the client wrote it: `first-last`, `first-` or `-suffix`."""

    __slots__ = ("first", "last", "suffix")

    def __init__(self, first: int | None, last: int | None, suffix: int | None) -> None:
        self.first, self.last, self.suffix = first, last, suffix

    def resolve(self, size: int) -> tuple[int, int] | None:
        """`(start, end)` with end exclusive for a representation of `size` bytes; None if unsatisfiable."""
        if self.suffix is not None:
            if self.suffix == 0 or size == 0:
                return None
            return max(0, size - self.suffix), size
        assert self.first is not None
        if self.first >= size:
            return None
        last = size - 1 if self.last is None else min(self.last, size - 1)
        return self.first, last + 1

    def __repr__(self) -> str:
        return f"RangeSpec({self.first}, {self.last}, {self.suffix})"


def parse_range(value: str | None) -> RangeSpec | None:
    """A single byte range, or None for no header or anything we do not serve ourselves."""
    if value is None:
        return None
    match = _RANGE.match(value)
    if not match:
        return None
    first, last = match.group(1), match.group(2)
    if first == "" and last == "":
        return None
    if first == "":
        return RangeSpec(None, None, int(last))
    if last != "" and int(last) < int(first):
        return None
    return RangeSpec(int(first), int(last) if last else None, None)


def parse_content_range(value: str | None) -> tuple[int, int, int] | None:
    """`bytes a-b/N` -> (a, b + 1, N); None unless well-formed with a known complete length."""
    if value is None:
        return None
    match = _CONTENT_RANGE.match(value)
    if not match:
        return None
    first, last, size = (int(g) for g in match.groups())
    if not first <= last < size:
        return None
    return first, last + 1, size


def content_range(start: int, end: int, size: int) -> str:
    return f"bytes {start}-{end - 1}/{size}"
