"""The clients a busy origin has asked to swarm, per file: whom a hinted head lists (`Swarm-Peers`). Sans-I/O.

Each entry is the address a hinted GET came from, with the port its `Swarm-Accept` field named
(`swarm.content.peer_field`): the client leaves at the hint and serves what it fetches there. An address is one
entry (a public IPv6 address: its /64, one subscriber; an IPv6 address that embeds an IPv4 host: that host:
`addresses.source`), so one host with many ports or many connections is one entry: its newest claim takes the
port, and it keeps its place and age (asking again and again pushes nobody out). A public network (a /24, a /48:
`addresses.network_prefix`) keeps its newest `per_network` entries of a file, so one party's many addresses fill
at most that much of it. Link-local and special-purpose clients are not kept: nobody may dial them. A hinted head
lists up to `PEERS_GIVEN` of the file's entries at random, never the requester's own; the requester is added
afterwards.

Which entries: those older than `FRESH` s first, and younger ones only when those are too few. A client hinted a
moment ago is still fetching and holds little; one hinted a second before most likely holds the file. At 1,000
arrivals a second, listing the newest 256 clients (a quarter second of the crowd), the simulated origin was asked
for the blocks none of them had yet and sent at its full rate throughout (bench/README.md, "The peer list").

The list keeps the last `per_file` entries of a file (4,096: seconds of a crowd of a thousand a second, minutes of
a smaller one) in a ring in the order they came, so the older ones are a contiguous run of it and a pick costs
O(want + log per_file), not a walk of the list: the plugin answers every hinted GET of a crowd. An entry older
than `max_age` is not listed (a client that asks again after that is a new entry); a slot left behind (a network's
oldest entry making way, an expired one asked anew) is skipped by picks; the ring is compacted (left-behind and
expired slots freed) once such slots are half the unexpired ones, and when it is full and an eighth of it is left
behind, before it pushes a live entry out: a party cycling through its network's addresses pushes out the
`per_network` entries it may hold and at most an eighth of the ring more, once. At most `total` slots over all
files, left-behind ones included (the least recently hinted file goes first): bounded memory whatever strangers
send.

What it cannot stop (SECURITY.md): whoever controls addresses in many networks can fill a file's list with
addresses that serve nothing; a client then dials them in vain and falls back on its DHT lookup and the origin.
Behind a reverse proxy or a CDN the plugin sees the proxy's address, not the client's: give it the client's
(`uvicorn --proxy-headers`, an aiohttp middleware that sets `request.remote`) or `Publisher(list_peers=False)`.
"""

from __future__ import annotations

import bisect
import collections
import random

import addresses
from swarm.content.peer_field import PEERS_GIVEN

__all__ = ["PeerPool", "PER_FILE", "PER_NETWORK", "TOTAL", "MAX_AGE", "FRESH"]

PER_FILE = 4096  # entries kept per file
# ... per public network (a /24, a /48) per file: a crowd comes from many networks, and a party holding a /48
# (a free tunnel broker's) or a /24 lists at most this many of its addresses
PER_NETWORK = 16
# Slots over all files: 30 MB when full of public clients, 17 MB of private ones (453 and 263 B a slot by
# tracemalloc; tests/server_plugin/test_peer_pool.py holds a slot under 480 B)
TOTAL = 65_536
# Seconds an entry is listed: a client serves what it fetched for a while after (the proxy's --linger, 10 min by
# default), and a crowd a busy origin hints to is much shorter than that
MAX_AGE = 600.0
FRESH = 1.0  # s: an entry younger than this is listed only when there are too few older ones
_KEPT = (addresses.Kind.PUBLIC, addresses.Kind.PRIVATE, addresses.Kind.LOOPBACK)  # kinds a node may dial at all
_COMPACT_FROM = 32  # left-behind slots a file may hold whatever its live entries: a small file is not rebuilt often
_RECLAIM_PART = 8  # a full ring is compacted once this part of it is left behind, before a live entry is pushed out


