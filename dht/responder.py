"""How a DHT node answers requests: one call per datagram, no I/O, both clocks passed in.

Answers PING with the address the request came from, FIND_NODE with the closest contacts and a write token,
FIND_PROVIDERS / GET_RECORDS with the records held for the key (each with the address it was observed arriving
from, `dht.attestation`) and contacts, ANNOUNCE / PUT_RECORD by storing the record if the token is ours and the
record valid. Every refusal is an ERROR reply and a counter, never an exception.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Protocol

from dht.admission import WriteTokens
from dht.config import DhtConfig
from dht.errors import MalformedRecord
from dht.records import KIND_MANIFEST, KIND_PROVIDER, decode_record, dht_key
from dht.routing import RoutingTableFacade
from dht.storage import RecordStore
from dht.wire import (
    HEADER_BYTES,
    MAX_CONTACTS,
    MAX_DATAGRAM_BYTES,
    TOKEN_BYTES,
    ErrorCode,
    Message,
    MessageType,
    Method,
    contact_size,
    record_entry_size,
)

Address = tuple[str, int]


class NodeState(Protocol):
    """The state of a `dht.node.DhtNode` that a responder reads and writes (read at each request: a test may
    swap the store)."""

    node_id: bytes
    config: DhtConfig
    store: RecordStore
    tokens: WriteTokens
    routing: RoutingTableFacade
    counters: Counter[str]


_KIND_OF_READ = {Method.FIND_PROVIDERS: KIND_PROVIDER, Method.GET_RECORDS: KIND_MANIFEST}
_KIND_OF_WRITE = {Method.ANNOUNCE: KIND_PROVIDER, Method.PUT_RECORD: KIND_MANIFEST}
_CONTACTS_BEFORE_RECORDS = 8  # a reply with records still carries enough contacts for the lookup to go on


def source_key(address: Address, by: str) -> str:
    """Whom rate limits and store quotas count against: the IP, or IP:port (`DhtConfig.rate_limit_by`)."""
    return address[0] if by == "ip" else f"{address[0]}:{address[1]}"


class Responder:
    def __init__(self, node: NodeState) -> None:
        self.node = node

    def answer(self, message: Message, address: Address, now: float, monotonic: float) -> Message | None:
        """The reply to request `message` from `address`; `now` is wall-clock (records), `monotonic` for tokens."""
        node = self.node
        method = message.method
        node.counters[f"requests_{method.name.lower()}"] += 1
        if method == Method.PING:
            return self._reply(message, observed=address)
        if method == Method.FIND_NODE:
            reply = self._reply(message, token=node.tokens.issue(address[0], monotonic))
            reply.contacts = node.routing.closest(message.target, min(node.config.k, MAX_CONTACTS), exclude=address)
            return reply
        if method in _KIND_OF_READ:
            return self._answer_read(message, address, _KIND_OF_READ[method], now, monotonic)
        if method in _KIND_OF_WRITE:
            return self._answer_write(message, address, _KIND_OF_WRITE[method], now, monotonic)
        return None  # unreachable: the codec only yields known methods

    def _reply(self, request: Message, **fields) -> Message:
        return Message(MessageType.RESPONSE, request.txid, request.method, self.node.node_id, **fields)

    def _error(self, request: Message, code: ErrorCode) -> Message:
        self.node.counters[f"refused_{code.name.lower()}"] += 1
        return Message(MessageType.ERROR, request.txid, request.method, self.node.node_id, status=code)

    def _answer_read(self, request: Message, address: Address, kind: int, now: float, monotonic: float) -> Message:
        node = self.node
        records = node.store.get_observed(kind, request.target, now)
        random.shuffle(records)  # different askers see different subsets when not all fit
        contacts = node.routing.closest(dht_key(kind, request.target), min(node.config.k, MAX_CONTACTS), address)
        budget = MAX_DATAGRAM_BYTES - HEADER_BYTES - TOKEN_BYTES - 2
        chosen_contacts = contacts[:_CONTACTS_BEFORE_RECORDS]
        budget -= sum(contact_size(c) for c in chosen_contacts)
        chosen_records: list[bytes] = []
        observed_from: list[str | None] = []
        for record, observed in records:
            size = record_entry_size(record.wire, observed)
            if size <= budget and len(chosen_records) < node.config.max_records_per_reply:
                chosen_records.append(record.wire)
                observed_from.append(observed)
                budget -= size
        if not chosen_records:  # nothing to give: behave like FIND_NODE so the lookup can go on
            for contact in contacts[_CONTACTS_BEFORE_RECORDS:]:
                if contact_size(contact) <= budget:
                    chosen_contacts.append(contact)
                    budget -= contact_size(contact)
        token = node.tokens.issue(address[0], monotonic)
        return self._reply(request, token=token, contacts=chosen_contacts, records=chosen_records,
                           observed_from=observed_from)

    def _answer_write(self, request: Message, address: Address, kind: int, now: float, monotonic: float) -> Message:
        node = self.node
        if not node.tokens.check(address[0], request.token, monotonic):
            return self._error(request, ErrorCode.BAD_TOKEN)
        try:
            record = decode_record(request.record)
        except MalformedRecord:
            return self._error(request, ErrorCode.MALFORMED)
        if record.kind != kind:
            return self._error(request, ErrorCode.WRONG_KIND)
        # The token proved that address[0] receives what we send it: the observed address cannot be spoofed.
        result = node.store.put(record, source_key(address, node.config.rate_limit_by), now, observed=address[0])
        node.counters[f"store_{result.name.lower()}"] += 1
        return self._reply(request, status=result)
