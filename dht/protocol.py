"""The guarded UDP endpoint: sends requests, matches replies, hands requests to a handler. Nothing escapes.

Why not rpcudp's `RPCProtocol` (the base of `kademlia.protocol.KademliaProtocol`): it schedules one task per
datagram and lets exceptions from ``umsgpack.unpackb`` or from the ``rpc_*`` handlers end those tasks (logged as
"exception never retrieved", the request unanswered); it dispatches ``rpc_<name>`` for any name a peer sends,
with any argument types; it accepts replies from any address; and it has no per-source limit. Here:

* `datagram_received` is synchronous and wrapped whole: oversized, undecodable or unexpected datagrams are
  counted in `counters` and dropped; a handler bug is logged and counted, never propagated;
* requests pass the handler's admission check (per-source rate limit) *before* decoding;
* a reply is accepted only from the address the request went to, with the request's random 8-byte txid and the
  same method — a third party cannot inject answers without guessing 64 random bits;
* every outgoing request has a timeout armed with ``loop.call_at``; the future resolves to the reply or `None`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections import Counter
from typing import Protocol

from dht.errors import MalformedMessage, NotRunning
from dht.wire import (
    MAX_DATAGRAM_BYTES,
    TXID_BYTES,
    Message,
    MessageType,
    Method,
    decode_message,
    encode_message,
)

log = logging.getLogger(__name__)

Address = tuple[str, int]


class RequestHandler(Protocol):
    def admit(self, address: Address) -> bool:
        """Cheap per-source admission check, called before a request is decoded."""

    def handle_request(self, message: Message, address: Address) -> Message | None:
        """Answer a decoded request (or None for no answer). May raise; the protocol contains it."""

    def on_message_from(self, message: Message, address: Address) -> None:
        """Every valid request or expected reply: lets the node learn contacts."""


class DhtDatagramProtocol(asyncio.DatagramProtocol):
    def __init__(self, handler: RequestHandler, *, max_outstanding: int = 4096) -> None:
        self.handler = handler
        self.transport: asyncio.DatagramTransport | None = None
        self.max_outstanding = max_outstanding
        self._outstanding: dict[bytes, tuple[asyncio.Future, Address, Method, asyncio.TimerHandle]] = {}
        self.counters: Counter[str] = Counter()

    # ------------------------------------------------------------------------------------------- lifecycle

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        for txid in list(self._outstanding):
            self._resolve(txid, None)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable and friends: the request will time out; nothing else to do.
        self.counters["socket_errors"] += 1

    @property
    def local_address(self) -> Address:
        if self.transport is None:
            raise NotRunning("DHT socket is not open")
        return self.transport.get_extra_info("sockname")[:2]

    # -------------------------------------------------------------------------------------------- receiving

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        try:
            self._datagram_received(data, (addr[0], addr[1]))
        except Exception:  # noqa: BLE001 - the one place that must contain everything
            self.counters["handler_errors"] += 1
            log.exception("DHT: error while handling a datagram from %s", addr)

    def _datagram_received(self, data: bytes, addr: Address) -> None:
        self.counters["datagrams_in"] += 1
        if len(data) > MAX_DATAGRAM_BYTES:
            self.counters["dropped_oversized"] += 1
            return
        is_request = len(data) > 4 and data[4] == MessageType.REQUEST
        if is_request and not self.handler.admit(addr):
            self.counters["dropped_rate_limited"] += 1
            return
        try:
            message = decode_message(data)
        except MalformedMessage:
            self.counters["dropped_malformed"] += 1
            return
        if message.type == MessageType.REQUEST:
            self.handler.on_message_from(message, addr)
            reply = self.handler.handle_request(message, addr)
            if reply is not None:
                self._send(reply, addr)
            return
        entry = self._outstanding.get(message.txid)
        if entry is None or entry[1] != addr or entry[2] != message.method:
            self.counters["dropped_unexpected_reply"] += 1
            return
        self.handler.on_message_from(message, addr)
        self._resolve(message.txid, message)

    # ---------------------------------------------------------------------------------------------- sending

    def _send(self, message: Message, addr: Address) -> None:
        if self.transport is None:
            return
        self.transport.sendto(encode_message(message), addr)
        self.counters["datagrams_out"] += 1

    def request(self, addr: Address, message: Message, timeout: float) -> asyncio.Future:
        """Send a request; the returned future resolves to the reply `Message` or `None` on timeout/error.

        Error replies also resolve to the reply (type ERROR) so callers can tell "refused" from "silent".
        Cancelling the future forgets the request.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        if self.transport is None:
            raise NotRunning("DHT socket is not open")
        if len(self._outstanding) >= self.max_outstanding:
            self.counters["requests_refused_local_cap"] += 1
            future.set_result(None)
            return future
        txid = os.urandom(TXID_BYTES)
        message.txid = txid
        message.type = MessageType.REQUEST
        timer = loop.call_at(loop.time() + timeout, self._on_timeout, txid)
        self._outstanding[txid] = (future, (addr[0], addr[1]), message.method, timer)
        future.add_done_callback(functools.partial(self._forget_done, txid))
        try:
            self._send(message, (addr[0], addr[1]))
        except (OSError, ValueError) as exc:  # unreachable address family, encoding cap
            log.debug("DHT: cannot send to %s: %s", addr, exc)
            self._resolve(txid, None)
        return future

    def _on_timeout(self, txid: bytes) -> None:
        self.counters["request_timeouts"] += 1
        self._resolve(txid, None)

    def _resolve(self, txid: bytes, reply: Message | None) -> None:
        entry = self._outstanding.pop(txid, None)
        if entry is None:
            return
        future, _addr, _method, timer = entry
        timer.cancel()
        if not future.done():
            future.set_result(reply)

    def _forget_done(self, txid: bytes, _done: asyncio.Future) -> None:  # the request's future is settled
        self._forget(txid)

    def _forget(self, txid: bytes) -> None:
        entry = self._outstanding.pop(txid, None)
        if entry is not None:
            entry[3].cancel()

    def outstanding(self) -> int:
        return len(self._outstanding)
