"""Inside a rack (sans-I/O): which rack mate shows a block its entry point brought in to which.

A rack's representants bring the blocks into the rack (`cluster.division.EntryPlan`); the rack's other members, the
**carriers**, spread them. Each block an entry point brought in goes first to one carrier (the carriers take each
entry point's blocks in turn, by node id: `carrier_turns`), which shows it to the rest of the rack (BitTorrent's
super-seeding, inside a rack). Shown to everyone, every member would ask the entry point for the same newest blocks
at once (they alone hold them): its uplink would carry the rack 2-5 copies while the members' idled at 0.5-0.8
(the lab's `upload_copies_by_role`).

A representant is shown every block by every carrier (it may serve them to other racks), but an entry point shows
its own blocks only to their first carrier, and the other representants' blocks to no carrier: a representant's
uplink also carries its blocks to other racks, so it relays nothing inside its rack. Relaying the other entry
point's blocks to the carriers (as before) held them back: 100 agents in `bench/sim` took p50 12.41 s, 12.00 s
without.
"""

from __future__ import annotations

from collections.abc import Container

__all__ = ["CarriedFirst", "carrier_turns"]


def carrier_turns(owners: list[str], carriers: int) -> list[int]:
    """Each block's first carrier, by its place among its entry point's blocks: every carrier takes as many of each."""
    seen: dict[str, int] = {}
    turns = []
    for owner in owners:
        count = seen.get(owner, 0)
        seen[owner] = count + 1
        turns.append(count % carriers)
    return turns


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
