"""The one error module of the `swarm` package.

Two families, because they call for different reactions (DESIGN.md, "Sans-I/O cores"):

* `PeerError` — a remote party sent something wrong (malformed frame, bad hash, bogus manifest). The right
  reaction is to penalise or close *that* peer; it must never take the process down.
* everything else deriving from `SwarmError` — a local condition (bad argument, our own bug, disk trouble).

Catch `PeerError` at the connection boundary and `SwarmError` at the API boundary. Add new types here, deriving
from the narrowest fitting class, so existing `except` clauses keep catching them.
"""

from __future__ import annotations

__all__ = [
    "SwarmError",
    "PeerError",
    "ProtocolError",
    "ManifestError",
    "HashMismatch",
]


class SwarmError(Exception):
    """Base of every error raised on purpose by `swarm`."""


class PeerError(SwarmError):
    """Input from a peer (or another untrusted source) is invalid; blame the sender, not this node."""


class ProtocolError(PeerError):
    """A peer's byte stream violates the wire format or its limits (see `swarm.wire`)."""


class ManifestError(PeerError):
    """An encoded manifest is malformed, truncated, oversized or inconsistent.

    It is a `PeerError` because encoded manifests arrive from peers, the DHT or an origin's headers; a caller
    decoding its own bytes can still catch it specifically.
    """


class HashMismatch(PeerError):
    """Bytes or hashes do not match the merkle root (or the verified hash layer) they claim to belong to."""
