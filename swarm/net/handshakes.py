"""Which new QUIC connections a listener creates state for (sans-I/O; in `swarm.net`, beside its one user, as
`swarm.net.wire` is: the transports may not import `swarm.core`).

Every Initial packet for a connection id a QUIC listener does not know asks it for a connection: aioquic builds
the TLS state, keys and the server's first flight (our certificate), kept for retransmission until the
connection completes or times out. One socket's 28 MB of valid Initials grew a node from 70 to 630 MB of RSS, and
the heap kept it after the connections were gone. So the listener decides before any state exists:

* at most `total` connections are **opening** at a time — from their first Initial until their control stream
  opens (`swarm.net.quic`), or they end (the open timeout ends those that never complete);
* at most `per_address` of them come from one source address, and `per_network` from one network
  (`addresses.network_prefix`: a public IPv4 /24 or IPv6 /48; on loopback or a LAN each address is its own);
* a source proves that it receives at its address (a Retry, RFC 9000 §8.1: a token bound to the address that
  costs us one datagram and no state) before it opens a second connection at a time, and every source does once
  `retry_above` connections are opening: then spoofed source addresses, which never see a Retry, hold nothing.

An Initial over a bound is dropped — no state, no reply — and its client sends it again on its timer, getting in
once room is made. So a flood holds at most `total` connections' state, and one address at most `per_address`;
honest peers, one connection at a time each, never meet a Retry while fewer than `retry_above` are opening.

`decide(address, validated)` says what to do with such an Initial (`validated`: it carries a Retry token, which
the listener checks before creating anything); the shell reports `opened(key, address)` when it created the
connection and `ended(key)` when it opened its control stream or ended.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Hashable

import addresses

__all__ = ["HandshakeGate", "Decision", "TOTAL", "PER_ADDRESS", "PER_NETWORK", "RETRY_ABOVE"]

TOTAL = 128  # connections opening at once: an honest node's arrivals come one per peer and root, in seconds
PER_ADDRESS = 8
PER_NETWORK = 32
RETRY_ABOVE = 32


class Decision(enum.Enum):
    ADMIT = "admit"  # create the connection
    RETRY = "retry"  # answer with a Retry packet and hold nothing
    DROP = "drop"  # hold nothing, answer nothing


class HandshakeGate:
    def __init__(self, *, total: int = TOTAL, per_address: int = PER_ADDRESS, per_network: int = PER_NETWORK,
                 retry_above: int = RETRY_ABOVE) -> None:
        if min(total, per_address, per_network) < 1 or retry_above < 0:
            raise ValueError("bounds must be >= 1 (retry_above >= 0)")
        self.total = total
        self.per_address = per_address
        self.per_network = per_network
        self.retry_above = retry_above
        self._opening: dict[Hashable, tuple[str, str | None]] = {}
        self._by_address: Counter[str] = Counter()
        self._by_network: Counter[str] = Counter()

    def __len__(self) -> int:
        """Connections opening now."""
        return len(self._opening)

    def held_by(self, address: str) -> int:
        return self._by_address[_groups(address)[0]]

    def decide(self, address: str, validated: bool) -> Decision:
        """An Initial for a new connection arrived from `address`; `validated`: it carries a Retry token."""
        host, network = _groups(address)
        if len(self._opening) >= self.total or self._by_address[host] >= self.per_address:
            return Decision.DROP
        if network is not None and self._by_network[network] >= self.per_network:
            return Decision.DROP
        if not validated and (self._by_address[host] > 0 or len(self._opening) >= self.retry_above):
            return Decision.RETRY
        return Decision.ADMIT

    def opened(self, key: Hashable, address: str) -> None:
        """The connection `key` from `address` was created (after `decide` said ADMIT)."""
        if key in self._opening:
            return
        host, network = _groups(address)
        self._opening[key] = (host, network)
        self._by_address[host] += 1
        if network is not None:
            self._by_network[network] += 1

    def ended(self, key: Hashable) -> None:
        """`key` opened its control stream, or ended: it no longer counts as opening."""
        groups = self._opening.pop(key, None)
        if groups is None:
            return
        host, network = groups
        self._by_address[host] -= 1
        if not self._by_address[host]:
            del self._by_address[host]
        if network is not None:
            self._by_network[network] -= 1
            if not self._by_network[network]:
                del self._by_network[network]


def _groups(address: str) -> tuple[str, str | None]:
    """The address as counted (one spelling per host: a mapped IPv4 address is the IPv4 one), and its network."""
    host, network = addresses.source(address)
    return host or address, network
