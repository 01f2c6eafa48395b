"""Reading and writing only what changed (`cluster.fresh`): what a reader sends, what it makes of the answers, and
when a writer only extends a key's TTL."""

from __future__ import annotations

import hashlib

import pytest

from cluster.fresh import DIGEST_HEX, RESEAL_AFTER, UNCHANGED, ReadCache, WriteMemo, digest


def test_the_digest_is_what_the_script_compares():
    # The script compares the first DIGEST_HEX hex digits of `redis.sha1hex(value)`.
    assert digest(b"abc") == hashlib.sha1(b"abc").hexdigest()[:DIGEST_HEX]
    assert digest("abc") == digest(b"abc")


# (what is held before, per key; the replies; the values a plain MGET would have given; what is held after, by key;
# the keys asked for whole next time although held: their value changed at this read)
SETTLE = [
    ("nothing held, values read", {}, [b"a", b"b"], [b"a", b"b"], {"k0": b"a", "k1": b"b"}, set()),
    ("held and unchanged", {"k0": b"a", "k1": b"b"}, [UNCHANGED, UNCHANGED], [b"a", b"b"],
     {"k0": b"a", "k1": b"b"}, set()),
    ("one changed", {"k0": b"a", "k1": b"b"}, [UNCHANGED, b"c"], [b"a", b"c"], {"k0": b"a", "k1": b"c"}, {"k1"}),
    ("one gone", {"k0": b"a", "k1": b"b"}, [None, UNCHANGED], [None, b"b"], {"k1": b"b"}, set()),
    ("gone, never held", {}, [None, None], [None, None], {}, set()),
    # An "unchanged" for a value no longer held (dropped in between): no value, and read whole next time.
    ("unchanged but not held", {"k1": b"b"}, [UNCHANGED, UNCHANGED], [None, b"b"], {"k1": b"b"}, set()),
    # Anything else (an error in the reply, True) is no value: never a value made up.
    ("a strange reply", {"k0": b"a"}, [True, RuntimeError("x")], [None, None], {}, set()),
    ("text values", {}, ["a", "b"], ["a", "b"], {"k0": "a", "k1": "b"}, set()),
    # Sent whole (a plain MGET) and the same as held: compared again next time.
    ("whole and the same", {"k0": b"a"}, [b"a", None], [b"a", None], {"k0": b"a"}, set()),
]


@pytest.mark.parametrize("held, replies, values, after, whole", [case[1:] for case in SETTLE],
                         ids=[case[0] for case in SETTLE])
def test_settle_gives_what_mget_would(held, replies, values, after, whole):
    cache = ReadCache()
    keys = ["k0", "k1"]
    cache.settle(list(held), list(held.values()))
    assert cache.ask(keys) == [digest(held[k]) if k in held else "" for k in keys]
    assert cache.settle(keys, replies) == values
    assert cache.ask(keys) == [digest(after[k]) if k in after and k not in whole else "" for k in keys]


def test_a_value_that_keeps_changing_is_asked_whole_until_it_stands_still():
    cache = ReadCache()
    cache.settle(["k"], [b"1"])
    assert cache.ask(["k"]) == [digest(b"1")]
    cache.settle(["k"], [b"2"])  # changed: redis would hash it for nothing next time
    assert cache.ask(["k"]) == [""]
    cache.settle(["k"], [b"3"])
    assert cache.ask(["k"]) == [""]
    assert cache.settle(["k"], [b"3"]) == [b"3"]  # read whole, the same: compared again
    assert cache.ask(["k"]) == [digest(b"3")]
    assert cache.settle(["k"], [UNCHANGED]) == [b"3"]


def test_the_cache_keeps_the_most_recently_read():
    cache = ReadCache(held=2)
    cache.settle(["a", "b"], [b"1", b"2"])
    cache.settle(["a"], [UNCHANGED])  # a read again: b is now the oldest
    cache.settle(["c"], [b"3"])
    assert cache.ask(["a", "b", "c"]) == [digest(b"1"), "", digest(b"3")]


def test_settle_wants_an_answer_per_key():
    with pytest.raises(ValueError):
        ReadCache().settle(["a", "b"], [b"1"])


# (what was written and when, the record now, now, whether only the TTL is extended)
MEMO = [
    ("never written", None, "r", 100.0, False),
    ("same record, just sealed", ("r", 100.0), "r", 100.0, True),
    ("same record, sealed a while ago", ("r", 100.0), "r", 100.0 + RESEAL_AFTER - 0.01, True),
    ("same record, seal due", ("r", 100.0), "r", 100.0 + RESEAL_AFTER, False),
    ("another record", ("r", 100.0), "s", 101.0, False),
    ("the clock went back", ("r", 100.0), "r", 99.0, False),
]


@pytest.mark.parametrize("written, record, now, extend", [case[1:] for case in MEMO], ids=[case[0] for case in MEMO])
def test_a_writer_extends_only_an_unchanged_recent_record(written, record, now, extend):
    memo = WriteMemo()
    if written is not None:
        memo.wrote("k", *written, b"the value written")
    # What it extends is the value it wrote, by digest: the key is extended only while it still holds that.
    assert memo.unchanged("k", record, now) == (digest(b"the value written") if extend else None)
    if written is not None and record == written[0]:  # a value with no time in it is kept however old
        assert memo.unchanged("k", record, now + 1e6, timed=False) == digest(b"the value written")
    memo.lost("k")  # the key did not hold it: written whole next
    assert memo.unchanged("k", record, now) is None


def test_what_a_reader_wrote_is_asked_by_digest_and_a_later_write_still_comes_over():
    cache = ReadCache()
    cache.wrote("k", b"mine")
    assert cache.ask(["k"]) == [digest(b"mine")]  # never sent back whole while the key holds it
    assert cache.settle(["k"], [UNCHANGED]) == [b"mine"]
    cache.wrote("k", b"mine, newer")
    assert cache.ask(["k"]) == [digest(b"mine, newer")]
    # Another write came between (a stranger, a replica promoted with an older value): the script sends it.
    assert cache.settle(["k"], [b"theirs"]) == [b"theirs"]
    cache.wrote("k", b"again")
    assert cache.settle(["k"], [None]) == [None]  # the write was lost (redis restarted empty): no value made up
    assert cache.ask(["k"]) == [""]


def test_a_written_value_counts_against_what_the_cache_keeps():
    cache = ReadCache(held=2)
    cache.settle(["a", "b"], [b"1", b"2"])
    cache.wrote("c", b"3")
    assert cache.ask(["a", "b", "c"]) == ["", digest(b"2"), digest(b"3")]
