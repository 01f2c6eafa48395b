"""Hole punching, the asyncio shell: coordinating for others, waiting to be introduced, and asking to be.

The decisions are `swarm.core.punch`'s; the wire is `swarm.net.wire`, "Hole punching"; the punch itself needs the
QUIC transport to dial from its listening socket (`swarm.net.quic`, "One socket", and `QuicTransport.punch`).

**Coordinating** (`introduce`): the node keeps its served query sessions past their HANDSHAKE by their remote
address (`registered`/`ended`), which the transport proved: a node id is a HANDSHAKE's claim, and anyone can state
another's. A PUNCH_REQUEST (`swarm.core.serve.Introduce`) is judged by `PunchCoordinator`; if it is carried out, the
target is sent the requester's address first, then the requester the target's, each as the coordinator sees that
peer's own connection.

**Being reachable for punches** (`rendezvous`): a query session to a coordinator, kept open, read for PUNCH_PEERs;
each one (within `PunchLimiter`, per coordinator) makes this node send the punch datagram to the address named.

**Asking** (`request`): a query session to the coordinator, one PUNCH_REQUEST for the peer's address (as the
coordinator would see it: the one the peer is announced at, when its NAT keeps its port), its PUNCH_PEER back;
then the punch datagram, `delay` s, and the dial (`connect`: a session as `SwarmNode.open_connection` makes).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
from typing import TYPE_CHECKING

import addresses
from swarm.core.punch import ACTED_PER_COORDINATOR, PUNCH_DELAY, PUNCH_TTL, PunchCoordinator, PunchLimiter
from swarm.core.serve import Introduce
from swarm.errors import PeerError, TransportError
from swarm.net import wire
from swarm.net.transport import CONNECT_TIMEOUT, Address, Connection

if TYPE_CHECKING:
    from swarm.service.node import SwarmNode

__all__ = ["Punching", "Introduce"]  # (the action it carries out, `swarm.core.serve`'s)

log = logging.getLogger("swarmproxy.swarm")


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(addresses.canonical_host(host) or host)


def _key(address: Address) -> Address:
    return addresses.canonical_host(address[0]) or address[0], address[1]


class Punching:
    def __init__(self, *, allow_private: bool = False, ttl: int | None = PUNCH_TTL, delay: float = PUNCH_DELAY,
                 coordinator: PunchCoordinator | None = None, limiter: PunchLimiter | None = None) -> None:
        """`allow_private`: for tests and labs only (`swarm.core.punch`). `ttl`: the punch datagram's IP TTL (None:
        the system's). `delay`: s between the requester's punch datagram and its dial."""
        self.coordinator = coordinator or PunchCoordinator(PunchLimiter(allow_private=allow_private))
        # Introductions we act on: per coordinator (`limiter`), and per requester whoever introduces it.
        self.limiter = limiter or PunchLimiter(per_source=ACTED_PER_COORDINATOR, allow_private=allow_private)
        self.per_requester = PunchLimiter(allow_private=allow_private)
        self.ttl = ttl
        self.delay = delay
        self.punched = 0  # punch datagrams sent
        self._sessions: dict[Address, list[Connection]] = {}  # by remote address, oldest first

    # -- coordinating ------------------------------------------------------------------------------------------

    def registered(self, connection: Connection) -> None:
        """A served query session past its HANDSHAKE. Sessions from one address are one node's (its listener's
        socket): its rendezvous, and the sessions it opens to ask for punches or claims, which end soon."""
        self._sessions.setdefault(_key(connection.remote_address), []).append(connection)

    def ended(self, connection: Connection) -> None:
        """A served session ended."""
        key = _key(connection.remote_address)
        sessions = self._sessions.get(key, [])
        if connection in sessions:
            sessions.remove(connection)
        if not sessions:
            self._sessions.pop(key, None)

    def _session_from(self, address: Address) -> Connection | None:
        """The oldest live session from `address`: a rendezvous, not the short session a node asking us for a punch
        itself has open beside it (an introduction sent there would be read as the answer to its own request)."""
        return next((each for each in self._sessions.get(_key(address), ()) if each.close_reason is None), None)

    def introduce(self, connection: Connection, action: Introduce, now: float) -> wire.PunchStatus:
        """A PUNCH_REQUEST on the served `connection`: introduce, or answer why not."""
        target = self._session_from(action.address)
        status, why = self.coordinator.decide(connection.remote_address,
                                              None if target is None else target.remote_address, now)
        if status is wire.PunchStatus.PEER and target is not None:
            requester, peer = connection.remote_address, target.remote_address
            try:
                target.send_nowait(wire.PunchPeer(action.nonce, status, _ip(requester[0]), requester[1]))
            except (TransportError, ValueError) as exc:  # the rendezvous just ended: say so, not nothing
                status, why = wire.PunchStatus.UNKNOWN_PEER, f"its session ended: {exc}"
                self.coordinator.introduced -= 1
        with contextlib.suppress(TransportError, ValueError):
            if status is wire.PunchStatus.PEER and target is not None:
                connection.send_nowait(wire.PunchPeer(action.nonce, status, _ip(peer[0]), peer[1]))
                log.info("hole punching: introduced %s:%d and %s:%d", *requester, *peer)
            else:
                log.debug("hole punching for %s:%d not attempted: %s", *connection.remote_address, why)
                connection.send_nowait(wire.PunchPeer(action.nonce, status))
        return status

    # -- being introduced --------------------------------------------------------------------------------------

    def _punch(self, node: SwarmNode, address: Address) -> bool:
        punch = getattr(node.transport, "punch", None)
        if punch is None or not punch(address, self.ttl):
            return False
        self.punched += 1
        return True

    async def rendezvous(self, node: SwarmNode, coordinator: Address, *, timeout: float = 5.0) -> Connection:
        """Open a query session to `coordinator` and act on the introductions it sends there, until it ends (the
        caller may close it). The session is returned once open; its reader runs in the node's tasks."""
        connection = await node.open_connection(coordinator, wire.QUERY_ROOT, timeout)
        node._spawn(self._introductions(node, connection))
        return connection

    async def _introductions(self, node: SwarmNode, connection: Connection) -> None:
        loop = asyncio.get_running_loop()
        coordinator = connection.remote_address
        try:
            while (message := await connection.receive()) is not None:
                if isinstance(message, wire.KeepAlive):
                    continue
                if not isinstance(message, wire.PunchPeer) or message.status is not wire.PunchStatus.PEER:
                    log.debug("hole punching: %s:%d sent %s", *coordinator, message)
                    break
                requester, now = str(message.ip), loop.time()
                refusal = (self.per_requester.refusal(requester) or self.per_requester.admit(requester, now)
                           or self.limiter.admit(coordinator[0], now))
                if refusal is not None:
                    log.debug("hole punching: introduction by %s:%d not acted on: %s", *coordinator, refusal)
                    continue
                self._punch(node, (str(message.ip), message.port))
        except TransportError:
            pass
        finally:
            connection.abort("rendezvous over")

    # -- asking ------------------------------------------------------------------------------------------------

    async def request(self, node: SwarmNode, coordinator: Address, peer: Address, *, timeout: float = 5.0
                      ) -> Address:
        """Ask `coordinator` to introduce us to the node whose rendezvous with it comes from `peer`; punch towards the
        address it names (`peer`, unless the coordinator sees it otherwise) and wait `delay`.
        The peer's address; `PeerError` if the coordinator did not introduce us (or said nothing in time)."""
        nonce = secrets.token_bytes(wire.NONCE_SIZE)
        try:
            connection = await node.open_connection(coordinator, wire.QUERY_ROOT, timeout)
        except (TimeoutError, TransportError) as exc:
            raise PeerError(f"no query session with the coordinator: {str(exc) or 'timed out'}") from exc
        try:
            connection.send_nowait(wire.PunchRequest(nonce, _ip(peer[0]), peer[1]))
            async with asyncio.timeout(timeout):
                while (answer := await connection.receive()) is not None and isinstance(answer, wire.KeepAlive):
                    pass
        except (TimeoutError, TransportError) as exc:
            raise PeerError(f"the coordinator did not answer: {str(exc) or 'timed out'}") from exc
        finally:
            connection.abort("punch asked")
        if not isinstance(answer, wire.PunchPeer) or answer.nonce != nonce:
            raise PeerError(f"the coordinator answered {answer}")
        if answer.status is not wire.PunchStatus.PEER:
            raise PeerError(f"the coordinator did not introduce us: {answer.status.name}")
        # A coordinator finds the peer by the address asked, so an honest one names that address: another would be
        # its choice of where we punch and dial, which is nobody's to choose but the peer's proof of its address.
        address = _key((str(answer.ip), answer.port))
        if address != _key(peer):
            raise PeerError(f"the coordinator named {address[0]}:{address[1]}, not the address asked")
        if (refusal := self.limiter.refusal(address[0])) is not None:
            raise PeerError(f"no punch to {address[0]}: {refusal}")
        self._punch(node, address)
        await asyncio.sleep(self.delay)
        return address

    async def connect(self, node: SwarmNode, coordinator: Address, peer: Address, root: bytes = wire.QUERY_ROOT, *,
                      timeout: float = CONNECT_TIMEOUT) -> Connection:
        """A session for `root` (`SwarmNode.open_connection`) with the node at `peer`, which keeps a rendezvous with
        `coordinator`, through both NATs. `PeerError` if the coordinator did not introduce us, `ConnectFailed` if the
        punch did not open the way."""
        address = await self.request(node, coordinator, peer, timeout=min(timeout, 5.0))
        return await node.open_connection(address, root, timeout)
