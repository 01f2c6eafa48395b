"""The clients a busy origin has asked to swarm, per file: whom a hinted head lists (`Swarm-Peers`). Sans-I/O.

Each entry is the address a hinted GET came from, with the port its `Swarm-Accept` field named
(`swarm.content.peer_field`): the client leaves at the hint and serves what it fetches there. An address is one
entry (a public IPv6 address: its /64, one subscriber: `addresses.source`), so one host with many ports or many
connections is one entry, and its newest claim replaces the older. A hinted head lists up to `PEERS_GIVEN` of the
file's entries at random, never the requester's own; the requester is added afterwards.

Which entries: those older than `FRESH` s first, and younger ones only when those are too few. A client hinted a
moment ago is still fetching and holds little; one hinted a second before most likely holds the file. At 1,000
arrivals a second, listing the newest 256 clients (a quarter second of the crowd), the simulated origin was asked
for the blocks none of them had yet and sent at its full rate throughout (bench/README.md, "The peer list").

The list keeps the last `per_file` entries of a file (4,096: seconds of a crowd of a thousand a second, minutes of
a smaller one) in a ring in the order they came, so the older ones are a contiguous run of it and a pick costs
O(want + log per_file), not a walk of the list: the plugin answers every hinted GET of a crowd. An entry older
than `max_age` is not listed; at most `total` entries over all files (the least recently hinted file goes first):
bounded memory whatever strangers send.

What it cannot stop (SECURITY.md): whoever controls many addresses can fill a file's list with addresses that
serve nothing; a client then dials them in vain and falls back on its DHT lookup and the origin.
"""

from __future__ import annotations

import bisect
import collections
import random

import addresses
from swarm.content.peer_field import PEERS_GIVEN

__all__ = ["PeerPool", "PER_FILE", "TOTAL", "MAX_AGE", "FRESH"]

PER_FILE = 4096  # entries kept per file
TOTAL = 65_536  # ... and over all files (17 MB when full, measured with tracemalloc: 263 B an entry)
# Seconds an entry is listed: a client serves what it fetched for a while after (the proxy's --linger, 10 min by
# default), and a crowd a busy origin hints to is much shorter than that
MAX_AGE = 600.0
FRESH = 1.0  # s: an entry younger than this is listed only when there are too few older ones


class _File:
    """One file's ring: `times`, `hosts`, `ports`, `sources` by slot, in the order they came (slot `start` is the
    oldest once full); `slot_of` maps a source to its newest slot (an older slot of the same source is stale)."""

    __slots__ = ("times", "hosts", "ports", "sources", "start", "slot_of")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.hosts: list[str] = []
        self.ports: list[int] = []
        self.sources: list[str] = []
        self.start = 0
        self.slot_of: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.slot_of)

    def slot(self, age_rank: int) -> int:
        """The slot of the `age_rank`-th oldest entry (stale ones included)."""
        return (self.start + age_rank) % len(self.times)

    def add(self, source: str, host: str, port: int, now: float, capacity: int) -> None:
        """Append (in the oldest slot once `capacity` are taken)."""
        old = self.slot_of.pop(source, None)
        if old is not None:
            self.sources[old] = ""  # stale: skipped by picks, replaced in its turn
        if len(self.times) < capacity:
            slot = len(self.times)
            self.times.append(now)
            self.hosts.append(host)
            self.ports.append(port)
            self.sources.append(source)
        else:
            slot, self.start = self.start, (self.start + 1) % capacity
            gone = self.sources[slot]
            if gone and self.slot_of.get(gone) == slot:
                del self.slot_of[gone]
            self.times[slot], self.hosts[slot], self.ports[slot], self.sources[slot] = now, host, port, source
        self.slot_of[source] = slot

    def older_than(self, when: float) -> int:
        """How many of the oldest slots hold entries from before `when` (times are in order around the ring)."""
        size = len(self.times)
        return bisect.bisect_left(range(size), when, key=lambda rank: self.times[self.slot(rank)])


class PeerPool:
    def __init__(self, *, per_file: int = PER_FILE, total: int = TOTAL, max_age: float = MAX_AGE,
                 fresh: float = FRESH, rng: random.Random | None = None) -> None:
        if min(per_file, total) < 1 or max_age <= 0 or fresh < 0:
            raise ValueError("per_file and total must be at least 1, max_age above 0, fresh not negative")
        self.per_file, self.total, self.max_age, self.fresh = per_file, total, max_age, fresh
        self.rng = rng or random.Random()
        self._files: collections.OrderedDict[bytes, _File] = collections.OrderedDict()  # least recent first
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def exchange(self, root: bytes, host: str | None, port: int | None, now: float,
                 want: int = PEERS_GIVEN) -> list[tuple[str, int]]:
        """Up to `want` listed peers of `root` for a hinted GET from `host` (never `host`'s own entry), then that
        client added with `port` (when it named one and `host` is an IP address)."""
        source, _network = addresses.source(host)
        entries = self._files.get(root)
        given = [] if entries is None else self._pick(entries, source, now, want)
        if source is not None and port is not None:
            self._add(root, source, addresses.canonical_host(host) or source, port, now)
        return given

    def _pick(self, entries: _File, source: str | None, now: float, want: int) -> list[tuple[str, int]]:
        expired = entries.older_than(now - self.max_age)
        older = entries.older_than(now - self.fresh)
        chosen: list[int] = []
        # The older ranks first, then the fresh ones when those gave too few; in each up to 4 x `want` tried at
        # random (a stale slot, or the requester's own, is skipped)
        for lo, hi in ((expired, older), (older, len(entries.times))):
            for rank in self.rng.sample(range(lo, hi), min(hi - lo, 4 * want)):
                if len(chosen) == want:
                    break
                slot = entries.slot(rank)
                other = entries.sources[slot]
                if other and other != source and entries.slot_of.get(other) == slot:
                    chosen.append(slot)
        return [(entries.hosts[slot], entries.ports[slot]) for slot in chosen]

    def _add(self, root: bytes, source: str, host: str, port: int, now: float) -> None:
        entries = self._files.get(root)
        if entries is None:
            entries = self._files[root] = _File()
        self._files.move_to_end(root)
        before = len(entries)
        entries.add(source, host, port, now, self.per_file)
        self._count += len(entries) - before
        while self._count > self.total and len(self._files) > 1:
            _, gone = self._files.popitem(last=False)
            self._count -= len(gone)
