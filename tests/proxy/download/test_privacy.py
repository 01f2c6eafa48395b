"""The privacy rule (`discovery_rule`) in the download's core: a fast, small download tells the DHT nothing;
slowness, the origin's hint, a host slow recently or a large file let it look up and announce. Pure, fake clock."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.download import actions as act
from proxy.download.core import DownloadCore
from proxy.download.discovery_rule import HINT, HOST_SLOW, LARGE, SLOW, DiscoveryRule
from proxy.download.parking import ParkingSettings

from .download_vectors import CONTENT, PUBLISHED, SETTINGS, SIZE, head

# The defaults of the rule, with discovery on (a quorum of 2 to park for): T = 1 s, so the head's silence is 0.5 s.
PRIVATE = dataclasses.replace(SETTINGS, discovery=DiscoveryRule(), parking=ParkingSettings(after=2))
LARGE_SIZE = DiscoveryRule().large


@pytest.mark.parametrize("facts, allowed", [
    (dict(slow=False, hinted=False, host_slow=False, size=SIZE), None),
    (dict(slow=False, hinted=False, host_slow=False, size=None), None),
    (dict(slow=False, hinted=False, host_slow=False, size=LARGE_SIZE - 1), None),
    (dict(slow=False, hinted=False, host_slow=False, size=LARGE_SIZE), LARGE),
    (dict(slow=True, hinted=False, host_slow=False, size=SIZE), SLOW),
    (dict(slow=False, hinted=True, host_slow=False, size=SIZE), HINT),
    (dict(slow=False, hinted=False, host_slow=True, size=None), HOST_SLOW),
    (dict(slow=True, hinted=True, host_slow=True, size=LARGE_SIZE), HINT),  # the strongest reason is named
], ids=["fast-small", "fast-no-size", "just-under-large", "large", "slow", "hinted", "host-slow", "all"])
def test_what_allows_a_download_to_tell_the_dht(facts, allowed):
    assert DiscoveryRule().allows(**facts) == allowed


def test_the_size_threshold_is_a_setting():
    assert DiscoveryRule(large=1000).allows(slow=False, hinted=False, host_slow=False, size=1000) == LARGE
    assert DiscoveryRule(large=1000).allows(slow=False, hinted=False, host_slow=False, size=999) is None


def names(actions) -> list[str]:
    return [type(a).__name__ for a in actions]


def fast(settings, h=None, *, size: int = SIZE) -> list:
    """A head at 0.1 s, then the whole body at once: what a fast origin does."""
    core = DownloadCore(settings)
    actions = core.start(0.0)
    actions += core.origin_head(h or head(size=size), 0.1)
    actions += core.origin_data(CONTENT[:size] if size <= SIZE else bytes(size), 0.2)
    return actions


def test_a_fast_small_download_looks_nothing_up_and_announces_nothing():
    actions = fast(PRIVATE)
    assert not {"LookAhead", "StartLookup", "ClaimFetching"} & set(names(actions))
    complete = next(a for a in actions if isinstance(a, act.OriginComplete))
    assert complete.publishable is False  # kept, served to the client, never announced
    assert any(isinstance(a, act.Note) and "private" in a.text for a in actions)


def test_a_download_slowed_after_its_early_point_and_done_before_w_was_slow():
    """A crowd's first fetcher: fast at its early point, slowed by the crowd after it, done before W: under R
    from its first byte to its last, so it may vouch (it was kept private as a fast download before)."""
    settings = dataclasses.replace(PRIVATE, transition=dataclasses.replace(PRIVATE.transition, min_rate=160_000.0))
    core = DownloadCore(settings)
    core.start(0.0)
    actions = core.origin_head(head(ranges=True), 0.1)
    actions += core.origin_data(CONTENT[:90_000], 0.15)
    actions += core.timer(0.6)  # the early point: 90 kB in 0.5 s is R or more, no lookup
    assert not {"LookAhead", "StartLookup"} & set(names(actions))
    actions = core.origin_data(CONTENT[90_000:], 1.9)  # 100 kB in 1.8 s: under 160 kB/s
    complete = next(a for a in actions if isinstance(a, act.OriginComplete))
    assert complete.publishable is True


def test_a_large_download_is_looked_up_at_its_head_and_announced():
    core = DownloadCore(PRIVATE)
    assert core.start(0.0) == []
    actions = core.origin_head(head(size=LARGE_SIZE, ranges=True), 0.1)
    assert "StartLookup" in names(actions)  # the lookup at the head: do others fetch it already?


def test_a_small_download_from_a_fast_origin_is_not_looked_up_at_its_head():
    core = DownloadCore(PRIVATE)
    core.start(0.0)
    assert "StartLookup" not in names(core.origin_head(head(ranges=True), 0.1))


def test_a_silent_head_counts_as_slow_and_starts_the_lookup_ahead():
    core = DownloadCore(PRIVATE)
    assert core.start(0.0) == []
    assert core.next_deadline() == pytest.approx(0.5)  # half of T
    assert core.timer(0.49) == []
    actions = core.timer(0.5)
    assert names(actions) == ["Note", "LookAhead"]
    assert core.timer(0.6) == []  # once
    actions = core.origin_head(head(), 0.7) + core.origin_data(CONTENT, 0.8)
    complete = next(a for a in actions if isinstance(a, act.OriginComplete))
    assert complete.publishable is True  # the origin was slow to answer: what it sent may be shared


def test_a_host_slow_recently_looks_ahead_at_once_and_may_announce():
    settings = dataclasses.replace(PRIVATE, host_slow=True)
    core = DownloadCore(settings)
    assert names(core.start(0.0)) == ["LookAhead"]
    actions = core.origin_head(head(), 0.1) + core.origin_data(CONTENT, 0.2)
    assert next(a for a in actions if isinstance(a, act.OriginComplete)).publishable is True


def test_the_origins_hint_allows_it():
    actions = fast(PRIVATE, head(published=PUBLISHED, hinted=True))
    assert "Switch" in names(actions)  # the hint switches at once


def test_without_discovery_nothing_is_scheduled():
    settings = dataclasses.replace(PRIVATE, parking=ParkingSettings(after=0))
    core = DownloadCore(settings)
    assert core.start(0.0) == [] and core.next_deadline() == pytest.approx(1.0)  # T alone


def test_a_slow_start_at_the_early_point_allows_a_lookup_and_the_announcement():
    core = DownloadCore(PRIVATE)  # early lookup at 0.5 s after the first byte; R = 10 000 B/s
    core.start(0.0)
    actions = core.origin_head(head(), 0.1)
    assert "StartLookup" not in names(actions)
    actions = core.origin_data(CONTENT[:1000], 0.2) + core.timer(0.7)
    assert "StartLookup" in names(actions)  # slow so far: the early point may look it up


def test_a_name_that_may_be_private_is_not_looked_up_before_its_head():
    """`localhost`, a single label, an unlisted private literal: a lookup before the head would tell the DHT about
    a URL the connection may show to be this machine's. A silent head and T wait for the origin instead."""
    core = DownloadCore(dataclasses.replace(PRIVATE, before_head=False, host_slow=True))
    assert core.start(0.0) == [] and core.next_deadline() == pytest.approx(1.0)  # T alone: no silence, no look-ahead
    actions = core.timer(1.0)
    assert names(actions) == ["Switch"] and "waits for its origin" in actions[0].reason  # T, with no lookup
    assert core.next_deadline() is None  # nothing but the origin's answer
    actions = core.origin_head(head(), 1.5) + core.origin_data(CONTENT, 1.6)
    assert next(a for a in actions if isinstance(a, act.OriginComplete)).publishable is True  # T: it was slow
