"""What the download's core (`proxy.download.core`) asks its shell to do: one frozen dataclass per action.

The shell (`proxy.download.fallback`) executes a list of them in order; their names say what, their fields say with
what.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING

from swarm.content.manifest import Manifest
from swarm.trust import ManifestSource

if TYPE_CHECKING:
    from ..engine import Found


class Source(enum.Enum):
    ORIGIN = "origin"
    SWARM = "swarm"


# -- actions ------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RelayAsIs:
    """Not swarmable: copy the origin's answer to the client untouched; the core is done."""
    reason: str | None


@dataclasses.dataclass(frozen=True)
class RelayHead:
    """Answer with the origin's own response head; its body follows as `Deliver` actions."""


@dataclasses.dataclass(frozen=True)
class Respond:
    """Answer with our own head for the manifest's bytes `start..end` (the origin has said nothing)."""
    status: int
    start: int
    end: int
    manifest: Manifest
    described: tuple[str | None, str | None] | None  # Content-Type and -Encoding, if not the manifest's


@dataclasses.dataclass(frozen=True)
class OpenSpool:
    """Keep (and hash) the origin's bytes from offset 0 on, to share them once complete."""
    size: int
    block_size: int | None


@dataclasses.dataclass(frozen=True)
class ClaimFetching:
    """Say in discovery that this node fetches the representation from its origin and will vouch for it; the
    shell ends the claim when the download is over (unless its bytes go on to be vouched for)."""
    size: int
    block_size: int
    validator: str


@dataclasses.dataclass(frozen=True)
class EndClaim:
    """This download no longer fetches the file from the origin for the others (`ClaimFetching` is taken back)."""


@dataclasses.dataclass(frozen=True)
class LookAhead:
    """Start the lookup of the URL's claims before the head (`SwarmEngine.look_ahead`): the privacy rule allows it
    (`proxy.download.discovery_rule`: its host was slow recently, or the head has been silent too long)."""


@dataclasses.dataclass(frozen=True)
class StartLookup:
    headless: bool  # before any origin byte: the stricter quorum applies


@dataclasses.dataclass(frozen=True)
class StopLookup:
    pass


@dataclasses.dataclass(frozen=True)
class StartHead:
    """Ask the origin for a HEAD, to know which version it serves now."""


@dataclasses.dataclass(frozen=True)
class StopHead:
    pass


@dataclasses.dataclass(frozen=True)
class Switch:
    cause: str
    position: int
    reason: str


@dataclasses.dataclass(frozen=True)
class StartSwarm:
    found: Found
    start: int
    end: int


@dataclasses.dataclass(frozen=True)
class StartSegments:
    """Take bytes `start..end-1` segment by segment (`proxy.download.segments`): from the peers who hold a vouched
    segment, else from the origin by Range; the origin's own stream is closed. `block_size` cuts the segments;
    `origin_rate` (B/s, the origin's so far or R) says how long to wait for a segment's vouches."""
    start: int
    end: int
    block_size: int
    origin_rate: float


@dataclasses.dataclass(frozen=True)
class StopSwarm:
    pass


@dataclasses.dataclass(frozen=True)
class CloseOrigin:
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class ReopenOrigin:
    """Ask the origin again for `start..end` (If-Range: `validator`) after we closed it (the swarm failed, the wait
    for the fetchers ended, the early lookup's answer came): as `streams` Range requests at once when more than one
    (a claimer's: `proxy.download.origin_pieces`), the first one's answer standing for the whole rest's."""
    start: int
    end: int
    validator: str | None
    streams: int = 1


@dataclasses.dataclass(frozen=True)
class Deliver:
    source: Source
    data: bytes


@dataclasses.dataclass(frozen=True)
class RejectManifest:
    """The manifest's bytes differ from the origin's: count it and keep nothing of it."""
    source: ManifestSource


@dataclasses.dataclass(frozen=True)
class SwarmFailed:
    """The swarm failed this response (its bytes differ from the origin's or the Repr-Digest, or the block engine
    failed): why, for the request's record. Not an exception: the origin may still finish it, else it is cut."""
    text: str


@dataclasses.dataclass(frozen=True)
class Note:
    """Something worth a log line (and, if `event`, a line of the request's `events`)."""
    text: str
    event: bool = True


@dataclasses.dataclass(frozen=True)
class OriginComplete:
    """The origin delivered the whole body: what was spooled may be stored and shared."""
    publishable: bool


@dataclasses.dataclass(frozen=True)
class WithdrawSegments:
    """The body disagreed with the origin's Repr-Digest: every segment this download shared (from the origin or from
    peers) is withdrawn, its vouches too, and dropped from the store, never to be served again."""
    reason: str


@dataclasses.dataclass(frozen=True)
class Account:
    """Split the block engine's bytes into origin-Range and peer bytes (once the swarm is stopped)."""
    from_swarm: int


@dataclasses.dataclass(frozen=True)
class HandOver:
    """Store and share what is complete, stop sharing what is not (once per merged download). No manifest:
    a segmented download, whose segments were shared as they came."""
    manifest: Manifest | None
    fetch_start: int
    swarm_done: bool
    publishable: bool
    vouch: bool  # a segmented download's file may be vouched for: every byte of it came from the origin


@dataclasses.dataclass(frozen=True)
class Finish:
    """End the response normally: every byte was delivered."""


@dataclasses.dataclass(frozen=True)
class Cut:
    """Cut the client off: ending normally would hand it a short body that looks complete."""
    reason: str


@dataclasses.dataclass(frozen=True)
class Fail:
    """The origin could not be reached and nothing else can answer: an HTTP error (502/504) from `error`."""
    error: BaseException


Action = (RelayAsIs | RelayHead | Respond | OpenSpool | ClaimFetching | EndClaim | LookAhead | StartLookup
          | StopLookup | StartHead | StopHead | Switch | StartSwarm | StartSegments | StopSwarm | CloseOrigin
          | ReopenOrigin | Deliver | RejectManifest | SwarmFailed | Note | OriginComplete
          | WithdrawSegments | Account | HandOver | Finish | Cut | Fail)
