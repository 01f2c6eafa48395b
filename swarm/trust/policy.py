"""The trust policy a node runs with (`--trust`): which manifests from a Discovery it may believe.

`origin` never believes one; `quorum:N` believes a summary that independent publishers in N networks agree on
(`swarm.trust.quorum`); `any` (Pack's behaviour, for a lab or a trusted LAN) the heaviest group unless another
ties with it. The same policy sets how many independent others fetching a file make a download wait for them
instead of asking the origin too (`vouchers`, the parking threshold) and what answering before the origin said
anything takes (`headless`). Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

__all__ = ["MAX_QUORUM", "ManifestSource", "TrustMode", "TrustPolicy", "parse_trust"]

MAX_QUORUM = 16
_QUORUM = re.compile(r"quorum:([0-9]{1,2})")


class TrustMode(enum.StrEnum):
    ORIGIN = "origin"  # only the origin's own manifest (or this node's own copy from it)
    QUORUM = "quorum"  # N independent networks agree
    ANY = "any"  # the heaviest group, unless another ties with it


class ManifestSource(enum.StrEnum):
    """Where the manifest a download swarms with came from, as `/_swarm/requests` records it."""

    ORIGIN = "origin"  # the origin published it (the server plugin, `manifest publish`)
    SELF = "self"  # this node fetched the file from the origin itself
    QUORUM = "quorum"  # a quorum of independent publishers (`swarm.trust.quorum.decide`)
    ANY = "any"  # the heaviest group under `--trust any`
    SEGMENTS = "segments"  # no manifest of the file: its segments' quorums, one by one
    NONE = "none"  # not believed


@dataclass(frozen=True)
class TrustPolicy:
    mode: TrustMode
    quorum: int = 0  # N for "quorum", else 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", TrustMode(self.mode))  # "quorum" is TrustMode.QUORUM: `is` holds

    def __str__(self) -> str:
        return f"quorum:{self.quorum}" if self.mode is TrustMode.QUORUM else str(self.mode)

    @property
    def vouchers(self) -> int:
        """How many independent vouchers make a manifest believable: 0 when none ever does (`origin`)."""
        return {TrustMode.QUORUM: self.quorum, TrustMode.ANY: 1}.get(self.mode, 0)

    def headless(self) -> TrustPolicy:
        """The policy for answering before the origin has said anything (a `T` switch with no response head).

        Behind every other switch stands the origin's own word: its size and validator filter the candidates
        and its first bytes are checked against the peers'. Without it, one more independent network must
        stand in for it, so a party that just makes a quorum cannot answer a URL the origin is slow to answer.
        `any` (a lab, a trusted LAN) and `origin` (no DHT manifest at all) stay as they are."""
        return TrustPolicy(TrustMode.QUORUM, self.quorum + 1) if self.mode is TrustMode.QUORUM else self


def parse_trust(text: str) -> TrustPolicy:
    """`origin`, `any` or `quorum:N` with N in 1..16 (case and surrounding blanks ignored)."""
    value = str(text).strip().lower()
    if value in (TrustMode.ORIGIN, TrustMode.ANY):
        return TrustPolicy(TrustMode(value))
    match = _QUORUM.fullmatch(value)
    if match is not None and 1 <= int(match.group(1)) <= MAX_QUORUM:
        return TrustPolicy(TrustMode.QUORUM, int(match.group(1)))
    raise ValueError(f"trust must be 'origin', 'any' or 'quorum:N' with N from 1 to {MAX_QUORUM}, got {text!r}")
