"""Random secrets of at least 64 bits, in the shapes services issue them (test data, no imports of ours).

Each shape is a function of a `random.Random` that returns (token, bits): the token as it would stand in a
query string (percent-encoded where it has to be) and how many random bits went into it, counted from the
alphabet and length alone (a separator or a fixed prefix adds none). Every shape draws at least
MIN_BITS, so "a shape passes the gate" means "a 64-bit secret is announced to strangers".
`bench/attacks/privacy_gate.py` loads this file by path, so it must stay importable on its own.
"""

from __future__ import annotations

import math
import random
import string
import uuid
from urllib.parse import quote

MIN_BITS = 64

LOWER = string.ascii_lowercase
UPPER = string.ascii_uppercase
DIGITS = string.digits
HEX = "0123456789abcdef"
BASE32 = UPPER + "234567"  # RFC 4648
BASE36 = DIGITS + LOWER
BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"  # Bitcoin's: no 0, O, I, l
BASE62 = UPPER + LOWER + DIGITS
BASE64URL = BASE62 + "-_"
BASE64 = BASE62 + "+/"


def _least(alphabet: str) -> int:
    """Fewest characters of `alphabet` that hold MIN_BITS."""
    return math.ceil(MIN_BITS / math.log2(len(alphabet)))


def _draw(rng: random.Random, alphabet: str, n: int) -> tuple[str, float]:
    return "".join(rng.choice(alphabet) for _ in range(n)), n * math.log2(len(alphabet))


def _run(alphabet: str, longest: int):
    def shape(rng: random.Random) -> tuple[str, float]:
        return _draw(rng, alphabet, rng.randint(_least(alphabet), longest))
    return shape


def _groups(alphabet: str, sizes: list[tuple[int, ...]], separators: str = "-"):
    """Fixed-size groups joined by a separator: licence keys, 8-8-8 digit codes, hex words."""
    def shape(rng: random.Random) -> tuple[str, float]:
        drawn = [_draw(rng, alphabet, size) for size in rng.choice(sizes)]
        return rng.choice(separators).join(text for text, _ in drawn), sum(bits for _, bits in drawn)
    return shape


def _letter_groups(shortest: int, longest: int):
    """Random lowercase groups of random length, joined until they hold MIN_BITS: pronounceable-looking
    "word" tokens, the shape that single-word rules miss."""
    def shape(rng: random.Random) -> tuple[str, float]:
        parts, bits = [], 0.0
        while bits < MIN_BITS:
            text, more = _draw(rng, LOWER, rng.randint(shortest, longest))
            parts.append(text)
            bits += more
        return rng.choice("-_.").join(parts), bits
    return shape


def upper(rng: random.Random) -> tuple[str, float]:
    text, bits = _draw(rng, UPPER, rng.randint(14, 32))
    return text, bits


def base32_lower(rng: random.Random) -> tuple[str, float]:
    text, bits = _run(BASE32, 32)(rng)
    return text.lower(), bits


def base64_standard(rng: random.Random) -> tuple[str, float]:
    text, bits = _run(BASE64, 43)(rng)
    return quote(text, safe=""), bits  # `+` and `/` as a client sends them


def uuid4(rng: random.Random) -> tuple[str, float]:
    text = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    style = rng.randrange(3)
    return (text, text.upper(), text.replace("-", ""))[style], 122.0


def prefixed(rng: random.Random) -> tuple[str, float]:
    # GitHub, GitLab, OpenAI-style, Slack, Google OAuth, Stripe, npm: a fixed prefix, then base62
    prefix = rng.choice(["ghp_", "glpat-", "sk-", "xoxb-", "ya29.", "pk_live_", "npm_"])
    text, bits = _run(BASE62, 40)(rng)
    return prefix + text, bits


def dotted_base64url(rng: random.Random) -> tuple[str, float]:
    # two base64url parts joined by a dot (a MAC after a payload): 12 characters at least, 72 bits
    first, bits_a = _draw(rng, BASE64URL, rng.randint(6, 12))
    second, bits_b = _draw(rng, BASE64URL, rng.randint(6, 12))
    return f"{first}.{second}", bits_a + bits_b


DIGIT_GROUPS = [(8, 8, 8), (4, 4, 4, 4, 4), (5, 5, 5, 5), (6, 6, 6, 6), (7, 7, 7), (10, 10), (3,) * 7, (4,) * 6]

# The shapes of issue 35 §7 first, then others seen in the wild.
SHAPES = {
    "lowercase 14-32": _run(LOWER, 32),
    "uppercase 14-32": upper,
    "digits 20-32": _run(DIGITS, 32),
    "dashed digit groups": _groups(DIGITS, DIGIT_GROUPS, "-._ "),
    "hex 16-64": _run(HEX, 64),
    "base32 upper": _run(BASE32, 32),
    "base32 lower": base32_lower,
    "base36": _run(BASE36, 32),
    "base58": _run(BASE58, 32),
    "base64url": _run(BASE64URL, 43),
    "uuid": uuid4,
    "mixed-case alnum": _run(BASE62, 32),
    "dashed random words 3-7": _letter_groups(3, 7),
    "dashed random words 2-4": _letter_groups(2, 4),
    "hex groups": _groups(HEX, [(4, 4, 4, 4), (4,) * 5, (8, 8), (8, 8, 8)], "-:."),
    "base64 standard": base64_standard,
    "base32 key groups": _groups(BASE32, [(4,) * 4, (5,) * 4, (5,) * 5]),
    "base36 groups": _groups(BASE36, [(5, 5, 5), (6, 6, 6), (4,) * 4]),
    "prefixed base62": prefixed,
    "dotted base64url": dotted_base64url,
}


def samples(shape: str, count: int, seed: int = 35) -> list[tuple[str, float]]:
    """`count` tokens of one shape, the same ones every run (the seed mixes in the shape's name)."""
    rng = random.Random(f"{seed}:{shape}")
    return [SHAPES[shape](rng) for _ in range(count)]
