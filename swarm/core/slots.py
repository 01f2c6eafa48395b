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

`admit(peer, now)` returns what to do: nothing (admitted), `Evict(victim)` (admitted in the victim's place), or
`Refuse(peer)`; the shell reports `downloaded(peer, now)` for each block a peer takes and `release(peer)` when
a connection ends.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

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
    last_download: float | None = None

    def useful_since(self) -> float:
        return self.arrived if self.last_download is None else self.last_download


class SlotPolicy:
    def __init__(self, capacity: int, *, protect_for: float = PROTECT_FOR) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.protect_for = protect_for
        self._slots: dict[Peer, _Slot] = {}

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, peer: object) -> bool:
        return peer in self._slots

    def admit(self, peer: Peer, now: float) -> list[SlotAction]:
        """A connection arrived: [] when it has a slot, [Evict(other)] when it took other's, or [Refuse(it)]."""
        actions: list[SlotAction] = []
        if len(self._slots) >= self.capacity:
            victim = self._least_useful(now)
            if victim is None:
                return [Refuse(peer, f"all {self.capacity} slots serve peers that are downloading")]
            idle = now - self._slots.pop(victim).useful_since()
            actions.append(Evict(victim, f"slot given to a newcomer: took nothing for {idle:.0f} s"))
        self._slots[peer] = _Slot(now)
        return actions

    def downloaded(self, peer: Peer, now: float) -> None:
        """`peer` took a block from us."""
        slot = self._slots.get(peer)
        if slot is not None:
            slot.last_download = now

    def release(self, peer: Peer) -> None:
        self._slots.pop(peer, None)

    def _least_useful(self, now: float) -> Peer | None:
        candidates = [(slot.useful_since(), index, peer) for index, (peer, slot) in enumerate(self._slots.items())
                      if slot.last_download is None or now - slot.last_download >= self.protect_for]
        return min(candidates)[2] if candidates else None
