"""What a publisher claims about a key, and how a claim store says where the claim came from.

The vocabulary every Discovery backend and the trust rule share, defined once: `ManifestClaim` is the summary a
node vouches for ("the representation under this key is the content of this root": root, size, block size,
validator); `Vouch` is one publisher's claim as a claim store returns it, with an explicit `Attestation` of the
publisher's address, because the address is the only thing the quorum counts (`swarm.trust.quorum`): keys are
free, networks are not.

A backend that cannot say where a claim came from (BitTorrent's Mainline DHT, a store anyone writes to) returns
`Attestation.NONE`, and such a claim weighs nothing; it never silently counts as one more network.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# The root an in-progress claim names ("I am fetching it from the origin now"): no merkle root is all zeros (it is a
# SHA-256 output), so it cannot name real content.
IN_PROGRESS_ROOT = bytes(32)
# The longest validator a claim carries (an ETag is rarely longer than 64 bytes; a record stays one datagram). Here,
# with the claim it bounds, so that every store (`swarm.discovery.seam` re-exports it) and the peer protocol's
# CLAIMS message (`swarm.net.wire`) refuse alike.
MAX_VALIDATOR_BYTES = 200


class Attestation(enum.StrEnum):
    """How a claim store knows the publisher's address (`Vouch.publisher_host`)."""

    NONE = "none"  # it does not: the claim weighs nothing in a quorum
    FIRST_HAND = "first-hand"  # this node saw the claim arrive from that address (its own store, its coordinator)
    STORING_NODES = "storing-nodes"  # other nodes, in the networks `attested_by`, vouch they saw it arrive from there


@dataclass(frozen=True)
class ManifestClaim:
    """What a publisher vouches for under a key: the content of `content_root`, `size` bytes in blocks of
    `block_size`, as the origin labelled it with `validator` (an ETag's or Last-Modified's bytes). Also what a
    group of vouches agrees on (`swarm.trust.quorum.decide`)."""

    content_root: bytes
    size: int
    block_size: int
    validator: bytes


@dataclass(frozen=True)
class Vouch:
    """One publisher's claim about a key, as a claim store returns it.

    `publisher_host` is the address the claim was seen arriving from, per `attestation`, never what the publisher
    wrote; `attested_by` the networks whose storing nodes vouch for it (`Attestation.STORING_NODES` only): a quorum
    spends each on one publisher. `published_at`: when the publisher made the claim, by its own clock (0.0 when
    the store does not say): it orders claims alike for every reader, and proves nothing. `serves_at`: the peer
    port a first-hand publisher answered us on a moment ago (a claims query), a provider of the claimed root where
    the directory may not list it yet: its blocks are checked against the root like anyone's."""

    claim: ManifestClaim
    publisher_id: bytes
    attestation: Attestation
    publisher_host: str | None = None
    attested_by: frozenset[str] = frozenset()
    published_at: float = 0.0
    serves_at: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        # The attestation and the fields agree, so the quorum can read the host and the attesters alone.
        host, by = self.publisher_host is not None, bool(self.attested_by)
        expected = {Attestation.NONE: (False, False), Attestation.FIRST_HAND: (True, False),
                    Attestation.STORING_NODES: (True, True)}[self.attestation]
        if (host, by) != expected:
            raise ValueError(f"a {self.attestation} vouch {'has' if host else 'lacks'} a publisher host and "
                             f"{'has' if by else 'lacks'} attesting networks")

    @classmethod
    def seen(cls, claim: ManifestClaim, publisher_id: bytes, host: str | None, attested_by: frozenset[str],
             published_at: float = 0.0, serves_at: tuple[str, int] | None = None) -> Vouch:
        """A claim seen from `host` (None: not attested), attested by the networks `attested_by` (none: seen
        first-hand): the attestation those imply."""
        attestation = (Attestation.NONE if host is None else
                       Attestation.STORING_NODES if attested_by else Attestation.FIRST_HAND)
        return cls(claim, publisher_id, attestation, host, attested_by if host is not None else frozenset(),
                   published_at, serves_at)

    # The claim's fields, read as the vouch's own by the quorum's counting.
    content_root = property(lambda self: self.claim.content_root)
    size = property(lambda self: self.claim.size)
    block_size = property(lambda self: self.claim.block_size)
    validator = property(lambda self: self.claim.validator)
