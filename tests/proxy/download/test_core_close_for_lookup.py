"""Table-driven tests of the close while the early lookup runs (`proxy.download.parking_steps`): a download whose
origin is slow so far at its early point closes the stream until the lookup answers, and asks for the rest by Range
(If-Range) where it left off when it goes on with the origin, or after `close_for_lookup` (0.5 s) if the lookup is
slower. Same driver as the other core tests (`download_vectors.py`): T = 1 s, R = 10 000 B/s, W = 2 s, early lookup
0.5 s; 100 000 bytes in 16 KiB blocks; the origin's head at 0.1, so the early point at 0.6. The privacy rule is the
product's (100 KB is not large): nothing is looked up at the head, as for a newcomer of the lab's crowd.
"""

from __future__ import annotations

import dataclasses

import pytest

from proxy.download.discovery_rule import DiscoveryRule
from proxy.download.parking import ParkingSettings

from . import download_vectors as vectors
from .download_vectors import (
    BLOCKS,
    DEADLINE,
    FOUND,
    HEAD,
    HFAIL,
    LOOK,
    PUBLISHED,
    SETTINGS,
    SFAIL,
    SIZE,
    TIMER,
    Driver,
    O,
    S,
    Vector,
    head,
)

CLOSE = dataclasses.replace(SETTINGS, discovery=DiscoveryRule(),
                            parking=ParkingSettings(after=2, poll=0.5, shortest=1.0, longest=1.0))
RANGES = head(ranges=True)
START = [HEAD(RANGES, 0.1, "RelayHead OpenSpool(100000,None)"),  # no lookup at the head: small, not slow yet
         O(3000, 0.3, "D(o,3000)")]  # 3100 bytes with the head by the early point: under R (5000)
CLOSED = TIMER("Note StartLookup CloseOrigin", 0.6)  # slow so far: looks it up, and closes the origin meanwhile
AGAIN = 'ReopenOrigin(3000-100000,"v1")'
AGAIN_BY_RANGES = 'ReopenOrigin(3000-100000,"v1",x4)'  # a claimer's: the rest by four Ranges at once
REST = HEAD(head(206, start=3000, end=SIZE, ranges=True), 0.8, "")  # the origin's answer to the Range
CLAIMED = LOOK(None, 0.7, f"ClaimFetching {AGAIN_BY_RANGES}", others=0)  # too few others: it fetches it, asked again
FROM_PEERS = "StopSwarm Account(97000) HandOver(0,done,True) D(s,1696) Finish"


def vector(*steps, settings=CLOSE, **fields) -> Vector:
    return vectors.vector(*steps, settings=settings, **fields)