class _File:
    """One file's ring: `times`, `hosts`, `ports`, `sources`, `networks` by slot, in the order they came (slot
    `start` is the oldest once full); `slot_of` maps a live source to its slot, `by_network` a public network to
    its live slots, oldest first. A slot whose source is "" was left behind: skipped, reused in its turn."""

    __slots__ = ("times", "hosts", "ports", "sources", "networks", "start", "slot_of", "by_network", "behind")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.hosts: list[str] = []
        self.ports: list[int] = []
        self.sources: list[str] = []
        self.networks: list[str | None] = []
        self.start = 0
        self.slot_of: dict[str, int] = {}
        self.by_network: dict[str, list[int]] = {}
        self.behind = 0  # slots left behind

    def __len__(self) -> int:
        return len(self.slot_of)

    def slot(self, age_rank: int) -> int:
        """The slot of the `age_rank`-th oldest entry (left-behind ones included)."""
        return (self.start + age_rank) % len(self.times)

    def add(self, source: str, network: str | None, host: str, port: int, now: float, *, capacity: int,
            per_network: int, expired: float) -> None:
        """`source` claims `host`:`port` at `now`: its live entry takes the new address and port, in place; else it
        is appended (in the oldest slot once `capacity` are taken), its network's oldest entry making way when
        that network has `per_network` already. An entry from before `expired` is not live."""
        slot = self.slot_of.get(source)
        if slot is not None and self.times[slot] >= expired:
            self.hosts[slot], self.ports[slot] = host, port
            return
        if slot is not None:
            self._leave(slot)
        mates = self.by_network.get(network) if network is not None else None
        if mates is not None and len(mates) >= per_network:
            self._leave(mates[0])
        if len(self.times) >= capacity and self.behind >= max(1, capacity // _RECLAIM_PART):
            # Full with slots left behind: free them rather than push out the oldest live entry (else each ask
            # of a network at its cap, one slot left behind and one taken, pushed out an honest entry)
            self._compact(expired)
        if len(self.times) < capacity:
            slot = len(self.times)
            self.times.append(now)
            self.hosts.append(host)
            self.ports.append(port)
            self.sources.append(source)
            self.networks.append(network)
        else:
            slot, self.start = self.start, (self.start + 1) % capacity
            if self.sources[slot]:
                self._forget(slot)
            else:
                self.behind -= 1
            self.times[slot], self.hosts[slot], self.ports[slot] = now, host, port
            self.sources[slot], self.networks[slot] = source, network
        self.slot_of[source] = slot
        if network is not None:
            self.by_network.setdefault(network, []).append(slot)
        if self.behind >= _COMPACT_FROM and 2 * self.behind >= len(self.times) - self.older_than(expired):
            # Left-behind slots are half of those a pick samples (the unexpired ones): expired entries are
            # never listed, so they must not count as live ones here, or they shield a ring of left-behind slots
            self._compact(expired)

    def older_than(self, when: float) -> int:
        """How many of the oldest slots hold entries from before `when` (times are in order around the ring)."""
        size = len(self.times)
        return bisect.bisect_left(range(size), when, key=lambda rank: self.times[self.slot(rank)])

    def _forget(self, slot: int) -> None:
        """The live entry in `slot` is gone from the indexes (its slot is about to be reused or left behind)."""
        del self.slot_of[self.sources[slot]]
        network = self.networks[slot]
        if network is not None:
            mates = self.by_network[network]
            mates.remove(slot)  # at most `per_network` long
            if not mates:
                del self.by_network[network]

    def _leave(self, slot: int) -> None:
        self._forget(slot)
        self.sources[slot] = ""
        self.behind += 1

    def _compact(self, expired: float) -> None:
        """Rebuild the ring from its live slots from `expired` on, oldest first: its left-behind and expired ones
        freed. Amortised O(1) an add: it costs a step a slot, each expired slot is freed once, and it runs when
        the left-behind slots are at least half the unexpired ones, or an eighth of a full ring."""
        live = [slot for slot in map(self.slot, range(len(self.times)))
                if self.sources[slot] and self.times[slot] >= expired]
        self.times = [self.times[s] for s in live]
        self.hosts = [self.hosts[s] for s in live]
        self.ports = [self.ports[s] for s in live]
        self.sources = [self.sources[s] for s in live]
        self.networks = [self.networks[s] for s in live]
        self.start, self.behind = 0, 0
        self.slot_of = {source: slot for slot, source in enumerate(self.sources)}
        self.by_network = {}
        for slot, network in enumerate(self.networks):
            if network is not None:
                self.by_network.setdefault(network, []).append(slot)


class PeerPool:
    def __init__(self, *, per_file: int = PER_FILE, per_network: int = PER_NETWORK, total: int = TOTAL,
                 max_age: float = MAX_AGE, fresh: float = FRESH, rng: random.Random | None = None) -> None:
        if min(per_file, per_network) < 1 or total < per_file or max_age <= 0 or fresh < 0:
            raise ValueError("per_file and per_network must be at least 1, total at least per_file, max_age above 0,"
                             " fresh not negative")
        self.per_file, self.per_network, self.total = per_file, per_network, total
        self.max_age, self.fresh = max_age, fresh
        self.rng = rng or random.Random()
        self._files: collections.OrderedDict[bytes, _File] = collections.OrderedDict()  # least recent first
        self._slots = 0  # over all files, left-behind ones included: what `total` bounds
        self._now = float("-inf")  # the latest `now` seen: a clock that steps back is held where it was

    def __len__(self) -> int:
        """Live entries over all files (a walk of the files: for tests and diagnostics)."""
        return sum(len(entries) for entries in self._files.values())

    @property
    def slots(self) -> int:
        return self._slots

    def exchange(self, root: bytes, host: str | None, port: int | None, now: float,
                 want: int = PEERS_GIVEN) -> list[tuple[str, int]]:
        """Up to `want` listed peers of `root` for a hinted GET from `host` (never `host`'s own entry), then that
        client added with `port` (when it named one and `host` is an IP address a node may dial)."""
        now = self._now = max(self._now, now)  # the ring's times must not go back: its picks bisect them
        source, network = addresses.source(host)
        entries = self._files.get(root)
        given = [] if entries is None else self._pick(entries, source, now, max(0, want))
        kind = addresses.kind_of(host)
        if source is not None and port is not None and kind in _KEPT:
            self._add(root, source, network if kind is addresses.Kind.PUBLIC else None,
                      addresses.canonical_host(host) or source, port, now)
        return given

    def _pick(self, entries: _File, source: str | None, now: float, want: int) -> list[tuple[str, int]]:
        expired = entries.older_than(now - self.max_age)
        older = entries.older_than(now - self.fresh)
        chosen: list[int] = []
        # The older ranks first, then the fresh ones when those gave too few; in each up to 4 x `want` tried at
        # random (a left-behind slot, or the requester's own, is skipped: at most half the unexpired slots are)
        for lo, hi in ((expired, older), (older, len(entries.times))):
            if len(chosen) == want:
                break
            for rank in self.rng.sample(range(lo, hi), min(hi - lo, 4 * want)):
                slot = entries.slot(rank)
                other = entries.sources[slot]
                if other and other != source:
                    chosen.append(slot)
                    if len(chosen) == want:
                        break
        return [(entries.hosts[slot], entries.ports[slot]) for slot in chosen]

    def _add(self, root: bytes, source: str, network: str | None, host: str, port: int, now: float) -> None:
        entries = self._files.get(root)
        if entries is None:
            entries = self._files[root] = _File()
        self._files.move_to_end(root)
        before = len(entries.times)
        entries.add(source, network, host, port, now, capacity=self.per_file, per_network=self.per_network,
                    expired=now - self.max_age)
        self._slots += len(entries.times) - before
        while self._slots > self.total:
            _, gone = self._files.popitem(last=False)  # never this file: `total` >= `per_file`
            self._slots -= len(gone.times)
