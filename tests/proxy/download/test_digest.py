"""RFC 9530 Repr-Digest: a swarmed body that disagrees with the origin's digest is never completed as valid."""

from __future__ import annotations

import base64
import dataclasses
import hashlib

import pytest

from proxy.download import actions as act
from proxy.download.core import DownloadCore
from proxy.origin_head import repr_digest
from swarm.content.manifest import build_manifest

from .download_vectors import BAD, BLOCK, CONTENT, NO_EARLY, SIZE, V1, Found, head


def field(algorithm: str, data: bytes) -> str:
    digest = hashlib.new(algorithm.replace("-", ""), data).digest()
    return f"{algorithm}=:{base64.b64encode(digest).decode()}:"


SHA256 = hashlib.sha256(b"x").digest()
SHA512 = hashlib.sha512(b"x").digest()


@pytest.mark.parametrize("value, expected", [
    (field("sha-256", b"x"), ("sha-256", SHA256)),
    (field("sha-512", b"x"), ("sha-512", SHA512)),
    (f"{field('sha-512', b'x')}, {field('sha-256', b'x')}", ("sha-256", SHA256)),  # sha-256 preferred
    (f"{field('sha-256', b'x')};note=1", ("sha-256", SHA256)),  # parameters are ignored
    (f"md5=:{base64.b64encode(b'0' * 16).decode()}:, {field('sha-512', b'x')}", ("sha-512", SHA512)),
    (f"md5=:{base64.b64encode(b'0' * 16).decode()}:", None),  # only algorithms we cannot check
    ("sha-256=abc", None),  # not a byte sequence
    ("sha-256=:not base64!:", None),
    (f"sha-256=:{base64.b64encode(b'short').decode()}:", None),  # the wrong length for its algorithm
    ("", None),
    (None, None),
], ids=["sha-256", "sha-512", "both", "parameters", "unknown-and-known", "unknown", "token", "bad-base64",
        "short", "empty", "absent"])
def test_which_repr_digest_is_checked(value, expected):
    assert repr_digest(value) == expected


DIGEST = ("sha-256", hashlib.sha256(CONTENT).digest())
WRONG = ("sha-256", hashlib.sha256(b"something else").digest())
BAD_MANIFEST, _ = build_manifest([BAD], SIZE, block_size=BLOCK, validator=V1, content_type="text/html")
GOOD_MANIFEST, _ = build_manifest([CONTENT], SIZE, block_size=BLOCK, validator=V1, content_type="text/html")


def blocks(data: bytes, start: int = 0):
    for offset in range(start, len(data), BLOCK):
        yield data[offset:offset + BLOCK]


def names(actions) -> list[str]:
    return [type(a).__name__ for a in actions]


def relayed(digest, body: bytes = CONTENT):
    core = DownloadCore(NO_EARLY)
    core.start(0.0)
    actions = core.origin_head(dataclasses.replace(head(), digest=digest), 0.1)
    for piece in blocks(body):
        actions += core.origin_data(piece, 0.2)
    return core, actions


def test_an_origin_body_matching_its_digest_is_shared():
    core, actions = relayed(DIGEST)
    assert core.done and names(actions)[-2:] == ["OriginComplete", "Finish"] and actions[-2].publishable


def test_an_origin_body_contradicting_its_digest_is_relayed_as_is_but_never_shared():
    core, actions = relayed(WRONG)
    # Segments it vouched for as its stream passed them are withdrawn too: the origin's digest is the authority.
    assert names(actions)[-4:] == ["Note", "WithdrawSegments", "OriginComplete", "Finish"]
    assert not actions[-2].publishable


def swarmed(manifest, digest, *, died_after: int = 0):
    """The origin sends `died_after` bytes and breaks off; the swarm (a manifest's bytes) finishes."""
    core = DownloadCore(NO_EARLY)
    core.start(0.0)
    actions = core.origin_head(dataclasses.replace(head(), digest=digest), 0.1)
    if died_after:
        actions += core.origin_data(CONTENT[:died_after], 0.2)
    actions += core.origin_end(0.3) + core.lookup_done(Found(manifest), 0.4)
    start = next(a for a in actions if isinstance(a, act.StartSwarm)).start
    source = BAD if manifest is BAD_MANIFEST else CONTENT
    for piece in blocks(source[:SIZE], start):
        actions += core.swarm_data(piece, 0.5)
    return core, actions


def test_a_swarmed_body_matching_the_digest_completes():
    core, actions = swarmed(GOOD_MANIFEST, DIGEST, died_after=BLOCK)
    assert core.done and names(actions)[-1] == "Finish" and "Cut" not in names(actions)


def test_a_swarmed_body_contradicting_the_digest_is_cut_before_its_last_byte():
    # No origin byte to compare the first block against: only the digest can tell.
    core, actions = swarmed(BAD_MANIFEST, DIGEST)
    assert names(actions)[-1] == "Cut" and actions[-1].reason.startswith("digest_mismatch")
    assert "Finish" not in names(actions)
    delivered = b"".join(a.data for a in actions if isinstance(a, act.Deliver))
    assert len(delivered) < SIZE  # the last piece never went out
    hand_over = next(a for a in actions if isinstance(a, act.HandOver))
    assert not hand_over.publishable and not hand_over.swarm_done  # nothing of it is kept or shared
    assert "RejectManifest" in names(actions)
    assert names(actions).index("WithdrawSegments") < names(actions).index("HandOver")  # nor served again


def test_a_headless_answer_is_checked_against_the_heads_digest():
    core = DownloadCore(NO_EARLY)
    core.start(0.0)
    actions = core.timer(1.0)
    actions += core.head_answered(dataclasses.replace(head(), digest=DIGEST))
    actions += core.lookup_done(Found(BAD_MANIFEST), 1.1)
    for piece in blocks(BAD):
        actions += core.swarm_data(piece, 1.2)
    assert names(actions)[-1] == "Cut" and actions[-1].reason.startswith("digest_mismatch")


def test_a_range_of_the_representation_is_not_checked():
    # A digest covers the whole representation; a 206 for part of it cannot be checked (nor is it refused).
    core = DownloadCore(NO_EARLY, range_header="bytes=0-49999")
    core.start(0.0)
    actions = core.timer(1.0)
    actions += core.head_answered(dataclasses.replace(head(), digest=DIGEST))
    actions += core.lookup_done(Found(BAD_MANIFEST), 1.1)
    for piece in blocks(BAD[:50_000]):
        actions += core.swarm_data(piece, 1.2)
    assert names(actions)[-1] == "Finish"
