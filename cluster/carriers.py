"""Inside a rack (sans-I/O): which rack mate shows a block its entry point brought in to which.

A rack's representants bring the blocks into the rack (`cluster.division.EntryPlan`); the rack's other members, the
**carriers**, spread them. Each block an entry point brought in goes first to one carrier (the carriers take each
entry point's blocks in turn, by node id: `carrier_turns`; BitTorrent's super-seeding, inside a rack). Shown to
everyone, every member would ask the entry point for the same newest blocks at once (they alone hold them): its
uplink would carry the rack 2-5 copies while the members' idled at 0.5-0.8 (the lab's `upload_copies_by_role`).

From its first carrier the block goes on down a small tree of the rack's carriers, `CARRIER_FANOUT` children each
(`carrier_step`), in a rack of more than `STAR_UP_TO` carriers. Shown by the first carrier to all the others at
once (a star), every carrier of a rack of 20 asked it for the block at the same moment: its uplink served 17 rack
mates a seventeenth of the rate each while none of them could relay it (none held it before the others), and at
100 agents of `bench/sim` (3 GB, 300 MB/s, racks of 20) the p50 was 12.00 s, the makespan 12.28 s; down the trees
11.66 s and 11.75 s. In small racks the star did better: with 5 carriers (racks of 7 at 10 Mbit/s, 16 KiB blocks)
the trees took 31.3-31.8 s where the star took 29.5 s, with 8 carriers 29.7 s against 29.6 s, with 11 as long.
Why a tree costs there is not understood yet (not the simulator's quantum: 1 ms instead of 13 gave the same).

The tree of a block is the carriers in node id order rotated to start at its first carrier, so that every carrier
is an inner node as often as any (each uploads about one copy) and the trees of consecutive blocks differ. A
representant is shown every block by every carrier (it may serve them to other racks, `_from_parent_rack`), but
an entry point shows its own blocks only to their first carrier, and the other representants' blocks to no
carrier: a representant's uplink also carries its blocks to other racks, so it relays nothing inside its rack.
Relaying the other entry point's blocks to the carriers held them back: 100 agents in `bench/sim` took p50
12.41 s with the star, 12.00 s without; with the trees 30.6 s, for a carrier took a block from the representant
when it showed it before the carrier's parent did, and the representant's uplink was busy elsewhere.
"""

from __future__ import annotations

from collections.abc import Container

__all__ = ["CARRIER_FANOUT", "STAR_UP_TO", "CarriedFirst", "Relayed", "carrier_step", "carrier_turns"]

CARRIER_FANOUT = 2  # rack mates a carrier shows a carried block to, in the block's tree (4: much the same)
STAR_UP_TO = 11  # carriers in a rack up to which the first carrier shows a block to all the others (a star)


def carrier_turns(owners: list[str], carriers: int) -> list[int]:
    """Each block's first carrier, by its place among its entry point's blocks: every carrier takes as many of each."""
    seen: dict[str, int] = {}
    turns = []
    for owner in owners:
        count = seen.get(owner, 0)
        seen[owner] = count + 1
        turns.append(count % carriers)
    return turns


def carrier_step(place: int, turn: int, count: int) -> int:
    """A carrier's step in the tree of a block whose first carrier is `turn` (places among `count` carriers, by node
    id): the carriers from the first on. Step s shows the block to steps `CARRIER_FANOUT` * s + 1 ... +
    `CARRIER_FANOUT`."""
    return (place - turn) % count


class CarriedFirst(Container[int]):
    """What a rack's entry point (or another representant) shows a rack mate: every block but those the rack's
    entry points brought in (`owners`); of these only its own, and each only to its first carrier (`turns[block]`:
    that carrier's place among the carriers); `place` is the receiver's (-1: a representant, which takes these
    blocks from their carriers). A test rather than a set: a representant's pairs in a rack of 20 with 2,048 blocks
    would hold 19 sets of a thousand blocks each."""

    __slots__ = ("owners", "turns", "server", "place")

    def __init__(self, owners: list[str], turns: list[int], server: str, place: int) -> None:
        self.owners, self.turns, self.server, self.place = owners, turns, server, place

    def __contains__(self, block: object) -> bool:
        if not isinstance(block, int) or not 0 <= block < len(self.owners):
            return False
        owner = self.owners[block]
        if owner == self.server:
            return self.turns[block] == self.place
        return not owner or self.place < 0


class Relayed(Container[int]):
    """What a carrier (`server`, its place among the `count` carriers) shows another carrier (`place`): the blocks
    an entry point brought in (`owners`) only where the receiver is its child in the block's tree (`carrier_step`),
    everything else."""

    __slots__ = ("owners", "turns", "server", "place", "count")

    def __init__(self, owners: list[str], turns: list[int], server: int, place: int, count: int) -> None:
        self.owners, self.turns, self.server, self.place, self.count = owners, turns, server, place, count

    def __contains__(self, block: object) -> bool:
        if not isinstance(block, int) or not 0 <= block < len(self.owners):
            return False
        if not self.owners[block]:
            return True
        turn = self.turns[block]
        step = carrier_step(self.place, turn, self.count)
        return step > 0 and (step - 1) // CARRIER_FANOUT == carrier_step(self.server, turn, self.count)
