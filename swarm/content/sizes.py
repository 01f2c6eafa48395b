"""Sizes, rates and block sizes as people write them: on a command line, in a config file or the environment.

    size        65536, 64k, 64K, 64Ki, 64KiB, 1.5M, 4Mi, 10G, 10Gi, 1T: k, M, G and T are powers of 1024, with or
                without the i and a trailing B. Decimal SI is not accepted for a size: it counts memory, disk and
                blocks, which are binary, and `64k` must be a block size. Write ten million bytes as 10000000. A
                fraction of a byte is dropped (0.5 is 0 bytes).
    rate        160000, 160k, 1.25M, 100Ki, 160k/s: bytes per second. k, M, G and T are powers of 1000 here, Ki,
                Mi, Gi and Ti powers of 1024: link speeds are quoted in SI, and so is the switch rule's R (Pack's
                160 000 B/s, written 160k).
    block size  auto, or a size that is a power of two from MIN_BLOCK_SIZE to MAX_BLOCK_SIZE, the manifest's bounds.

Every flag that takes one parses it here (`run`'s, `manifest publish`'s, `swarm manifest`'s, `cluster agent
--disk-reserve`, the demo's, the lab's and the benches'), so `64k` means the same everywhere. This module sits in
`swarm.content` because the block-size bounds are the manifest's and the origin-side plugin may import nothing
else of ours (tests/test_layout.py). Pure: no I/O.

A text that is not one raises `BadSize`, whose message says what is wrong; as an argparse `type=`, argparse
prints that message as the error line.
"""

from __future__ import annotations

import fractions
import re

from swarm.content.manifest import MAX_BLOCK_SIZE, MIN_BLOCK_SIZE
from swarm.errors import BadSize

__all__ = ["BadSize", "parse_size", "parse_rate", "parse_block_size", "format_size"]

_TEXT = re.compile(r"([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(i?))?b?", re.IGNORECASE)
_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4}
_SIZE_EXAMPLES = "65536, 64k, 1.5Mi, 10G"
_RATE_EXAMPLES = "160000, 160k, 1.25M, 100Ki"


def _value(text: object, *, rate: bool) -> fractions.Fraction:
    """`text` as an exact non-negative number of bytes (per second with `rate`: k is 1000, `/s` may follow)."""
    kind, examples = ("rate in bytes/s", _RATE_EXAMPLES) if rate else ("size", _SIZE_EXAMPLES)
    written = str(text).strip()
    if rate and written.lower().endswith("/s"):
        written = written[:-2]
    match = _TEXT.fullmatch(written)
    if match is None or isinstance(text, bool):  # TOML's true would read as "True": not a size either way
        raise BadSize(f"{text!r} is not a {kind} (e.g. {examples})")
    sign, number, prefix, binary = match.groups()
    value = fractions.Fraction(number)
    if prefix:
        value *= (1000 if rate and not binary else 1024) ** _POWERS[prefix.lower()]
    if sign == "-" and value:
        raise BadSize(f"{text!r} must not be negative")
    return value


def parse_size(text: str | int) -> int:
    """A size in bytes: '65536', '64k' (65536), '1.5Mi', '10G' (10 * 2**30), '2 KB' (2048); BadSize if not one."""
    return int(_value(text, rate=False))


def parse_rate(text: str | int | float) -> float:
    """A rate in bytes/s: '160000', '160k' (160000), '1.25M', '100Ki' (102400), '160k/s'; BadSize if not one."""
    return float(_value(text, rate=True))


def parse_block_size(text: str | int) -> int | None:
    """'auto' -> None (the manifest's rule by file size, `choose_block_size`); else a power of two from
    MIN_BLOCK_SIZE to MAX_BLOCK_SIZE, e.g. '64k' or '1Mi'; BadSize naming those bounds if not one."""
    if str(text).strip().lower() == "auto":
        return None
    wrong = BadSize(f"block size {text!r} is not auto or a power of two from {format_size(MIN_BLOCK_SIZE)} to "
                    f"{format_size(MAX_BLOCK_SIZE)} (e.g. 64Ki, 1Mi)")
    try:
        value = _value(text, rate=False)
    except BadSize:
        raise wrong from None
    whole = value.numerator
    if value.denominator != 1 or not MIN_BLOCK_SIZE <= whole <= MAX_BLOCK_SIZE or whole & (whole - 1):
        raise wrong
    return whole


def format_size(count: int) -> str:
    """`count` bytes as the largest whole binary unit: 16384 -> '16Ki', 4194304 -> '4Mi', 1000 -> '1000'."""
    for power, unit in ((4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        if count and count % 1024**power == 0:
            return f"{count // 1024**power}{unit}"
    return str(count)
