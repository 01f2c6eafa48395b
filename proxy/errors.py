"""The errors of the `proxy` package.

A `ConfigError` is the user's to fix and is printed without a traceback. An `OriginError` is an
upstream failure that becomes an HTTP answer (502/504) instead of an exception.
"""


class ProxyError(Exception):
    """Base of every error raised by the proxy package."""


class ConfigError(ProxyError):
    """A setting is missing, malformed or unsafe; the message says which and how to fix it."""


class OriginError(ProxyError):
    """The origin could not be reached or did not answer; carries the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ListenError(ProxyError):
    """A listener could not be opened (address in use, no permission, bad key file); says which and why."""


class ClientGone(ProxyError, ConnectionError):
    """The client connection was closed or deliberately cut; nothing more can be answered on it."""
