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
  (`cluster.turns`); its clock stands still meanwhile (it does not start again: a transfer that cannot progress
  and yields its turn every 30 s would otherwise never be given up on). Any change of its verified count, up or
  down (a wiped store), starts it again.
* **a late agent starts fresh.** An agent's clock starts when its record is first read (a rack that joins late),
  and again whenever it makes progress.

An agent registered that never writes a member record is judged the same way, from when it was first seen. One
that was seen and then went away (its host died: its keys expire) is **unreachable** once it has been away that
long on the same clock; an agent that restarts within it is simply waited for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cluster.stalls import MemberState

__all__ = ["Patience"]

GIVE_UP_AFTER = 300.0  # seconds without progress a push waits for an agent (`cluster push --give-up-after`)


class Patience:
    def __init__(self, after: float = GIVE_UP_AFTER, gap: float = 4.0) -> None:
        self.after, self.gap = after, gap
        self._seen = 0.0  # seconds of rounds read so far (gaps capped at `gap`)
        self._last_round: float | None = None
        self._stalled: dict[str, tuple[int, float]] = {}  # node -> (verified, seconds fetching without a change)
        self._present: dict[str, float] = {}  # node -> `_seen` when its record or registration was last read

    def observe_round(self, records: Mapping[str, MemberState], now: float, registered: Iterable[str] = ()
                      ) -> frozenset[str]:
        """Every member record read this round, and the agents registered now; the agents given up on among
        those: fetching for `after` s in all without their verified count changing (waiting their turn pauses
        the count, any change restarts it)."""
        step = 0.0 if self._last_round is None else min(max(0.0, now - self._last_round), self.gap)
        self._last_round = now
        self._seen += step
        present = set(records) | set(registered)
        for node in present:
            record = records.get(node)
            verified = record.verified if record is not None else -1  # registered, no record yet
            fetching = record.fetching if record is not None else True
            before = self._stalled.get(node)
            if before is None or verified != before[0]:
                stalled = 0.0
            else:
                stalled = before[1] + (step if fetching else 0.0)
            self._stalled[node] = (verified, stalled)
            self._present[node] = self._seen
        return frozenset(node for node in present if self._stalled[node][1] >= self.after
                         and (node not in records or records[node].verified < records[node].blocks))

    def waited(self, node: str) -> float:
        """Seconds (as counted above) `node` has been fetching without progress; 0 for one never read."""
        entry = self._stalled.get(node)
        return 0.0 if entry is None else entry[1]

    def absent(self, node: str) -> float:
        """Seconds (as counted above) since `node`'s record or registration was last read."""
        return self._seen - self._present.get(node, self._seen)
