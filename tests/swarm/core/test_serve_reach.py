"""ServeCore and connect-backs: a REACH_REQUEST on a query session, and a session that opens with a REACH_PROOF."""

from __future__ import annotations

import pytest

from swarm.core.serve import IDLE_TIMEOUT, Close, ConnectBack, ProofArrived, Send, ServeCore
from swarm.net import wire
from tests.swarm.core.test_serve import NODE, core, handshake

PEER = b"p" * 32
NONCE = b"n" * 16
PROOF = wire.reach_proof(NONCE)
K1 = b"\x01" * 32
BOTH = wire.Transport.TCP | wire.Transport.QUIC
REQUEST = wire.ReachRequest(5000, BOTH, NONCE)


def querying() -> ServeCore:
    serve = core()
    assert serve.on_message(wire.Handshake(wire.PROTOCOL_VERSION, PEER, wire.QUERY_ROOT), 0.0) == [
        Send(wire.Handshake(wire.PROTOCOL_VERSION, NODE, wire.QUERY_ROOT))]
    return serve


# Each case: the messages after a query session's HANDSHAKE, and what the last one makes the core do.
CASES = [
    ("a request is handed to the shell", [REQUEST], [ConnectBack(5000, BOTH, NONCE)]),
    ("one transport", [wire.ReachRequest(40000, wire.Transport.QUIC, NONCE)],
     [ConnectBack(40000, wire.Transport.QUIC, NONCE)]),
    ("after a claims request", [wire.ClaimsRequest(K1), REQUEST], [ConnectBack(5000, BOTH, NONCE)]),
    ("claims after a request are still answered", [REQUEST, wire.ClaimsRequest(K1)],
     [Send(wire.ClaimsResponse(K1, ()))]),
    ("a second request closes the session", [REQUEST, REQUEST],
     [Close("a second REACH_REQUEST on one query session")]),
    ("a proof right after the handshake is a connect-back, closed once taken", [wire.ReachProof(PROOF)],
     [ProofArrived(PROOF), Close("connect-back taken")]),
    ("a proof after anything else closes the session", [wire.ClaimsRequest(K1), wire.ReachProof(PROOF)],
     [Close("REACH_PROOF not right after the HANDSHAKE")]),
    ("even after a keepalive", [wire.KeepAlive(), wire.ReachProof(PROOF)],
     [Close("REACH_PROOF not right after the HANDSHAKE")]),
    ("a proof after a request is no connect-back", [REQUEST, wire.ReachProof(PROOF)],
     [Close("REACH_PROOF not right after the HANDSHAKE")]),
    ("a result is never sent to a node that serves", [wire.ReachResult(NONCE, wire.Transport.TCP,
                                                                       wire.ReachStatus.CONNECTED)],
     [Close("ReachResult on a query session")]),
]  # fmt: skip


@pytest.mark.parametrize("name, messages, expected", CASES, ids=[case[0] for case in CASES])
def test_query_session_table(name: str, messages: list, expected: list) -> None:
    serve = querying()
    for turn, message in enumerate(messages[:-1], 1):
        assert not any(isinstance(a, Close) for a in serve.on_message(message, float(turn))), message
    assert serve.on_message(messages[-1], float(len(messages))) == expected
    assert serve.connect_back == any(isinstance(action, ProofArrived) for action in expected)


@pytest.mark.parametrize("message", [REQUEST, wire.ReachProof(PROOF)], ids=lambda m: type(m).__name__)
def test_a_content_session_that_asks_for_a_connect_back_or_brings_a_proof_is_closed(message):
    serve = core()
    handshake(serve)
    assert serve.on_message(message, 0.0) == [Close(f"{type(message).__name__} outside a query session")]
    assert not serve.connect_back


def test_a_request_keeps_the_session_as_a_claims_request_does():
    """The answer comes once the connect-back is over (seconds): the idle timeout runs from the request."""
    serve = querying()
    serve.on_message(REQUEST, 30.0)
    assert serve.next_deadline() == 30.0 + IDLE_TIMEOUT


def test_a_proof_before_the_handshake_closes_the_connection():
    (action,) = core().on_message(wire.ReachProof(PROOF), 0.0)
    assert isinstance(action, Close) and "expected HANDSHAKE" in action.reason
