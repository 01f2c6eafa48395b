"""`FetchReport`: what one fetch of the block engine saw, for metrics.

A module of its own, importing nothing, so that the proxy's statistics can name the type without pulling in the
asyncio shell that fills it (`swarm.service.fetch_run`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["FetchReport"]


@dataclass(slots=True)
class FetchReport:
    """Counts of one fetch, or totals over several (`SwarmNode.fetch_totals`).

    Pass one to `SwarmNode.fetch(..., report=)`: the fetch adds its counts to it, in place, when it stops (its
    iterator is exhausted, fails or is closed), so read it only after that.
    """

    hash_failures: int = 0  # blocks or hash layers from peers (or the origin) that failed verification
    banned: int = 0  # sources banned for bad data
    bytes_origin: int = 0  # verified bytes that came from origin Range requests
    bytes_peers: int = 0  # verified bytes that came from peers

    def add(self, other: FetchReport) -> None:
        """Add `other`'s counts to these."""
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
