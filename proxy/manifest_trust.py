"""Which manifest from the DHT may we believe? The pure quorum decision.

DESIGN.md "Content identity, integrity and trust": a manifest from the DHT is used only when enough
*independent* publishers vouch for the same one. Each publisher is a node that fetched the bytes
from the origin and signed a small record (root, size, block size, validator); the DHT layer has
already checked the signatures, so a `Vouch` here is "publisher X, reachable at host H, says so".

Independence is counted by network, not by key: keys are free, addresses are not. A group's weight
is the largest number of (publisher id, network prefix) pairs with no id and no prefix used twice
(a maximum matching, so the answer does not depend on the order records arrive in). The prefix of
a public IPv4 address is its /24 and of a public IPv6 address its /48, the blocks one party
usually controls. Loopback, private (RFC 1918, ULA fc00::/7) and link-local addresses count per
full address: a lab on 127.0.0.x or nodes on one LAN are genuinely separate machines there, and an
attacker who can run nodes on your loopback or LAN already owns more than this check guards. A
vouch with no known host shares one "unknown" prefix with all others like it, so any number of
host-less publishers weigh one.

The policy (`parse_trust`): `origin` never believes the DHT; `quorum:N` takes the heaviest group
if it weighs at least N and no other group does (two quorums for different bytes is an attack or
a corrupt swarm: believe neither); `any` (Pack's behaviour, for a lab or a trusted LAN) takes the
heaviest group unless another ties with it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

# Mirrors swarm.manifest.MIN_BLOCK_SIZE and the DHT's record check (a test keeps them equal);
# repeated here so this pure module needs neither package.
MIN_BLOCK_SIZE = 16 * 1024
ROOT_BYTES = 32  # SHA-256
MAX_QUORUM = 16
UNKNOWN_PREFIX = "unknown"

_QUORUM = re.compile(r"quorum:([0-9]{1,2})")


@dataclass(frozen=True)
class Vouch:
    """One publisher's manifest summary as found in the DHT."""

    publisher_id: bytes
    content_root: bytes
    size: int
    block_size: int
    validator: bytes
    publisher_host: str | None = None  # the IP the publisher is known at (its provider record), if any


@dataclass(frozen=True)
class AgreedManifest:
    """What a group of vouches agrees on: the summary to fetch the full manifest for."""

    content_root: bytes
    size: int
    block_size: int
    validator: bytes


@dataclass(frozen=True)
class TrustPolicy:
    mode: str  # "origin", "quorum" or "any"
    quorum: int = 0  # N for "quorum", else 0

    def __str__(self) -> str:
        return f"quorum:{self.quorum}" if self.mode == "quorum" else self.mode


@dataclass(frozen=True)
class TrustDecision:
    accepted: AgreedManifest | None
    source: str  # "quorum" or "any" when accepted, else "none"
    reason: str  # "ok", "trust=origin", "no-candidates", "inconsistent", "below-quorum", "conflict"
    publishers: int  # weight of the accepted group, or of the heaviest group when rejected


def parse_trust(text: str) -> TrustPolicy:
    """`origin`, `any` or `quorum:N` with N in 1..16 (case and surrounding blanks ignored)."""
    value = str(text).strip().lower()
    if value in ("origin", "any"):
        return TrustPolicy(value)
    match = _QUORUM.fullmatch(value)
    if match is not None and 1 <= int(match.group(1)) <= MAX_QUORUM:
        return TrustPolicy("quorum", int(match.group(1)))
    raise ValueError(f"trust must be 'origin', 'any' or 'quorum:N' with N from 1 to {MAX_QUORUM}, got {text!r}")


def network_prefix(host: str | None) -> str:
    """The network a publisher's address stands for; see the module docstring.

    `203.0.113.7` -> `203.0.113.0/24`, `2001:db8:1:2::5` -> `2001:db8:1::/48`,
    `192.168.1.4` -> `192.168.1.4/32`, `::ffff:203.0.113.7` is treated as the IPv4 address,
    anything that is not an IP address (None, "", a host name) or cannot identify a sender
    (unspecified, multicast) -> `unknown`.
    """
    if not host:
        return UNKNOWN_PREFIX
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return UNKNOWN_PREFIX  # a name proves nothing about where its owner sits
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified or ip.is_multicast:
        return UNKNOWN_PREFIX
    if _is_local(ip):
        return f"{ip}/{ip.max_prefixlen}"
    length = 24 if ip.version == 4 else 48
    return str(ipaddress.ip_network(f"{ip}/{length}", strict=False))


