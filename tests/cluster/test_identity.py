"""cluster.identity: a sealed report opens only for the admitted agent that wrote it, at the key it was written to,
recently; every other way to produce one (another key, another owner, a moved or changed record, a replay, a
record for someone else's node id) is refused, saying why."""

from __future__ import annotations

import json
import os
import stat

import pytest

from cluster.errors import BadRecord, ConfigError
from cluster.identity import REPORT_MAX_AGE, Admission, Gate, Identity, node_of
from cluster.intent import SigningKey

OWNER, STRANGER = SigningKey.generate(), SigningKey.generate()
AGENT = Identity.issue(OWNER, "r1a1")
GHOST = Identity.issue(STRANGER, "r1a1")  # a key of its own, "admitted" by a key nobody trusts
NOW = 1_800_000_000.0
WHERE = "swarmproxy:cluster:t:abc:member:" + AGENT.node
RECORD = {"node": AGENT.node, "state": "FINISHED", "root": "ab" * 32, "name": "image.bin"}


def gate(now: float = NOW) -> Gate:
    return Gate(frozenset({OWNER.public}), clock=lambda: now)


def tampered(text: str, change) -> str:
    value = json.loads(text)
    change(value)
    return json.dumps(value)


def other_agents_admission(value: dict) -> None:
    value["admission"] = json.loads(Identity.issue(OWNER, "r1a2").seal("member", WHERE, RECORD, NOW))["admission"]


SEALED = AGENT.seal("member", WHERE, RECORD, NOW)

REFUSED = [
    pytest.param(lambda: GHOST.seal("member", WHERE, RECORD, NOW), AGENT.node, WHERE, "does not trust",
                 id="admitted-by-an-untrusted-key"),
    pytest.param(lambda: GHOST.seal("member", WHERE, RECORD, NOW), GHOST.node, WHERE, "does not trust",
                 id="a-ghost-under-its-own-id"),
    pytest.param(lambda: SEALED, "00" * 32, WHERE, "another node", id="read-as-another-node"),
    pytest.param(lambda: SEALED, AGENT.node, WHERE + "x", "does not verify", id="moved-to-another-key"),
    pytest.param(lambda: tampered(SEALED, lambda v: v["record"].update(state="PENDING")), AGENT.node, WHERE,
                 "does not verify", id="a-changed-field"),
    pytest.param(lambda: tampered(SEALED, lambda v: v.update(at=NOW + 30)), AGENT.node, WHERE, "does not verify",
                 id="a-changed-time"),
    pytest.param(lambda: tampered(SEALED, other_agents_admission), AGENT.node, WHERE, "another node",
                 id="another-agents-admission"),
    pytest.param(lambda: tampered(SEALED, lambda v: v["admission"].update(name="r9a9")), AGENT.node, WHERE,
                 "admission's signature", id="a-renamed-admission"),
    pytest.param(lambda: AGENT.seal("member", WHERE, RECORD, NOW - REPORT_MAX_AGE - 1), AGENT.node, WHERE,
                 "a replay", id="an-old-report-replayed"),
    pytest.param(lambda: AGENT.seal("member", WHERE, RECORD, NOW + REPORT_MAX_AGE + 1), AGENT.node, WHERE,
                 "a replay", id="dated-ahead"),
    pytest.param(lambda: json.dumps(RECORD), AGENT.node, WHERE, "not a sealed report", id="unsealed"),
    pytest.param(lambda: "{", AGENT.node, WHERE, "not a sealed report", id="not-json"),
    pytest.param(lambda: "x" * 70_000, AGENT.node, WHERE, "too long", id="too-long"),
    pytest.param(lambda: tampered(SEALED, lambda v: v.update(record=[1])), AGENT.node, WHERE, "wrong fields",
                 id="a-record-that-is-not-an-object"),
    pytest.param(lambda: tampered(SEALED, lambda v: v["admission"].pop("owner")), AGENT.node, WHERE,
                 "member record: admission: wrong fields", id="an-admission-without-owner"),
]


