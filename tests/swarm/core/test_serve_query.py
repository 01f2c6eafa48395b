"""ServeCore's query sessions: a HANDSHAKE on QUERY_ROOT, then CLAIMS_REQUESTs only, each answered (fake clock)."""

from __future__ import annotations

import pytest

from swarm.content.manifest import build_manifest
from swarm.content.merkle import ZERO_HASH
from swarm.core.serve import IDLE_TIMEOUT, MAX_QUERIES_PER_SESSION, ClaimersAsked, Close, Send, ServeCore, Shared
from swarm.net import wire
from swarm.trust.claims import ManifestClaim
from tests.swarm.core.test_serve import NODE, ROOT, core, handshake

PEER = b"p" * 32
K1, K2 = b"\x01" * 32, b"\x02" * 32
ENTRY = wire.ClaimEntry(ManifestClaim(b"r" * 32, 1000, 16384, b'"etag"'), 30, 90)
OTHER = wire.ClaimEntry(ManifestClaim(b"s" * 32, 2000, 16384, b'"etag-2"'), 0, 120)


class Table:
    """The caller's claims by key; records the keys it was asked about."""

    def __init__(self, claims: dict[bytes, list[wire.ClaimEntry]]) -> None:
        self.claims = claims
        self.asked: list[bytes] = []

    def __call__(self, key: bytes) -> list[wire.ClaimEntry]:
        self.asked.append(key)
        return self.claims.get(key, [])


def querying(claims=None, **kwargs) -> tuple[ServeCore, Table]:
    table = Table(claims if claims is not None else {K1: [ENTRY]})
    serve = core(claims=table, **kwargs)
    assert serve.on_message(wire.Handshake(wire.PROTOCOL_VERSION, PEER, wire.QUERY_ROOT), 0.0) == [
        Send(wire.Handshake(wire.PROTOCOL_VERSION, NODE, wire.QUERY_ROOT))]  # no BITFIELD: no content
    assert serve.query and serve.peer == PEER
    return serve, table


@pytest.mark.parametrize("claims,key,entries", [
    ({K1: [ENTRY]}, K1, (ENTRY,)),
    ({K1: [ENTRY]}, K2, ()),  # nothing under that key: an empty answer, not a silence
    ({}, K1, ()),
    ({K1: [ENTRY, OTHER]}, K1, (ENTRY, OTHER)),
    ({K1: [ENTRY] * (wire.MAX_CLAIMS_PER_ANSWER + 3)}, K1, (ENTRY,) * wire.MAX_CLAIMS_PER_ANSWER),
])
def test_each_claims_request_is_answered_by_one_claims_for_its_key(claims, key, entries):
    serve, table = querying(claims)
    assert serve.on_message(wire.ClaimsRequest(key), 1.0) == [Send(wire.ClaimsResponse(key, entries))]
    assert table.asked == [key]


def test_without_a_claims_callback_every_answer_is_empty():
    serve = core()
    serve.on_message(wire.Handshake(wire.PROTOCOL_VERSION, PEER, wire.QUERY_ROOT), 0.0)
    assert serve.on_message(wire.ClaimsRequest(K1), 0.0) == [Send(wire.ClaimsResponse(K1, ()))]


def test_a_query_session_needs_no_content_and_asks_no_lookup():
    looked_up: list[bytes] = []
    serve = ServeCore(NODE, lambda root: looked_up.append(root), claims=Table({K1: [ENTRY]}))
    assert serve.on_message(wire.Handshake(wire.PROTOCOL_VERSION, PEER, wire.QUERY_ROOT), 0.0) == [
        Send(wire.Handshake(wire.PROTOCOL_VERSION, NODE, wire.QUERY_ROOT))]
    assert looked_up == []


def test_the_empty_contents_root_opens_a_content_session_not_a_query():
    """The empty content's root is all zeros (`merkle.ZERO_HASH`) and is served like any other: QUERY_ROOT is not it."""
    empty, layer = build_manifest([], 0)
    assert empty.root == ZERO_HASH != wire.QUERY_ROOT
    serve = ServeCore(NODE, {ZERO_HASH: Shared(empty, layer, wire.Bitfield(0, b""))}.get, claims=Table({}))
    assert serve.on_message(wire.Handshake(wire.PROTOCOL_VERSION, PEER, ZERO_HASH), 0.0) == [
        Send(wire.Handshake(wire.PROTOCOL_VERSION, NODE, ZERO_HASH)), Send(wire.Bitfield(0, b""))]
    assert not serve.query
    assert serve.on_message(wire.ClaimsRequest(K1), 0.0) == [Close("CLAIMS_REQUEST outside a query session")]


def test_the_version_is_checked_on_a_query_session_too():
    (action,) = core().on_message(wire.Handshake(99, PEER, wire.QUERY_ROOT), 0.0)
    assert isinstance(action, Close) and "protocol version 99" in action.reason


