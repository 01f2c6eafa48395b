"""The one error module of the `bittorrent` package."""

from __future__ import annotations

__all__ = ["BadTarget", "BridgeError", "ListenFailed"]


class BridgeError(Exception):
    """Base of every error raised on purpose by `bittorrent`."""


class ListenFailed(BridgeError):
    """The embedded session could not listen where it was told to (`--bt-listen`)."""


class BadTarget(BridgeError):
    """A magnet link, .torrent file or info dict that swarmproxy will not fetch by (`target`): malformed, v1-only,
    inconsistent, or naming no one file to fetch. The message says why, for the user who pasted it."""
