"""Peer exchange on content sessions: which peers offered by a PEX a fetch connects to. Pure.

A flash crowd's parked downloads all see the quorum's manifest within a second and all fetch at once, from the
providers the DHT lists by then: the two first-hand fetchers and a few that held part of it. The others of the
herd hold blocks a moment later, but announce them to the DHT, where a lookup finds them 0.3-0.6 s after: too late
for a 100 KB file. In the lab's no-plugin crowd at 20/s a parked download took a median 1 s and up to 2.2 s for
100 KB after its quorum, against 0.1 s at the link's rate (`bench/results/lab/flashcrowd-20-no-plugin-95aef5a`).
So, as BitTorrent's PEX does, a peer serving a root tells each one fetching it from it about the others fetching
it lately (`swarm.core.claimers.ClaimerBook`, by root), and the fetch connects to some of them: the herd then
trades blocks among itself as its picker spreads them (rarest first), and the holders' uplinks are not the only
ones at work.

On a content session the fetching side sends, right after its HANDSHAKE, a PEX of at most one entry: the peer
port it serves on (none: it serves nothing); the serving side keeps it by the address the connection came from
(never the entry's) and answers with a PEX of the others (`swarm.core.serve`). A node from before this ignores a PEX
on a content session, which to the fetcher is a peer that knows no others.

Nothing offered is believed: an address is only one more peer to connect to, whose blocks are checked against the
manifest like any other's, and which the slots and trust of the fetch bound like any provider. What a liar can do
is choose whom we connect to; so `PexJoin` takes only:

* the first PEX of a session, and at most `PER_PEX` addresses of it;
* at most `JOINED` addresses in all over one fetch (`swarm.service.swarm_service.FETCH_PEERS`), one per host and
  `PER_NETWORK` per network (`addresses.network_prefix`), none the fetch already tried;
* only addresses by the fetch's own transport, on a port of 1024 or over (a node's peer port; the serving side
  could not check the port, only the host);
* only public addresses, or addresses of the offering peer's own kind (`addresses.Kind`): a peer on loopback may
  offer loopback addresses and one on a LAN private ones, but a stranger on the Internet cannot make a fetch
  connect into its own machine or LAN; never a special-purpose address (unspecified, multicast, documentation...).

An honest serving side passes on only hosts that connected to it themselves (`ClaimerBook`); a lying one can name
any address within those rules, which is why they bound what a PEX can make a fetch do: at most `JOINED`
connections over a fetch, each a swarm HANDSHAKE and nothing of the liar's choosing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from addresses import Kind, classify, kind_of, network_prefix
from swarm.net import wire

__all__ = ["JOINED", "PER_NETWORK", "PER_PEX", "PexJoin"]

PER_PEX = 8  # addresses taken from one peer's PEX
JOINED = 16  # addresses joined from PEXes over one fetch: --fetch-peers' default
PER_NETWORK = 2  # of them in one network, one per host (the claimers' rule)
LOWEST_PORT = 1024  # a node's peer port is never a privileged one

Address = tuple[str, int]


class PexJoin:
    """One fetch's choice of the peers PEXes offer it; `transport` is the fetch's (`wire.Transport` flag)."""

    def __init__(self, transport: int) -> None:
        self.transport = transport
        self.tried: set[Address] = set()  # every address the fetch connected to, or tried to
        self._hosts: set[str] = set()
        self._networks: Counter[str] = Counter()  # of the addresses joined from PEXes
        self.joined = 0

    def connecting(self, address: Address) -> bool:
        """The fetch is about to connect to `address` (a provider, a refresh's, or a PEX's): False if it tried
        it already (an address once tried is never tried again: it may have been dropped for lying)."""
        if address in self.tried:
            return False
        self.tried.add(address)
        self._hosts.add(address[0])
        return True

    def offered(self, peers: Sequence[wire.PexPeer], by: str) -> list[Address]:
        """A session's first PEX, from the peer at `by`, offers `peers`: the addresses to connect to (module
        docstring's bounds)."""
        chosen: list[Address] = []
        for peer in _usable(peers, self.transport, kind_of(by)):
            if len(chosen) >= PER_PEX or self.joined >= JOINED:
                break
            host = str(peer.ip)
            network = network_prefix(host)
            if host in self._hosts or self._networks[network] >= PER_NETWORK:
                continue
            self._networks[network] += 1
            self.joined += 1
            address = (host, peer.port)
            self.connecting(address)
            chosen.append(address)
        return chosen


def _usable(peers: Iterable[wire.PexPeer], transport: int, offering: Kind | None) -> Iterable[wire.PexPeer]:
    for peer in peers:
        kind = classify(peer.ip)
        if peer.port >= LOWEST_PORT and int(peer.transports) & transport and kind is not Kind.SPECIAL \
                and (kind is Kind.PUBLIC or kind is offering):
            yield peer
