"""How long a push waits for an agent that makes no progress (sans-I/O).

A push waits for every admitted agent it targets. One that stays registered but never gets a block further (its
peer port firewalled, a broken disk that still lets it write its record) once held the push until `--timeout`,
or for good without one. So a push stops waiting for an agent whose verified count has not grown for `after`
seconds while it was fetching, reports it, and exits non-zero once every other agent is done.

The clock agrees with the rest of the cluster's tolerance:

* **a redis outage is no stall.** Agents keep fetching while redis is away and rewrite their records when it
  returns; the push cannot read anything meanwhile. Only time between two rounds it read counts, each gap at most
  `gap` seconds (two reconcile periods), so an outage of any length costs an agent at most that much patience.
* **waiting its turn is no stall.** An agent fetching a transfer of higher priority first says `fetching: false`
  (`cluster.turns`); its clock starts again.
* **a late agent starts fresh.** An agent's clock starts when its record is first read (a rack that joins late),
  and again whenever it makes progress.

An agent registered that never writes a member record is judged the same way, from when it was first seen. One
that was seen and then went away (its host died: its keys expire) is **unreachable** once it has been away that
long on the same clock; an agent that restarts within it is simply waited for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cluster.division import MemberState

__all__ = ["Patience"]

GIVE_UP_AFTER = 300.0  # seconds without progress a push waits for an agent (`cluster push --give-up-after`)


class Patience:
    def __init__(self, after: float = GIVE_UP_AFTER, gap: float = 4.0) -> None:
        self.after, self.gap = after, gap
        self._seen = 0.0  # seconds of rounds read so far (gaps capped at `gap`)
        self._last_round: float | None = None
        self._progress: dict[str, tuple[int, float]] = {}  # node -> (verified, `_seen` when it last grew)
        self._present: dict[str, float] = {}  # node -> `_seen` when its record or registration was last read

    def observe_round(self, records: Mapping[str, MemberState], now: float, registered: Iterable[str] = ()
                      ) -> frozenset[str]:
        """Every member record read this round, and the agents registered now; the agents given up on among
        those (no progress for `after`)."""
        if self._last_round is not None:
            self._seen += min(max(0.0, now - self._last_round), self.gap)
        self._last_round = now
        for node, record in records.items():
            before = self._progress.get(node)
            if before is None or record.verified > before[0] or not record.fetching:
                self._progress[node] = (record.verified, self._seen)
            self._present[node] = self._seen
        present = set(records)
        for node in registered:  # registered, no record yet: its clock starts when first seen
            self._progress.setdefault(node, (-1, self._seen))
            self._present[node] = self._seen
            present.add(node)
        return frozenset(node for node in present if self.waited(node) >= self.after
                         and (node not in records or records[node].verified < records[node].blocks))

    def absent(self, node: str) -> float:
        """Seconds (as counted above) since `node`'s record or registration was last read."""
        return self._seen - self._present.get(node, self._seen)

    def waited(self, node: str) -> float:
        """Seconds (as counted above) since `node` last made progress; 0 for one never read."""
        entry = self._progress.get(node)
        return 0.0 if entry is None else self._seen - entry[1]
