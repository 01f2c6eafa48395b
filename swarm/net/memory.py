"""The in-process transport: connection pairs inside one event loop, for tests of many nodes.

Same contract as every `swarm.net.transport.Transport`, and the same codec: each message is encoded into frames and
fed to the peer's `swarm.net.decoder.Decoder`, so malformed input behaves exactly as over a socket. Addresses are
(host, port) pairs in a `MemoryNetwork` (any host string; port 0 picks a free port); give every node of a test
the same network.

Backpressure: bytes one side sends land at once in the peer's receive queue, so a side's `buffered` is what the
peer has received and not yet taken with `receive()` (plus an incomplete frame); `drain()` waits until the peer
reads. `receive_limit` plays no part here: the sender's `send_limit` is the whole bound.

Fault injection: `MemoryConnection.send_raw(data)` delivers bytes past the codec (garbage, a truncated frame);
`MemoryConnection.drop()` breaks the pair as a network failure would (both sides end with `CloseCause.LOST`);
`MemoryNetwork.refuse(address)` makes connects to a listening address fail.
"""

from __future__ import annotations

import itertools

from swarm.errors import ConnectFailed, ProtocolError
from swarm.net import wire
from swarm.net.decoder import Decoder
from swarm.net.transport import (
    CONNECT_TIMEOUT,
    Address,
    BlockPayload,
    CloseCause,
    CloseReason,
    Connection,
    ConnectionSettings,
    Listener,
    Transport,
    read_location,
)
from swarm.net.wire import Message
from swarm.store.interface import BlockLocation

__all__ = ["MemoryNetwork", "MemoryTransport", "MemoryListener", "MemoryConnection"]

_FIRST_PORT = 10000


class MemoryNetwork:
    """The address space memory transports share: listening addresses → listeners."""

    def __init__(self) -> None:
        self.listeners: dict[Address, MemoryListener] = {}
        self.refused: set[Address] = set()
        self._ports = itertools.count(_FIRST_PORT)

    def free_port(self, host: str) -> int:
        while (port := next(self._ports)) and (host, port) in self.listeners:
            pass
        return port

    def refuse(self, address: Address, refused: bool = True) -> None:
        """Fault injection: connects to `address` fail (or succeed again with `refused=False`)."""
        if refused:
            self.refused.add(address)
        else:
            self.refused.discard(address)


_default_network = MemoryNetwork()


class MemoryConnection(Connection):
    transport_name = "memory"

    def __init__(self, settings: ConnectionSettings, local: Address, remote: Address, *,
                 accepted: bool = False) -> None:
        super().__init__(settings, accepted=accepted)
        self._local = local
        self._remote = remote
        self._decoder = Decoder(settings.limits, admit_block=self.expected.admit)
        self.peer: MemoryConnection | None = None

    @property
    def remote_address(self) -> Address:
        return self._remote

    @property
    def local_address(self) -> Address:
        return self._local

    @property
    def buffered(self) -> int:
        peer = self.peer
        if peer is None or peer.close_reason is not None and peer.close_reason.cause is CloseCause.LOCAL:
            return 0
        return peer.receive_buffered + peer._decoder.buffered

    # --- sending ------------------------------------------------------------------------------------------

    def _send_message(self, message: Message) -> None:
        self._deliver_to_peer(message.encode())

    def _send_block(self, block: int, offset: int, payload: BlockPayload) -> None:
        data = read_location(payload) if isinstance(payload, BlockLocation) else payload
        # Header and payload fed separately, as a socket would deliver them: the decoder keeps a view of
        # immutable bytes instead of copying them.
        self._deliver_to_peer(wire.encode_block_header(block, offset, len(data)))
        self._deliver_to_peer(data if type(data) is bytes else bytes(data))

    def send_raw(self, data: bytes) -> None:
        self._check_open()
        self._deliver_to_peer(bytes(data))

    def _deliver_to_peer(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None:
            peer._receive_bytes(data)

    def _receive_bytes(self, data: bytes) -> None:
        if self.close_reason is not None:
            return
        try:
            messages = self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(CloseReason(CloseCause.PROTOCOL, str(exc), exc))
            return
        self._deliver(messages)

    def _taken(self, size: int) -> None:
        peer = self.peer
        if peer is not None:
            peer._buffer_shrank()

    # --- ending -------------------------------------------------------------------------------------------

    def _close_gracefully(self) -> None:
        self._disconnect(CloseReason(CloseCause.REMOTE, "peer closed the connection"))

    def _abort(self) -> None:
        self._disconnect(CloseReason(CloseCause.LOST, "connection reset by peer"))

    def drop(self) -> None:
        """Fault injection: the link breaks; both sides end with `CloseCause.LOST`."""
        self._record_close(CloseReason(CloseCause.LOST, "link dropped (injected)"))
        self._disconnect(CloseReason(CloseCause.LOST, "link dropped (injected)"))

    def _disconnect(self, peer_reason: CloseReason) -> None:
        peer, self.peer = self.peer, None
        self._finished()
        if peer is not None:
            peer.peer = None
            peer._peer_gone(peer_reason)

    def _peer_gone(self, reason: CloseReason) -> None:
        if self.close_reason is None and self._decoder.buffered:
            reason = CloseReason(CloseCause.LOST, f"peer went away mid-frame ({self._decoder.buffered} bytes held)")
        self._finished(reason)


class MemoryListener(Listener):
    def __init__(self, settings: ConnectionSettings, network: MemoryNetwork, address: Address) -> None:
        super().__init__(settings)
        self._network = network
        self._address = address

    @property
    def address(self) -> Address:
        return self._address

    def _stop(self) -> None:
        if self._network.listeners.get(self._address) is self:
            del self._network.listeners[self._address]


class MemoryTransport(Transport):
    name = "memory"

    def __init__(self, network: MemoryNetwork | None = None, settings: ConnectionSettings | None = None) -> None:
        super().__init__(settings)
        self.network = network or _default_network

    async def listen(self, host: str, port: int = 0) -> MemoryListener:
        address = (host, port or self.network.free_port(host))
        if address in self.network.listeners:
            raise OSError(f"address {address} already in use")
        listener = MemoryListener(self.settings, self.network, address)
        self.network.listeners[address] = listener
        return listener

    async def connect(self, address: Address, *, timeout: float = CONNECT_TIMEOUT, own_socket: bool = False
                      ) -> MemoryConnection:
        address = (address[0], int(address[1]))
        listener = self.network.listeners.get(address)
        if listener is None or address in self.network.refused:
            raise ConnectFailed(f"memory: connection to {address} refused")
        local = ("memory-client", self.network.free_port("memory-client"))
        # Each side decodes with its own node's limits.
        client = MemoryConnection(self.settings, local, address)
        server = MemoryConnection(listener.settings, address, local, accepted=True)
        client.peer, server.peer = server, client
        listener._offer(server)
        return client