def test_the_session_closes_past_its_last_query():
    serve, table = querying()
    for turn in range(MAX_QUERIES_PER_SESSION):
        assert serve.on_message(wire.ClaimsRequest(K1), float(turn)) == [Send(wire.ClaimsResponse(K1, (ENTRY,)))]
    assert serve.on_message(wire.ClaimsRequest(K1), 99.0) == [
        Close(f"more than {MAX_QUERIES_PER_SESSION} CLAIMS_REQUESTs on one query session")]
    assert len(table.asked) == MAX_QUERIES_PER_SESSION  # the one refused was not looked up


@pytest.mark.parametrize("message,name", [
    (wire.Request(0, 0, 16384), "Request"),
    (wire.HashRequest(0, 10), "HashRequest"),
    (wire.ManifestRequest(), "ManifestRequest"),
    (wire.Bitfield.from_blocks(8, [1]), "Bitfield"),
    (wire.Have(1), "Have"),
    (wire.Cancel(0, 0, 1), "Cancel"),
    (wire.Start(1), "Start"),
    (wire.ClaimsResponse(K1, ()), "ClaimsResponse"),
    (wire.Handshake(wire.PROTOCOL_VERSION, PEER, wire.QUERY_ROOT), "Handshake"),
    (wire.Handshake(wire.PROTOCOL_VERSION, PEER, ROOT), "Handshake"),  # no turning it into a content session
])
def test_anything_but_a_claims_request_closes_a_query_session(message, name):
    serve, table = querying()
    assert serve.on_message(wire.ClaimsRequest(K1), 0.0) == [Send(wire.ClaimsResponse(K1, (ENTRY,)))]
    assert serve.on_message(message, 1.0) == [Close(f"{name} on a query session")]


def test_a_keepalive_is_let_be_and_does_not_keep_the_session():
    serve, _ = querying()
    assert serve.on_message(wire.KeepAlive(), 50.0) == []
    assert serve.next_deadline() == IDLE_TIMEOUT  # from the HANDSHAKE at 0, not from the keepalive


def test_an_idle_query_session_is_closed_at_the_idle_timeout_counted_from_its_last_query():
    serve, _ = querying()
    assert serve.next_deadline() == IDLE_TIMEOUT
    serve.on_message(wire.ClaimsRequest(K1), 30.0)
    assert serve.next_deadline() == 30.0 + IDLE_TIMEOUT
    assert serve.on_timer(30.0 + IDLE_TIMEOUT - 1) == []
    assert serve.on_timer(30.0 + IDLE_TIMEOUT) == [Close(f"asked for nothing for {IDLE_TIMEOUT:g} s")]


def test_a_query_session_is_told_of_no_content():
    serve, _ = querying()
    assert serve.on_new_block(1) == []
    assert serve.on_origin_fetch(1) == []
    assert serve.on_view_changed() == []


def test_a_claims_request_on_a_content_session_closes_it():
    serve = core()
    handshake(serve)
    assert serve.on_message(wire.ClaimsRequest(K1), 0.0) == [Close("CLAIMS_REQUEST outside a query session")]


ME = wire.PexPeer(wire.IPv4Address("0.0.0.0"), 5000, wire.Transport.TCP | wire.Transport.QUIC)
TWO = wire.PexPeer(wire.IPv4Address("9.9.9.9"), 5001, wire.Transport.TCP)
PEX_LATE = Close("a PEX on a query session not right after a CLAIMS_REQUEST, or of more than one peer")

# Other claimers (`swarm.core.claimers`): the messages after the HANDSHAKE → what the last one comes to.
CLAIMERS = {
    "asks only": ([wire.ClaimsRequest(K1), wire.Pex(())], [ClaimersAsked(K1, 0, 0)]),
    "claims too": ([wire.ClaimsRequest(K1), wire.Pex((ME,))], [ClaimersAsked(K1, 5000, int(ME.transports))]),
    "the last request's key": ([wire.ClaimsRequest(K1), wire.ClaimsRequest(K2), wire.Pex(())],
                               [ClaimersAsked(K2, 0, 0)]),
    "a keepalive between": ([wire.ClaimsRequest(K1), wire.KeepAlive(), wire.Pex(())], [ClaimersAsked(K1, 0, 0)]),
    "before any request": ([wire.Pex((ME,))], [PEX_LATE]),
    "a second for one request": ([wire.ClaimsRequest(K1), wire.Pex(()), wire.Pex((ME,))], [PEX_LATE]),
    "two peers": ([wire.ClaimsRequest(K1), wire.Pex((ME, TWO))], [PEX_LATE]),
}


@pytest.mark.parametrize("messages,expected", CLAIMERS.values(), ids=CLAIMERS.keys())
def test_a_pex_right_after_a_claims_request_asks_for_the_other_claimers(messages, expected):
    serve, _ = querying()
    for at, message in enumerate(messages[:-1]):
        serve.on_message(message, float(at))
    assert serve.on_message(messages[-1], 10.0) == expected
