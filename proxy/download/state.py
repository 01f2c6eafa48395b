"""The states of a fallback download (`proxy.download.core`), shared by the modules its decisions are split into.

Its phases and the changes between them (`NEXT`: the core makes every change in one place, checked here), its
producers, and the small state objects the core owns, one per concern, instead of a flat list of fields: what is
known of the representation, the headless answer, the lookups, and the origin bytes the merge checks the swarm's
first block against (parking's is `proxy.download.parking.Parking`).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING

from swarm.content.manifest import MAX_BLOCK_SIZE

from ..origin_head import client_range

if TYPE_CHECKING:
    from swarm.content.manifest import Manifest

    from ..engine import Found
    from ..origin_head import OriginHead
    from ..origin_manifest import OriginManifest

__all__ = ["KEPT_FOR", "NEXT", "TAIL_LIMIT", "Headless", "Lookups", "Phase", "PhaseError", "Producer", "Representation",
           "Tail", "checked"]

TAIL_LIMIT = MAX_BLOCK_SIZE  # the origin bytes kept to check the first swarm block against: the largest block
# How long the head's lookup answer, found before the origin could be judged, stands in for the early lookup's.
KEPT_FOR = 3.0


class Phase(enum.Enum):
    HEAD = "head"
    HEADLESS = "headless"
    WAIT = "wait"
    STREAM = "stream"
    SWITCHED = "switched"
    MERGE = "merge"
    DONE = "done"


# Which phases may follow which: the changes the core makes (docs/ARCHITECTURE.md, "The download", says when).
# Every phase may end (DONE: relayed as is, failed, finished, cut, or left by the shell) and none comes back. Two
# changes may come in one event: a switch whose manifest was found already, and a parked download taken segment
# by segment, go STREAM -> SWITCHED -> MERGE.
NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.HEAD: frozenset({
        Phase.STREAM,  # its head
        Phase.HEADLESS,  # no first byte in T: a lookup races a HEAD
        Phase.WAIT,  # ... for a name that may be private: no lookup
        Phase.DONE}),
    Phase.HEADLESS: frozenset({
        Phase.MERGE,  # found, and the HEAD does not say otherwise: our own head
        Phase.WAIT,  # nothing usable
        Phase.STREAM,  # the origin answered first
        Phase.DONE}),
    Phase.WAIT: frozenset({Phase.STREAM, Phase.DONE}),  # the origin's head, whenever it comes
    Phase.STREAM: frozenset({Phase.SWITCHED, Phase.DONE}),  # a switch (the policy, the origin's hint, died), parked
    Phase.SWITCHED: frozenset({Phase.MERGE, Phase.DONE}),  # found, or taken segment by segment
    Phase.MERGE: frozenset({Phase.DONE}),
    Phase.DONE: frozenset(),
}


class PhaseError(RuntimeError):
    """A phase change `NEXT` does not allow: a bug in the download's core, never the network's doing."""

    def __init__(self, current: Phase, new: Phase) -> None:
        super().__init__(f"the download's core cannot go from {current.name} to {new.name} "
                         f"(allowed: {', '.join(sorted(p.name for p in NEXT[current])) or 'nothing'})")
        self.current, self.new = current, new


def checked(current: Phase, new: Phase) -> Phase:
    """`new`, if the core may go there from `current` (`NEXT`); else PhaseError."""
    if new not in NEXT[current]:
        raise PhaseError(current, new)
    return new


class Producer(enum.Enum):
    NONE = "none"  # never started
    HEAD_PENDING = "head pending"  # the origin's request is sent, its head not yet here
    RUNNING = "running"
    GONE = "gone"


@dataclasses.dataclass(frozen=True)
class Representation:
    """What the origin's head (or, headless, a manifest) said of the representation: replaced whole, never edited.
    The shell tells its lookups (`SwarmEngine.find`) and the segments' fetch what it knows."""

    size: int | None = None
    validator: str | None = None
    content_type: str | None = None
    published: OriginManifest | None = None  # the origin's own manifest (server plugin)
    hinted: bool = False  # the origin asks clients to swarm
    ranges: bool = False  # it serves ranges: a stream closed can be reopened where delivery got to

    @classmethod
    def of(cls, head: OriginHead) -> Representation:
        return cls(head.size, head.validator, head.content_type, head.published, head.hinted, head.ranges)


