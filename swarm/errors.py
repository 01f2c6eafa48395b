"""The one error module of the `swarm` package.

Two families, because they call for different reactions (docs/ARCHITECTURE.md, "Sans-I/O cores"):

* `PeerError` — a remote party sent something wrong (malformed frame, bad hash, bogus manifest). The right
  reaction is to penalise or close *that* peer; it must never take the process down.
* everything else deriving from `SwarmError` — a local condition (bad argument, our own bug, disk trouble).

Catch `PeerError` at the connection boundary and `SwarmError` at the API boundary. Add new types here, deriving
from the narrowest fitting class, so existing `except` clauses keep catching them.
"""

from __future__ import annotations

import argparse
import errno as _errno

__all__ = [
    "SwarmError",
    "PeerError",
    "ProtocolError",
    "ManifestError",
    "BencodeError",
    "HashMismatch",
    "BadBlockIndex",
    "StoreError",
    "StoreFull",
    "StoreIOError",
    "NotInStore",
    "TransportError",
    "ConnectFailed",
    "ConnectionClosed",
    "OriginSourceError",
    "FetchFailed",
    "BadSize",
    "DiscoveryFailed",
]


class SwarmError(Exception):
    """Base of every error raised on purpose by `swarm`."""


class PeerError(SwarmError):
    """Input from a peer (or another untrusted source) is invalid; blame the sender, not this node."""


class ProtocolError(PeerError):
    """A peer's byte stream violates the wire format or its limits (see `swarm.net.wire`)."""


class ManifestError(PeerError):
    """An encoded manifest is malformed, truncated, oversized or inconsistent.

    It is a `PeerError` because encoded manifests arrive from peers, the DHT or an origin's headers; a caller
    decoding its own bytes can still catch it specifically.
    """


class BencodeError(PeerError):
    """Bencoded bytes (a .torrent file, an info dict from BitTorrent peers) are malformed, not in the one canonical
    form, or beyond the decoder's bounds (`swarm.content.torrent.bdecode`). Such bytes come from strangers."""


class HashMismatch(PeerError):
    """Bytes or hashes do not match the merkle root (or the verified hash layer) they claim to belong to."""


class BadBlockIndex(PeerError):
    """A source announced a block index or bitfield that does not fit this representation."""


class StoreError(SwarmError):
    """A local block-store condition (see `swarm.store.interface`): never the fault of a peer."""


class StoreFull(StoreError):
    """The store's size cap cannot make room: the content is larger than the cap, or the rest is pinned."""


class StoreIOError(StoreError):
    """The operating system refused a store operation: disk full, quota, read-only or unwritable, I/O error.

    `errno` is the OS error number; `operation` names what failed ("create", "write", "read"); `root` is the
    content root concerned, if any.
    """

    def __init__(self, message: str, *, errno: int | None = None, operation: str = "", root: bytes | None = None):
        super().__init__(message)
        self.errno = errno
        self.operation = operation
        self.root = root

    @property
    def disk_full(self) -> bool:
        """True for "no space" conditions (ENOSPC, EDQUOT, EFBIG), which freeing space may cure."""
        return self.errno in (_errno.ENOSPC, _errno.EDQUOT, _errno.EFBIG)


class CorruptEntry(SwarmError):
    """A disk store entry's files are not usable (`swarm.store.disk`); the entry is dropped and its files deleted.

    Not a `StoreError`: it never leaves the store, which reads it as "this entry is gone"."""


class NotInStore(StoreError):
    """The store holds no entry for that content root, or not that block of it (yet, or any more)."""


class TransportError(SwarmError):
    """A connection-level condition in `swarm.net.transport` (unreachable peer, connection already closed)."""


class ConnectFailed(TransportError):
    """A connection to a peer could not be established (refused, unreachable, handshake failed, timed out)."""


class ConnectionClosed(TransportError):
    """A send (or drain) on a connection that is closed; `reason` is its `swarm.net.transport.CloseReason`."""

    def __init__(self, reason: object) -> None:
        super().__init__(f"connection closed: {reason}")
        self.reason = reason


class OriginSourceError(SwarmError):
    """The origin, used as an HTTP Range source (`swarm.service.origin_source`), did not deliver the range asked.

    A source failure, not a `PeerError`: the origin is not a peer to penalise. `permanent` says whether it can
    still serve ranges of this representation: True when it ignores `Range`, the validator or size changed, it
    answers in another byte space or refuses access (stop using it as a Range source); False for 5xx, 408/429,
    timeouts, resets and truncated bodies (retry later or elsewhere). `status` is the HTTP status, if one came.
    """

    def __init__(self, message: str, *, permanent: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.status = status


class FetchFailed(SwarmError):
    """A fetch cannot complete: no source is left that could supply the missing blocks (`swarm.service.node`)."""


class BadSize(SwarmError, ValueError, argparse.ArgumentTypeError):
    """A size, rate or block size someone wrote is not one (`swarm.content.sizes`); the message says why.

    A `ValueError` for callers that catch those, and an `ArgumentTypeError` because argparse prints only that
    kind's message as is when a parser is a `type=`: any other ValueError becomes "invalid ... value"."""


class DiscoveryFailed(SwarmError):
    """A discovery call failed because of the network or other nodes (no answer, this node's address not known
    yet): the `errors` of the in-memory backend and of the composite (`swarm.discovery`), logged and survived."""
