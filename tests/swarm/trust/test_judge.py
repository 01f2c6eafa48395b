"""A lookup's judgement for one download (`swarm.trust.judge`): the cascade `SwarmEngine.find` used to run between
its awaits, as vectors: the manifest to believe or why not, and the others fetching and ahead (pure)."""

from __future__ import annotations

import math

import pytest

from swarm.trust import IN_PROGRESS_ROOT, ManifestSource, parse_trust
from swarm.trust.judge import Judgement, judge

from .test_quorum import ROOT_B, SIZE, V1, V2, agreed, v

ME = b"me"
A, B, C = "192.31.196.1", "192.175.48.1", "192.52.193.1"  # three public networks with no route out of the test


def claim(pid: str, host: str, at: float, validator: bytes = V1):
    return v(pid, host, root=IN_PROGRESS_ROOT, validator=validator, at=at)


NONE = ManifestSource.NONE
ROWS = {
    # name: (policy, vouches, known size, known validator, claimed at, headless, expected)
    "nothing-found-is-no-record": (
        "quorum:2", [], SIZE, V1, math.inf, False, Judgement(None, NONE, "no-record", "", 0, 0)),
    "only-claims-say-how-many-fetch": (
        "quorum:2", [claim("a", A, 1.0), claim("b", B, 2.0)], SIZE, V1, math.inf, False,
        Judgement(None, NONE, "no-record", "2 fetching from the origin", 2, 2)),
    "a-claimer-steps-back-only-for-earlier-claims": (
        "quorum:2", [claim("a", A, 1.0), claim("b", B, 3.0)], SIZE, V1, 2.0, False,
        Judgement(None, NONE, "no-record", "2 fetching from the origin", 2, 1)),
    "its-own-listed-claim-orders-it-and-is-never-counted": (  # (its own clock said inf: the record decides)
        "quorum:2", [claim("me", C, 0.5), claim("a", A, 1.0)], SIZE, V1, math.inf, False,
        Judgement(None, NONE, "no-record", "1 fetching from the origin", 1, 0)),
    "claims-for-another-version-do-not-count": (
        "quorum:2", [claim("a", A, 1.0, validator=V2)], SIZE, V1, math.inf, False,
        Judgement(None, NONE, "no-record", "", 0, 0)),
    "no-version-known-no-count": (
        "quorum:2", [claim("a", A, 1.0)], None, None, math.inf, False, Judgement(None, NONE, "no-record", "", 0, 0)),
    "a-quorum-is-believed-and-holders-are-ahead": (
        "quorum:2", [v("a", A), v("b", B)], SIZE, V1, math.inf, False,
        Judgement(agreed(), ManifestSource.QUORUM, "ok", "", 2, 2)),
    "headless-needs-one-more-network": (
        "quorum:2", [v("a", A), v("b", B)], SIZE, V1, math.inf, True,
        Judgement(None, NONE, "below-quorum", "2 publishers", 2, 2)),
    "headless-with-three-networks": (
        "quorum:2", [v("a", A), v("b", B), v("c", C)], None, None, math.inf, True,
        Judgement(agreed(), ManifestSource.QUORUM, "ok", "", 0, 0)),
    "unattested-publishers-are-named-and-weigh-nothing": (
        "quorum:2", [v("a", A), v("x", None), v("y", None)], SIZE, V1, math.inf, False,
        Judgement(None, NONE, "below-quorum", "1 publisher, 2 unattested", 1, 1)),
    "the-origin-policy-believes-nobody": (
        "origin", [v("a", A), v("b", B)], SIZE, V1, math.inf, False,
        Judgement(None, NONE, "trust=origin", "0 publishers", 2, 2)),
    "two-quorums-for-different-bytes-is-a-conflict": (
        "quorum:2", [v("a", A), v("b", B), v("c", C, root=ROOT_B), v("d", "2620:4f:1:a::1", root=ROOT_B)], SIZE, V1,
        math.inf, False, Judgement(None, NONE, "conflict", "2 publishers", 4, 4)),  # all four hold that version
    "a-size-the-origin-contradicts-is-inconsistent": (
        "quorum:2", [v("a", A), v("b", B)], SIZE + 1, V1, math.inf, False,
        Judgement(None, NONE, "inconsistent", "0 publishers", 0, 0)),
}


@pytest.mark.parametrize("name", ROWS)
def test_judgement(name):
    policy, vouches, size, validator, claimed_at, headless, expected = ROWS[name]
    got = judge(vouches, parse_trust(policy), known_size=size, known_validator=validator, me=ME,
                claimed_at=claimed_at, headless=headless)
    assert got == expected
    assert got.rejected == (expected.reason not in ("ok", "no-record"))
