"""The DHT datagram codec: bytes ↔ `Message`, with hard limits. Pure, no I/O.

Our own format rather than rpcudp's msgpack: rpcudp accepts any msgpack shape and calls ``rpc_<name>`` with
whatever arguments arrive, so type confusion reaches the handlers (and its parse errors kill the task that
handles the datagram). Here every field has a fixed type and length, the decoder checks all of them, and
anything else raises `MalformedMessage` — the only exception `decode_message` raises.

Layout (big-endian)::

    magic "SPD" | version u8 (=2) | type u8 | txid 8 | method u8 | sender node id 20 | payload

    type: 0 request, 1 response, 2 error (payload: code u8)
    request payloads:   PING ∅ · FIND_NODE target 20 · FIND_PROVIDERS / GET_RECORDS key 32
                        ANNOUNCE / PUT_RECORD token 8 + one record (rest of datagram)
    response payloads:  PING observed address of the requester: family u8 (4|6) | address 4|16 | port u16
                        FIND_NODE token 8 + contacts
                        FIND_PROVIDERS / GET_RECORDS token 8 + contacts + records
                        ANNOUNCE / PUT_RECORD status u8 (a `dht.storage.StoreResult`)
    contacts: count u8, each node id 20 | family u8 (4|6) | address 4|16 | port u16
    records:  count u8, each length u16 | record bytes (decoded and verified by the node, not here) |
              observed: family u8 (0 none | 4 | 6) | address 0|4|16 — the address the storing node saw the record
              arrive from (version 2; `dht.attestation` says what a reader makes of it)

No datagram we send or accept exceeds `MAX_DATAGRAM_BYTES` (1,400: one unfragmented packet on ordinary
paths; rpcudp's 8 KB needs IP fragmentation, which loses whole datagrams when one fragment is dropped).
"""

from __future__ import annotations

import enum
import socket
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from dht.errors import MalformedMessage
from dht.identity import NODE_ID_BYTES
from dht.records import KEY_BYTES, MAX_RECORD_BYTES

MAX_DATAGRAM_BYTES = 1400
MAX_CONTACTS = 20
TOKEN_BYTES = 8
TXID_BYTES = 8
_MAGIC = b"SPD\x02"  # version 2: records in replies carry the address they were observed from
_HEADER = struct.Struct(f">4sB{TXID_BYTES}sB{NODE_ID_BYTES}s")
_PORT = struct.Struct(">H")
HEADER_BYTES = _HEADER.size


class MessageType(enum.IntEnum):
    REQUEST = 0
    RESPONSE = 1
    ERROR = 2


class Method(enum.IntEnum):
    PING = 1
    FIND_NODE = 2
    FIND_PROVIDERS = 3
    ANNOUNCE = 4
    GET_RECORDS = 5
    PUT_RECORD = 6


class ErrorCode(enum.IntEnum):
    MALFORMED = 1  # the request decoded as a datagram but its record or arguments were invalid
    BAD_TOKEN = 2  # write without a valid token from a recent lookup reply
    WRONG_KIND = 3  # e.g. a manifest record sent with ANNOUNCE
    INTERNAL = 4  # our bug; the handler did not crash the node but could not answer


class Contact(NamedTuple):
    node_id: bytes
    host: str
    port: int

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


@dataclass
class Message:
    type: MessageType
    txid: bytes
    method: Method
    sender_id: bytes
    target: bytes = b""  # FIND_NODE target (20) or FIND_PROVIDERS / GET_RECORDS key (32)
    token: bytes = b""
    record: bytes = b""  # ANNOUNCE / PUT_RECORD request
    contacts: list[Contact] = field(default_factory=list)
    records: list[bytes] = field(default_factory=list)
    # Parallel to `records` in a FIND_PROVIDERS / GET_RECORDS response: where the responder saw each arrive from
    # (None: it published the record itself, or did not say). Shorter than `records` means None for the rest.
    observed_from: list[str | None] = field(default_factory=list)
    status: int = 0  # store response status or error code
    observed: tuple[str, int] | None = None  # PING response: the requester's address as the responder saw it


_KEYED_METHODS = (Method.FIND_PROVIDERS, Method.GET_RECORDS)
_WRITE_METHODS = (Method.ANNOUNCE, Method.PUT_RECORD)


def contact_size(contact: Contact) -> int:
    return NODE_ID_BYTES + 1 + (16 if ":" in contact.host else 4) + 2


def record_entry_size(record: bytes, observed: str | None) -> int:
    return 2 + len(record) + (1 if observed is None else len(pack_address(observed)))


def encode_message(message: Message) -> bytes:
    """Encode; raises `ValueError` if the message would exceed `MAX_DATAGRAM_BYTES` (a bug of the caller)."""
    parts = [_HEADER.pack(_MAGIC, message.type, message.txid, message.method, message.sender_id)]
    if message.type == MessageType.ERROR:
        parts.append(bytes([message.status]))
    elif message.type == MessageType.REQUEST:
        if message.method in (Method.FIND_NODE, *_KEYED_METHODS):
            parts.append(message.target)
        elif message.method in _WRITE_METHODS:
            parts.append(message.token + message.record)
    else:
        if message.method == Method.PING and message.observed is not None:
            parts.append(pack_address(message.observed[0]) + _PORT.pack(message.observed[1]))
        elif message.method in (Method.FIND_NODE, *_KEYED_METHODS):
            parts.append(message.token)
            parts.append(_encode_contacts(message.contacts))
            if message.method in _KEYED_METHODS:
                parts.append(bytes([len(message.records)]))
                observed = message.observed_from + [None] * (len(message.records) - len(message.observed_from))
                parts.extend(struct.pack(">H", len(r)) + r + (b"\x00" if o is None else pack_address(o))
                             for r, o in zip(message.records, observed))
        elif message.method in _WRITE_METHODS:
            parts.append(bytes([message.status]))
    data = b"".join(parts)
    if len(data) > MAX_DATAGRAM_BYTES:
        raise ValueError(f"message of {len(data)} bytes exceeds {MAX_DATAGRAM_BYTES}")
    return data


