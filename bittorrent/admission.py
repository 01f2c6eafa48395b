"""Who may connect to the embedded session's listener (`--bt-listen`): connections per address and network (pure).

libtorrent bounds its peers only as a whole (`bittorrent.settings.MAX_CONNECTIONS`) and counts a connection from
the moment it accepts it, before the peer says which torrent it wants: one address that opened 300 connections
and sent nothing held all 200 slots, and a real client arriving then waited 61.6 s instead of 0.60 s
(`bench/attacks/bt_flood.py`). libtorrent has no limit per address, no way to close one connection of ours,
and no hook before it accepts; what it offers is an IP filter, which refuses a filtered address's new
connections at accept and drops its connected peers (its half-open ones end at the handshake timeout).

So this core follows the connections as libtorrent reports them (accepted, handshaken, disconnected) and says
which sources to filter. A source is an address (a public IPv6 one: its /64) or its network (`addresses.source`:
a public IPv4 /24 or IPv6 /48; on loopback or a LAN each address is its own network):

* **opening** (accepted, no handshake yet): at most `opening_per_address` per address and `opening_per_network`
  per network. An honest client sends its handshake as it connects;
* **all**: at most `per_address` per address and `per_network` per network. An honest client opens one
  connection per torrent (libtorrent keeps `allow_multiple_connections_per_ip` off), so the address bound is how
  many of our torrents one client may fetch at once;
* **crowding**: when the session holds `full_at` connections or more, a newcomer's arrival filters the network
  holding the most of them, if it holds more than `crowd_share` — as our own slots (`swarm.core.slots`) make a
  source over its share give way, since libtorrent will not let a newcomer in while it is full.

A source over a bound is filtered for `block_for` seconds, doubled for each new offence while its last one is
remembered (`remember_for` after its block ends), up to `max_block`. A block, not a cap: what it opened before
still holds slots until libtorrent's handshake timeout, so a source let back the moment its count fell would hold
the listener for a timeout out of every few seconds. What it cannot stop: an attacker with addresses in more
networks than `capacity / crowd_share` (a botnet), each under its bounds, is as many honest clients; SECURITY.md
measures it. A host that is not an IP literal counts in nothing.

The shell reports `arrived(key, host, now)` for each accepted connection (key: anything that names it, e.g. the
remote endpoint), `handshaken(key)` when it named a torrent of ours and `left(key)` when it ended, calls
`expire(now)` now and then, and applies `blocks()` as the IP filter whenever `arrived` or `expire` says they
changed. `reset()` forgets the connections (libtorrent dropped alerts: counts that only grow would block an honest
address for good).
"""

from __future__ import annotations

import ipaddress
from collections import Counter, OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

import addresses

__all__ = ["Admission", "Block", "PER_ADDRESS", "PER_NETWORK", "OPENING_PER_ADDRESS", "OPENING_PER_NETWORK",
           "CROWD_SHARE", "BLOCK_FOR", "MAX_BLOCK"]

PER_ADDRESS = 16  # connections one address may hold: one per torrent, so 16 of ours fetched at once
PER_NETWORK = 32  # ... one network (a /24: a few households, or one office behind one NAT)
OPENING_PER_ADDRESS = 4  # connections one address may have open before their handshake (`swarm.net.handshakes`)
OPENING_PER_NETWORK = 16
CROWD_SHARE = 8  # connections a network may hold when the session is full before it gives way to newcomers
FULL_SLACK = 10  # the session counts as full from this many connections short of its capacity
BLOCK_FOR = 60.0  # seconds a source that went over a bound is filtered, the first time
MAX_BLOCK = 3600.0  # ... and at most, doubling with each offence
REMEMBER_FOR = 3600.0  # seconds after a block ends that an offence still counts towards the next block's length
MAX_REMEMBERED = 4096  # offenders remembered at most (the oldest forgotten first): bounded memory for any flood


@dataclass(frozen=True)
class Block:
    """A filtered source: an address or a network, its IP range, until when, and why."""

    source: str
    first: str
    last: str
    until: float
    reason: str


@dataclass
class _Connection:
    address: str
    network: str | None
    opening: bool = True


@dataclass
class _Offender:
    offences: int
    until: float


