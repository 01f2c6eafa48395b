"""This node's own claims, by key: what it answers when a peer asks it directly (a CLAIMS_REQUEST). Pure.

A discovery backend that stores only an address under a key (BitTorrent's Mainline DHT) cannot hold a claim: the
node announces its peer port under the key, and whoever finds the address asks the node, over the peer protocol,
for its claims under the key (`swarm.net.wire`, query sessions). This table is what it answers from: the claim
store puts and withdraws here, and the node's serving side (`swarm.service.node.SwarmNode`) reads it.

One claim per key, as the `ClaimStore` seam says: a put replaces this node's previous claim under the key (an
in-progress claim is replaced by the real one). A claim lives `ttl` seconds from its put (at most `MAX_TTL_S`, as
every store's), and is answered with its age and the seconds it has left, never with a time: the asker adds those
to its own clock. `now` is the caller's clock, and must be one clock for every call; the node uses the wall clock
(`time.time()`), which is what `Vouch.published_at` is compared in across stores.

The table is bounded (`MAX_KEYS`, the oldest put evicted first): a leak in its caller, or a flood of keys from
above, costs memory up to the bound and no more.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass

from swarm.discovery.seam import KEY_BYTES, MAX_TTL_S, claim_problem
from swarm.trust.claims import ManifestClaim

__all__ = ["MAX_KEYS", "OwnClaim", "OwnClaims"]

# Keys held at most. A node claims only what it fetched from an origin and holds; each claim is also an announcement
# on the DHT, refreshed every quarter of an hour, so a node claiming more than some thousands is already a heavy DHT
# user. A claim costs some hundreds of bytes here: 100,000 keep the table within tens of MB whatever its caller does.
# The oldest put goes first: a claim its store keeps up is put again, and moves to the back.
MAX_KEYS = 100_000


@dataclass(frozen=True, slots=True)
class OwnClaim:
    """One of this node's claims: made at `published_at`, gone at `expires_at` (the caller's clock)."""

    claim: ManifestClaim
    published_at: float
    expires_at: float

    def age_ms(self, now: float) -> int:
        """Whole milliseconds since the claim was made, within its life (a clock stepped back does not make it
        negative, one stepped forward does not make it older than its life)."""
        return max(0, min(math.floor((now - self.published_at) * 1000), self._life * 1000))

    def seconds_left(self, now: float) -> int:
        """Whole seconds the claim still lives, rounded up (≥ 1 while it lives), never more than its life (a clock
        stepped back does not lengthen it)."""
        return max(0, min(math.ceil(self.expires_at - now), self._life))

    @property
    def _life(self) -> int:
        return math.ceil(self.expires_at - self.published_at)


class OwnClaims:
    """This node's claims by key (module docstring): put, withdraw, get the live ones."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self.max_keys = max_keys
        self._claims: OrderedDict[bytes, OwnClaim] = OrderedDict()  # in the order of their puts: the oldest first
        # (expires_at, key) of every put, the replaced and withdrawn ones too until they come up: `expire` pops
        # what is due instead of scanning the table. Rebuilt when the stale ones outnumber the live.
        self._expiries: list[tuple[float, bytes]] = []

    def __len__(self) -> int:
        return len(self._claims)

    def put(self, key: bytes, claim: ManifestClaim, *, now: float, ttl: float) -> OwnClaim:
        """This node vouches for `claim` under `key` from `now` for `ttl` seconds (1..`MAX_TTL_S`), in place of its
        previous claim under `key`. A claim the peer protocol could not carry is a `ValueError` (the caller's
        bug), as every store refuses it."""
        if len(key) != KEY_BYTES or len(claim.content_root) != KEY_BYTES:
            raise ValueError(f"a key and a content root are {KEY_BYTES} bytes")
        if (problem := claim_problem(claim.size, claim.block_size, claim.validator)) is not None:
            raise ValueError(problem)
        if not 1 <= ttl <= MAX_TTL_S:
            raise ValueError(f"ttl must be in 1..{MAX_TTL_S} s, got {ttl}")
        self.expire(now)
        self._claims.pop(key, None)  # re-put: to the back of the eviction order
        while len(self._claims) >= self.max_keys:
            self._claims.popitem(last=False)
        own = self._claims[key] = OwnClaim(claim, now, now + ttl)
        heapq.heappush(self._expiries, (own.expires_at, key))
        if len(self._expiries) > 2 * len(self._claims) + 64:
            self._expiries = [(own.expires_at, key) for key, own in self._claims.items()]
            heapq.heapify(self._expiries)
        return own

    def withdraw(self, key: bytes) -> bool:
        """Drop this node's claim under `key`; whether there was one."""
        return self._claims.pop(key, None) is not None

    def get(self, key: bytes, now: float) -> list[OwnClaim]:
        """This node's live claims under `key`: its one claim, or none (never put, withdrawn, or expired)."""
        own = self._claims.get(key)
        if own is None:
            return []
        if own.expires_at <= now:
            del self._claims[key]
            return []
        return [own]

    def expire(self, now: float) -> int:
        """Drop every claim expired at `now`; how many. (`get` never returns one anyway: this gives back memory.)"""
        dropped = 0
        while self._expiries and self._expiries[0][0] <= now:
            expires_at, key = heapq.heappop(self._expiries)
            own = self._claims.get(key)
            if own is not None and own.expires_at == expires_at:  # not a replaced claim's entry
                del self._claims[key]
                dropped += 1
        return dropped
