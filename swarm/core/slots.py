"""Serving slots: which peer connections a node keeps when more peers want one than it has (sans-I/O).

A node serves at most `capacity` connections, each counted from the moment it is accepted — before its
handshake, so connections that never say what they want hold a slot too (and have their handshake timeout,
`swarm.core.serve`). Content roots are public in the DHT: anyone can open connections and sit on them. So when
every slot is taken and another peer arrives, the newcomer is not simply refused; as libtorrent's choker
prefers the peers that transfer, the least useful connection makes room:

* a peer that took a block from us within `protect_for` seconds is downloading, and keeps its slot;
* of the others, the one whose last block (or, for one that never took any, its arrival) is oldest goes.

Only when every slot holds a peer that is downloading is the newcomer refused: then the node is at work, not
blocked. Idle connections can never hold slots against newcomers — at best an attacker's connections push out
each other, oldest first, while a newcomer that starts downloading is protected at its first block.

**Shares.** Downloading is cheap to fake: 64 connections from one address, each taking one 16 KiB block every
8 s, all counted as downloading and kept every newcomer out for as long as they ran. So protection is per
source: an address holds at most `per_address` protected slots and a network (`addresses.network_prefix`: a
public IPv4 /24, an IPv6 /48; on loopback or a LAN each address is its own network, so there `per_address`
binds) at most `per_network`. Slots are never refused for being over a share while some are free — one address
may use them all when nobody else wants them — but when the node is full:

* a newcomer within its shares takes the place of a connection whose address or network holds more than its
  share (downloading or not; the least useful of them), else of an unprotected one as above;
* a newcomer whose address or network already holds its share may only take the place of an unprotected
  connection of that same address or network: a source does not grow past its share at others' expense.

Many distinct peers are served exactly as before; a source with more addresses than that (a botnet, or many
networks) is the residual risk. A connection whose address is not an IP literal (the in-memory transport of
tests) counts in no address or network.

`admit(peer, now, address)` returns what to do: nothing (admitted), `Evict(victim)` (admitted in the victim's
place), or `Refuse(peer)`; the shell reports `downloaded(peer, now)` for each block a peer takes and
`release(peer)` when a connection ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import addresses

__all__ = ["SlotPolicy", "Evict", "Refuse", "SlotAction", "PROTECT_FOR"]

# libtorrent's unchoke interval: a peer that took a block this recently is counted as downloading.
PROTECT_FOR = 15.0

Peer = Hashable


@dataclass(frozen=True)
class Evict:
    peer: Peer
    reason: str


@dataclass(frozen=True)
class Refuse:
    peer: Peer
    reason: str


SlotAction = Evict | Refuse


@dataclass
class _Slot:
    arrived: float
    address: str | None  # canonical IP address; None: counts in no address (nor network)
    network: str | None  # `addresses.network_prefix`; None: counts in no network
    last_download: float | None = None

    def useful_since(self) -> float:
        return self.arrived if self.last_download is None else self.last_download


class SlotPolicy:
    def __init__(self, capacity: int, *, protect_for: float = PROTECT_FOR, per_address: int | None = None,
                 per_network: int | None = None) -> None:
        """Shares default to 1/16 of the slots per address (4 of 64) and 1/4 per network (16 of 64)."""
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.protect_for = protect_for
        self.per_address = max(1, capacity // 16) if per_address is None else per_address
        self.per_network = max(self.per_address, capacity // 4) if per_network is None else per_network
        if self.per_address < 1 or self.per_network < 1:
            raise ValueError("shares must be >= 1")
        self._slots: dict[Peer, _Slot] = {}
        self._by_address: Counter[str] = Counter()
        self._by_network: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, peer: object) -> bool:
        return peer in self._slots

    def held_by(self, address: str) -> int:
        """Slots held by connections from `address`."""
        host = addresses.canonical_host(address)
        return 0 if host is None else self._by_address[host]

    def admit(self, peer: Peer, now: float, address: str | None = None) -> list[SlotAction]:
        """A connection from `address` arrived: [] when it has a slot, [Evict(other)] when it took other's, or
        [Refuse(it)]."""
        host, network = addresses.source(address)
        actions: list[SlotAction] = []
        if len(self._slots) >= self.capacity:
            at_share = self._at_share(host, network)
            if at_share is not None:
                group_host, group_network, name = at_share
                victim = self._least_useful(now, lambda slot: self._in_group(slot, group_host, group_network))
                if victim is None:
                    return [Refuse(peer, f"{name} holds its share of slots, all downloading")]
            else:
                victim = self._over_share()
                if victim is None:
                    victim = self._least_useful(now, lambda slot: True)
                if victim is None:
                    return [Refuse(peer, f"all {self.capacity} slots serve peers that are downloading")]
            actions.append(Evict(victim, self._evicted(victim, now)))
            self._remove(victim)
        self._slots[peer] = _Slot(now, host, network)
        if host is not None:
            self._by_address[host] += 1
        if network is not None:
            self._by_network[network] += 1
        return actions

    def downloaded(self, peer: Peer, now: float) -> None:
        """`peer` took a block from us."""
        slot = self._slots.get(peer)
        if slot is not None:
            slot.last_download = now

    def release(self, peer: Peer) -> None:
        if peer in self._slots:
            self._remove(peer)

    # --- the rule -----------------------------------------------------------------------------------------

    def _at_share(self, host: str | None, network: str | None) -> tuple[str | None, str | None, str] | None:
        """The group (address, network, its name) whose share a newcomer from there would exceed, or None."""
        if host is not None and self._by_address[host] >= self.per_address:
            return host, None, f"address {host}"
        if network is not None and self._by_network[network] >= self.per_network:
            return None, network, f"network {network}"
        return None

    @staticmethod
    def _in_group(slot: _Slot, host: str | None, network: str | None) -> bool:
        return slot.address == host if host is not None else slot.network == network

    def _over(self, slot: _Slot) -> str | None:
        """The name of the group of `slot` that holds more than its share, or None."""
        if slot.address is not None and self._by_address[slot.address] > self.per_address:
            return f"address {slot.address}"
        if slot.network is not None and self._by_network[slot.network] > self.per_network:
            return f"network {slot.network}"
        return None

    def _over_share(self) -> Peer | None:
        """The least useful connection of an address or network holding more than its share, protected or not."""
        candidates = [(slot.useful_since(), index, peer) for index, (peer, slot) in enumerate(self._slots.items())
                      if self._over(slot) is not None]
        return min(candidates)[2] if candidates else None

    def _least_useful(self, now: float, eligible: Callable[[_Slot], bool]) -> Peer | None:
        """The unprotected connection, of those `eligible`, whose last block (or arrival) is oldest."""
        candidates = [(slot.useful_since(), index, peer) for index, (peer, slot) in enumerate(self._slots.items())
                      if eligible(slot) and not self._protected(slot, now)]
        return min(candidates)[2] if candidates else None

    def _protected(self, slot: _Slot, now: float) -> bool:
        return slot.last_download is not None and now - slot.last_download < self.protect_for

    def _evicted(self, victim: Peer, now: float) -> str:
        slot = self._slots[victim]
        group = self._over(slot)
        if group is not None and self._protected(slot, now):
            return f"slot given to a newcomer: {group} holds more than its share"
        return f"slot given to a newcomer: took nothing for {now - slot.useful_since():.0f} s"

    def _remove(self, peer: Peer) -> None:
        slot = self._slots.pop(peer)
        if slot.address is not None:
            self._by_address[slot.address] -= 1
            if not self._by_address[slot.address]:
                del self._by_address[slot.address]
        if slot.network is not None:
            self._by_network[slot.network] -= 1
            if not self._by_network[slot.network]:
                del self._by_network[slot.network]