VECTORS = [
    # The lab's crowd: two others fetch it, so it parks, its origin already closed; their vouches come, it finishes
    # from peers. The origin sent nothing more after the early point.
    pytest.param(vector(START, CLOSED, DEADLINE(1.1), LOOK(None, 0.7, "Switch(fetching@3000) CloseOrigin", others=2),
                        DEADLINE(1.2), TIMER("StartLookup"), LOOK(FOUND, 1.25, "StartSwarm(0-100000)"),
                        S(None, 1.3, "D(s,13384)"), BLOCKS(16384, 98304, 1.4), S(None, 1.5, FROM_PEERS)),
                 id="closed-then-parks-and-finishes-from-peers"),
    # Too few others: it says it fetches and asks for the rest where it left off; every byte still came from the
    # origin, so it is shared and vouched for as before.
    pytest.param(vector(START, CLOSED, CLAIMED, REST, O(97_000, 0.9, "D(o,97000) OriginComplete(True) Finish")),
                 id="closed-then-claims-and-the-origin-goes-on-by-range"),
    # A trusted copy: the crowd switch takes the swarm alone (the origin is closed already); the swarm fails, and
    # the origin is asked again where delivery got to.
    pytest.param(vector(START, CLOSED, LOOK(FOUND, 0.7, "Switch(crowd@3000) StartSwarm(0-100000)"),
                        S(None, 0.8, "D(s,13384)"),
                        SFAIL(0.9, 'Note SwarmFailed(swarm_failed) ReopenOrigin(16384-100000,"v1")'),
                        HEAD(head(206, start=16384, end=SIZE, ranges=True), 1.0, ""),
                        O(83_616, 1.1, "CloseOrigin StopSwarm Account(13384) HandOver(0,partial,True) D(o,83616) "
                                       "Finish")),
                 id="closed-then-found-the-swarm-fails-the-origin-again"),
    # A slow lookup (Mainline's take seconds): the origin is asked again 0.5 s after the close; the answer, when
    # it comes, may still leave the origin to the fetchers, closing the stream asked again.
    pytest.param(vector(START, CLOSED, DEADLINE(1.1), TIMER(f"Note {AGAIN}"),
                        HEAD(head(206, start=3000, end=SIZE, ranges=True), 1.2, ""), O(1000, 1.25, "D(o,1000)"),
                        LOOK(None, 1.3, "Switch(fetching@4000) CloseOrigin", others=2), DEADLINE(1.8),
                        TIMER("StartLookup"), LOOK(FOUND, 1.85, "StartSwarm(0-100000)"),
                        S(None, 1.9, "D(s,12384)"), BLOCKS(16384, 98304, 1.95),
                        S(None, 2.0, "StopSwarm Account(96000) HandOver(0,done,True) D(s,1696) Finish")),
                 id="a-slow-lookup-the-origin-asked-again-meanwhile"),
    pytest.param(vector(START, CLOSED, DEADLINE(1.1), TIMER(f"Note {AGAIN}"),
                        LOOK(None, 1.15, "Switch(fetching@3000) CloseOrigin", others=2), ends="gone"),
                 id="a-slow-lookup-parks-before-the-origin-answered-again"),
    # The origin asked it to swarm (its hint, with its manifest): the lookup gets `close_while_asked` (2 s), not
    # 0.5 s, before the busy origin is asked again.
    pytest.param(vector(HEAD(head(published=PUBLISHED, hinted=True, ranges=True), 0.1,
                             "RelayHead OpenSpool(100000,16384) Switch(hint@0) StartLookup CloseOrigin"),
                        DEADLINE(2.1), TIMER('ReopenOrigin(0-100000,"v1")'),
                        HEAD(head(206, start=0, end=SIZE, ranges=True), 2.2, ""),
                        O(SIZE, 2.3, "D(o,100000) StopLookup OriginComplete(True) Finish")),
                 id="asked-to-swarm-the-lookup-gets-longer"),
    # R fires while the stream is closed: the early lookup is the switch's; it found too few others, so the origin
    # is asked again and the download claims it, as a switched one does.
    pytest.param(vector(START, CLOSED, TIMER("Switch(R@3000)", 0.9),
                        LOOK(None, 1.0, f"ClaimFetching {AGAIN_BY_RANGES} Note", others=0),
                        HEAD(head(206, start=3000, end=SIZE, ranges=True), 1.05, ""),
                        O(97_000, 1.1, "D(o,97000) OriginComplete(True) Finish"),
                        settings=dataclasses.replace(CLOSE, transition=dataclasses.replace(
                            CLOSE.transition, rate_window=0.8))),
                 id="switched-by-R-while-closed-the-origin-again"),
    # The origin changed in the meantime: the bytes delivered are of the old version, nothing can complete them.
    pytest.param(vector(START, CLOSED, CLAIMED,
                        HEAD(head(200, size=60_000, validator='"v2"', ranges=True), 0.8,
                             "CloseOrigin Switch(died@3000) StartLookup"),
                        LOOK(None, 0.9, "Cut(broke_off)", others=0), ends="Cut"),
                 id="asked-again-another-version-is-cut"),
    pytest.param(vector(START, CLOSED, CLAIMED, HFAIL(0.8, "Switch(died@3000) StartLookup"),
                        LOOK(FOUND, 0.9, "StartSwarm(0-100000)"), S(None, 1.0, "D(s,13384)"),
                        BLOCKS(16384, 98304, 1.05), S(None, 1.1, FROM_PEERS)),
                 id="asked-again-failed-the-swarm-finishes"),
    # A claimer's rechecks leave its origin open: the crowd waits for its bytes.
    pytest.param(vector(START, CLOSED, CLAIMED, REST, O(1000, 0.9, "D(o,1000)"), TIMER("StartLookup", 1.2),
                        LOOK(None, 1.25, "", others=1), O(96_000, 1.3, "D(o,96000) OriginComplete(True) Finish")),
                 id="a-claimers-rechecks-never-close"),
    # Not closed: an origin that serves no ranges (it could not be asked for the rest), or parking off (trust
    # `any`: nobody to wait for).
    pytest.param(vector(HEAD(head(), 0.1, "RelayHead OpenSpool(100000,None)"), O(3000, 0.3, "D(o,3000)"),
                        TIMER("Note StartLookup", 0.6), LOOK(None, 0.7, "ClaimFetching", others=0),
                        O(97_000, 0.8, "D(o,97000) OriginComplete(True) Finish")),
                 id="no-ranges-no-close"),
    pytest.param(vector(START, TIMER("Note StartLookup", 0.6), LOOK(None, 0.7, ""),
                        O(97_000, 0.8, "D(o,97000) OriginComplete(True) Finish"),
                        settings=dataclasses.replace(CLOSE, parking=ParkingSettings(after=0))),
                 id="parking-off-no-close"),
    pytest.param(vector(START, TIMER("Note StartLookup", 0.6), LOOK(None, 0.7, "ClaimFetching", others=0),
                        O(97_000, 0.8, "D(o,97000) OriginComplete(True) Finish"),
                        settings=dataclasses.replace(CLOSE, parking=ParkingSettings(after=2, close_for_lookup=0.0))),
                 id="close-turned-off"),
]


@pytest.mark.parametrize("vector", VECTORS)
def test_vector(vector: Vector) -> None:
    Driver(vector).run()
