"""`proxy.idle_trim.IdleTrim`: the heap is trimmed once, TRIM_AFTER s after the last client connection closed,
and never while one is open. A fake loop stands in for the clock."""

from __future__ import annotations

import pytest

from proxy import idle_trim
from proxy.idle_trim import TRIM_AFTER, TRIM_EVERY, IdleTrim, malloc_trim


@pytest.fixture(autouse=True)
def _no_trim_yet(monkeypatch):
    monkeypatch.setattr(idle_trim, "_last_trim", None)  # the process-wide memory of the last trim


class _Handle:
    def __init__(self, loop: _Loop, when: float, callback) -> None:
        self.loop, self.when, self.callback, self.cancelled = loop, when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class _Loop:
    def __init__(self) -> None:
        self.now = 0.0
        self.handles: list[_Handle] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback) -> _Handle:
        handle = _Handle(self, self.now + delay, callback)
        self.handles.append(handle)
        return handle

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for handle in list(self.handles):
            if not handle.cancelled and handle.when <= self.now:
                self.handles.remove(handle)
                handle.callback()


def _trimmer() -> tuple[_Loop, IdleTrim, list[float]]:
    loop = _Loop()
    trimmed: list[float] = []
    trim = IdleTrim(loop, trim=lambda: trimmed.append(loop.now) or True)  # type: ignore[arg-type]
    return loop, trim, trimmed


def test_trims_once_after_the_last_connection_closed():
    loop, trim, trimmed = _trimmer()
    trim.connections(1)
    trim.connections(2)
    trim.connections(1)
    loop.advance(60)
    assert trimmed == []  # busy all along
    trim.connections(0)
    loop.advance(TRIM_AFTER - 0.01)
    assert trimmed == []
    loop.advance(0.02)
    assert len(trimmed) == 1 and 60 + TRIM_AFTER <= trimmed[0] < 60 + TRIM_AFTER + 0.02
    loop.advance(600)
    assert trim.trims == 1  # idle for long: once


def test_a_connection_before_the_delay_puts_the_trim_off():
    loop, trim, trimmed = _trimmer()
    trim.connections(0)
    loop.advance(TRIM_AFTER / 2)
    trim.connections(1)  # a client came back
    loop.advance(TRIM_AFTER)
    assert trimmed == []
    trim.connections(0)
    loop.advance(TRIM_AFTER)
    assert trimmed == [TRIM_AFTER * 2.5]


def test_many_servers_of_one_process_trim_at_most_once_in_trim_every():
    loop = _Loop()
    trimmed: list[float] = []
    servers = [IdleTrim(loop, trim=lambda: trimmed.append(loop.now) or True) for _ in range(500)]  # type: ignore[arg-type]
    for server in servers:  # the lab: every node of a worker goes idle within moments
        server.connections(1)
        server.connections(0)
    loop.advance(TRIM_AFTER + 1)
    assert len(trimmed) == 1
    servers[0].connections(1)
    servers[0].connections(0)
    loop.advance(TRIM_AFTER + 1)
    assert len(trimmed) == 1  # too soon after the last
    loop.advance(TRIM_EVERY)
    servers[1].connections(1)
    servers[1].connections(0)
    loop.advance(TRIM_AFTER + 1)
    assert len(trimmed) == 2


def test_a_load_right_after_a_trim_is_trimmed_once_one_is_allowed_again():
    loop, trim, trimmed = _trimmer()
    trim.connections(1)
    trim.connections(0)
    loop.advance(TRIM_AFTER)
    assert trimmed == [TRIM_AFTER]
    trim.connections(1)  # a burst of downloads right after that trim
    loop.advance(10)
    trim.connections(0)
    loop.advance(TRIM_AFTER)
    assert trimmed == [TRIM_AFTER]  # too soon for another
    loop.advance(TRIM_EVERY)
    assert len(trimmed) == 2 and trimmed[1] >= TRIM_AFTER + TRIM_EVERY  # put off, not dropped
    loop.advance(600)
    assert len(trimmed) == 2  # and then no more while idle


def test_a_server_idle_since_before_the_last_trim_does_not_trim_again():
    loop = _Loop()
    trimmed: list[float] = []
    servers = [IdleTrim(loop, trim=lambda: trimmed.append(loop.now) or True) for _ in range(3)]  # type: ignore[arg-type]
    for server in servers:
        server.connections(1)
        server.connections(0)
    loop.advance(TRIM_AFTER)
    loop.advance(TRIM_EVERY * 3)
    assert trimmed == [TRIM_AFTER]  # one trim covers them all: none is put off


def test_malloc_trim_answers_where_glibc_is():
    assert malloc_trim() in (True, False)  # never raises: a no-op without glibc
