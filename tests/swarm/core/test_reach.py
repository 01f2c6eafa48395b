"""The connect-back limiter on a fake clock: per source (a public IPv6 /64 is one), in all, under way at once.

Each case is a table of steps (`run` below):

    admit ADDRESS PORT NOW -> ok            carried out (and under way until a `finish`)
    admit ADDRESS PORT NOW -> no WORDS      refused, the reason containing WORDS
    finish                                  an admitted request is over
"""

from __future__ import annotations

import pytest

from swarm.core.reach import LOWEST_PORT, MAX_IN_FLIGHT, PER_SOURCE, WINDOW, ConnectBackLimiter

A, B = "7.7.1.1", "7.7.2.1"  # public addresses (the test internet's, `bench/internet_plan.py`)
P = 40000  # a requester's port


def run(limiter: ConnectBackLimiter, steps: list[str]) -> None:
    for step in steps:
        words = step.split()
        if words[0] == "finish":
            limiter.finished()
            continue
        _, address, port, now, _, verdict, *why = words
        refusal = limiter.admit(None if address == "none" else address, int(port), float(now))
        if verdict == "ok":
            assert refusal is None, f"{step}: {refusal}"
        else:
            assert refusal is not None and " ".join(why) in refusal, f"{step}: {refusal}"
        assert limiter.in_flight <= limiter.max_in_flight


def asks(address: str, n: int, now: float, verdict: str = "ok", finish: bool = True) -> list[str]:
    return [f"admit {address} {P} {now} -> {verdict}"] * n + (["finish"] * n if finish and verdict == "ok" else [])


CASES = [
    # --- per source ---------------------------------------------------------------------------------------
    ("a source gets PER_SOURCE a window", {},
     asks(A, PER_SOURCE, 0) + [f"admit {A} {P} 1 -> no {A} asked for {PER_SOURCE}"]),
    ("another source is not held up by it", {},
     asks(A, PER_SOURCE, 0) + asks(B, PER_SOURCE, 1)),
    ("the window slides", {},
     asks(A, PER_SOURCE, 0) + [f"admit {A} {P} {WINDOW - 1} -> no asked"] + asks(A, 1, WINDOW)),
    ("refused asks do not count against the source", {},
     asks(A, 1, 0) + [f"admit {A} 80 1 -> no below"] * 5 + asks(A, 1, 2)),
    ("addresses of one IPv4 /24 are distinct sources", {},
     asks("7.7.1.1", PER_SOURCE, 0) + asks("7.7.1.2", PER_SOURCE, 0)),
    ("an IPv4-mapped address is the IPv4 address", {},
     asks(A, 1, 0) + asks(f"::ffff:{A}", 1, 0) + [f"admit [::ffff:{A}] {P} 0 -> no asked"]),
    ("a public IPv6 /64 is one source", {},
     asks("2a00:1:2:3::1", 1, 0) + asks("2a00:1:2:3:ffff::9", 1, 0)
     + ["admit 2a00:1:2:3::77 40000 0 -> no 2a00:1:2:3::/64 asked"] + asks("2a00:1:2:4::1", 1, 0)),
    # --- in all -------------------------------------------------------------------------------------------
    ("at most max_in_flight under way", {},
     [f"admit 7.7.{i}.1 {P} 0 -> ok" for i in range(MAX_IN_FLIGHT)]
     + [f"admit 7.8.0.1 {P} 0 -> no {MAX_IN_FLIGHT} connect-backs under way", "finish",
        f"admit 7.8.0.1 {P} 0 -> ok"]),
    ("at most per_window a window, whoever asks", {"per_window": 3},
     asks("7.7.0.1", 1, 0) + asks("7.7.0.2", 1, 0) + asks("7.7.0.3", 1, 0)
     + ["admit 7.7.0.4 40000 10 -> no 3 connect-backs in the last 60 s"] + asks("7.7.0.4", 1, WINDOW)),
    # --- what is never dialled ----------------------------------------------------------------------------
    ("a port below 1024", {}, [f"admit {A} {LOWEST_PORT - 1} 0 -> no below {LOWEST_PORT}",
                               f"admit {A} {LOWEST_PORT} 0 -> ok"]),
    ("a loopback source", {}, ["admit 127.0.0.1 40000 0 -> no not a public address"]),
    ("a private source", {}, ["admit 192.168.1.9 40000 0 -> no not a public address",
                              "admit 172.17.0.1 40000 0 -> no not a public address",
                              "admit fe80::1 40000 0 -> no not a public address"]),
    ("a loopback or private source in a lab", {"allow_private": True},
     asks("127.0.0.1", PER_SOURCE, 0) + ["admit 127.0.0.1 40000 0 -> no asked"] + asks("192.168.1.9", 1, 0)),
    ("a special-purpose address, even in a lab", {"allow_private": True},
     ["admit 203.0.113.5 40000 0 -> no special-purpose", "admit 0.0.0.0 40000 0 -> no special-purpose"]),
    ("no IP address at all", {"allow_private": True}, ["admit none 40000 0 -> no not an IP address",
                                                       "admit node-1 40000 0 -> no not an IP address"]),
]  # fmt: skip


@pytest.mark.parametrize("name, settings, steps", CASES, ids=[case[0] for case in CASES])
def test_limiter_table(name: str, settings: dict, steps: list[str]) -> None:
    run(ConnectBackLimiter(**settings), steps)


def test_finishing_what_was_not_admitted_is_a_local_bug():
    limiter = ConnectBackLimiter()
    with pytest.raises(RuntimeError):
        limiter.finished()


def test_what_it_remembers_is_bounded_by_the_window():
    limiter = ConnectBackLimiter(per_window=10_000, max_in_flight=10_000)
    for i in range(1000):
        assert limiter.admit(f"7.{i // 250}.{i % 250}.1", P, i * 0.01) is None
    assert limiter.admit(A, P, 10 + WINDOW) is None
    assert len(limiter._recent._admitted) == 1 and len(limiter._recent._by_source) == 1  # (the shared window)


@pytest.mark.parametrize("settings", [{"per_source": 0}, {"per_window": 0}, {"max_in_flight": 0}, {"window": 0}])
def test_limits_must_allow_something(settings):
    with pytest.raises(ValueError):
        ConnectBackLimiter(**settings)
