"""The one error module of the `bittorrent` package."""

from __future__ import annotations

__all__ = ["BridgeError", "ListenFailed"]


class BridgeError(Exception):
    """Base of every error raised on purpose by `bittorrent`."""


class ListenFailed(BridgeError):
    """The embedded session could not listen where it was told to (`--bt-listen`)."""
