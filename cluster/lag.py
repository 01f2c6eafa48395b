"""A root member whose share from the pusher lags the other root members' (sans-I/O): its flow from the pusher first.

The seeder gives each root member (the DC representants) a fixed share of the blocks (`cluster.division.EntryPlan`),
and those blocks reach the rest of the DC only through that member's rack: its rack is their home, the root of
their trees between racks. A member behind a slow link into its rack (`bench.cluster_netns`: rack 1's uplink shaped
to 2 MB/s each way) took its share as one TCP flow among about nine on that link, beside its own and its rack
mate's flows from the other racks; the last of the share arrived near the end, and the other racks, which can
have it only through that rack's shaped uplink, finished 0.6-3.2 s after it (docs/cluster.md).

So each root member compares, every reconcile, how much of its share it has received from outside its DC (the
`outside` bytes of the member records: in one DC, the pusher's) with the other root members': one that is
`LAG_MARGIN` of its share behind the lower median of the others has its fetch hold its far sources (across the
rack or DC link) to `PolicyConfig.priority_far_others` while the pusher still has blocks for it
(`PolicyConfig.priority_first`). It stays so for the transfer: caught up, it would let the others go and fall
behind again. The others are untouched: where every root member gets its share at the same pace (the pusher's
uplink the limit, as in `bench.sim.lab`'s 100 to 2,600 agents) nobody lags and nothing changes; held back there
from the start, every DC representant fell behind its rack.

The lower median of the others, not their mean or best: a root member whose record claims more than it received
cannot by itself make another one lag while the honest others are not ahead (records are signed by their
writers, `cluster.identity`, but a member writes its own counts). What a lie can do is hold an honest root
member's far sources to one while the pusher has blocks for it: it still fetches from its rack and the pusher.
Outside one DC the `outside` bytes also count blocks from other DCs' representants; capped at the share, they
can only make a member look less behind.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Protocol

__all__ = ["LAG_MARGIN", "LagWatch", "share_progress"]

# How far behind the other root members (fractions of a share) a root member must be before its pusher's flow goes
# first. In the shaped 3 x 4 namespaces the others had their whole share within a second while rack 1's member
# had a few percent; a quarter keeps the jitter of equal shares at an equal pace (100 to 2,600 agents) out.
LAG_MARGIN = 0.25


class Progress(Protocol):
    """What `LagWatch` reads of a member record (`cluster.records.MemberRecord`): bytes received by level label."""

    @property
    def received(self) -> Mapping[str, int]: ...


def share_progress(owners: Sequence[str], node: str, received_outside: int, block_size: int) -> float | None:
    """The fraction of `node`'s root share (the blocks `owners` gives it) that it has received from outside its
    DC, at most 1; None when it has no share."""
    share = sum(1 for owner in owners if owner == node) * block_size
    return None if share <= 0 else min(1.0, received_outside / share)


class LagWatch:
    """Whether this root member's share lags the other root members' (`lagging`, kept once found)."""

    def __init__(self, node: str, margin: float = LAG_MARGIN) -> None:
        self.node = node
        self.margin = margin
        self.lagging = False

    def __call__(self) -> bool:
        """`PolicyConfig.priority_first`."""
        return self.lagging

    def observe(self, owners: Sequence[str] | None, records: Mapping[str, Progress], block_size: int) -> bool:
        """The root's owners of each block (`EntryPlan.root`; None: no root split yet) and the member records read
        this round; whether this member lags now."""
        if self.lagging or not owners or self.node not in records:
            return self.lagging
        progress = {}
        for node in set(owners):
            record = records.get(node)
            if record is not None:
                done = share_progress(owners, node, record.received.get("outside", 0), block_size)
                if done is not None:
                    progress[node] = done
        mine = progress.pop(self.node, None)
        if mine is None or mine >= 1.0 or not progress:
            return False
        self.lagging = statistics.median_low(progress.values()) - mine >= self.margin
        return self.lagging
