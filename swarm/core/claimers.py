"""Other claimers a node has heard of, by key: what it passes on to whoever asks it for its claims. Pure.

On the Mainline DHT a claimer is found by the address it announced under the key, and an announcement becomes
findable when libtorrent's search for the key is over: in the Internet mode's flash-crowd lab the first claimer's
within a second, the others' 20-26 s later, while the crowd read the origin together. So a node that answers a
claims query (`swarm.net.wire`, query sessions) also passes on the addresses of the other claimers that asked it
lately: the asker says, after its CLAIMS_REQUEST, the peer port it claims under that key on (a PEX of one entry;
none: it claims nothing), and the answer is a PEX of the others. One findable claimer introduces the rest.

Nothing passed on is believed: an address here is only one more to *ask*, directly, for its own claims, which
is what makes a claim first-hand (`bittorrent.mainline_claims`). So the book keeps only what cannot be forged
for free, and bounds what can:

* the host is the one the asker's connection came from (its transport proved it), never one it names, so nobody
  can make others connect to a third party's host; only the port is the asker's word;
* it keeps keys under which this node claims itself (the caller's check), so a stranger cannot use any node as a
  meeting point for keys of its own, at most `MAX_KEYS` of them, the least lately heard of dropped first;
* per key at most `PER_KEY` claimers, one per host and `PER_NETWORK` per network (`addresses.network_prefix`):
  one party with many ports or many addresses of one network crowds out at most that many honest claimers;
* a claimer lives `CLAIMER_LIFE` s from when it last said so (an in-progress claim's life); an answer passes on
  every live one (`PER_KEY` at most), the first heard of first: in a flash crowd those are the earliest claimers,
  the ones every other steps back for (`swarm.trust.ahead_of`). Eight, the most lately heard first, left each of
  a 12-node crowd a different part of it, so that six, not two, judged themselves the first two and kept reading
  the origin.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from addresses import network_prefix

__all__ = ["CLAIMER_LIFE", "PASSED_ON", "Claimer", "ClaimerBook"]

MAX_KEYS = 1024  # keys with claimers kept (a node claims only what it fetches from an origin: few at a time)
PER_KEY = 16  # claimers kept per key: MAX_ASKED of the asker's lookup, which asks what is passed on
PER_NETWORK = 2  # of them in one network, one per host (the asker's own lookup's rule)
CLAIMER_LIFE = 120.0  # s a claimer is passed on after it last said it claims: an in-progress claim's life
PASSED_ON = PER_KEY  # claimers in one answer (a PEX carries up to 200): all a key keeps, for a whole view


@dataclass(frozen=True, slots=True)
class Claimer:
    host: str
    port: int
    transports: int  # `swarm.net.wire.Transport` flags, as the claimer stated them
    heard_at: float


class ClaimerBook:
    """Claimers by key; `now` is the caller's clock, one clock for every call."""

    def __init__(self) -> None:
        self._keys: OrderedDict[bytes, dict[str, Claimer]] = OrderedDict()  # key -> host -> claimer

    def __len__(self) -> int:
        return len(self._keys)

    def heard(self, key: bytes, host: str, port: int, transports: int, now: float) -> bool:
        """The node at `host` (its connection's address) says it claims under `key`, reachable on `port`; whether
        it is kept."""
        if not 1 <= port <= 0xFFFF or not transports:
            return False
        claimers = self._live(key, now)
        if host not in claimers:
            network = network_prefix(host)
            if len(claimers) >= PER_KEY or sum(network_prefix(h) == network for h in claimers) >= PER_NETWORK:
                return False
        claimers[host] = Claimer(host, port, transports, now)  # (one heard again keeps its place: the first first)
        self._keys[key] = claimers
        self._keys.move_to_end(key)
        while len(self._keys) > MAX_KEYS:
            self._keys.popitem(last=False)
        return True

    def others(self, key: bytes, host: str, now: float) -> list[Claimer]:
        """The claimers of `key` to pass on to the node at `host`: not itself, the first heard of first."""
        claimers = self._live(key, now)
        return [c for c in claimers.values() if c.host != host][:PASSED_ON]

    def _live(self, key: bytes, now: float) -> dict[str, Claimer]:
        claimers = self._keys.get(key)
        if claimers is None:
            return {}
        for host in [h for h, c in claimers.items() if now - c.heard_at >= CLAIMER_LIFE or c.heard_at > now]:
            del claimers[host]
        if not claimers:
            del self._keys[key]
        return claimers
