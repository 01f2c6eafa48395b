"""Work division (sans-I/O): each member of a group prefers its own slice of the blocks.

Tekel's work division: the members of a group that fetch from the level above split the blocks between them, so
the level above sends each block once and the members trade the rest among themselves. Here a member's slice is
a contiguous run of the blocks (`slice_of`), the members ordered by node id so that every member computes the
same split without talking; a member asks for its slice first, then the rest.

The block engine's piece picker (`swarm.core.picker`) already orders the blocks a source offers by availability
and, for ties, by one permutation drawn from an injected `random.Random` (`rng.shuffle`); `SliceFirst` is such an
rng whose shuffle puts the slice first. With rarest first on top, a block another member already holds is
"less rare" and is taken from that member, not from above: the slice only breaks the ties that would otherwise be
random. The engine does not take an rng through `SwarmService.fetch` yet, so the agent relies on the entry plan
below; `SliceFirst` is the picker-side half, ready for that hook (tests/cluster/test_division.py drives the real
picker with it).

**Entry points** (`EntryPlan`, the division this engine version can apply without a picker hook): every block
enters each unit of the topology through one designated member, and a node serving a peer across a level shows
it (BITFIELD, HAVE) only the blocks that peer is the entry point of; inside a rack everything, but for the blocks
an entry point brought in (carriers, below). So:

* the seeder shows each root member (the DC representants, all DCs) its contiguous slice: it sends each block
  once (seeder upload ratio ~1, Tekel's 1.12 with work stealing);
* into a DC, a block enters through the DC representant that got it from the seeder if that one is in this DC,
  else the DC's representants split the remaining blocks: each DC uplink carries about one copy;
* into a rack likewise, nested in the DC's choice: each rack uplink carries about one copy, the two rack
  representants each bringing in half (one that the level above already sends a share takes that much less of
  the rest: they share the rack's uplink) and trading the rest inside the rack;
* between the racks of a DC, a block is shown only by its parent in a small tree of racks rooted at its home rack,
  the one it entered the DC through (`HOME_FANOUT` children each; with three racks the home gives to both
  others): a rack's uplink carries out about one copy in all, so the blocks only it can give do not queue behind
  blocks the other racks could have had from elsewhere;
* inside a rack, a block its entry point brought in is shown at first to one member only, its first **carrier**
  (the rack's members that are not its representants take each entry point's blocks in turn), and it goes on from
  there to the rest of the rack, down a small tree of carriers in a large rack (`cluster.carriers`). Shown to
  everyone, every member would ask the entry point for the same newest blocks at once (they alone hold them): its
  uplink would carry the rack 2-5 copies while the members' idled at 0.5-0.8 (the lab's `upload_copies_by_role`);
  with carriers every host uploads about one copy, as BitTorrent's super-seeding spreads a seed's pieces. A rack
  of representants alone is shown everything.

The plan is a pure function of the overlay `View`, so every node computes the same one. When a member leaves
(its record expires), the plan is recomputed without it and the serving nodes reveal (HAVE) what they hid from the
others; a slice is never taken back, since a peer never forgets a HAVE.

**Work stealing** (`cluster.stalls`): a member that made no progress for `STEAL_AFTER` s is shown everything
across the level (`stalled`); one whose requests timed out on the only sources of some blocks is shown those blocks
by the others, and each such source shows its share to its unit's other members (`stranded`, `shown`).

Late members (a rack that joins late, Kraken's issue #244) get their share as soon as they are representants:
what they are shown comes from every rack of the DC that holds it, never from a seeder slot the first racks hold.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Container, Iterable, Mapping, MutableSequence
from typing import Any

from cluster.carriers import STAR_UP_TO, CarriedFirst, Relayed, carrier_turns
from cluster.overlay import RACK_REPS, Level, Location, View
from cluster.stalls import Joined

__all__ = ["EntryPlan", "HOME_FANOUT", "SliceFirst", "provider_order", "slice_of"]
HOME_FANOUT = 2  # racks a rack gives a block to, in the block's tree between the racks of a DC


def slice_of(node: str, members: Iterable[str], num_blocks: int) -> range:
    """The blocks `node` prefers among `members` (it need not be one: then the whole range)."""
    ordered = sorted(set(members))
    if node not in ordered or num_blocks <= 0:
        return range(0, max(0, num_blocks))
    index, count = ordered.index(node), len(ordered)
    return range(index * num_blocks // count, (index + 1) * num_blocks // count)


class SliceFirst(random.Random):
    """An rng for the picker whose `shuffle` puts the blocks of `preferred` first, each part shuffled."""

    def __init__(self, preferred: range, seed: int | None = None) -> None:
        super().__init__(seed)
        self.preferred = preferred

    def shuffle(self, x: MutableSequence[Any]) -> None:
        mine = [b for b in x if b in self.preferred]
        rest = [b for b in x if b not in self.preferred]
        super().shuffle(mine)
        super().shuffle(rest)
        x[:] = mine + rest


def _even_quotas(count: int, held: list[int]) -> list[int]:
    """How many of `count` more blocks each of the candidates takes so that their totals (`held` + quota) end up
    as even as they can be (water filling): a candidate that already brings blocks into the unit from the level
    above takes fewer of the rest."""
    order = sorted(range(len(held)), key=lambda i: held[i])
    lowest = len(held)
    while lowest > 1 and (count + sum(held[i] for i in order[:lowest])) // lowest < held[order[lowest - 1]]:
        lowest -= 1  # the highest holder is above the level the rest can be filled to: it takes none
    level = (count + sum(held[i] for i in order[:lowest])) // lowest
    quotas = [0] * len(held)
    for i in order[:lowest]:
        quotas[i] = level - held[i]
    for i in order[:count - sum(quotas)]:  # what the integer level leaves over, one each, lowest first
        quotas[i] += 1
    return quotas


def _nest(higher: list[str] | None, candidates: list[str], num_blocks: int) -> list[str] | None:
    """Owners of every block for a unit whose entry `candidates` are these: the higher level's owner where it is
    one of them, the rest split in contiguous runs so that every candidate brings in about as much (the one the
    level above already sends a share takes that much less of the rest: they share the unit's link, and the last
    to finish sets the pace)."""
    if not candidates:
        return None
    owners: list[str] = list(higher) if higher is not None else [""] * num_blocks
    chosen = set(candidates)
    remaining = [b for b in range(num_blocks) if higher is None or higher[b] not in chosen]
    held = [0] * len(candidates) if higher is None else [higher.count(c) for c in candidates]
    blocks = iter(remaining)
    for candidate, quota in zip(candidates, _even_quotas(len(remaining), held)):
        for _ in range(quota):
            owners[next(blocks)] = candidate
    return owners


def provider_order(seeder: bool, level: int, gives: bool) -> int:
    """Which providers a fetch takes first when it cannot take them all (lower first): a transfer's seeder (the
    root members' only source), then the nearest, and at each distance first those the entry plan has show this
    node blocks (`EntryPlan.gives`: the parent racks in its blocks' trees). Past 64 candidates a parent rack left
    out showed a representant nothing until it stalled for `STEAL_AFTER` (the simulator's entry gaps: 86 of 120
    representants at 1,200 agents, 250 of 260 at 2,600)."""
    return -1 if seeder else 2 * level + (0 if gives else 1)


def tree_step(rack: int, home: int, offset: int, count: int, homes: int = 0) -> int:
    """A rack's place in the tree of the blocks of one home between the `count` racks of a DC (by their places in
    name order): the home first, then the others in name order from the home on, rotated by the tree's `offset`
    (`EntryPlan._offsets_in`: chosen so that every rack's uplink carries out about as much, its own home's blocks
    included; in name order alone, the racks just after the DC's few homes gave out two copies each while others
    gave none). One rotation per tree keeps a rack's parents few: a representant reaches at most `FETCH_PEERS`
    sources, and a parent outside them would show it nothing until it stalled. Step s gives to steps
    `HOME_FANOUT` * s + 1 ... + `HOME_FANOUT`.

    With `homes` > 0 the DC's home racks are the last `homes` places (`EntryPlan`) and come last in every other
    home's tree, leaves there: the racks that are no block's home first, rotated by `offset` among themselves.
    A home rack's uplink gives out its own blocks to `HOME_FANOUT` racks, and that falls on its DC representant
    alone (a rack's relays the two representants share): an inner node of the other trees as often as balance
    allowed, a DC representant was to upload 1.10-1.225 copies with 30 to 130 racks (its rack's entries 0.5, its
    own blocks 0.4, half the relays; `tests/cluster/test_division.py`) while the others stayed at or under 1.05.
    `homes_last_variants` says in which of the trees (the others rotate every rack but the home)."""
    if rack == home:
        return 0
    others = count - homes
    if homes <= 0:
        return ((rack - home - 1) % count - offset) % (count - 1) + 1
    if rack < others:
        return (rack - offset) % others + 1
    return others + (rack - home - 1) % homes + 1


TREE_VARIANTS = 4  # trees per home, the blocks taking them in turn: finer shares, still few parents per rack
REBALANCE_ROUNDS = 4  # rounds of rotating each tree again (`balanced_offsets`); 5 to 130 racks settle in one or two
# Rotations `balanced_offsets` tries per tree, evenly spread (all of them up to 33 racks): all 129 at 130 racks made
# a plan take 0.47 s instead of 0.07 before the balancing (0.09 with 32), for no better balance there.
ROTATIONS_TRIED = 32
# Racks in a DC from which the homes may come last in some trees (`homes_last_variants`): in `bench/sim` (seed 1) it
# gained at 30 racks (600 agents: p50 12.16 -> 11.96 s, makespan 12.33 -> 12.12 s), not at 20 (400: p50 11.89 ->
# 11.96 s, makespan 12.09 -> 12.07 s), and lost at 5 and 10 (100 agents: makespan 11.75 -> 12.00 s; 200: p50
# 11.78 -> 11.91 s, makespan 11.94 -> 12.22 s), where a rack representant took up what the DC representants gave
# up (1.04-1.10 copies).
HOMES_LAST_FROM = 30


def variant_offset(block: int, count: int) -> int:
    """A block's tree's default rotation beyond its home's (`tree_step`): a home's blocks take `TREE_VARIANTS`
    trees in turn, each rotated by as much more, so that a rack is an inner node for a quarter of a home's share at
    a time. `EntryPlan._offsets_in` starts its search for each tree's rotation there."""
    return (block % TREE_VARIANTS) * (count - 1) // TREE_VARIANTS if count > 1 else 0


def fanouts(count: int) -> list[int]:
    """How many racks each step of a tree between `count` racks gives to (`tree_step`): the steps
    `HOME_FANOUT` * s + 1 ... + `HOME_FANOUT` that exist."""
    return [max(0, min(HOME_FANOUT * s + HOME_FANOUT, count - 1) - HOME_FANOUT * s) for s in range(count)]


def homes_last_variants(count: int, free: int, home_shares: Mapping[str, list[float]]) -> int:
    """In how many of the `TREE_VARIANTS` trees of each home the `count` racks' home racks come last (`tree_step`'s
    `homes`): the number that leaves the busiest representant's upload across the DC least, estimated.

    A home rack's uplink gives its own blocks (its DC representants' `home_shares`, fractions of the file) to
    `HOME_FANOUT` racks, on those representants alone, while a rack's relays are shared by its `RACK_REPS`
    representants. Balanced per rack (`balanced_offsets`), every rack gives about (count - 1) / count copies,
    a home rack's DC representant its own blocks and a share of relays on top: 1.07 copies at 600 agents in
    `bench/sim` (30 racks; members 1.00), besides its rack's entries. With the homes last in every tree they relay
    nothing, but the `free` other racks take all the relays: with 5 homes of 10 racks a rack representant uploaded
    1.23 copies and the p50 at 200 agents went 11.78 -> 12.97 s. Estimated, at a fraction f of the trees:
    a DC representant own + (1 - f) x (mean - its rack's own) / RACK_REPS, another (1 - f) x mean + f x what
    the free racks give with the homes last, over RACK_REPS. Ties: the fewer (the plain rotation)."""
    if count < HOMES_LAST_FROM or free < HOME_FANOUT or not home_shares:
        return 0
    mean = (count - 1) / count
    leftover = (count - 1 - HOME_FANOUT * sum(len(s) for s in home_shares.values()) / len(home_shares)) / free
    chosen, least = 0, math.inf
    for variants in range(TREE_VARIANTS + 1):
        f = variants / TREE_VARIANTS
        worst = ((1 - f) * mean + f * leftover) / RACK_REPS
        for shares in home_shares.values():
            own = [HOME_FANOUT * s for s in shares]
            worst = max(worst, max(own) + (1 - f) * max(0.0, mean - sum(own)) / RACK_REPS)
        if worst < least - 1e-9:
            chosen, least = variants, worst
    return chosen


def balanced_offsets(homes: list[int | None], count: int, homes_last: int = 0, variants_last: int = 0,
                     weights: Mapping[int, int] | None = None) -> dict[tuple[int, int], int]:
    """Each tree's rotation (`tree_step`), per (home, variant: block % `TREE_VARIANTS`), for blocks whose home
    racks (places among `count`) are `homes`, so that every rack's uplink gives out about as much across the DC.

    A home always gives its own blocks to `HOME_FANOUT` racks; rotated evenly regardless of that, the homes were
    also inner nodes of the other homes' trees as often as any rack. With 5 racks of 20 (Kraken's case at 100
    agents, five DC representants in three racks) a home rack's uplink gave out 1.1 copies, a rack without 0.5, and
    a DC representant, which also brings half its rack's blocks in, sent 1.10 copies through a link capped like
    every other: those blocks came out last (`bench/sim`: the DC representants' uplinks alone 15 % faster took
    0.9 s off the p50). So what each home gives as one is counted first; the trees, largest share first, are each
    rotated so that the most any rack gives out is least (then the sum of squares), from the default rotation on
    (`variant_offset`); then each tree is rotated again, the others staying, while that lowers either (a tree
    placed early cannot see which racks the later trees' homes leave free: its home excluded, a rack takes no
    inner step of its own trees). Pure: every node computes the same rotations."""
    if count < 2:
        return {}
    shares: dict[tuple[int, int], int] = {}
    for block, home in enumerate(homes):
        if home is not None:
            key = (home, block % TREE_VARIANTS)
            shares[key] = shares.get(key, 0) + 1
    ranks = {home: rank for rank, home in enumerate(sorted({home for home, _ in shares}))}
    give = fanouts(count)
    homes_give = [0] * count  # blocks each home gives out as one, whatever the rotations
    for (home, _variant), share in shares.items():
        homes_give[home] += give[0] * share * (weights or {}).get(home, 1)

    def last(tree: tuple[int, int]) -> int:  # `tree_step`'s `homes`: the trees of the first variants only
        return homes_last if tree[1] < variants_last else 0

    def rotated(tree: tuple[int, int]) -> int:  # the racks a tree's rotation moves
        return count - last(tree) if last(tree) else count - 1

    def inner(tree: tuple[int, int], offset: int) -> list[int]:
        """What the racks but the home give out in this tree, rotated by `offset`: `tree_step` for every rack at
        once, by slicing (rack by rack, one `tree_step` call each, is what made a plan at 130 racks slow)."""
        home, share, moved = tree[0], shares[tree], rotated(tree)
        turn = -offset % moved
        if last(tree):  # the racks that are no home first, rotated; then the other homes, from the home on
            free = give[1:moved + 1]
            ends = [0 if rack == home else give[moved + (rack - home - 1) % last(tree) + 1]
                    for rack in range(moved, count)]
            return [g * share for g in free[turn:] + free[:turn] + ends]
        by_place = [0, *give[1:][turn:], *give[1:][:turn]]  # the home, then the others from the home on
        back = -home % count
        return [g * share for g in by_place[back:] + by_place[:back]]

    def best(load: list[int], tree: tuple[int, int], start: int) -> tuple[tuple[int, int], int]:
        """The rotation, from `start` on, that leaves the least (most, sum of squares) over `load`."""
        chosen: tuple[tuple[int, int], int] | None = None
        moved = rotated(tree)
        for turn in range(0, moved, -(-moved // ROTATIONS_TRIED)):
            offset = (start + turn) % moved
            trial = [a + b for a, b in zip(load, inner(tree, offset), strict=True)]
            key = (max(trial), sum(x * x for x in trial))
            if chosen is None or key < chosen[0]:
                chosen = (key, offset)
        assert chosen is not None
        return chosen

    def place(order: list[tuple[int, int]]) -> tuple[tuple[int, int], dict[tuple[int, int], int]]:
        load, offsets = list(homes_give), {}
        for tree in order:
            home, variant = tree
            default = ranks[home] * (count - 1) // len(ranks) + variant_offset(variant, count)
            offsets[tree] = best(load, tree, default)[1]
            load = [a + b for a, b in zip(load, inner(tree, offsets[tree]), strict=True)]
        for _round in range(REBALANCE_ROUNDS):
            moved = False
            for tree in order:
                now = inner(tree, offsets[tree])
                without = [a - b for a, b in zip(load, now, strict=True)]
                key, offset = best(without, tree, offsets[tree])  # its own rotation kept unless another is better
                if key < (max(load), sum(x * x for x in load)):
                    offsets[tree], moved = offset, True
                    load = [a + b for a, b in zip(without, inner(tree, offset), strict=True)]
            if not moved:
                break
        return (max(load), sum(x * x for x in load)), offsets

    # Largest share first, then smallest first; the better. Each is stuck at times where moving one tree alone
    # changes nothing and two would (5 racks, homes of 160, 80 and 160 of 400 blocks: largest first left racks
    # at 0.9 and 0.6 copies where 0.8 each fit).
    largest = sorted(shares, key=lambda tree: (-shares[tree], tree))
    return min(place(largest), place(largest[::-1]), key=lambda placed: placed[0])[1]


def _nothing(block: int) -> bool:  # noqa: ARG001 - what a seeder's rack gives out across its DC
    return False


class EntryPlan:
    """Which member each block enters each unit (the root, a DC, a rack) through, for one `View`."""

    def __init__(self, view: View, num_blocks: int) -> None:
        self.view = view
        self.num_blocks = num_blocks
        members = [m for m in view.members.values() if not m.seeder and m.location is not None]
        located = [m.location for m in members if m.location is not None]  # all of them: narrowed for the checker
        root = sorted(m.node for m in members if view.is_dc_rep(m.node))
        self.root = _nest(None, root, num_blocks)
        dcs = sorted({loc.dc for loc in located})
        self.dc = {dc: _nest(self.root, sorted(view.dc_reps_of(dc)), num_blocks) for dc in dcs}
        racks = sorted(set(located), key=str)
        self.rack = {loc: _nest(self.dc.get(loc.dc), sorted(view.rack_reps_of(loc)), num_blocks)
                     for loc in racks}
        # per DC, its racks that have representants (the nodes of every block's tree between racks), by name; a
        # seeder's rack is a leaf of every tree instead (`_from_parent_rack`), unless a block's home is there
        standing = {(slot.dc, slot.rack) for slot in view.holders if slot.level is Level.RACK}
        self._racks: dict[str, list[str]] = {}
        self._leaves: dict[str, list[str]] = {}
        # per DC, its home racks (at the end of `_racks`, in name order if none) and the tree variants in which
        # they come last (`homes_last_variants`)
        self._homes_last: dict[str, tuple[int, int]] = {}
        for dc in dcs:
            named = sorted(rack for d, rack in standing if d == dc)
            homes = {self._rack_of(owner) for owner in set(self.dc[dc] or ())}
            leaves = [r for r in named if view.shares_with_seeder(Location(dc, r)) and r not in homes]
            inner = [r for r in named if r not in leaves]
            self._racks[dc], self._leaves[dc] = (inner, leaves) if inner else (named, [])
            # the home racks last, leaves of the other homes' trees (`tree_step`), when the racks that are no home
            # can take a home's children: the home's own blocks are its DC representant's load alone
            at_home = [r for r in self._racks[dc] if r in homes]
            free = [r for r in self._racks[dc] if r not in homes]
            variants = homes_last_variants(len(self._racks[dc]), len(free), self._home_shares(dc))
            self._homes_last[dc] = (len(at_home), variants)
            if variants:
                self._racks[dc] = free + at_home
        # per DC, each block's home: its place in `_racks` (None: unknown), asked of every tree below
        self._homes = {dc: self._homes_in(dc) for dc in self._racks}
        self._offsets = {dc: self._offsets_in(dc) for dc in self._racks}
        # per DC with a seeder's rack, the rack (its place in `_racks`) that gives each block to the seeder's racks
        self._to_leaves = {dc: self._balanced_parents(dc) for dc, leaves in self._leaves.items() if leaves}
        self._cache: dict[tuple[str, str], Container[int] | None] = {}
        # per rack, its members that are not representants (the carriers) and each block's carrier among them
        self._carriers: dict[Location, tuple[list[str], list[int]]] = {}
        self.stalled: frozenset[str] = frozenset()  # members shown everything (`cluster.stalls.StallWatch`)
        self._stranded: Mapping[str, frozenset[str]] = {}
        self._stranded_on: dict[str, set[str]] = {}  # a stopped source -> the members that named it
        self._joined: dict[tuple[str, str], Container[int] | None] = {}

    @property
    def stranded(self) -> Mapping[str, frozenset[str]]:
        """Members -> the stopped sources they name (`cluster.stalls.stranded_by`), set every period."""
        return self._stranded

    @stranded.setter
    def stranded(self, named: Mapping[str, frozenset[str]]) -> None:
        if named == self._stranded:
            return
        self._stranded = named
        self._stranded_on = {}
        for member, sources in named.items():
            for source in sources:
                self._stranded_on.setdefault(source, set()).add(member)
        self._joined.clear()

    def _homes_in(self, dc: str) -> list[int | None]:
        owners = self.dc.get(dc)
        if owners is None:
            return [None] * self.num_blocks
        index = {rack: i for i, rack in enumerate(self._racks[dc])}
        places = {owner: index.get(self._rack_of(owner) or "") for owner in set(owners)}
        return [places[owner] for owner in owners]

    def _offsets_in(self, dc: str) -> dict[tuple[int, int], int]:
        """Each tree's rotation of the other racks (`tree_step`), per (home, variant): `balanced_offsets`."""
        weights = self._weights(dc) if self._homes_last[dc][1] else None
        return balanced_offsets(self._homes[dc], len(self._racks[dc]), *self._homes_last[dc], weights)

    def _weights(self, dc: str) -> dict[int, int]:
        """Per home rack (its place in `_racks`), how many times `balanced_offsets` counts what it gives out as a
        home: its relays are shared by its representants, its own blocks fall on its DC representants alone."""
        places = {rack: i for i, rack in enumerate(self._racks[dc])}
        return {places[rack]: max(1, RACK_REPS // len(shares))
                for rack, shares in self._home_shares(dc).items() if rack in places}

    def _last(self, dc: str, block: int) -> int:
        """`tree_step`'s `homes` for a block's tree: the home racks last in the first variants only."""
        homes, variants = self._homes_last[dc]
        return homes if block % TREE_VARIANTS < variants else 0

    def _home_shares(self, dc: str) -> dict[str, list[float]]:
        """Per home rack, the blocks each of its DC representants brought into the DC."""
        owners, shares = self.dc.get(dc) or [], dict[str, list[int]]()
        for owner in sorted(set(owners)):
            shares.setdefault(self._rack_of(owner) or "", []).append(owners.count(owner))
        return {rack: [s / max(1, self.num_blocks) for s in counts] for rack, counts in shares.items()}

    def _offset(self, dc: str, home: int, block: int) -> int:
        return self._offsets[dc].get((home, block % TREE_VARIANTS), 0)

    def _balanced_parents(self, dc: str) -> list[int | None]:
        """Which rack gives each block to the seeder's racks: the one whose uplink carries out the least so far,
        counting what the trees make it give (every rack holds every block in the end, so any may). In Tekel's
        topology the last rack of each tree left one uplink 1.2 copies and another 0.8; balanced, each carries
        out about one."""
        leaves, homes = len(self._leaves[dc]), self._homes[dc]
        count = len(self._racks[dc])
        children = fanouts(count)
        steps: dict[tuple[int, int, int], list[int]] = {}  # (home, offset, homes last) -> each rack's step
        trees: list[list[int] | None] = []  # each block's
        for block, home in enumerate(homes):
            if home is None:
                trees.append(None)
                continue
            key = (home, self._offset(dc, home, block), self._last(dc, block))
            if key not in steps:
                steps[key] = [tree_step(rack, home, key[1], count, key[2]) for rack in range(count)]
            trees.append(steps[key])
        load = [0] * count
        for tree in trees:
            for rack, step in enumerate(tree or ()):
                load[rack] += children[step]
        parents: list[int | None] = []
        last = max(0, count - 1 - HOME_FANOUT)  # a tree's last racks only: few parents (`tree_step`), spare uplinks
        for tree in trees:
            if tree is None:
                parents.append(None)
                continue
            candidates = [rack for rack in range(count) if tree[rack] >= last]
            chosen = min(candidates, key=lambda i: (load[i], tree[i]))
            load[chosen] += leaves
            parents.append(chosen)
        return parents

    def _rack_of(self, node: str) -> str | None:
        member = self.view.members.get(node)
        return None if member is None or member.location is None else member.location.rack

    def owners_for(self, server: str, receiver: str) -> list[str] | None:
        view = self.view
        sender, taker = view.members.get(server), view.members.get(receiver)
        if taker is None or taker.location is None:
            return None
        if sender is not None and sender.seeder:
            return self.root
        level = view.level(server, receiver)
        if level is Level.RACK:
            return None
        if level is Level.DC:
            return self.rack.get(taker.location)
        return self.dc.get(taker.location.dc)

    def shown(self, server: str, receiver: str) -> Container[int] | None:
        """The blocks `server` shows `receiver` (None: all of them, as to a stalled member).

        Around a stopped source (`cluster.stalls`): a member that names it is also shown, by every other server,
        what it was to show that member; and the stopped source shows the member's share to the other members of
        its unit (`_taken_over`: they take it in its place, and the member gets it from them). The pusher, the only
        holder of a root member's slice, gets that slice to the member that way."""
        if receiver in self.stalled:
            return None
        if receiver not in self.view.members:  # not in this plan: nothing until a plan that has it
            return frozenset()
        own = self._planned(server, receiver)
        if not self._stranded:
            return own
        key = (server, receiver)
        if key not in self._joined:
            extra = [self._planned(source, receiver) for source in sorted(self._stranded.get(receiver, ()))
                     if source != server]
            extra = [part for part in extra + self._taken_over(server, receiver) if part != frozenset()]
            if not extra:
                self._joined[key] = own
            elif own is None or None in extra:
                self._joined[key] = None
            else:
                self._joined[key] = Joined([own, *(part for part in extra if part is not None)])
        return self._joined[key]

    def _taken_over(self, server: str, receiver: str) -> list[Container[int] | None]:
        """The shares of the members of `receiver`'s unit that named `server` stopped: each other member of the
        unit is shown them whole. Split between them (each block to one, as if the stopped member had left), the
        share crossed `server`'s link once, but the blocks then followed the trees rooted at the stopped member's
        rack, behind it (docs/cluster.md, "A blackhole mid-push"); whole, START keeps the takers from each taking
        every block."""
        unit = self.owners_for(server, receiver)
        if unit is None or receiver not in unit:  # (the pusher's unit is the root's, whoever asks)
            return []
        return [self._planned(server, member) for member in sorted(self._stranded_on.get(server, ()))
                if member != receiver and self.owners_for(server, member) is unit]

    def _planned(self, server: str, receiver: str) -> Container[int] | None:
        """The blocks the plan has `server` show `receiver`, a member of the view."""
        key = (server, receiver)
        if key not in self._cache:
            owners = self.owners_for(server, receiver)
            if owners is None:
                self._cache[key] = self._in_rack(server, receiver)
            else:
                parent = self._from_parent_rack(server, receiver)
                self._cache[key] = frozenset(
                    b for b, owner in enumerate(owners) if owner == receiver and (parent is None or parent(b)))
        return self._cache[key]

    def gives(self, server: str, receiver: str) -> bool:
        """Whether `server` is to show `receiver` any block (`provider_order`)."""
        shown = self.shown(server, receiver)
        return shown is None or not isinstance(shown, frozenset) or bool(shown)

    def _in_rack(self, server: str, receiver: str) -> Container[int] | None:
        """Between rack mates: everything, but the blocks the rack's entry points brought in only down their trees
        of carriers (`cluster.carriers`)."""
        view = self.view
        sender, taker = view.members.get(server), view.members.get(receiver)
        if (sender is None or taker is None or sender.location is None or sender.seeder
                or view.level(server, receiver) is not Level.RACK):
            return None
        owners = self.rack.get(sender.location)
        if owners is None:
            return None
        if sender.location not in self._carriers:
            reps = view.rack_reps_of(sender.location)
            carriers = sorted(m.node for m in view.members.values()
                              if m.location == sender.location and not m.seeder and m.node not in reps)
            self._carriers[sender.location] = (carriers, carrier_turns(owners, len(carriers)) if carriers else [])
        carriers, turns = self._carriers[sender.location]
        if not carriers:
            return None
        place = carriers.index(receiver) if receiver in carriers else -1
        if server in carriers:  # a representant everything; in a small rack every carrier too (a star)
            if place < 0 or len(carriers) <= STAR_UP_TO:
                return None
            return Relayed(owners, turns, carriers.index(server), place, len(carriers))
        return CarriedFirst(owners, turns, server, place)

    def _from_parent_rack(self, server: str, receiver: str) -> Callable[[int], bool] | None:
        """Between racks of one DC, a block is shown only by the rack it comes from in its tree: the rack it entered
        the DC through (its home) is the root, and the DC's racks with representants form a `HOME_FANOUT`-ary
        tree (`tree_step`; with three racks, the home gives to both others).

        Any rack holding a block could serve it to another, but a rack's uplink is shared by everything it takes
        in and gives out: when other racks draw blocks out of a rack that they could have had from elsewhere, its
        uplink carries them once more, in competition with the blocks only that rack can give (those it brought
        into the DC), and those come out last. In the tree a rack gives out a block only to its few children, and
        a rack's uplink carries out about one copy in all however many racks the DC has (the home alone would
        serve every other rack: a copy per rack). A member stalled for `STEAL_AFTER` is shown everything by
        everyone (`shown`), so a parent rack that cannot serve holds its children back no longer than that.

        A seeder's rack (`View.shares_with_seeder`) is a leaf of every tree: its uplink carries the seeder's copy
        out to the other racks' DC representants, so it gives out nothing else (sharing it, the seeder's rack
        carried out two copies in Tekel's topology: the seeder's, and the blocks it was the home or a parent of),
        and each block reaches it from the rack `_balanced_parents` chose."""
        view = self.view
        sender, taker = view.members.get(server), view.members.get(receiver)
        if (sender is None or taker is None or sender.location is None or taker.location is None
                or view.level(server, receiver) is not Level.DC):
            return None
        dc = taker.location.dc
        racks, leaves = self._racks.get(dc), self._leaves.get(dc, [])
        if self.dc.get(dc) is None or not racks:
            return None
        if sender.location.rack in leaves:
            return _nothing
        index = {rack: i for i, rack in enumerate(racks)}
        given, taking = index.get(sender.location.rack), index.get(taker.location.rack)
        if given is None or (taking is None and taker.location.rack not in leaves):
            return None  # a rack without representants yet: no tree to place it in
        homes, to_leaves = self._homes[dc], self._to_leaves.get(dc, [])

        def from_parent(block: int) -> bool:
            home = homes[block]
            if home is None:
                return True
            if taking is None:  # a seeder's rack: from the rack balance gave it
                return given == to_leaves[block]
            offset = self._offset(dc, home, block)
            last = self._last(dc, block)
            step = tree_step(taking, home, offset, len(racks), last)  # the taker's place in the block's tree
            return step > 0 and tree_step(given, home, offset, len(racks), last) == (step - 1) // HOME_FANOUT

        return from_parent

    def uplink_copies(self, location: Location) -> float:
        """Copies of the content this plan brings into a rack from outside it (1.0 when every block enters once)."""
        owners = self.rack.get(location)
        return 0.0 if owners is None or not self.num_blocks else sum(1 for o in owners if o) / self.num_blocks
