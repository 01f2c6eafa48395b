"""Discovery, as the block engine sees it: the seam every backend implements, and what runs several together.

- `seam` — the two roles (`ProviderDirectory`: who holds a content root; `ClaimStore`: who vouches for which key,
  each claim a `Vouch` saying how its publisher's address was attested), `Discovery` (both), and the values that
  cross (`Provider`, `ManifestClaim`, `TransportFlags`, the bounds every backend refuses alike). Pure: a backend's
  sans-I/O core may import it (`dht.records` does).
- `composite` — `compose(directories, claim_stores)`: several backends as one `Discovery`, a publisher seen on
  two of them counted once; `backend_status` for the admin API.
- `memory` — `MemoryDiscovery`: both roles in memory, for tests.
- `own_claims` — `OwnClaims`: this node's own claims by key, what it answers a peer that asks it directly (a
  backend that stores only addresses, BitTorrent's Mainline DHT, sends the asker there). Pure.

Backends elsewhere import `seam` and nothing else of the engine: `dht.discovery.DhtDiscovery`,
`cluster.discovery.RedisDiscovery`. This package re-exports the seam only, so importing it does no I/O.
"""

from .seam import (
    IN_PROGRESS_ROOT,
    IN_PROGRESS_TTL,
    UNSPECIFIED_HOST,
    Attestation,
    ClaimStore,
    Discovery,
    ManifestClaim,
    Provider,
    ProviderDirectory,
    TransportFlags,
    Vouch,
    validator_bytes,
)

__all__ = ["IN_PROGRESS_ROOT", "IN_PROGRESS_TTL", "UNSPECIFIED_HOST", "Attestation", "ClaimStore", "Discovery",
           "ManifestClaim", "Provider", "ProviderDirectory", "TransportFlags", "Vouch", "validator_bytes"]
