"""What a lookup's vouches and claims mean for one download: the manifest to believe (and where from), or why
none, and how many independent others fetch the version from the origin. Pure: the proxy's engine awaits the
lookup and the providers; this decides.

The cascade (`proxy.engine.SwarmEngine.find`): the origin's own manifest, then this node's copy from the origin,
are taken before any lookup; what is left to judge is what a Discovery returned: nothing but claims (nobody holds
it yet), a manifest a quorum agrees on under the policy (one more network when the origin said nothing yet:
`TrustPolicy.headless`), or a miss with the reason `decide` gives. Whatever the outcome, the weight of the others
fetching this version (`working`) and of those this node steps back for (`ahead_of`) go with it: parking reads
them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .claims import IN_PROGRESS_ROOT, ManifestClaim, Vouch
from .policy import ManifestSource, TrustPolicy
from .quorum import ahead_of, decide, unattested, working


@dataclass(frozen=True)
class Judgement:
    accepted: ManifestClaim | None  # the summary to fetch by, or None
    source: ManifestSource  # QUORUM or ANY when accepted, else NONE
    reason: str  # "ok", "no-record", or `decide`'s reason
    detail: str  # for the log and the request's record: "2 publishers, 1 unattested", "3 fetching from the origin"
    others: int  # the weight of the others holding or fetching this version from the origin
    ahead: int  # ... and of those a download that claimed steps back for

    @property
    def rejected(self) -> bool:
        """Vouches were there, and none could be believed (a claim-only answer is not a rejection)."""
        return self.accepted is None and self.reason != "no-record"


def judge(vouches: Sequence[Vouch], policy: TrustPolicy, *, known_size: int | None, known_validator: bytes | None,
          me: bytes, claimed_at: float = math.inf, headless: bool = False) -> Judgement:
    """The judgement on one lookup's `vouches` for the version of `known_size` bytes labelled `known_validator`
    (either None: the origin has not said); `me` is this node's id, `claimed_at` when it said it fetches the
    version (its own clock; inf: it did not)."""
    others = ahead = 0
    if known_size is not None and known_validator:
        others = working(vouches, size=known_size, validator=known_validator, exclude=me)
        ahead = working(ahead_of(vouches, me, claimed_at), size=known_size, validator=known_validator, exclude=me)
    if all(v.content_root == IN_PROGRESS_ROOT for v in vouches):
        detail = f"{others} fetching from the origin" if others else ""
        return Judgement(None, ManifestSource.NONE, "no-record", detail, others, ahead)
    decision = decide(vouches, policy.headless() if headless else policy, known_size=known_size,
                      known_validator=known_validator)
    if decision.accepted is None:
        detail = f"{decision.publishers} publisher{'s' if decision.publishers != 1 else ''}"
        if hidden := unattested(vouches):
            detail += f", {hidden} unattested"
        return Judgement(None, ManifestSource.NONE, decision.reason, detail, others, ahead)
    return Judgement(decision.accepted, decision.source, "ok", "", others, ahead)
