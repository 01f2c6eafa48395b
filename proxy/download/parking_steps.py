"""Parking's steps on the download's core: leaving the origin to the fetchers, and closing it while a lookup runs.

`parking` holds the rule's settings, state and decisions; these are the steps they lead to, which change the core's
own state (its phase, its producers, its lookups), so they are methods of `DownloadCore`, kept here as a mixin to
keep each module one concern. The attributes and methods declared below are the core's (`proxy.download.core`).

**Closing the origin while the early lookup runs.** A download whose origin is slow so far at its early point
looks its URL up; until the answer (0.16 s at the median on our DHT, seconds on Mainline's) it used to go on
reading the origin. In a flash crowd without the origin's help, those reads were most of what the origin sent: each
newcomer took a 16 KB turn of the throttled origin into a connection it closed a moment later, once the lookup found
the fetchers (the lab's no-plugin crowd at 20/s: 5.9 % of the direct clients' origin bytes, against 0.6 % with the
plugin). So it closes the stream when the lookup starts, if it can come back (the origin serves ranges and gave a
validator: parking's own condition), and asks for the rest by Range with If-Range where it left off when the answer
says it goes on with the origin, or after `ParkingSettings.close_for_lookup` s if the lookup is slower. The cost, for
a download that goes on with its origin: one request's round trip and at most that long without origin bytes, from
an origin already judged slower than R.

A download the origin asks to swarm (server_plugin's `Swarm-Hint`, with its manifest) closes the stream the same
way while its providers are looked up (for up to `ParkingSettings.close_while_asked`, 2 s, not 0.5; its first GET
said it would, `Swarm-Accept: hint`, and a busy plugin holds that body until it has left): the origin said it is
busy, and a stream kept open for the lookup took its turns for bytes the swarm then replaced, and held one of its
connections through each lookup, which newcomers' heads waited behind: on the crowd simulator (`bench/crowd_sim`,
10,000 clients at 1,000/s with the plugin) closing it took the median from 6.71 to 2.58 s and the origin's share from
0.141 to 0.078 % (bench/README.md; measured before 2d72b57 corrected the simulator's origin, which stalled on
departed clients' chunks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm.content.segments import segmented

from . import actions as act
from .actions import Action, Source
from .parking import Parking
from .settings import DownloadSettings
from .state import Lookups, Phase, Producer, Representation
from .transition import FETCHING_CAUSE, TransitionPolicy

if TYPE_CHECKING:
    from ..engine import Found


class ParkingSteps:
    """Mixed into `DownloadCore`: the steps of parking (`parking.Parking`'s decisions) and of the close while the
    early lookup runs (module docstring)."""

    # -- the core's state these steps read and change (`DownloadCore.__init__` sets them) --------------------
    settings: DownloadSettings
    policy: TransitionPolicy
    phase: Phase
    origin: Producer
    swarm: Producer
    position: int
    end: int
    swarm_position: int
    fetch_start: int
    promised_start: int
    known: Representation
    spool_block: int | None
    lookups: Lookups
    parking: Parking
    found: Found | None
    reopen: bool
    delivered: dict[Source, int]

    def _enter(self, phase: Phase) -> None:
        raise NotImplementedError  # (the core's)

    def _tick(self, now: float) -> list[Action]:
        raise NotImplementedError

    def _stop_lookups(self) -> list[Action]:
        raise NotImplementedError

    def _reopen(self) -> list[Action]:
        raise NotImplementedError

    # -- parking -------------------------------------------------------------------------------------------------
    def _may_park(self) -> bool:
        """Can this download leave the origin for the fetchers, and come back to where it is if they fail it? (Its
        stream may be closed for the lookup that decides it, or asked again after it: `_close_for_lookup`.)"""
        return (self.parking.available and self.phase in (Phase.STREAM, Phase.SWITCHED)
                and (self.origin in (Producer.RUNNING, Producer.HEAD_PENDING) or self.parking.closed_for_lookup)
                and self._may_come_back())

    def _may_come_back(self) -> bool:
        """Could the rest be asked for by Range, of this very version, if the stream were closed now?"""
        return self.known.ranges and bool(self.known.validator) and self.position < self.end

    def _park_if(self, others: int, ahead: int, now: float) -> list[Action] | None:
        """Park if enough others fetch it (`Parking.enough`) and the origin has shown it is slow (`Parking.leaves`).
        None: it does not, and the lookup's answer is taken as if too few fetched it."""
        if not self._may_park() or not self.parking.enough(others, ahead):
            return None
        streaming = self.phase is Phase.STREAM
        if (rate := self.parking.leaves(self.policy, self.delivered[Source.ORIGIN], now, streaming=streaming)) is None:
            # It stays. One that never said it fetches does not say so now, with enough others at it: the early
            # point's lookup asks again if the origin is slow by then. The rest goes on as when too few fetch it.
            return self._tick(now) if streaming and not self.parking.claimed else None
        actions: list[Action] = [act.EndClaim()] if self.parking.claimed else []
        self.parking.claimed = False
        return actions + self._park(ahead if actions else others, rate, now)

    def _park(self, others: int, rate: float, now: float) -> list[Action]:
        wait = self.parking.park(now, remaining=self.end - self.position, rate=rate)
        why = f"{others} independent other{'s' if others != 1 else ''} fetch it from the origin"
        actions: list[Action] = []
        if self.phase is Phase.STREAM:  # (a switched download said why already)
            actions.append(act.Switch(FETCHING_CAUSE, self.position, f"{why}; waiting for their vouches"))
            self._enter(Phase.SWITCHED)
        self.origin, self.reopen = Producer.GONE, True
        if self.spool_block and self.known.size and segmented(self.known.size, self.spool_block):
            # Segment by segment: from peers once vouched, before anyone has it all (`proxy.download.segments`).
            self._enter(Phase.MERGE)
            self.swarm, self.swarm_position = Producer.RUNNING, self.position
            self.fetch_start = self.position
            return actions + self._stop_lookups() + [
                act.CloseOrigin(f"{why}: taking it segment by segment, from their vouches or the origin's ranges"),
                act.StartSegments(self.position, self.end, self.spool_block, rate)]
        self.parking.parked_until, self.lookups.at = now + wait, now + self.settings.parking.poll
        return actions + [act.CloseOrigin(f"{why}: leaving the origin to them for up to {wait:.3g} s")]

    def _unpark(self, now: float) -> list[Action]:
        """No vouched manifest in time: the origin again where delivery got to; lookups go on as after a switch."""
        self.parking.parked_until = None
        self.lookups.again(now, self.settings.repoll)
        return [act.Note("the fetchers' vouches did not come in time; back to the origin")] + self._reopen()

    # -- the close while the early lookup runs ---------------------------------------------------------------------
    def _close_for_lookup(self, now: float, *, asked: bool = False) -> list[Action]:
        """The early lookup starts on an origin slow so far: close it until the answer (module docstring), if
        parking could leave it (`_may_park`) and this download has not said it fetches it (a claimer's rechecks
        keep reading: it is one of those the crowd waits for). `asked`: the origin asked us to swarm (its hint):
        closed whether parking is on or not, if the rest can be asked for again (`_may_come_back`)."""
        if not self.settings.parking.close_for_lookup or self.parking.claimed or self.origin is not Producer.RUNNING:
            return []
        if not (self._may_come_back() if asked else self._may_park()):
            return []
        self.parking.close_for_lookup(now, asked=asked)
        self.origin, self.reopen = Producer.GONE, True
        why = "the origin asks clients to swarm" if asked else "slow so far"
        return [act.CloseOrigin(f"{why}: closed while the lookup runs, asked again by Range if it goes on")]

    def _reopen_after_lookup(self) -> list[Action]:
        """The lookup's answer (or its time) came and the download goes on with the origin, still closed for that
        lookup: ask for the rest where delivery got to."""
        if not self.parking.closed_for_lookup:
            return []
        self.parking.close_over()
        return self._reopen()
