"""Every exception the `dht` package raises.

Two families, never mixed:

* `LocalError` — something wrong on *our* side: a corrupt key file, a bad argument from the caller, a node
  that is not running. These propagate to the caller (the proxy / block engine) and are bugs or setup problems.
* `PeerError` — something wrong in what a *remote* node sent us: a malformed datagram, a record that does not
  decode, a bad signature. These are caught at the boundary, counted and dropped; they must never stop the
  process or a background task. Code that handles network input catches `PeerError` and nothing broader.
"""

from __future__ import annotations


class DhtError(Exception):
    """Base of every error raised by `dht`."""


# ---------------------------------------------------------------------------------------------- local errors


class LocalError(DhtError):
    """A problem on this node's side (configuration, caller arguments, lifecycle)."""


class IdentityError(LocalError):
    """The node's key file is unreadable, corrupt or cannot be created."""


class InvalidArgument(LocalError, ValueError):
    """A caller passed a value this package cannot encode or use (bad port, oversized validator, ...)."""


class NotRunning(LocalError):
    """An operation needs a started node (an open UDP socket) and there is none."""


# ----------------------------------------------------------------------------------------------- peer errors


class PeerError(DhtError):
    """Input from a remote node was invalid. Drop it (and count it); never let it escape a handler."""


class MalformedMessage(PeerError):
    """A datagram is not a well-formed message of our wire protocol (or is over the size cap)."""


class MalformedRecord(PeerError):
    """Bytes claiming to be a record do not decode, violate a cap, or carry out-of-range fields."""


class BadSignature(PeerError):
    """A record's signature does not verify against the publisher key it carries."""
