"""The iterative Kademlia lookup as a state machine. Pure: no sockets, time comes in as `now`.

The asyncio shell (`dht.node`) asks `next_queries(now)` whom to query, sends the RPCs, and reports each outcome
with `on_reply` or `on_failure`; it stops when `finished(now)` says so. Rules:

* at most `alpha` queries in flight; always the closest not-yet-queried known contacts first;
* once a reply brings no contact closer than the closest already known, the lookup has converged, and it asks
  every one of the `k` closest it has not asked yet at once (the Kademlia paper's final round, §2.3): it must hear
  from all of them before it ends anyway, and asking them `alpha` at a time took one round trip per `alpha` of
  them (a manifest lookup among 100 nodes on 25 ms links: 0.45 s, most of a flash-crowd download);
* done when the `k` closest contacts that have not failed have all replied (classic Kademlia termination), or
  nothing is left to ask, or the overall `deadline` passed — a lookup never waits longer than that, however
  many dead nodes it meets (each dead one costs one per-RPC timeout, paid `alpha` at a time, or all at once
  once it has converged);
* the result is the `k` closest contacts that replied, with the write token each gave us.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dht.wire import Contact

_NEW, _IN_FLIGHT, _REPLIED, _FAILED = range(4)


@dataclass
class _Candidate:
    contact: Contact
    distance: int
    state: int = _NEW
    token: bytes = b""


@dataclass
class Lookup:
    target: bytes
    k: int
    alpha: int
    deadline: float
    self_id: bytes = b""
    max_candidates: int = 200  # bounds memory if peers answer with floods of bogus contacts
    # A read may end once all but `slack` of the k closest replied, after it converged (`finished`).
    slack: int = 0
    _candidates: dict[bytes, _Candidate] = field(default_factory=dict, init=False, repr=False)
    _target_int: int = field(default=0, init=False, repr=False)
    queries_sent: int = field(default=0, init=False)
    converged: bool = field(default=False, init=False)  # a reply brought nothing closer: ask the k closest at once

    def __post_init__(self) -> None:
        self._target_int = int.from_bytes(self.target, "big")

    @classmethod
    def start(
        cls, target: bytes, seeds: Iterable[Contact], *, k: int, alpha: int, deadline: float, self_id: bytes = b"",
        slack: int = 0,
    ) -> Lookup:
        lookup = cls(target=target, k=k, alpha=alpha, deadline=deadline, self_id=self_id, slack=slack)
        lookup.add_contacts(seeds)
        return lookup

    @classmethod
    def again(
        cls, previous: Lookup, seeds: Iterable[Contact], *, k: int, alpha: int, deadline: float, self_id: bytes = b"",
        slack: int = 0,
    ) -> Lookup:
        """A new lookup of `previous`'s target, which ran moments ago. If that one `settled`, its k closest are
        asked again all at once, as in a final round: one round trip instead of a walk in from our routing
        table (a download waiting for vouches looks the same key up every half second; a walk took 0.2-1 s of
        its wait in a flash crowd). Contacts nearer the target that they or `seeds` name are still asked, and
        a dead one is still replaced, as in any final round. If it did not settle, its replies only seed a
        walk."""
        lookup = cls.start(
            previous.target, [c for c, _ in previous.result()] + list(seeds),
            k=k, alpha=alpha, deadline=deadline, self_id=self_id, slack=slack,
        )
        lookup.converged = previous.settled()
        return lookup

    def settled(self) -> bool:
        """Did it converge and hear from the k closest it knew, all but `slack` of them (not stopped early by
        its reader, nor by its deadline)?"""
        return self._settled(self._live_closest())

    def _settled(self, live: list[_Candidate]) -> bool:
        if not self.converged or not live or any(c.state == _NEW for c in live):
            return False
        replied = sum(1 for c in live if c.state == _REPLIED)
        # The slack only where there are k to choose from: in a network of a few nodes each one counts.
        return replied == len(live) or (len(live) == self.k and replied >= self.k - self.slack)

    def distance(self, node_id: bytes) -> int:
        return int.from_bytes(node_id, "big") ^ self._target_int

    def add_contacts(self, contacts: Iterable[Contact]) -> None:
        for contact in contacts:
            if contact.node_id == self.self_id or contact.node_id in self._candidates:
                continue
            if len(contact.node_id) != len(self.target):
                continue
            self._candidates[contact.node_id] = _Candidate(contact, self.distance(contact.node_id))
        if len(self._candidates) > self.max_candidates:
            # Keep the closest; a far-away NEW contact can never matter once k closer ones exist.
            keep = sorted(self._candidates.values(), key=lambda c: c.distance)[: self.max_candidates]
            kept_ids = {c.contact.node_id for c in keep}
            for node_id in list(self._candidates):
                if node_id not in kept_ids and self._candidates[node_id].state == _NEW:
                    del self._candidates[node_id]

    def _live_closest(self) -> list[_Candidate]:
        live = [c for c in self._candidates.values() if c.state != _FAILED]
        live.sort(key=lambda c: c.distance)
        return live[: self.k]

    def _closest_live(self) -> int:
        return min((c.distance for c in self._candidates.values() if c.state != _FAILED), default=0)

    def in_flight(self) -> int:
        return sum(1 for c in self._candidates.values() if c.state == _IN_FLIGHT)

    def next_queries(self, now: float) -> list[Contact]:
        """Contacts to query now (marked in flight). Empty when waiting, finished or past the deadline."""
        if now >= self.deadline:
            return []
        budget = (self.k if self.converged else self.alpha) - self.in_flight()
        chosen = []
        for candidate in self._live_closest():
            if budget <= 0:
                break
            if candidate.state == _NEW:
                candidate.state = _IN_FLIGHT
                chosen.append(candidate.contact)
                budget -= 1
        self.queries_sent += len(chosen)
        return chosen

    def on_reply(self, contact: Contact, contacts: Iterable[Contact], token: bytes = b"") -> None:
        candidate = self._candidates.get(contact.node_id)
        if candidate is None:
            return
        candidate.state = _REPLIED
        candidate.token = token
        if self.converged:
            self.add_contacts(contacts)
            return
        closest = self._closest_live()
        self.add_contacts(contacts)
        self.converged = self._closest_live() >= closest

    def on_failure(self, contact: Contact) -> None:
        candidate = self._candidates.get(contact.node_id)
        if candidate is not None:
            candidate.state = _FAILED

    def resume(self, deadline: float) -> None:
        """Go on with a lookup whose driver stopped early (a reader had found enough records), until `deadline`:
        the queries it cancelled in flight are asked again; what already replied, with its token, stays."""
        for candidate in self._candidates.values():
            if candidate.state == _IN_FLIGHT:
                candidate.state = _NEW
        self.deadline = deadline
        self.slack = 0  # a write goes on to hear from every one of the k closest

    def finished(self, now: float) -> bool:
        if now >= self.deadline:
            return True
        # Queries still in flight to contacts that fell out of the k closest do not matter any more.
        live = self._live_closest()
        if all(c.state == _REPLIED for c in live):
            return True
        # A read does not wait for its last `slack` stragglers: a record is on all k of them, and one busy node
        # (its replies queued behind the blocks it serves) held a waiting download's poll up to a request
        # timeout, then again for the contact that replaced it.
        return self.slack > 0 and self._settled(live)

    def next_deadline(self) -> float:
        return self.deadline

    def result(self) -> list[tuple[Contact, bytes]]:
        """The k closest contacts that replied, closest first, each with its write token."""
        replied = [c for c in self._candidates.values() if c.state == _REPLIED]
        replied.sort(key=lambda c: c.distance)
        return [(c.contact, c.token) for c in replied[: self.k]]
