"""The settings of one fallback download (`proxy.download.core`), and the defaults they start from.

One frozen object per proxy (`proxy.download.fallback` builds it from the command line; the adaptive T/R/W give each
download its own `transition`), so the core reads every knob from one place and tests pass their own.
"""

from __future__ import annotations

import dataclasses

from swarm.content.manifest import MAX_BLOCKS

from .discovery_rule import DiscoveryRule
from .parking import ParkingSettings
from .transition import TransitionSettings

# Seconds between lookups while a switched download still crawls from the origin (the last one repeats): in a
# flash crowd the first copies complete and are vouched for a few seconds after the crowd arrived (Pack polled
# every 5 s).
REPOLL_SECONDS = (1.0, 2.0, 3.0, 5.0)
# After a `T` switch a lookup races a HEAD to the origin. When the lookup finds a manifest first, the HEAD gets
# this much longer to say which version the origin serves now: a lookup of a few milliseconds must not answer with
# an older version the origin's HEAD, a moment later, would have shown.
HEAD_GRACE_SECONDS = 0.25


@dataclasses.dataclass(frozen=True)
class DownloadSettings:
    transition: TransitionSettings = TransitionSettings()
    max_spool: int = 0  # the largest origin body kept (and hashed) to be shared; 0: none
    sharing: bool = True
    repoll: tuple[float, ...] = REPOLL_SECONDS
    block_size: int | None = None  # of the manifests made from origin bytes (--block-size); None: by size
    parking: ParkingSettings = ParkingSettings()
    head_grace: float = HEAD_GRACE_SECONDS
    discovery: DiscoveryRule = DiscoveryRule()  # when it may look up or announce (the privacy rule)
    host_slow: bool = False  # this download's host was slow recently (`Adaptive.choose`)
    before_head: bool = True  # its name alone says the origin may be shared: look it up before the head if need be

    def leaves_at_hint(self, before_head: bool) -> bool:
        """Does a download with these settings, of a URL whose name lets it be looked up before its head
        (`before_head`), close its origin's stream at a head asking it to swarm while it looks the providers up
        (`parking_steps`)? Its first GET then says so (`Swarm-Accept: hint`), and a busy origin running
        server_plugin holds that response's body until the client has left. Every GET already names the proxy in
        `Via`, so the field tells an origin nothing more; a name that may be a private origin's is not told."""
        return self.parking.close_for_lookup > 0 and before_head

    def spool_block_size(self, size: int, published: int | None) -> int | None:
        """The block size to hash `size` origin bytes in: a published manifest's, else --block-size, else (None)
        the size rule, which is also used where --block-size would make more blocks than a manifest may have."""
        if published is None and self.block_size and -(-size // self.block_size) <= MAX_BLOCKS:
            return self.block_size
        return published
