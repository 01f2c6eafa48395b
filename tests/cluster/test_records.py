"""Records and key names: round trips, refusal of what we did not write, names safe in keys."""

import json

import pytest

from cluster.errors import BadRecord, ConfigError
from cluster.overlay import Level, Slot
from cluster.records import (
    FINISHED,
    AgentRecord,
    Keys,
    MemberRecord,
    ProviderRecord,
    TransferRecord,
    check_name,
    transfer_id,
)


@pytest.mark.parametrize("record", [
    AgentRecord("127.0.0.1", 4000, "dc1", "r1", "host-a"),
    MemberRecord("ab" * 32, FINISHED, 10, 10, received={"rack": 5}),
    ProviderRecord("10.0.0.1", 9000, 1),
    TransferRecord("0123456789abcdef", "f.bin", "bWFu", "", 3, 1.5, "cd" * 32, "dc1/*/*"),
])
def test_round_trip(record):
    assert type(record).load(record.dump()) == record


@pytest.mark.parametrize("data", [None, b"", b"not json", b"[1,2]", b'{"unknown": 1}', b'{"host": "x"}'])
def test_bad_records_are_refused(data):
    with pytest.raises(BadRecord):
        AgentRecord.load(data)


def test_layer_hashes():
    record = TransferRecord("t", "n", "", TransferRecord.pack(b"a" * 32 + b"b" * 32))
    assert record.layer_hashes() == [b"a" * 32, b"b" * 32]
    with pytest.raises(BadRecord):
        TransferRecord("t", "n", "", TransferRecord.pack(b"a" * 33)).layer_hashes()
    with pytest.raises(BadRecord):
        TransferRecord.unpack("***")


def test_progress():
    assert MemberRecord("n", verified=5, blocks=10).progress == 0.5
    assert MemberRecord("n", FINISHED).progress == 1.0
    assert MemberRecord("n").progress == 0.0


def test_priority_order():
    low, high, older = (TransferRecord("a", "", "", "", 0, 1.0), TransferRecord("b", "", "", "", 5, 2.0),
                        TransferRecord("c", "", "", "", 5, 1.0))
    assert sorted([low, high, older], key=TransferRecord.sort_key) == [older, high, low]


def test_keys():
    keys = Keys("ns")
    assert keys.slot("t", Slot(Level.RACK, "d", "r", 1)) == "ns:t:t:slot:rack:d:r:1"
    assert keys.slot("t", Slot(Level.DC, "d", "", 0)) == "ns:t:t:slot:dc:d:0"
    assert keys.provider(b"\x01" * 32, "n").startswith("ns:prov:0101")
    assert transfer_id(bytes(range(32))) == "0001020304050607"


@pytest.mark.parametrize("name, ok", [("r1", True), ("rack-a.b_c", True), ("a:b", False), ("", False),
                                      ("x" * 65, False), ("é", False)])
def test_check_name(name, ok):
    if ok:
        assert check_name("rack", name) == name
    else:
        with pytest.raises(ConfigError):
            check_name("rack", name)


def test_a_member_records_stranded_sources_are_left_out_while_empty():
    """An agent of the version before `stranded` refuses a record with a field it does not know: a record names
    stopped sources only while there are some, and reads the same as before otherwise."""
    plain = MemberRecord("ab" * 32, verified=3, blocks=10)
    assert "stranded" not in json.loads(plain.dump())
    assert MemberRecord.load(plain.dump()) == plain
    named = MemberRecord("ab" * 32, verified=3, blocks=10, stranded=("cd" * 32,))
    assert json.loads(named.dump())["stranded"] == ["cd" * 32]
    assert list(MemberRecord.load(named.dump()).stranded) == ["cd" * 32]
