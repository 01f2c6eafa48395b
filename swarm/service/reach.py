"""Connect-backs, the asyncio shell: asking peers whether they can reach us, and answering such asks.

One `Reach` per node identity, shared by the node of every transport (`SwarmService` hands one to each, as it does
the claims table): a probe may go out over TCP and its proof come back over QUIC, and the limits on what strangers
can make us dial hold for the node, not per transport. The decisions are the cores': `swarm.core.reach` (which
connect-backs we make for others), `swarm.core.reachability` (what we learnt of our own port); the wire is
`swarm.net.wire`, "Connect-backs".

**Asking** (`probe`): a query session to the peer, one REACH_REQUEST with the port we listen on, the transports we
listen by and a fresh nonce, and one REACH_RESULT per transport back; for each the peer says it connected, the proof
is awaited on our own listeners (`proof_arrived`, which the serving side calls for a session that opens with a
REACH_PROOF). What it came to is fed to `reachability` (`swarm.core.reachability.Outcome`) and returned.

**Answering** (`connect_back`): the request is judged by the limiter, then each transport asked is dialled at the
address the request came from (the connection's own remote address: never one the request names), given
`CONNECT_BACK_TIMEOUT` s to connect and to have the proof read, and REACH_RESULT goes back on the requester's session.

**Strangers** (`inbound`): a connection to the peer port that is not a connect-back shows that port reachable by its
transport (from a public address: the core judges), unless it comes from a host our QUIC listener's socket sent to
lately (`QuicTransport.contacted`: a dial or a punch from that socket opened our NAT for it, and only for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
from typing import TYPE_CHECKING

import addresses
from swarm.core.reach import CONNECT_BACK_TIMEOUT, ConnectBackLimiter
from swarm.core.reachability import Outcome, Reachability
from swarm.core.serve import ConnectBack
from swarm.errors import ConnectFailed, PeerError, TransportError
from swarm.net import wire
from swarm.net.transport import Address, Connection, Transport

if TYPE_CHECKING:  # the node imports this module: its type only
    from swarm.service.node import SwarmNode

__all__ = ["Reach", "TRANSPORT_FLAGS", "PROBE_TIMEOUT"]

log = logging.getLogger("swarmproxy.swarm")

# Seconds a probe gives the session to open, the peer beyond its own connect-back time to answer, and a proof to
# arrive after "connected": a peer found on the DHT that is slower than that is one to ask another time.
PROBE_TIMEOUT = 3.0

#: A transport's name (`swarm.net.transport.Transport.name`) -> its flag on the wire; others (memory) have none.
TRANSPORT_FLAGS = {"tcp": wire.Transport.TCP, "quic": wire.Transport.QUIC}

_STATUS_OUTCOMES = {wire.ReachStatus.REFUSED: Outcome.REFUSED, wire.ReachStatus.TIMED_OUT: Outcome.TIMED_OUT,
                    wire.ReachStatus.NOT_ATTEMPTED: Outcome.NOT_ATTEMPTED}


def _each(flags: wire.Transport) -> list[wire.Transport]:
    return [flag for flag in wire.Transport if flag & flags]


@dataclasses.dataclass
class _Probe:
    """A connect-back asked for and not yet over: where its proof may arrive, and from which address it did."""

    transports: wire.Transport
    arrived: dict[wire.Transport, asyncio.Future[str]]


class Reach:
    def __init__(self, *, allow_private: bool = False, connect_back_timeout: float = CONNECT_BACK_TIMEOUT,
                 limiter: ConnectBackLimiter | None = None, reachability: Reachability | None = None) -> None:
        """`allow_private`: for tests and LAN labs only: dial back loopback and private requesters, and count
        loopback and private peers and strangers as the public ones (`swarm.core.reach`, `swarm.core.reachability`);
        off, connect-backs and what they teach are about the public network alone."""
        self.reachability = reachability or Reachability(allow_private=allow_private)
        self.limiter = limiter or ConnectBackLimiter(allow_private=allow_private)
        self.connect_back_timeout = connect_back_timeout
        self.node_id = b""  # the id our connect-backs' HANDSHAKE gives: the nodes' (`attach`)
        self.dials = 0  # connect-backs dialled for others, for the status page
        self._transports: dict[wire.Transport, Transport] = {}
        self._probes: dict[bytes, _Probe] = {}  # by the proof that will come back

    def attach(self, node: SwarmNode) -> None:
        """`node` dials back and listens by its transport, under its node id."""
        flag = TRANSPORT_FLAGS.get(node.transport.name)
        if flag is not None:
            self._transports[flag] = node.transport
        self.node_id = node.node_id

    def listening(self, name: str, address: Address, now: float) -> None:
        """The node of transport `name` listens at `address`."""
        flag = TRANSPORT_FLAGS.get(name)
        if flag is not None:
            self.reachability.listening(flag, address[1], now)

    def status(self) -> dict[str, object]:
        """For the admin API: `Reachability.status`, and the connect-backs made for others."""
        loop = asyncio.get_running_loop()
        return {**self.reachability.status(loop.time()),
                "connect_backs": {"dialled": self.dials, "under_way": self.limiter.in_flight}}

    # -- asking ------------------------------------------------------------------------------------------------

    async def probe(self, node: SwarmNode, peer: Address, *, transports: wire.Transport | None = None,
                    timeout: float = PROBE_TIMEOUT, port: int | None = None) -> dict[str, Outcome]:
        """Ask `peer` (over `node`'s transport) to connect back by `transports` (default: every one we listen by) to
        `port` (default: the one we listen on; another only for tests: what is learnt of it is not ours). What each
        connect-back came to, by transport name; `reachability` is told. `timeout` s for the session and its
        handshake, as many again beyond the peer's connect-back time for its answer, and again for a proof."""
        loop = asyncio.get_running_loop()
        flags = _each(self.reachability.transports if transports is None else transports)
        ports = {self.reachability.port(flag) for flag in flags} if port is None else {port}
        if not flags or len(ports) != 1 or None in ports:
            raise ValueError(f"no one port to probe: by {flags} listening on {ports}")
        port = ports.pop()
        assert port is not None
        nonce = secrets.token_bytes(wire.NONCE_SIZE)
        proof = wire.reach_proof(nonce)
        asked = wire.Transport(0)
        for flag in flags:
            asked |= flag
        probe = _Probe(asked, {flag: loop.create_future() for flag in flags})
        self._probes[proof] = probe
        try:
            statuses = await self._ask(node, peer, wire.ReachRequest(port, asked, nonce), len(flags), timeout)
            awaited = [probe.arrived[flag] for flag, status in statuses.items()
                       if status is wire.ReachStatus.CONNECTED]
            if awaited:  # (the proof may well have come before the answer)
                await asyncio.wait(awaited, timeout=timeout)
        finally:
            del self._probes[proof]
        outcomes: dict[str, Outcome] = {}
        now = loop.time()
        for flag in flags:
            arrived, status = probe.arrived[flag], statuses.get(flag)
            source = arrived.result() if arrived.done() else peer[0]  # (a proof: the address it came from)
            if arrived.done():
                outcome = Outcome.PROVED
            elif status is None:
                outcome = Outcome.NO_ANSWER
            else:
                outcome = _STATUS_OUTCOMES.get(status, Outcome.NO_PROOF)  # (CONNECTED, and no proof came)
            arrived.cancel()
            self.reachability.connect_back(flag, port, source, outcome, now)
            outcomes[str(flag.name).lower()] = outcome
        log.info("reachability: %s:%d connecting back to port %d: %s", peer[0], peer[1], port,
                 ", ".join(f"{name} {outcome}" for name, outcome in outcomes.items()))
        return outcomes

    async def _ask(self, node: SwarmNode, peer: Address, request: wire.ReachRequest, answers: int,
                   timeout: float) -> dict[wire.Transport, wire.ReachStatus]:
        """The peer's REACH_RESULTs for `request`, by transport; those it gave before it failed or fell silent."""
        statuses: dict[wire.Transport, wire.ReachStatus] = {}
        try:
            connection = await node.open_connection(peer, wire.QUERY_ROOT, timeout)
        except (TimeoutError, TransportError, PeerError) as exc:
            log.debug("reachability: no query session with %s:%d: %s", peer[0], peer[1], str(exc) or "timed out")
            return statuses
        try:
            connection.send_nowait(request)
            async with asyncio.timeout(CONNECT_BACK_TIMEOUT + timeout):  # (the peer's time, not the one we give)
                while len(statuses) < answers and (message := await connection.receive()) is not None:
                    if isinstance(message, wire.KeepAlive):
                        continue
                    if not isinstance(message, wire.ReachResult) or message.nonce != request.nonce \
                            or not message.transport & request.transports:
                        log.debug("reachability: %s:%d answered %s", peer[0], peer[1], message)
                        break
                    statuses[message.transport] = message.status
        except (TimeoutError, TransportError):
            pass
        finally:
            connection.abort("reachability asked")
        return statuses

    def proof_arrived(self, name: str, connection: Connection, proof: bytes) -> None:
        """A session on our transport `name` opened with REACH_PROOF `proof` (the serving side closes it)."""
        flag = TRANSPORT_FLAGS.get(name)
        probe = self._probes.get(proof)
        if flag is None or probe is None or not flag & probe.transports or probe.arrived[flag].done():
            log.debug("reachability: a connect-back from %s matches no probe of ours", connection.remote_address)
            return
        probe.arrived[flag].set_result(connection.remote_address[0])

    # -- answering ---------------------------------------------------------------------------------------------

    async def connect_back(self, connection: Connection, action: ConnectBack) -> None:
        """Carry out a REACH_REQUEST that came on `connection` (served), within the limiter's bounds."""
        loop = asyncio.get_running_loop()
        host = addresses.canonical_host(connection.remote_address[0])  # the requester's own: never one it names
        flags = _each(action.transports)
        refusal = self.limiter.admit(host, action.port, loop.time())
        if refusal is not None:
            log.debug("connect-back to %s port %d not attempted: %s", host, action.port, refusal)
            statuses = [wire.ReachStatus.NOT_ATTEMPTED] * len(flags)
        else:
            assert host is not None  # (the limiter refuses what is not an IP address)
            proof = wire.reach_proof(action.nonce)
            try:
                statuses = await asyncio.gather(*(self._dial(flag, (host, action.port), proof) for flag in flags))
            finally:
                self.limiter.finished()
        for flag, status in zip(flags, statuses):
            with contextlib.suppress(TransportError):
                connection.send_nowait(wire.ReachResult(action.nonce, flag, status))

    async def _dial(self, flag: wire.Transport, address: Address, proof: bytes) -> wire.ReachStatus:
        """One connect-back: connect, HANDSHAKE on QUERY_ROOT, REACH_PROOF, and close once the peer took it."""
        transport = self._transports.get(flag)
        if transport is None:
            return wire.ReachStatus.NOT_ATTEMPTED  # a transport this node does not speak
        self.dials += 1
        deadline = asyncio.get_running_loop().time() + self.connect_back_timeout
        try:
            # (from a socket of its own: one the peer talked to would pass its NAT's filter, as a stranger's does not)
            connection = await transport.connect(address, timeout=self.connect_back_timeout, own_socket=True)
        except ConnectFailed as exc:
            timed_out = isinstance(exc.__cause__, TimeoutError)
            return wire.ReachStatus.TIMED_OUT if timed_out else wire.ReachStatus.REFUSED
        try:
            connection.send_nowait(wire.Handshake(wire.PROTOCOL_VERSION, self.node_id, wire.QUERY_ROOT))
            connection.send_nowait(wire.ReachProof(proof))
            # Its HANDSHAKE, then its close once it read the proof: closing before that could cut the proof off.
            async with asyncio.timeout_at(deadline):
                for _ in range(2):
                    if await connection.receive() is None:
                        break
        except (TimeoutError, TransportError):
            pass
        finally:
            connection.abort("connect-back made")
        return wire.ReachStatus.CONNECTED

    # -- strangers ---------------------------------------------------------------------------------------------

    def inbound(self, name: str, connection: Connection, now: float) -> None:
        """A peer connected to our transport `name` on its own, and said what it wants (not a connect-back)."""
        flag = TRANSPORT_FLAGS.get(name)
        contacted = getattr(self._transports.get(flag), "contacted", None) if flag is not None else None
        if contacted is not None and contacted(connection.remote_address[0], now):
            # (QUIC dials and punches from the listener's socket: our own NAT lets that host in, strangers not)
            log.debug("reachability: %s connected, but we sent to it lately: no evidence", connection.remote_address)
            return
        if flag is not None:
            self.reachability.inbound(flag, connection.local_address[1], connection.remote_address[0], now)
