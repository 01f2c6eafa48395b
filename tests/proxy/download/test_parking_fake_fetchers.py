"""Fake fetchers cannot slow a healthy download (SECURITY.md, "Leaving the origin to others who fetch it").

Parties in as many networks as the quorum say they fetch a URL from its origin and never vouch. Before, a download
whose lookup at its head saw them parked at once and waited as long as its origin would still take at R (no body
byte yet: R stood in for the origin's rate). Now a download leaves its origin only once it judged it slow, at the
early point (under R, or no body byte at all), and waits at most as long as that origin would still have taken at
the rate it showed (or at R when it showed none: it is slower than R so far).

The first test plays whole downloads on a fake clock (the core and a throttled origin, lookups that always find the
fakes and never a manifest) and compares each with the same download without the fakes. The last one is end to end,
in one process: a victim proxy, a healthy loopback origin, fake claims from two addresses (loopback addresses count
one by one, as networks do).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib

import pytest
import pytest_asyncio

from proxy.demo.local_swarm import Cluster
from proxy.download import actions as act
from proxy.download.core import DownloadCore
from proxy.download.discovery_rule import DiscoveryRule
from proxy.download.parking import ParkingSettings
from proxy.download.settings import DownloadSettings
from proxy.download.transition import TransitionSettings
from proxy.origin_head import OriginHead

CHUNK = 16 * 1024
HEAD_AT = 0.05  # the origin's head, after the GET went out at 0
LOOKUP_SECONDS = 0.01
# The defaults (T = 0.75 s, R = 160 000 B/s, W = 2 s, early lookup 0.25 s) and parking under quorum:2; every size
# may be looked up (by default a fast download looks up a file of 16 MiB or more only, where the same rule applies).
SETTINGS = DownloadSettings(TransitionSettings(), max_spool=1 << 30, parking=ParkingSettings(after=2),
                            discovery=DiscoveryRule(large=0))


def origin_head(size: int, start: int = 0) -> OriginHead:
    return OriginHead(status=206 if start else 200, swarmable=True, reason=None, size=size, validator='"v1"',
                      start=start, end=size, content_type="application/octet-stream", content_encoding=None,
                      ranges=True, published=None, hinted=False, head_size=300)


@dataclasses.dataclass
class Run:
    ended: float  # when the last byte was delivered
    names: list[str]  # the actions', in order
    parked: tuple[float, int] | None = None  # when it left the origin, and the body bytes it had by then


def download(size: int, rate: float, fakes: int) -> Run:
    """A download of `size` bytes from an origin sending `rate` B/s (16 KiB at a time, from its head on), while
    `fakes` independent parties claim to fetch it."""
    core = DownloadCore(SETTINGS)
    now, delivered, run = 0.0, 0, Run(0.0, [])
    origin_next: float | None = None  # when the origin's next chunk comes (None: closed)
    origin_at = 0
    head_due: tuple[float, int] | None = (HEAD_AT, 0)  # (when, start) of a head on its way
    lookup_due: float | None = None
    actions = core.start(now)
    while True:
        for action in actions:
            run.names.append(type(action).__name__)
            match action:
                case act.Deliver(_, data):
                    delivered += len(data)
                case act.Finish():
                    assert delivered == size
                    run.ended = now
                    return run
                case act.Cut() | act.Fail() | act.StartSwarm() | act.StartSegments():
                    raise AssertionError(f"unexpected {action}")
                case act.StartLookup():
                    lookup_due = now + LOOKUP_SECONDS
                case act.StopLookup():
                    lookup_due = None
                case act.CloseOrigin():
                    origin_next, run.parked = None, (now, delivered)
                case act.ReopenOrigin(start):
                    head_due = (now + HEAD_AT, start)
        deadline = core.next_deadline()
        events = [t for t in (head_due and head_due[0], origin_next, lookup_due, deadline) if t is not None]
        now = max(now, min(events))
        if head_due is not None and now >= head_due[0]:
            start, head_due = head_due[1], None
            origin_at, origin_next = start, now + CHUNK / rate
            actions = core.origin_head(origin_head(size, start), now)
        elif origin_next is not None and now >= origin_next:
            piece = b"x" * min(CHUNK, size - origin_at)
            origin_at += len(piece)
            origin_next = now + CHUNK / rate if origin_at < size else None
            actions = core.origin_data(piece, now)
        elif lookup_due is not None and now >= lookup_due:
            lookup_due = None
            actions = core.lookup_done(None, now, fakes, fakes)  # the fakes, all ahead of it; never a manifest
        else:
            actions = core.timer(now)


@pytest.mark.parametrize("size,rate,healthy", [
    (3_000_000, 2_000_000, True),  # the measured case: 1.5 s, and 6.6 s when it parked at its first read
    (1_000_000, 400_000, True),
    (2_000_000, 240_000, True),  # 1.5 R
    (1_000_000, 100_000, False),  # a slow origin may be left: for at most what it would still take
    (3_000_000, 50_000, False),  # no body byte by the early point: slower than R, waited for at R
    (400_000, 60_000, False),  # the origin would finish sooner than the shortest wait (5 s)
])
def test_fake_fetchers_delay_a_download_by_at_most_what_its_origin_would_still_take(size, rate, healthy) -> None:
    baseline, attacked = download(size, rate, fakes=0), download(size, rate, fakes=2)
    assert baseline.parked is None and "ClaimFetching" not in attacked.names  # it saw two: it does not claim
    if healthy:
        assert attacked.ended == baseline.ended and attacked.parked is None
        return
    assert attacked.parked is not None  # a slow origin is left to the fetchers...
    at, body = attacked.parked
    # ...at the rate it showed since its head, about its own (none: R)
    shown = body / (at - HEAD_AT) if body else SETTINGS.transition.min_rate
    assert rate / 2 <= shown <= rate or body == 0
    wait = SETTINGS.parking.wait(remaining=size - body, rate=shown)
    # Delayed by the wait, and by reopening: a new head, and the first chunk of the origin's pace.
    assert baseline.ended < attacked.ended <= baseline.ended + wait + HEAD_AT + CHUNK / rate
    assert wait == max(SETTINGS.parking.shortest, (size - body) / shown)


SIZE = 600_000
DATA = (hashlib.sha256(b"healthy").digest() * (SIZE // 32 + 1))[:SIZE]
# Every size may be looked up (the privacy rule lets a fast download look up a large file only: it has tests of its
# own); a 20 MB file of a fast origin is one the rule lets look up, and it parked at its head before.
E2E = {"first_byte_timeout": "5", "min_rate": "160k", "rate_window": "30", "early_lookup": "0.3",
       "discover_size": "0"}


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, **E2E)
    yield group
    await group.close()


async def test_fake_fetchers_in_two_networks_do_not_make_a_healthy_download_leave_its_origin(cluster, slow_origin):
    url = slow_origin.add("/healthy.bin", DATA)
    slow_origin.set_rate(1_000_000)  # over R: the download takes 0.6 s, and still runs at its early point
    slow_origin.first_byte_delay = 0.05  # the victim's lookup answers before the head, as across real networks
    etag = slow_origin.files["/healthy.bin"][1]
    _, first, second = await cluster.grow(3)
    for fake in (first, second):  # what a download's ClaimFetching says; never followed by a vouch
        fake.engine.fetching(url, size=len(DATA), block_size=16 * 1024, validator=etag)
    await asyncio.gather(first.engine.service.settled(), second.engine.service.settled())
    victim = await cluster.add()
    status, _, body = await cluster.get(victim, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(victim)
    events = record["events"]
    assert any("(2 fetching" in e for e in events), events  # it saw both fakes...
    assert record["transition"] is None and record["bytes_origin"] == len(DATA), events  # ...and stayed
    assert not any("this node fetches it" in e for e in events), events  # nor claimed with them


@pytest.mark.parametrize("body,since_head,judged,slow,verdict", [
    (0, 1.0, True, True, "leave"),  # no body byte by the early point: slow, and no rate (waited for at R)
    (100_000, 0.0, True, True, "later"),
    (100_000, 0.1, False, True, "later"),  # before the early point: a first read is a burst
    (100_000, 0.5, True, False, "stay"),  # a healthy origin is never left
    (100_000, 0.5, True, True, "leave"),  # at 200 000 B/s, what it showed
])
def test_a_download_leaves_only_an_origin_that_showed_a_slow_rate(body, since_head, judged, slow, verdict) -> None:
    assert ParkingSettings.leave(body=body, since_head=since_head, judged=judged, slow=slow) == verdict


@pytest.mark.parametrize("remaining,rate,wait", [
    (20_000_000, 2_000_000, 10.0),
    (3_000_000, 100_000, 30.0),
    (100_000, 100_000, 5.0),  # at least `shortest`
    (10**9, 1_000, 600.0),  # at most `longest`
    (20_000_000, 0, 5.0),  # no rate at all: `shortest` (a download that showed none is waited for at R)
])
def test_the_wait_is_what_the_origin_would_still_take_at_its_rate(remaining, rate, wait) -> None:
    assert ParkingSettings(after=2).wait(remaining=remaining, rate=rate) == pytest.approx(wait)
