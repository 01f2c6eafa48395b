"""Trust in content from strangers: one rule for every Discovery backend, the proxy and the cluster.

`claims`: the vocabulary every Discovery backend shares with the rule: the claim a publisher makes
(`ManifestClaim`), and one publisher's claim as a claim store returns it (`Vouch`), saying how its address was
attested (`Attestation`).
`policy`: what a node is told to believe (`--trust`), and the vocabulary of where a manifest came from.
`quorum`: the pure decision over the vouches and claims a Discovery returned: who counts, how much (one network
is one vote, whatever the number of keys and hosts claimed), which group wins, who is fetching, who is ahead.
`judge`: what one lookup's answer means for one download (the manifest and its source, or why not; the others).
"""

from .claims import IN_PROGRESS_ROOT, Attestation, ManifestClaim, Vouch
from .judge import Judgement, judge
from .policy import MAX_QUORUM, ManifestSource, TrustMode, TrustPolicy, parse_trust
from .quorum import TrustDecision, ahead_of, decide, leading, unattested, working

__all__ = ["IN_PROGRESS_ROOT", "MAX_QUORUM", "Attestation", "Judgement", "ManifestClaim", "ManifestSource",
           "TrustDecision", "TrustMode", "TrustPolicy", "Vouch", "ahead_of", "decide", "judge", "leading",
           "parse_trust", "unattested", "working"]
