"""Signed intents and the agent's ledger, as tables: who may push, replace or cancel what (pure)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from cluster.errors import BadRecord, ConfigError
from cluster.intent import CANCEL, PUSH, Intent, Ledger, SignedIntent, SigningKey, public_key

OWNER, STRANGER = SigningKey.generate(), SigningKey.generate()
TRUSTED = frozenset({OWNER.public})
NOW = 1_800_000_000.0


def intent(action: str = PUSH, *, tid: str = "t1", name: str = "model.bin", seq: int = 10,
           expires: float = NOW + 3600, **changes) -> Intent:
    base = Intent(action, tid, name, "ab" * 32, 1000, 0, "*", seq, expires)
    return dataclasses.replace(base, **changes)


# Each row: intents the ledger saw before (all accepted), the one judged now (signed by OWNER unless a SignedIntent
# is given), and the reason it is refused (a fragment) or None.
ROWS = [
    ("a first push", [], intent(), None),
    ("its pusher rewrites the same push every period", [intent()], intent(), None),
    ("a later version of the name", [intent()], intent(tid="t2", seq=11), None),
    ("rollback to an older version", [intent(tid="t2", seq=11)], intent(seq=10), "rollback"),
    ("another push under an accepted sequence", [intent()], intent(tid="t9"), "replay"),
    ("the push re-posted after its cancel", [intent(), intent(CANCEL)], intent(), "replay"),
    ("a cancel of the accepted push", [intent()], intent(CANCEL), None),
    ("a cancel of an older push", [intent(tid="t2", seq=11)], intent(CANCEL, seq=10), "older push"),
    ("a cancel naming another transfer at the same sequence", [intent()], intent(CANCEL, tid="t9"), "older push"),
    ("a cancel before the push was seen", [], intent(CANCEL), None),
    ("a push after a cancel at a higher sequence", [intent(CANCEL, seq=12)], intent(seq=11), "rollback"),
    ("an expired push", [], intent(expires=NOW - 1), "expired"),
    ("other names are other sequences", [intent(name="a.bin", seq=99)], intent(seq=1), None),
    ("an unknown action", [], intent("delete"), "unknown action"),
    ("a stranger's key", [], STRANGER.sign(intent()), "does not trust"),
]


@pytest.mark.parametrize("what, before, judged, refused", ROWS, ids=[row[0] for row in ROWS])
def test_ledger(what, before, judged, refused):
    ledger = Ledger()
    for seen in before:
        signed = OWNER.sign(seen)
        assert ledger.judge(signed, TRUSTED, NOW) is None
        ledger.accept(signed)
    signed = judged if isinstance(judged, SignedIntent) else OWNER.sign(judged)
    reason = ledger.judge(signed, TRUSTED, NOW)
    assert (reason is None) == (refused is None), reason
    if refused is not None:
        assert refused in reason


@pytest.mark.parametrize("field, value", [("tid", "t2"), ("name", "other.bin"), ("root", "cd" * 32), ("size", 1),
                                          ("priority", 100), ("hosts", "dc1/*"), ("seq", 11), ("action", CANCEL),
                                          ("expires", NOW + 7200)])
def test_every_field_is_signed(field, value):
    signed = OWNER.sign(intent())
    forged = SignedIntent(dataclasses.replace(signed.intent, **{field: value}), signed.key, signed.signature)
    assert "signature" in Ledger().judge(forged, TRUSTED, NOW)


def test_a_signature_made_with_another_key_under_the_owners_name_fails():
    theirs = STRANGER.sign(intent())
    assert "signature" in Ledger().judge(SignedIntent(theirs.intent, OWNER.public, theirs.signature), TRUSTED, NOW)


def test_the_ledger_survives_a_restart():
    ledger = Ledger()
    ledger.accept(OWNER.sign(intent(seq=11)))
    restarted = Ledger(json.loads(json.dumps(ledger.state())))
    assert "rollback" in restarted.judge(OWNER.sign(intent(seq=10)), TRUSTED, NOW)
    assert Ledger({"x": "garbage", "y": [1, 2]}).state() == {}  # a damaged file forgets, never crashes


def test_dump_and_load_round_trip():
    signed = OWNER.sign(intent())
    assert SignedIntent.load(signed.dump()) == signed
    assert Ledger().judge(SignedIntent.load(signed.dump()), TRUSTED, NOW) is None


@pytest.mark.parametrize("text", [None, "", "1", "[]", "{}", '{"intent": {}, "key": "", "signature": ""}',
                                  json.dumps({"intent": {**dataclasses.asdict(intent()), "seq": "10"}, "key": "k",
                                              "signature": "s"}),
                                  json.dumps({"intent": {**dataclasses.asdict(intent()), "seq": True}, "key": "k",
                                              "signature": "s"}),
                                  json.dumps({"intent": {**dataclasses.asdict(intent()), "extra": 1}, "key": "k",
                                              "signature": "s"}),
                                  "x" * 5000])
def test_garbage_is_a_bad_record(text):
    with pytest.raises(BadRecord):
        SignedIntent.load(text)


def test_keys_are_saved_privately_and_never_overwritten(tmp_path):
    path = tmp_path / "owner.key"
    OWNER.save(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert SigningKey.load(path).public == OWNER.public
    with pytest.raises(ConfigError, match="never overwritten"):
        STRANGER.save(path)
    (tmp_path / "bad.key").write_bytes(b"not a key")
    with pytest.raises(ConfigError, match="keygen"):
        SigningKey.load(tmp_path / "bad.key")
    with pytest.raises(ConfigError, match="cannot read"):
        SigningKey.load(tmp_path / "missing.key")


@pytest.mark.parametrize("text", ["", "abc", "swarmproxy-cluster-ed25519:!!", "swarmproxy-cluster-ed25519:AAAA"])
def test_public_keys_that_are_not_are_config_errors(text):
    with pytest.raises(ConfigError):
        public_key(text)
    assert len(public_key(OWNER.public)) == 32
