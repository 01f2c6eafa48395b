"""Query sessions for claims, both sides' shells (`swarm.net.wire`, "Query sessions"; `swarm.core.serve`, "Other
claimers"): asking a node for the claims it makes itself under a key and for the other claimers it heard of, and
answering a peer that asks us for ours.

Kept apart from `swarm.service.node`, which opens the connections and runs the serving core: this is what the
Internet mode's claim store (`bittorrent.mainline_claims`) asks of a node, and what it answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from ipaddress import IPv4Address, ip_address
from typing import NamedTuple

from swarm.core.claimers import ClaimerBook
from swarm.core.serve import ClaimersAsked
from swarm.discovery.own_claims import OwnClaims
from swarm.discovery.seam import KEY_BYTES
from swarm.errors import PeerError, TransportError
from swarm.net import wire
from swarm.net.transport import Address, Connection
from swarm.trust.claims import ManifestClaim

__all__ = ["ClaimsAnswer", "ask_claims", "answer_claimers"]

log = logging.getLogger("swarmproxy.swarm")

_ANY = IPv4Address(0)  # the address a claimer's PEX entry carries: the answerer takes the connection's
# Seconds the other claimers are waited for after the CLAIMS, at most: one round trip for an honest node. A node that
# never answers its PEX costs the asker this, and never the claims it gave (its caller's own timeout may be short:
# `bittorrent.mainline_claims` gives a whole ask 2 s).
OTHERS_WAIT = 0.5

# Connect to an address and exchange HANDSHAKEs on a root within a timeout (`SwarmNode.open_connection`).
Connect = Callable[[Address, bytes, float], Awaitable[Connection]]


class ClaimsAnswer(NamedTuple):
    """What one node answered: its own claims under the key, each (claim, published_at, expires_at) by our wall
    clock, and the addresses of the other claimers it heard of (to ask, not to believe)."""

    claims: list[tuple[ManifestClaim, float, float]]
    others: list[tuple[str, int]]


async def ask_claims(connect: Connect, address: Address, key: bytes, *, timeout: float,
                     claiming: tuple[int, int] | None = None) -> ClaimsAnswer:
    """The claims the node at `address` makes itself under `key`, and the other claimers it heard of.

    One query session: connect, HANDSHAKE on `wire.QUERY_ROOT`, one CLAIMS_REQUEST, the CLAIMS for `key`; then a
    PEX saying `claiming` (our peer port and `wire.Transport` flags, if we claim under `key` too; None: we only
    ask), answered with a PEX of the others; close. The claims' times are the age and the time left the node gave,
    counted from when its answer came. Raises `TransportError` (no connection), `TimeoutError` (`timeout` s for the
    connection and the handshake, as many for the answer) or `PeerError` (it closed, answered something else, is
    this node itself, or answers no query: an older one closes at the handshake). Others are a bonus: a node that
    closes at the PEX (older than it), or does not answer it within `OTHERS_WAIT`, knows none."""
    if len(key) != KEY_BYTES:
        raise ValueError(f"a key is {KEY_BYTES} bytes")
    connection = await connect(address, wire.QUERY_ROOT, timeout)
    try:
        connection.send_nowait(wire.ClaimsRequest(key))
        claims = await _answer(connection, key, timeout)
        try:
            said = () if claiming is None else (wire.PexPeer(_ANY, claiming[0], wire.Transport(claiming[1])),)
            connection.send_nowait(wire.Pex(said))
            others = await _others(connection, min(timeout, OTHERS_WAIT))
        except (TransportError, PeerError, TimeoutError, ValueError) as exc:
            log.debug("%s gave no other claimers: %s", connection, str(exc) or type(exc).__name__)
            others = []
        return ClaimsAnswer(claims, others)
    finally:
        connection.abort("claims asked")


async def _answer(connection: Connection, key: bytes, timeout: float) -> list[tuple[ManifestClaim, float, float]]:
    async with asyncio.timeout(timeout):
        while (message := await connection.receive()) is not None:
            if isinstance(message, wire.KeepAlive):
                continue
            if not isinstance(message, wire.ClaimsResponse) or message.key != key:
                raise PeerError(f"answered {type(message).__name__} instead of the CLAIMS for our key")
            now = time.time()
            return [(entry.claim, now - entry.age_ms / 1000, now + entry.ttl) for entry in message.entries]
    raise PeerError(f"closed without answering ({connection.close_reason})")


async def _others(connection: Connection, timeout: float) -> list[tuple[str, int]]:
    async with asyncio.timeout(timeout):
        while (message := await connection.receive()) is not None:
            if isinstance(message, wire.KeepAlive):
                continue
            if not isinstance(message, wire.Pex):
                raise PeerError(f"answered {type(message).__name__} instead of a PEX of other claimers")
            return [(str(peer.ip), peer.port) for peer in message.peers]
    return []  # closed: a node older than this exchange


def answer_claimers(book: ClaimerBook, own: OwnClaims, connection: Connection, asked: ClaimersAsked,
                    now: float) -> wire.Pex:
    """What to answer a peer that asked for the other claimers of `asked.key`: the book keeps the peer when it says
    it claims there and we claim there too (a stranger cannot make us a meeting point for keys of its own), by
    the address its connection came from; the answer is the others we heard of."""
    host = connection.remote_address[0]
    if asked.port and own.get(asked.key, time.time()):
        book.heard(asked.key, host, asked.port, asked.transports, now)
    return wire.Pex(tuple(wire.PexPeer(ip_address(claimer.host), claimer.port, wire.Transport(claimer.transports))
                          for claimer in book.others(asked.key, host, now)))