class Admission:
    def __init__(self, capacity: int, *, per_address: int = PER_ADDRESS, per_network: int = PER_NETWORK,
                 opening_per_address: int = OPENING_PER_ADDRESS, opening_per_network: int = OPENING_PER_NETWORK,
                 crowd_share: int = CROWD_SHARE, block_for: float = BLOCK_FOR, max_block: float = MAX_BLOCK,
                 remember_for: float = REMEMBER_FOR) -> None:
        bounds = (capacity, per_address, per_network, opening_per_address, opening_per_network, crowd_share)
        if min(bounds) < 1 or block_for <= 0 or max_block < block_for:
            raise ValueError("bounds must be >= 1 and 0 < block_for <= max_block")
        self.capacity, self.full_at = capacity, max(1, capacity - FULL_SLACK)
        self.per_address, self.per_network = per_address, per_network
        self.opening_per_address, self.opening_per_network = opening_per_address, opening_per_network
        self.crowd_share = crowd_share
        self.block_for, self.max_block, self.remember_for = block_for, max_block, remember_for
        self._connections: dict[Hashable, _Connection] = {}
        self._all: Counter[str] = Counter()  # address or network -> its connections
        self._opening: Counter[str] = Counter()  # ... -> those of them not handshaken yet
        self._blocks: dict[str, Block] = {}  # source -> its block
        self._offenders: OrderedDict[str, _Offender] = OrderedDict()  # oldest offence first
        self.refused = 0  # blocks made so far

    def arrived(self, key: Hashable, host: str, now: float) -> Block | None:
        """A connection was accepted from `host`; the block to add if that makes a source go over a bound."""
        address, network = addresses.source(host)
        if address is None or key in self._connections:
            return None
        self._connections[key] = connection = _Connection(address, network)
        for counter in (self._all, self._opening):
            _add(counter, connection, 1)
        if self._all[address] > self.per_address:
            return self._block(address, f"more than {self.per_address} connections from one address", now)
        if self._opening[address] > self.opening_per_address:
            return self._block(address, f"more than {self.opening_per_address} connections from one address "
                                        "before their handshake", now)
        if network is not None:
            if self._all[network] > self.per_network:
                return self._block(network, f"more than {self.per_network} connections from one network", now)
            if self._opening[network] > self.opening_per_network:
                return self._block(network, f"more than {self.opening_per_network} connections from one network "
                                            "before their handshake", now)
        if len(self._connections) >= self.full_at:
            crowd = max(self._networks(), key=lambda name: self._all[name], default=None)
            if crowd is not None and self._all[crowd] > self.crowd_share:
                return self._block(crowd, f"the session is full and this network holds {self._all[crowd]} of its "
                                          f"connections (more than {self.crowd_share})", now)
        return None

    def handshaken(self, key: Hashable) -> None:
        """The connection named a torrent of ours: it no longer counts as opening."""
        connection = self._connections.get(key)
        if connection is not None and connection.opening:
            connection.opening = False
            _add(self._opening, connection, -1)

    def left(self, key: Hashable) -> None:
        """A connection ended (one never reported as arrived, e.g. one this node dialled, is ignored)."""
        connection = self._connections.pop(key, None)
        if connection is None:
            return
        _add(self._all, connection, -1)
        if connection.opening:
            _add(self._opening, connection, -1)

    def expire(self, now: float) -> bool:
        """Lift the blocks whose time is up; whether any was (the filter must then be applied again)."""
        over = [source for source, block in self._blocks.items() if block.until <= now]
        for source in over:
            del self._blocks[source]
        return bool(over)

    def blocks(self) -> list[Block]:
        return list(self._blocks.values())

    def blocked(self, host: str, now: float) -> Block | None:
        """The block that covers `host`, if any (the tests' question: libtorrent applies the blocks)."""
        for source in addresses.source(host):
            block = self._blocks.get(source) if source is not None else None
            if block is not None and block.until > now:
                return block
        return None

    def reset(self) -> None:
        """Forget every connection (the blocks stay): libtorrent dropped alerts, so some ends went unseen."""
        self._connections.clear()
        self._all.clear()
        self._opening.clear()

    def status(self) -> dict[str, object]:
        return {"connections": len(self._connections),
                "opening": sum(1 for one in self._connections.values() if one.opening),
                "blocked": sorted(self._blocks), "blocks_made": self.refused}

    def _networks(self) -> set[str]:
        return {one.network for one in self._connections.values() if one.network is not None}

    def _block(self, source: str, reason: str, now: float) -> Block | None:
        if source in self._blocks:  # blocked already: libtorrent accepted this one before the filter applied
            return None
        offender = self._offenders.pop(source, None)
        if offender is not None and now - offender.until > self.remember_for:
            offender = None
        offences = 1 if offender is None else offender.offences + 1
        length = min(self.block_for * 2 ** min(offences - 1, 32), self.max_block)
        network = ipaddress.ip_network(source)  # an address is its own /32 or /128
        block = Block(source, str(network[0]), str(network[-1]), now + length, reason)
        self._blocks[source] = block
        self._offenders[source] = _Offender(offences, block.until)
        while len(self._offenders) > MAX_REMEMBERED:
            self._offenders.popitem(last=False)
        self.refused += 1
        return block


def _add(counter: Counter[str], connection: _Connection, delta: int) -> None:
    for name in (connection.address, connection.network):
        if name is None:
            continue
        counter[name] += delta
        if counter[name] <= 0:
            del counter[name]
