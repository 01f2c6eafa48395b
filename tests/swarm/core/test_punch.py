"""Hole punching, the sans-I/O parts: the limiter, the coordinator's judgement, ServeCore's PUNCH_REQUEST rules."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from swarm.core.punch import PER_SOURCE, WINDOW, PunchCoordinator, PunchLimiter
from swarm.core.serve import MAX_PUNCHES_PER_SESSION, Close, Introduce, Send, ServeCore
from swarm.net import wire
from tests.swarm.core.test_serve import NODE, core, handshake

PEER = b"p" * 32
TARGET_IP, TARGET_PORT = "55.55.102.2", 40001
NONCE = b"n" * 16
A, B = ("55.55.101.2", 40000), ("55.55.102.2", 40001)
PEER_STATUS, UNKNOWN = wire.PunchStatus.PEER, wire.PunchStatus.UNKNOWN_PEER
NOT_ATTEMPTED = wire.PunchStatus.NOT_ATTEMPTED


# --- the limiter ------------------------------------------------------------------------------------------------

# (address, now, expected refusal substring or None), in order, on one limiter of 3 per source, 4 in all, 60 s.
LIMITER_STEPS = [
    ("55.55.1.1", 0.0, None),
    ("55.55.1.1", 1.0, None),
    ("55.55.1.1", 2.0, None),
    ("55.55.1.1", 3.0, "caused 3"),  # a fourth from one source within the window
    ("55.55.1.2", 3.0, None),  # another source
    ("55.55.1.3", 4.0, "4 punches"),  # all sources: the window is full
    ("55.55.1.1", 60.0, None),  # the first fell out of the window
    ("192.168.1.10", 61.0, "not a public address"),
    ("127.0.0.1", 61.0, "not a public address"),
    ("example.org", 61.0, "not an IP address"),
    (None, 61.0, "not an IP address"),
    ("0.0.0.0", 61.0, "special-purpose"),
]  # fmt: skip


def test_limiter_table():
    limiter = PunchLimiter(per_source=3, per_window=4, window=60.0)
    for address, now, expected in LIMITER_STEPS:
        refusal = limiter.admit(address, now)
        if expected is None:
            assert refusal is None, (address, now, refusal)
        else:
            assert refusal is not None and expected in refusal, (address, now, refusal)


def test_limiter_counts_a_public_ipv6_network_as_one_source():
    limiter = PunchLimiter(per_source=1)
    assert limiter.admit("2001:db8:1:2::1", 0.0) is not None  # documentation prefix: special
    limiter = PunchLimiter(per_source=1)
    assert limiter.admit("2a00:1450:1:2::1", 0.0) is None
    assert "caused 1" in (limiter.admit("2a00:1450:1:2::ffff", 1.0) or "")


def test_allow_private_is_for_labs():
    assert PunchLimiter(allow_private=True).admit("127.0.0.1", 0.0) is None


def test_limits_are_checked():
    with pytest.raises(ValueError):
        PunchLimiter(per_source=0)
    with pytest.raises(ValueError):
        PunchLimiter(window=0)


# --- the coordinator --------------------------------------------------------------------------------------------

COORDINATOR_CASES = [
    ("two live public sessions are introduced", A, B, PEER_STATUS, "introduced"),
    ("no session from that address", A, None, UNKNOWN, "no live query session"),
    ("the requester's own session", A, A, UNKNOWN, "requester's own"),
    ("a target at a private address", A, ("192.168.1.10", 5000), NOT_ATTEMPTED, "not a public address"),
    ("a requester at a private address", ("10.0.0.1", 5000), B, NOT_ATTEMPTED, "not a public address"),
    ("a target of the other address family", A, ("2a00:1450::1", 5000), NOT_ATTEMPTED, "address families"),
    ("an IPv4-mapped target is IPv4", A, ("::ffff:55.55.102.2", 5000), PEER_STATUS, "introduced"),
]  # fmt: skip


@pytest.mark.parametrize("name, requester, target, status, reason", COORDINATOR_CASES,
                         ids=[case[0] for case in COORDINATOR_CASES])
def test_coordinator_table(name, requester, target, status, reason):
    coordinator = PunchCoordinator()
    decided, why = coordinator.decide(requester, target, 0.0)
    assert decided is status and reason in why
    assert coordinator.introduced == (status is PEER_STATUS)


def test_a_requester_gets_a_few_introductions_a_minute():
    coordinator = PunchCoordinator()
    statuses = [coordinator.decide(A, B, float(i))[0] for i in range(PER_SOURCE + 2)]
    assert statuses == [PEER_STATUS] * PER_SOURCE + [NOT_ATTEMPTED] * 2
    assert coordinator.decide(A, B, WINDOW + 0.5)[0] is PEER_STATUS
    assert coordinator.decide(("55.55.103.2", 1), B, 3.0)[0] is PEER_STATUS  # others are not held back by it


def test_asking_for_an_address_with_no_session_is_counted_like_an_introduction():
    """Otherwise a requester could ask a coordinator, address after address, which hold a session to it."""
    coordinator = PunchCoordinator()
    statuses = [coordinator.decide(A, None, float(now))[0] for now in range(PER_SOURCE + 1)]
    assert statuses == [UNKNOWN] * PER_SOURCE + [NOT_ATTEMPTED]
    assert coordinator.decide(A, B, float(PER_SOURCE + 1))[0] is NOT_ATTEMPTED
    assert coordinator.introduced == 0


# --- ServeCore --------------------------------------------------------------------------------------------------

REQUEST = wire.PunchRequest(NONCE, ip_address(TARGET_IP), TARGET_PORT)


def querying() -> ServeCore:
    serve = core()
    assert serve.on_message(wire.Handshake(wire.PROTOCOL_VERSION, PEER, wire.QUERY_ROOT), 0.0) == [
        Send(wire.Handshake(wire.PROTOCOL_VERSION, NODE, wire.QUERY_ROOT))]
    return serve


SERVE_CASES = [
    ("a request is handed to the shell", [REQUEST], [Introduce((TARGET_IP, TARGET_PORT), NONCE)]),
    ("after a claims request", [wire.ClaimsRequest(b"k" * 32), REQUEST], [Introduce((TARGET_IP, TARGET_PORT), NONCE)]),
    ("up to the session's limit", [REQUEST] * MAX_PUNCHES_PER_SESSION, [Introduce((TARGET_IP, TARGET_PORT), NONCE)]),
    ("one more closes the session", [REQUEST] * (MAX_PUNCHES_PER_SESSION + 1),
     [Close(f"more than {MAX_PUNCHES_PER_SESSION} PUNCH_REQUESTs on one query session")]),
    ("a PUNCH_PEER is never sent to a node that serves", [wire.PunchPeer(NONCE, wire.PunchStatus.UNKNOWN_PEER)],
     [Close("PunchPeer on a query session")]),
]  # fmt: skip


@pytest.mark.parametrize("name, messages, expected", SERVE_CASES, ids=[case[0] for case in SERVE_CASES])
def test_query_session_table(name, messages, expected):
    serve = querying()
    for turn, message in enumerate(messages[:-1], 1):
        assert not any(isinstance(a, Close) for a in serve.on_message(message, float(turn))), message
    assert serve.on_message(messages[-1], float(len(messages))) == expected


@pytest.mark.parametrize("message", [REQUEST, wire.PunchPeer(NONCE, wire.PunchStatus.NOT_ATTEMPTED)],
                         ids=lambda m: type(m).__name__)
def test_a_content_session_that_asks_for_a_punch_is_closed(message):
    serve = core()
    handshake(serve)
    assert serve.root is not None and not serve.query
    actions = serve.on_message(message, 1.0)
    assert len(actions) == 1 and isinstance(actions[0], Close)


def test_many_sources_asking_for_nobody_do_not_use_up_the_introductions():
    """22 sources x 3 requests for an address nobody holds emptied a window of 64 counted in all (the hole-punch
    attack review): only introductions made count against all now, requests against four times as many."""
    from swarm.core.punch import PER_WINDOW, REQUESTS_PER_INTRODUCTION
    coordinator = PunchCoordinator()
    sources = [(f"55.55.{i // 200}.{i % 200 + 1}", 4000) for i in range(PER_WINDOW * REQUESTS_PER_INTRODUCTION)]
    for source in sources[:PER_WINDOW * 2]:
        assert coordinator.decide(source, None, 1.0)[0] is UNKNOWN
    assert coordinator.decide(A, B, 2.0)[0] is PEER_STATUS
    for source in sources[PER_WINDOW * 2:]:  # the requests' own bound still holds
        coordinator.decide(source, None, 3.0)
    status, why = coordinator.decide(("55.55.250.1", 1), B, 4.0)
    assert status is NOT_ATTEMPTED and "punches in the last" in why
