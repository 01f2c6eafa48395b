"""Trust in content from strangers: one rule for every Discovery backend, the proxy and the cluster.

`policy`: what a node is told to believe (`--trust`), and the vocabulary of where a manifest came from.
`quorum`: the pure decision over the vouches and claims a Discovery returned: who counts, how much (one network
is one vote, whatever the number of keys and hosts claimed), which group wins, who is fetching, who is ahead.
`judge`: what one lookup's answer means for one download (the manifest and its source, or why not; the others).
"""

from .policy import MAX_QUORUM, ManifestSource, TrustMode, TrustPolicy, parse_trust
from .quorum import IN_PROGRESS_ROOT, AgreedManifest, TrustDecision, Vouch, ahead_of, decide, unattested, working

__all__ = ["IN_PROGRESS_ROOT", "MAX_QUORUM", "AgreedManifest", "Judgement", "ManifestSource", "TrustDecision",
           "TrustMode", "TrustPolicy", "Vouch", "ahead_of", "decide", "judge", "parse_trust", "unattested", "working"]