def _encode_contacts(contacts: list[Contact]) -> bytes:
    if len(contacts) > MAX_CONTACTS:
        raise ValueError("too many contacts")
    out = [bytes([len(contacts)])]
    for contact in contacts:
        out.append(contact.node_id + pack_address(contact.host) + _PORT.pack(contact.port))
    return b"".join(out)


def pack_address(host: str) -> bytes:
    """Family byte (4|6) + packed address. `socket.inet_pton` rather than `ipaddress`: 10x faster, and this
    runs for every contact of every reply. Raises `ValueError` for anything but an IP literal."""
    try:
        return b"\x04" + socket.inet_pton(socket.AF_INET, host)
    except OSError:
        pass
    try:
        return b"\x06" + socket.inet_pton(socket.AF_INET6, host)
    except OSError:
        raise ValueError(f"not an IP address literal: {host!r}") from None


class _Reader:
    """Bounds-checked cursor: every read past the end is a `MalformedMessage`, never an IndexError."""

    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    def take(self, n: int) -> bytes:
        end = self.offset + n
        if end > len(self.data):
            raise MalformedMessage("truncated message")
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def rest(self) -> bytes:
        chunk = self.data[self.offset :]
        self.offset = len(self.data)
        return chunk

    def finish(self) -> None:
        if self.offset != len(self.data):
            raise MalformedMessage("trailing bytes")


def decode_message(data: bytes) -> Message:
    """Parse one datagram. Raises `MalformedMessage` for anything not exactly in the format above."""
    if len(data) > MAX_DATAGRAM_BYTES:
        raise MalformedMessage("datagram over the size cap")
    if len(data) < HEADER_BYTES:
        raise MalformedMessage("datagram shorter than the header")
    magic, type_, txid, method, sender_id = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC:
        raise MalformedMessage("bad magic or version")
    try:
        message = Message(MessageType(type_), txid, Method(method), sender_id)
    except ValueError as exc:
        raise MalformedMessage(str(exc)) from None
    reader = _Reader(data, HEADER_BYTES)
    if message.type == MessageType.ERROR:
        message.status = reader.byte()
    elif message.type == MessageType.REQUEST:
        if message.method == Method.FIND_NODE:
            message.target = reader.take(NODE_ID_BYTES)
        elif message.method in _KEYED_METHODS:
            message.target = reader.take(KEY_BYTES)
        elif message.method in _WRITE_METHODS:
            message.token = reader.take(TOKEN_BYTES)
            message.record = reader.rest()
            if not 0 < len(message.record) <= MAX_RECORD_BYTES:
                raise MalformedMessage("record missing or over the size cap")
    else:
        if message.method == Method.PING and reader.offset < len(data):
            message.observed = _decode_address(reader)
        elif message.method in (Method.FIND_NODE, *_KEYED_METHODS):
            message.token = reader.take(TOKEN_BYTES)
            message.contacts = _decode_contacts(reader)
            if message.method in _KEYED_METHODS:
                for _ in range(reader.byte()):
                    (length,) = struct.unpack(">H", reader.take(2))
                    if not 0 < length <= MAX_RECORD_BYTES:
                        raise MalformedMessage("record length out of range")
                    message.records.append(reader.take(length))
                    message.observed_from.append(_decode_host(reader))
        elif message.method in _WRITE_METHODS:
            message.status = reader.byte()
    reader.finish()
    return message


def _decode_host(reader: _Reader, *, optional: bool = True) -> str | None:
    family = reader.byte()
    if family == 4:
        return socket.inet_ntop(socket.AF_INET, reader.take(4))
    if family == 6:
        return socket.inet_ntop(socket.AF_INET6, reader.take(16))
    if family == 0 and optional:
        return None
    raise MalformedMessage(f"unknown address family {family}")


def _decode_address(reader: _Reader) -> tuple[str, int]:
    host = _decode_host(reader, optional=False)
    assert host is not None  # optional=False never yields None
    (port,) = _PORT.unpack(reader.take(2))
    if port == 0:
        raise MalformedMessage("address with port 0")
    return host, port


def _decode_contacts(reader: _Reader) -> list[Contact]:
    count = reader.byte()
    if count > MAX_CONTACTS:
        raise MalformedMessage("too many contacts")
    contacts = []
    data = reader.data
    offset = reader.offset
    for _ in range(count):
        # Inlined cursor arithmetic (this loop is the hottest code in a busy node); still bounds-checked.
        family_at = offset + NODE_ID_BYTES
        if family_at >= len(data):
            raise MalformedMessage("truncated contact")
        family = data[family_at]
        if family == 4:
            address_length, af = 4, socket.AF_INET
        elif family == 6:
            address_length, af = 16, socket.AF_INET6
        else:
            raise MalformedMessage(f"unknown address family {family}")
        end = family_at + 1 + address_length + 2
        if end > len(data):
            raise MalformedMessage("truncated contact")
        host = socket.inet_ntop(af, data[family_at + 1 : family_at + 1 + address_length])
        (port,) = _PORT.unpack_from(data, end - 2)
        if port == 0:
            raise MalformedMessage("contact with port 0")
        contacts.append(Contact(data[offset:family_at], host, port))
        offset = end
    reader.offset = offset
    return contacts
