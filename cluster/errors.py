"""The one error module of the `cluster` package.

Every error raised on purpose derives from `ClusterError`; the command line prints them as one line, never a
traceback.
"""

from __future__ import annotations

__all__ = ["ClusterError", "ConfigError", "RedisUnavailable", "BadRecord", "NoSuchTransfer", "PushIncomplete",
           "TransferCancelled"]


class ClusterError(Exception):
    """Base of every error `cluster` raises on purpose."""


class ConfigError(ClusterError):
    """A bad flag or setting (a rack name with a colon, a capacity that is not a number)."""


class RedisUnavailable(ClusterError):
    """redis could not be reached or answered with an error: the shells retry, the commands say so and exit."""


class BadRecord(ClusterError):
    """A record read from redis does not parse: written by another version, or not by us. Skipped, never trusted."""


class NoSuchTransfer(ClusterError):
    """`cancel` or `status` named a transfer redis does not know."""


class TransferCancelled(ClusterError):
    """The owner cancelled a transfer while it was pushed: not every agent holds it (the push exits non-zero)."""


class PushIncomplete(ClusterError):
    """A push ended with agents that do not hold the file (refused it, or not within --timeout): the push exits
    non-zero, saying which agent holds what."""