def test_a_sealed_report_opens_for_its_admitted_writer() -> None:
    assert gate().open("member", WHERE, AGENT.node, SEALED) == RECORD
    assert gate(NOW + REPORT_MAX_AGE).open("member", WHERE, AGENT.node, SEALED) == RECORD


@pytest.mark.parametrize("text,node,where,why", REFUSED)
def test_anything_else_is_refused_saying_why(text, node, where, why) -> None:
    with pytest.raises(BadRecord, match=why):
        gate().open("member", where, node, text())


def test_a_record_of_another_kind_does_not_open_as_a_member_record() -> None:
    with pytest.raises(BadRecord, match="does not verify"):
        gate().open("member", WHERE, AGENT.node, AGENT.seal("agent", WHERE, RECORD, NOW))


def test_a_provider_record_needs_no_freshness_and_reads_the_same_every_time() -> None:
    first, second = (AGENT.seal("provider", "p", {"host": "10.0.0.1", "port": 1}, 0.0) for _ in range(2))
    assert first == second  # a withdrawal deletes the key only if it still holds this very text
    assert gate().open("provider", "p", AGENT.node, first, fresh=False) == {"host": "10.0.0.1", "port": 1}
    with pytest.raises(BadRecord, match="a replay"):
        gate().open("provider", "p", AGENT.node, first)


def test_the_node_id_is_the_public_key() -> None:
    assert AGENT.node == node_of(AGENT.key.public) and len(bytes.fromhex(AGENT.node)) == 32
    assert Identity.issue(OWNER, "r1a1").node != AGENT.node  # each admission is a new key


def test_an_identity_file_is_private_never_overwritten_and_reloads(tmp_path) -> None:
    path = tmp_path / "r1a1.identity"
    AGENT.save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(ConfigError, match="never overwritten"):
        Identity.issue(OWNER, "other").save(path)
    again = Identity.load(path)
    assert again.node == AGENT.node and again.admission == AGENT.admission
    assert gate().open("member", WHERE, AGENT.node, again.seal("member", WHERE, RECORD, NOW)) == RECORD


@pytest.mark.parametrize("content", ["", "{}", '{"format": "swarmproxy-cluster-identity-v1"}', "\x00" * 40])
def test_a_damaged_identity_file_is_a_clear_error(tmp_path, content) -> None:
    path = tmp_path / "bad.identity"
    path.write_text(content)
    with pytest.raises(ConfigError, match="not an agent identity"):
        Identity.load(path)
    with pytest.raises(ConfigError, match="cannot read"):
        Identity.load(tmp_path / "missing.identity")


def test_an_identity_whose_admission_names_another_key_is_refused() -> None:
    other = Identity.issue(OWNER, "r1a2")
    with pytest.raises(ConfigError, match="another key"):
        Identity(AGENT.key, other.admission)


def test_an_admission_verifies_only_under_its_owner() -> None:
    assert AGENT.admission.verify(frozenset({OWNER.public})) is None
    assert "does not trust" in AGENT.admission.verify(frozenset({STRANGER.public}))
    forged = Admission(GHOST.key.public, "r1a1", OWNER.public, GHOST.admission.signature)  # the owner's name on it
    assert "does not verify" in forged.verify(frozenset({OWNER.public}))


def test_a_gate_verifies_each_admission_once() -> None:
    calls = []
    the_gate = gate()
    real = Admission.verify

    def counted(self, trusted):
        calls.append(self.key)
        return real(self, trusted)

    Admission.verify = counted  # type: ignore[method-assign]
    try:
        for _ in range(5):
            the_gate.open("member", WHERE, AGENT.node, SEALED)
    finally:
        Admission.verify = real  # type: ignore[method-assign]
    assert calls == [AGENT.key.public]


@pytest.mark.parametrize("text", ["[" * 5000, '{"record": ' + "[" * 5000, b"\xff\xfe"])
def test_hostile_bytes_are_a_bad_record_never_a_crash(text) -> None:
    with pytest.raises(BadRecord):
        gate().open("member", WHERE, AGENT.node, text)
