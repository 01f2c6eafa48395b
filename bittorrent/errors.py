"""The one error module of the `bittorrent` package."""

from __future__ import annotations

__all__ = ["AlreadyAdded", "BadTarget", "BridgeError", "ListenFailed"]


class BridgeError(Exception):
    """Base of every error raised on purpose by `bittorrent`."""


class ListenFailed(BridgeError):
    """The embedded session could not listen where it was told to (`--bt-listen`). `timed_out`: libtorrent said
    nothing in time (rather than naming an error), which another try would only wait out again."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class BadTarget(BridgeError):
    """A magnet link, .torrent file or info dict that swarmproxy will not fetch by (`target`): malformed, v1-only,
    inconsistent, or naming no one file to fetch. The message says why, for the user who pasted it."""


class AlreadyAdded(BridgeError):
    """The session has a torrent of that info-hash already, not as a download (it seeds it): libtorrent would
    hand back that torrent's handle, and removing the download's would remove the seed and delete the store's
    file."""
