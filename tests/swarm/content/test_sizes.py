"""The one grammar of sizes, rates and block sizes: k is 1024 in a size, 1000 in a rate; errors say why."""

from __future__ import annotations

import argparse

import pytest

from swarm.content.manifest import MAX_BLOCK_SIZE, MIN_BLOCK_SIZE
from swarm.content.sizes import BadSize, format_size, parse_block_size, parse_rate, parse_size

KI, MI, GI, TI = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.mark.parametrize("text, value", [
    ("65536", 65536), (65536, 65536), ("0", 0), ("  16Ki ", 16 * KI),
    ("64k", 64 * KI), ("64K", 64 * KI), ("64Ki", 64 * KI), ("64KiB", 64 * KI), ("64kb", 64 * KI), ("2 KB", 2 * KI),
    ("4M", 4 * MI), ("4Mi", 4 * MI), ("4m", 4 * MI), ("1.5M", 3 * MI // 2), ("10G", 10 * GI), ("10Gi", 10 * GI),
    ("1GiB", GI), ("1T", TI), ("1000T", 1000 * TI), ("100B", 100), (".5k", 512), ("1.", 1),
    ("0.5", 0), ("0.1k", 102), ("-0", 0),  # a fraction of a byte is dropped
])
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text, value", [
    ("160000", 160_000), ("160k", 160_000), ("160K", 160_000), ("1.25M", 1_250_000), ("1G", 1e9),
    ("100Ki", 100 * KI), ("1Mi", MI), ("160k/s", 160_000), ("160kB/s", 160_000), ("0", 0), (64_000.0, 64_000),
    ("0.5", 0.5),
])
def test_rates(text, value):
    assert parse_rate(text) == value


@pytest.mark.parametrize("parse, text, message", [
    (parse_size, "big", "'big' is not a size (e.g. "),
    (parse_size, "-1", "'-1' must not be negative"),
    (parse_size, "-1k", "'-1k' must not be negative"),
    (parse_size, "nan", "'nan' is not a size"),
    (parse_size, "inf", "'inf' is not a size"),
    (parse_size, "1e6", "'1e6' is not a size"),
    (parse_size, "1k/s", "'1k/s' is not a size"),  # a size is no rate
    (parse_size, "10kbit", "'10kbit' is not a size"),
    (parse_size, "", "'' is not a size"),
    (parse_size, True, "True is not a size"),  # TOML's `store-size = true`
    (parse_rate, "fast", "'fast' is not a rate in bytes/s (e.g. "),
    (parse_rate, "-1", "'-1' must not be negative"),
])
def test_what_is_not_a_size_says_why(parse, text, message):
    with pytest.raises(BadSize) as caught:
        parse(text)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("text, value", [
    ("auto", None), ("AUTO", None), ("16Ki", 16 * KI), ("16k", 16 * KI), ("64k", 64 * KI), ("64Ki", 64 * KI),
    ("65536", 64 * KI), ("1M", MI), ("4M", 4 * MI), ("4Mi", 4 * MI), ("256KiB", 256 * KI),
])
def test_block_sizes(text, value):
    assert parse_block_size(text) == value


@pytest.mark.parametrize("text", ["8k", "8Ki", "48Ki", "16.5Ki", "8M", "16M", "1000", "0", "-16Ki", "big", ""])
def test_block_sizes_refused_name_the_manifest_bounds(text):
    with pytest.raises(BadSize) as caught:
        parse_block_size(text)
    bounds = f"from {format_size(MIN_BLOCK_SIZE)} to {format_size(MAX_BLOCK_SIZE)}"
    assert bounds == "from 16Ki to 4Mi"
    assert str(caught.value) == f"block size {text!r} is not auto or a power of two {bounds} (e.g. 64Ki, 1Mi)"


@pytest.mark.parametrize("count, text", [
    (0, "0"), (1000, "1000"), (16 * KI, "16Ki"), (4 * MI, "4Mi"), (3 * MI // 2, "1536Ki"), (GI, "1Gi"), (TI, "1Ti"),
    (KI + 1, "1025"),
])
def test_format_size_reads_back(count, text):
    assert format_size(count) == text
    assert parse_size(text) == count


@pytest.mark.parametrize("parse, text", [(parse_size, "zz"), (parse_rate, "fast"), (parse_block_size, "8k")])
def test_argparse_prints_the_message_itself(parse, text, capsys):
    parser = argparse.ArgumentParser(prog="t")
    parser.add_argument("--x", type=parse)
    with pytest.raises(SystemExit):
        parser.parse_args(["--x", text])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    with pytest.raises(BadSize) as caught:
        parse(text)
    assert error == f"t: error: argument --x: {caught.value}"