_LOCAL_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",  # IPv4
    "::1/128", "fc00::/7", "fe80::/10",  # IPv6
))


def _is_local(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    # An explicit list, not ip.is_private: that also covers documentation and benchmarking ranges,
    # which would let one party's many addresses there count one by one.
    return any(ip.version == net.version and ip in net for net in _LOCAL_NETWORKS)


def _well_formed(v: Vouch) -> bool:
    return (isinstance(v.content_root, bytes) and len(v.content_root) == ROOT_BYTES
            and isinstance(v.size, int) and v.size >= 0
            and isinstance(v.block_size, int) and v.block_size >= MIN_BLOCK_SIZE
            and v.block_size & (v.block_size - 1) == 0
            and isinstance(v.validator, bytes) and len(v.validator) > 0
            and isinstance(v.publisher_id, bytes) and len(v.publisher_id) > 0)


def _weight(vouches: list[Vouch]) -> int:
    """Maximum matching between publisher ids and network prefixes (Kuhn's augmenting paths)."""
    prefixes_of: dict[bytes, set[str]] = {}
    for v in vouches:
        prefixes_of.setdefault(v.publisher_id, set()).add(network_prefix(v.publisher_host))
    owner: dict[str, bytes] = {}  # prefix -> the id it is matched to

    def augment(pid: bytes, seen: set[str]) -> bool:
        for prefix in sorted(prefixes_of[pid]):
            if prefix in seen:
                continue
            seen.add(prefix)
            if prefix not in owner or augment(owner[prefix], seen):
                owner[prefix] = pid
                return True
        return False

    return sum(augment(pid, set()) for pid in sorted(prefixes_of))


def decide(candidates: Iterable[Vouch], policy: TrustPolicy, *, known_size: int | None = None,
           known_validator: bytes | None = None) -> TrustDecision:
    """The manifest summary the DHT candidates let us believe under `policy`, or None and why.

    `known_size` / `known_validator` are what the origin already told us; a candidate that
    contradicts them is dropped before counting.
    """
    if policy.mode == "origin":
        return TrustDecision(None, "none", "trust=origin", 0)
    vouches = [v for v in candidates if _well_formed(v)]
    if not vouches:
        return TrustDecision(None, "none", "no-candidates", 0)
    vouches = [v for v in vouches if (known_size is None or v.size == known_size)
               and (known_validator is None or v.validator == known_validator)]
    if not vouches:
        return TrustDecision(None, "none", "inconsistent", 0)

    groups: dict[AgreedManifest, list[Vouch]] = {}
    for v in _without_equivocators(vouches):
        groups.setdefault(_agreed(v), []).append(v)
    if not groups:
        return TrustDecision(None, "none", "conflict", 0)  # every publisher contradicted itself

    ranked = sorted(((_weight(members), key) for key, members in groups.items()),
                    key=lambda pair: pair[0], reverse=True)
    best_weight, best = ranked[0]
    runner_up = ranked[1][0] if len(ranked) > 1 else 0
    if policy.mode == "any":
        if runner_up == best_weight:
            return TrustDecision(None, "none", "conflict", best_weight)
        return TrustDecision(best, "any", "ok", best_weight)
    if best_weight < policy.quorum:
        return TrustDecision(None, "none", "below-quorum", best_weight)
    if runner_up >= policy.quorum:
        return TrustDecision(None, "none", "conflict", best_weight)
    return TrustDecision(best, "quorum", "ok", best_weight)


def _agreed(v: Vouch) -> AgreedManifest:
    return AgreedManifest(v.content_root, v.size, v.block_size, v.validator)


def _without_equivocators(vouches: list[Vouch]) -> list[Vouch]:
    """Drop every vouch of a publisher that signed two different manifests for one validator.

    Different validators are different versions of the URL, and an honest node may have vouched for
    both; two roots (or sizes, or block sizes) for the same validator cannot both be right, so that
    publisher is lying or broken and counts for nobody.
    """
    claims: dict[tuple[bytes, bytes], set[AgreedManifest]] = {}
    for v in vouches:
        claims.setdefault((v.publisher_id, v.validator), set()).add(_agreed(v))
    liars = {pid for (pid, _), agreed in claims.items() if len(agreed) > 1}
    return [v for v in vouches if v.publisher_id not in liars]
