"""Which manifest from a Discovery may we believe? The pure quorum decision, for the proxy and the cluster alike.

docs/ARCHITECTURE.md "Content identity, integrity and trust": a manifest from the DHT is used only when enough
*independent* publishers vouch for the same one. Each publisher is a node that fetched the bytes
from the origin and signed a small record (root, size, block size, validator); the DHT layer has
already checked the signatures, so a `Vouch` here is "publisher X, reachable at host H, says so".

Independence is counted by network, not by key: keys are free, addresses are not. A group's weight
is the largest number of (publisher id, network prefix) pairs with no id and no prefix used twice
(a maximum matching, so the answer does not depend on the order records arrive in), capped as below; prefixes are
`addresses.network_prefix`. A publisher's host is the one the DHT's storing nodes *observed* its
record arrive from (`dht.attestation`), never what the publisher wrote. A vouch with no attested host, or
one in no network (a special-purpose address), weighs nothing: not one shared "unknown" network, which *added*
to the real ones and let one address plus one planted key make `quorum:2`. And since storing nodes that lie
together can attest any host they like, a group never weighs more than the fewest networks a party would need
to show it to us (its publishers' networks, or, for a host only others attested, all the networks that attested
it): storing nodes in two networks attesting ten claimed hosts weigh two, as two publishers of their own would;
three publishers that only attest each other's records weigh two (any two could have made the third up) until
the reader's own store sees them, and three once it does. The rule is the same for manifests,
segment vouches, in-progress claims, headless answers and the "ahead" order, whatever Discovery found them.

The policy (`swarm.trust.policy`): `origin` never believes the DHT; `quorum:N` takes the heaviest group
if it weighs at least N and no other group does (two quorums for different bytes is an attack or
a corrupt swarm: believe neither); `any` (Pack's behaviour, for a lab or a trusted LAN) takes the
heaviest group unless another ties with it.

Claims naming `IN_PROGRESS_ROOT` ("I am fetching it from the origin now") are never a manifest; `working` weighs
them, with the real claims for the same version, to tell a newcomer whether enough independent others will
vouch soon that waiting for them beats asking an overloaded origin too (the proxy's download core, "park"), and
`ahead_of` orders claimers alike for every reader.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from addresses import UNKNOWN_PREFIX, network_prefix
from swarm.content.manifest import MAX_BLOCK_SIZE, MIN_BLOCK_SIZE
from swarm.content.merkle import HASH_SIZE

from .claims import IN_PROGRESS_ROOT, ManifestClaim, Vouch
from .policy import ManifestSource, TrustMode, TrustPolicy

# The DHT carries a manifest record's block size opaquely (`dht.records`): a vouch counts only if it could be a
# manifest the block engine accepts, by the engine's own bounds, so that nobody is believed for one it rejects.
ROOT_BYTES = HASH_SIZE  # a content root is a merkle root
# `_fewest_networks` searches which attested hosts could be lies over at most this many publishers whose hosts only
# others attested (2^10 cases at worst, under 2 ms; 17 took up to 55 ms a decision), so a stranger's many records
# cost us no more: a group then weighs at most this many of them (`quorum:11` and above also needs hosts that
# our own store saw).
FEWEST_SEARCHED = 10


@dataclass(frozen=True)
class TrustDecision:
    accepted: ManifestClaim | None
    source: ManifestSource  # QUORUM or ANY when accepted, else NONE
    reason: str  # "ok", "trust=origin", "no-candidates", "inconsistent", "below-quorum", "conflict"
    publishers: int  # weight of the accepted group, or of the heaviest group when rejected


def _well_formed(v: Vouch) -> bool:
    return (isinstance(v.content_root, bytes) and len(v.content_root) == ROOT_BYTES
            and isinstance(v.size, int) and v.size >= 0
            and isinstance(v.block_size, int) and MIN_BLOCK_SIZE <= v.block_size <= MAX_BLOCK_SIZE
            and v.block_size & (v.block_size - 1) == 0
            and isinstance(v.validator, bytes) and len(v.validator) > 0
            and isinstance(v.publisher_id, bytes) and len(v.publisher_id) > 0)


def _weight(vouches: list[Vouch]) -> int:
    """How many of `vouches`' publishers count (see the module docstring): the largest number of publishers with
    distinct ids in distinct host networks (a maximum matching, Kuhn's augmenting paths), but never more than the
    fewest networks a party would need to hold to show us exactly these (`_fewest_networks`). Unattested vouches,
    or hosts in no network, weigh nothing."""
    sources: dict[bytes, dict[str, set[frozenset[str]]]] = {}  # id -> host network -> attesting networks
    for v in vouches:
        prefix = network_prefix(v.publisher_host)
        if prefix != UNKNOWN_PREFIX:
            sources.setdefault(v.publisher_id, {}).setdefault(prefix, set()).add(frozenset(v.attested_by))
    owner: dict[str, bytes] = {}  # prefix -> the id it is matched to

    def augment(pid: bytes, seen: set[str]) -> bool:
        for prefix in sorted(sources[pid]):
            if prefix in seen:
                continue
            seen.add(prefix)
            if prefix not in owner or augment(owner[prefix], seen):
                owner[prefix] = pid
                return True
        return False

    matched = sum(augment(pid, set()) for pid in sorted(sources))
    return min(matched, _fewest_networks([(prefix, sources[pid][prefix]) for prefix, pid in sorted(owner.items())]))


def _fewest_networks(publishers: list[tuple[str, set[frozenset[str]]]]) -> int:
    """The fewest networks a party must hold to show us these publishers, each as (host network, the sets of
    networks that attested it; an empty set: our own store saw it arrive). A host our own store saw is where its
    publisher is. One attested by others is either where its publisher is, or a lie told by *every* storing node
    that attested it (an honest one reports only what arrived), so a party holding those networks could have
    made it up. Exact over the first `FEWEST_SEARCHED` hosts only others attested (a search over which are
    lies; more add nothing then): never more than the truth, so never more weight than a party's networks."""
    held = {prefix for prefix, attested in publishers if frozenset() in attested}
    doubtful = [(prefix, sorted(attested, key=lambda s: (len(s), sorted(s)))) for prefix, attested in publishers
                if frozenset() not in attested][:FEWEST_SEARCHED]
    best = len(held | {prefix for prefix, _ in doubtful})  # every host where it claims to be

    def search(index: int, networks: frozenset[str]) -> None:
        nonlocal best
        if len(networks) >= best:
            return
        if index == len(doubtful):
            best = len(networks)
            return
        prefix, lies = doubtful[index]
        for option in sorted([frozenset((prefix,)), *lies], key=lambda o: len(o - networks)):
            search(index + 1, networks | option)

    search(0, frozenset(held))
    return best


def decide(candidates: Iterable[Vouch], policy: TrustPolicy, *, known_size: int | None = None,
           known_validator: bytes | None = None) -> TrustDecision:
    """The manifest summary the DHT candidates let us believe under `policy`, or None and why.

    `known_size` / `known_validator` are what the origin already told us; a candidate that
    contradicts them is dropped before counting.
    """
    if policy.mode is TrustMode.ORIGIN:
        return TrustDecision(None, ManifestSource.NONE, "trust=origin", 0)
    reason, ranked = _ranked(candidates, known_size, known_validator)
    if not ranked:
        return TrustDecision(None, ManifestSource.NONE, reason, 0)
    best_weight, best = ranked[0]
    runner_up = ranked[1][0] if len(ranked) > 1 else 0
    if policy.mode is TrustMode.ANY:
        if best_weight == 0:  # nobody attested: `any` trusts the first *publisher*, never a bare claim
            return TrustDecision(None, ManifestSource.NONE, "below-quorum", 0)
        if runner_up == best_weight:
            return TrustDecision(None, ManifestSource.NONE, "conflict", best_weight)
        return TrustDecision(best, ManifestSource.ANY, "ok", best_weight)
    if best_weight < policy.quorum:
        return TrustDecision(None, ManifestSource.NONE, "below-quorum", best_weight)
    if runner_up >= policy.quorum:
        return TrustDecision(None, ManifestSource.NONE, "conflict", best_weight)
    return TrustDecision(best, ManifestSource.QUORUM, "ok", best_weight)


def leading(candidates: Iterable[Vouch], *, known_size: int | None = None,
            known_validator: bytes | None = None) -> ManifestClaim | None:
    """The claim a download still waiting for a quorum may prepare for: the heaviest group, if it weighs at least
    one network and no other group weighs as much; None otherwise. Never a reason to believe it (that is
    `decide`'s): the proxy's engine only looks up its providers ahead of the quorum, so that the lookup which
    finds the quorum goes on from a warm one (`proxy.engine.SwarmEngine.find`). An unattested claim weighs
    nothing here either, so a stranger's free keys start no lookup."""
    _, ranked = _ranked(candidates, known_size, known_validator)
    if not ranked or ranked[0][0] == 0 or (len(ranked) > 1 and ranked[1][0] == ranked[0][0]):
        return None
    return ranked[0][1]


def _ranked(candidates: Iterable[Vouch], known_size: int | None, known_validator: bytes | None
            ) -> tuple[str, list[tuple[int, ManifestClaim]]]:
    """The groups of well-formed real claims consistent with what the origin said, by claim, heaviest first, each
    with its weight; or why there are none ("no-candidates", "inconsistent", "conflict") and an empty list."""
    vouches = [v for v in candidates if _well_formed(v) and v.content_root != IN_PROGRESS_ROOT]
    if not vouches:
        return "no-candidates", []
    vouches = [v for v in vouches if (known_size is None or v.size == known_size)
               and (known_validator is None or v.validator == known_validator)]
    if not vouches:
        return "inconsistent", []
    groups: dict[ManifestClaim, list[Vouch]] = {}
    for v in _without_equivocators(vouches):
        groups.setdefault(v.claim, []).append(v)
    if not groups:
        return "conflict", []  # every publisher contradicted itself
    return "ok", sorted(((_weight(members), key) for key, members in groups.items()),
                        key=lambda pair: pair[0], reverse=True)


def unattested(candidates: Iterable[Vouch]) -> int:
    """How many publishers vouched for a root with no attested host (they weigh nothing): for saying why not."""
    return len({v.publisher_id for v in candidates
                if v.content_root != IN_PROGRESS_ROOT and network_prefix(v.publisher_host) == UNKNOWN_PREFIX})


def working(candidates: Iterable[Vouch], *, size: int, validator: bytes, exclude: bytes = b"") -> int:
    """The weight (as for a quorum) of the publishers other than `exclude` that hold or are fetching from the
    origin the version of `size` bytes labelled `validator`: those who will vouch for it soon."""
    return _weight([v for v in candidates if _well_formed(v) and v.publisher_id != exclude
                    and v.size == size and v.validator == validator])


def ahead_of(candidates: Iterable[Vouch], own: bytes, own_claimed_at: float) -> list[Vouch]:
    """The vouches a download that claimed to fetch at `own_claimed_at` (its own clock; inf: not known) steps
    back for: every holder, and the claims made before its own.

    Claims are ordered by (`published_at`, publisher id), which every reader sees alike. Claim time rather than
    id alone: the earlier claimer is the one further along, and the origin it read so far is not thrown away.
    Its own claim, once found, is judged by the same record as everyone else judges it. A claimer that lies about
    its time gains nothing an id ground to be small would not: honest ones step back for it, and come back to the
    origin when it never vouches (`proxy.download.parking`)."""
    candidates = list(candidates)
    listed = [v.published_at for v in candidates if v.publisher_id == own and v.content_root == IN_PROGRESS_ROOT]
    mine = (listed[0] if listed else own_claimed_at, own)
    return [v for v in candidates
            if v.content_root != IN_PROGRESS_ROOT or (v.published_at, v.publisher_id) < mine]


def _without_equivocators(vouches: list[Vouch]) -> list[Vouch]:
    """Drop every vouch of a publisher that signed two different manifests for one validator.

    Different validators are different versions of the URL, and an honest node may have vouched for
    both; two roots (or sizes, or block sizes) for the same validator cannot both be right, so that
    publisher is lying or broken and counts for nobody.
    """
    claims: dict[tuple[bytes, bytes], set[ManifestClaim]] = {}
    for v in vouches:
        claims.setdefault((v.publisher_id, v.validator), set()).add(v.claim)
    liars = {pid for (pid, _), agreed in claims.items() if len(agreed) > 1}
    return [v for v in vouches if v.publisher_id not in liars]
