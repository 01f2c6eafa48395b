"""`LeveledTransport`: swarm's TCP transport, with bytes counted and uploads throttled per level.

The block engine's `SwarmNode` takes any `swarm.net.transport.Transport`; this one is `TcpTransport` that keeps
track of every connection it makes or accepts, and:

* tallies their BLOCK bytes by level (rack, DC, outside: the peer's location, looked up by its address through
  `locate`, which the agent learns from the member records): `received` and `sent`, the per-level counters that
  the member records, the metrics and the tests read, and the throttle planner's measured rates (`on_bytes`).
  The bytes are the engine's own per-connection counters (`Connection.counters`); each look adds what a
  connection carried since the last one to the level its peer is at now, so the totals never go down, and a
  connection is forgotten only once it is closed and tallied (`tally`);
* gives the block engine, through its upload hook (`SwarmService(upload_throttle=)`, `upload_throttle` here),
  the `swarm.core.throttle.ThrottleGroup` of the served peer's level (myRack / myDC / outside) to take every block
  it sends from; the agent sets the groups' rates from `cluster.throttle.Planner` every few seconds.

Nearest first (a block a rack peer holds is not asked of a source across the level) is the block engine's own
rule once the fetch has distances (`swarm.core.starts.NearerHolders`, `Agent.distance`): nothing here.

What a served peer across a level is shown (the entry plan's BITFIELD/HAVE filter) is not done here: it is the
engine's `shown` hook (`SwarmService(shown=)`, `SwarmService.reveal()`), which the agent and the pusher give
their entry plan.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from cluster.overlay import Level, Location, level_between
from swarm.core.throttle import RATE_BURST_SECONDS, Throttle, ThrottleGroup
from swarm.net.tcp import TcpTransport
from swarm.net.transport import CONNECT_TIMEOUT, Address, Connection

__all__ = ["LeveledTransport"]


class LeveledTransport(TcpTransport):
    def __init__(self, me: Location | None, locate: Callable[[str], Location | None],
                 on_bytes: Callable[[Level, int], None] | None = None) -> None:
        super().__init__()
        self.me = me
        self.locate = locate
        self.on_bytes = on_bytes  # sent bytes by level, for the throttle planner's measured rates
        # Each level's cap banks a tenth of a second, not a second (`swarm.core.throttle.RATE_BURST_SECONDS`).
        self.groups = {level: ThrottleGroup(None, burst_seconds=RATE_BURST_SECONDS, name=level.label)
                       for level in Level}
        self._received = {level: 0 for level in Level}
        self._sent = {level: 0 for level in Level}
        # Every connection made or accepted -> its counters' (sent, received) at the last tally. The metrics
        # server reads the totals from its own thread: the lock keeps two tallies from counting a delta twice.
        self._tallied: dict[Connection, list[int]] = {}
        self._lock = threading.Lock()
        self._joined: dict[Connection, dict[Level, Throttle]] = {}  # served connections -> their group members

    def level_of(self, host: str) -> Level:
        return level_between(self.me, self.locate(host))

    @property
    def received(self) -> dict[Level, int]:
        """BLOCK payload bytes received, by the level of the peer that sent them."""
        self._tally(forget_closed=False)
        return dict(self._received)

    @property
    def sent(self) -> dict[Level, int]:
        """BLOCK payload bytes sent, by the level of the peer they went to."""
        self._tally(forget_closed=False)
        return dict(self._sent)

    def tally(self) -> None:
        """Add what each connection carried since the last tally to its peer's level, and forget the connections
        closed and done with (on the event loop only: a closed connection may still hand over what it received
        before it closed, and only the loop's own tally cannot run between that and its count)."""
        self._tally(forget_closed=True)

    def _tally(self, *, forget_closed: bool) -> None:
        with self._lock:
            for connection, seen in list(self._tallied.items()):
                counters = connection.counters
                sent, received = counters.bytes_sent - seen[0], counters.bytes_received - seen[1]
                if sent or received:
                    level = self.level_of(connection.remote_address[0])
                    seen[0], seen[1] = seen[0] + sent, seen[1] + received
                    self._sent[level] += sent
                    self._received[level] += received
                    if sent and self.on_bytes is not None:
                        self.on_bytes(level, sent)
                if forget_closed and connection.close_reason is not None and not connection.receive_buffered:
                    del self._tallied[connection]

    def _track(self, connection: Connection) -> None:
        with self._lock:
            self._tallied[connection] = [connection.counters.bytes_sent, connection.counters.bytes_received]

    def set_limits(self, limits: dict[Level, float | None], now: float) -> None:
        for level, rate in limits.items():
            self.groups[level].set_capacity(rate, now, reserve=0.0)  # the plan already left the reserve

    async def listen(self, host: str, port: int = 0):
        listener = await super().listen(host, port)
        accept = listener.accept

        async def accept_leveled() -> Connection:
            connection = await accept()
            self._track(connection)
            return connection

        listener.accept = accept_leveled  # type: ignore[method-assign]
        return listener

    async def connect(self, address: Address, *, timeout: float = CONNECT_TIMEOUT, own_socket: bool = False):
        connection = await super().connect(address, timeout=timeout, own_socket=own_socket)
        self._track(connection)
        return connection

    def upload_throttle(self, connection: Connection) -> Throttle:
        """The engine's upload hook: a BLOCK to the peer of `connection` is taken from the throttle group of the
        level the peer is at, looked up per block (an address's location may be learnt late); the connection
        leaves the groups it joined when it closes, so that it holds no place in their queues."""
        level = self.level_of(connection.remote_address[0])
        joined = self._joined.get(connection)
        if joined is None:
            joined = self._joined[connection] = {}
            connection.closed.add_done_callback(lambda _future: self._leave(connection))
        throttle = joined.get(level)
        if throttle is None:
            throttle = joined[level] = self.groups[level].join(connection)
        return throttle

    def _leave(self, connection: Connection) -> None:
        for level in self._joined.pop(connection, {}):
            self.groups[level].leave(connection)