@dataclasses.dataclass
class Headless:
    """The HEADLESS phase's: the client's range, which our own head answers, and the HEAD racing the lookup."""

    range_header: str | None = None  # the client's
    if_range: str | None = None
    head_pending: bool = False  # the HEAD is out
    head_answer: OriginHead | None = None  # what it said (None: nothing yet, or it failed)
    held: Found | None = None  # the lookup's manifest, held `head_grace` s for the racing HEAD
    held_until: float | None = None

    def range_of(self, manifest: Manifest) -> tuple[int, int, int]:
        """(status, start, end) of our own answer to the client's range, for the manifest's representation."""
        return client_range(self.range_header, self.if_range, manifest.size, manifest.validator)

    def hold(self, found: Found, until: float) -> None:
        self.held, self.held_until = found, until

    def release(self) -> Found | None:
        """The held manifest, no longer held."""
        found, self.held, self.held_until = self.held, None, None
        return found

    def stop(self) -> bool:
        """Nothing more is waited for: the HEAD nor a held manifest. Was the HEAD still out (the shell stops it)?"""
        pending, self.head_pending = self.head_pending, False
        self.release()
        return pending


@dataclasses.dataclass
class Lookups:
    """The download's lookups: at most one runs; a switched download schedules the next one at `at`."""

    running: bool = False
    at: float | None = None
    polls: int = 0  # the waits `again` scheduled: the next is `DownloadSettings.repoll[polls]` (the last repeats)
    looked_early: bool = False  # the early point came (and looked up, if the origin was slow by then)
    kept: tuple[Found, float] | None = None  # the head's lookup's manifest, found before the origin was judged; when

    def again(self, now: float, repoll: tuple[float, ...]) -> float:
        """Schedule the next lookup, the later the more came before it; the wait."""
        wait = repoll[min(self.polls, len(repoll) - 1)]
        self.polls += 1
        self.at = now + wait
        return wait

    def take_kept(self, now: float) -> Found | None:
        """The kept manifest if it is at most KEPT_FOR s old; it is no longer kept either way."""
        kept, self.kept = self.kept, None
        return kept[0] if kept is not None and now - kept[1] <= KEPT_FOR else None

    def stop(self) -> bool:
        """No lookup runs or is scheduled any more; was one running (the shell then stops it)?"""
        running, self.running, self.at = self.running, False, None
        return running


@dataclasses.dataclass
class Tail:
    """The last origin bytes delivered (up to TAIL_LIMIT), and, once the merge starts, those of them the swarm's
    first block must match: a manifest whose bytes differ from the origin's is caught before any swarm byte goes
    out."""

    end: int = 0  # where the bytes kept end
    kept: bytearray = dataclasses.field(default_factory=bytearray)
    check: bytes = b""  # what the swarm's first block must match, and where it starts
    check_at: int = 0

    def keep(self, piece: bytes, end: int) -> None:
        """`piece` was delivered from the origin, up to `end`."""
        self.kept += piece
        if len(self.kept) > TAIL_LIMIT:
            del self.kept[:len(self.kept) - TAIL_LIMIT]
        self.end = end

    def merge_at(self, position: int, block: int) -> int:
        """The merge starts with the client at `position`: where the block engine starts (at the block holding the
        last origin byte delivered, if there is one, so that its first block overlaps bytes to check it against),
        and what that block must match."""
        check_from = max(self.end - len(self.kept), 0)
        if self.kept and self.end == position and position > check_from:
            fetch_start = (position - 1) // block * block
        else:
            fetch_start = position // block * block
        self.check = bytes(self.kept[max(fetch_start - check_from, 0):]) if self.end == position else b""
        self.check_at = position - len(self.check)
        self.kept.clear()
        return fetch_start

    def first_block_matches(self, data: bytes, at: int) -> bool:
        """Do the swarm's bytes `data`, from `at`, match the origin's there? Only its first bytes are checked."""
        if not self.check:
            return True
        lo = self.check_at - at
        expected, self.check = self.check, b""
        return bytes(data[lo:lo + len(expected)]) == expected
