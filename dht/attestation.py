"""Where a manifest's publisher really is: the address storing nodes *observed* its record arrive from. Pure.

Keys are free, so a quorum counts networks; but a host written in a record is only a claim, and one party with
one address could sign many keys and claim a host in a different network for each. So the claim is checked
against what an attacker cannot choose for free, as BEP 42 binds node ids to addresses:

* a manifest record carries the host its publisher claims, under the publisher's signature (`dht.records`);
* a storing node accepts it only when it arrives from that host (`dht.storage` refuses any other source; the
  write token proves the source address can receive, so it cannot be spoofed) and, when asked, returns with each
  record the address it observed it arrive from (`dht.wire`);
* a reader believes the claimed host when its own store observed the record arrive from it, or when storing
  nodes in at least `MIN_ATTESTING_NETWORKS` different networks — as the reader sees *their* addresses — report
  that they observed it there. A lying storing node is one network: not enough on its own.

Anything else leaves the host unattested (`None`), and an unattested publisher weighs nothing in a quorum
(`swarm.trust`). To forge a host, an attacker needs lying storing nodes in two networks near the key
and the reader's lookup to reach them; and since such a party could then attest any number of hosts it claims,
a host attested by others carries the networks that attested it (`attesters`): an honest storing node reports
only what arrived, so such a host is either real or a lie of every one of them, and a quorum never weighs more
than the fewest networks that could have shown it (`swarm.trust`). Lying storing nodes in m networks
add at most m, as m publishers would.
"""

from __future__ import annotations

from addresses import UNKNOWN_PREFIX, canonical_host, network_prefix
from dht.records import ManifestRecord

MIN_ATTESTING_NETWORKS = 2


class Attestations:
    """What the storing nodes asked during one lookup said about where each publisher's record came from."""

    def __init__(self) -> None:
        self._by_networks: dict[tuple[bytes, str], set[str]] = {}  # (publisher key, host) -> attesting networks
        self._by_us: set[tuple[bytes, str]] = set()

    def observe(self, record: ManifestRecord, observed: str | None, responder: str | None) -> None:
        """`responder` says it saw `record` arrive from `observed`; `responder` None is our own store."""
        claimed = canonical_host(record.host)
        if claimed is None or canonical_host(observed) != claimed:
            return  # no observation, or one that contradicts the claim: it vouches for nothing
        pair = (record.publisher_key, claimed)
        if responder is None:
            self._by_us.add(pair)
        elif (network := network_prefix(responder)) != UNKNOWN_PREFIX:  # a responder in no network attests nothing
            self._by_networks.setdefault(pair, set()).add(network)

    def host(self, record: ManifestRecord) -> str | None:
        """The record's host if attested (see the module docstring), else None."""
        claimed = canonical_host(record.host)
        if claimed is None:
            return None
        pair = (record.publisher_key, claimed)
        if pair in self._by_us or len(self._by_networks.get(pair, ())) >= MIN_ATTESTING_NETWORKS:
            return claimed
        return None

    def attesters(self, record: ManifestRecord) -> frozenset[str]:
        """The networks whose storing nodes attest `record`'s host: empty when our own store saw it arrive (no
        one else's word is needed) or when it is not attested (`host` is None)."""
        claimed = canonical_host(record.host)
        if claimed is None:
            return frozenset()
        pair = (record.publisher_key, claimed)
        if pair in self._by_us or self.host(record) is None:
            return frozenset()
        return frozenset(self._by_networks[pair])
