"""The pusher's root shares, lent at the end (sans-I/O): a root member that asked for all of its share takes part of
the share of the root member furthest behind, and hands it on to that member.

The seeder gives each root member a fixed share (`cluster.division.EntryPlan.root`), and each share reaches the
member as one TCP flow among the others on its rack's downlink. Those flows do not run at one pace: in Tekel's
topology (`bench.seeder_flows`) the five shares were complete 5-8 s apart, and for the last seconds of the push the
pusher's uplink, the bound's limit, carried one or two flows and stood partly idle while the last shares came out.

So once a root member has asked the pusher for every block of its share (its flow is about to go idle), the pusher
shows it `LEND_AHEAD` more blocks at a time, taken from the share of the root member with the most blocks not yet
asked for (`Lender.on_asked`). The borrower asks for them as for its own; before asking a far source it tells the
peers it serves (START, `swarm.core.starts`), and the owner, which every root member shows its share
(`EntryPlan.shown`), holds the block back from the pusher until the borrower's HAVE, then takes it from the
borrower. The pusher sends each block once; the owner's slow flow carries less.

What the pusher counts is only what it sees itself: which member asked it for which block. A borrower that keeps a
lent block to itself delays its owner by the START's lifetime (`START_TTL`), after which the owner asks the pusher;
an owner that asks for a lent block anyway (its request crossed the START) is sent it a second time, counted in
`duplicates`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["LEND_AHEAD", "Lender"]

# Lent blocks a root member is shown and has not asked for yet: about the requests a fetch keeps in flight to one
# source (`PolicyConfig.peer_max_outstanding`, 8), so that its flow from the pusher never runs dry while the owner's
# still has blocks, and no more, since each lent block is one the owner might have asked for meanwhile.
LEND_AHEAD = 2


class Lender:
    """Which blocks of other root members' shares the pusher shows each root member (`lent`, only ever growing)."""

    def __init__(self, owners: Sequence[str], ahead: int = LEND_AHEAD) -> None:
        if ahead < 1:
            raise ValueError("ahead must be >= 1")
        self.ahead = ahead
        self.owners = list(owners)
        # per root member, the blocks of its share nobody has asked the pusher for, highest first last
        self._unasked: dict[str, list[int]] = {}
        for block, owner in enumerate(self.owners):
            if owner:
                self._unasked.setdefault(owner, []).append(block)
        self._left = {owner: set(blocks) for owner, blocks in self._unasked.items()}
        self.lent: dict[str, set[int]] = {owner: set() for owner in self._unasked}
        self._waiting: dict[str, set[int]] = {owner: set() for owner in self._unasked}  # lent, not asked for yet
        self._asked: set[int] = set()
        self.duplicates = 0  # blocks asked for a second time (an owner's request that crossed the START)

    def follow(self, owners: Sequence[str]) -> Lender:
        """A lender for a plan drawn again (a root member left or came): what was asked for and what was lent stay
        so (a block once shown is never taken back)."""
        new = Lender(owners, self.ahead)
        for block in self._asked | {b for blocks in self.lent.values() for b in blocks}:
            if 0 <= block < len(new.owners) and new.owners[block]:
                new._left[new.owners[block]].discard(block)
        new._asked = set(self._asked)
        for member, blocks in self.lent.items():
            new.lent.setdefault(member, set()).update(blocks)
        new.duplicates = self.duplicates
        return new

    def on_asked(self, member: str, block: int) -> list[int]:
        """`member` asked the pusher for `block`: the blocks now lent to it (to show it), if any."""
        if not 0 <= block < len(self.owners) or member not in self._left:
            return []
        if block in self._asked:
            self.duplicates += 1
        self._asked.add(block)
        self._left[self.owners[block]].discard(block)
        self._waiting[member].discard(block)
        if self._left[member]:
            return []  # its own share first
        return self._lend(member)

    def _lend(self, member: str) -> list[int]:
        lent: list[int] = []
        waiting = self._waiting[member]
        while len(waiting) < self.ahead:
            owner = max((m for m in self._left if m != member and len(self._left[m]) > self.ahead),
                        key=lambda m: (len(self._left[m]), m), default=None)
            if owner is None:
                break  # every other share has no more than the owner's own requests in flight ahead: left to it
            block = self._take(owner)
            waiting.add(block)
            self.lent[member].add(block)
            lent.append(block)
        return lent

    def _take(self, owner: str) -> int:
        """One block of `owner`'s share that nobody asked for: the highest (the owner's picker takes its share in
        a random order, so one is as likely as another to be asked for next)."""
        unasked, left = self._unasked[owner], self._left[owner]
        while unasked[-1] not in left:  # asked for since: dropped lazily
            unasked.pop()
        block = unasked.pop()
        left.discard(block)
        return block
