"""What a `--redis` URL names, and the asyncio client for it: one redis, or a primary that Sentinel manages.

    redis://[USER:PASSWORD@]HOST:PORT[/DB][?OPTIONS]                      one server (redis-py's own URL)
    rediss://...                                                           the same over TLS
    redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB][?OPTIONS]
    rediss+sentinel://...                                                  TLS to the primary and the sentinels

A Sentinel URL lists the sentinels (port 26379 when left out) and names the service they monitor (`sentinel
monitor SERVICE ...`); the client asks them for the service's primary at every new connection, so after a failover
the next call reaches the new primary (redis-py's `redis.asyncio.sentinel`). It is one URL, like the plain form,
because every command takes exactly one `--redis` and `$SWARMPROXY_REDIS` keeps the whole of it, passwords
included, off the command line (a systemd EnvironmentFile): two more flags would have had to travel together.

USER:PASSWORD and the options are the primary's, as in a plain URL: redis-py's query options (`ssl_ca_certs`,
`ssl_certfile`, `ssl_keyfile`, `ssl_cert_reqs`, `ssl_check_hostname`, `socket_timeout`, `db`, ...) mean the
same. The sentinels, which may have credentials of their own (`requirepass` or an ACL user in sentinel.conf), take:

* `sentinel_username`, `sentinel_password`: their credentials (default: none);
* `sentinel_ssl`: `yes`/`no`, whether they speak TLS (default: as the primary), with the same `ssl_*` files;
* `min_other_sentinels`: ignore a sentinel that sees fewer peers than this (default 0).

A sentinel on TLS with another CA or client certificate than the primary's is not expressible here (redis-py would
take it; one URL has one set of `ssl_*` options): give both the same CA.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.backoff import NoBackoff

from cluster.errors import ConfigError

__all__ = ["SentinelTarget", "client", "describe", "first_host", "is_sentinel", "parse_sentinel", "redacted"]

SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}  # scheme -> TLS
SENTINEL_PORT = 26379
# Query options that are the sentinels', not the primary's; the rest go to redis-py's URL parser unchanged.
_SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password", "sentinel_ssl", "min_other_sentinels")
_SECRETS = ("sentinel_password", "password")  # query options a message never shows
_TRUE, _FALSE = ("1", "yes", "true", "on"), ("0", "no", "false", "off")


def is_sentinel(url: str) -> bool:
    return urllib.parse.urlsplit(url).scheme.lower() in SCHEMES


@dataclass(frozen=True)
class SentinelTarget:
    """A Sentinel URL, parsed: where the sentinels are, the service, and the connection options of each side."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    primary: dict[str, Any] = field(default_factory=dict)  # redis-py's keyword arguments for the primary
    sentinel: dict[str, Any] = field(default_factory=dict)  # ... and for each sentinel
    min_other_sentinels: int = 0


def _hosts(netloc: str) -> tuple[tuple[str, int], ...]:
    """`HOST[:PORT],...` (an IPv6 host in brackets) as (host, port) pairs."""
    found = []
    for part in netloc.split(","):
        part = part.strip()
        if not part:
            raise ConfigError("an empty sentinel address (two commas, or a trailing one)")
        if part.startswith("["):
            host, _, rest = part[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else rest
        else:
            host, _, port_text = part.partition(":")
        if not host:
            raise ConfigError(f"sentinel address {part!r}: no host")
        if port_text and not port_text.isdigit() or port_text and not 0 < int(port_text) < 65536:
            raise ConfigError(f"sentinel address {part!r}: {port_text!r} is not a port")
        found.append((host, int(port_text) if port_text else SENTINEL_PORT))
    return tuple(found)


def _flag(name: str, text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise ConfigError(f"{name}={text!r}: say yes or no")


def parse_sentinel(url: str, timeout: float | None = None) -> SentinelTarget:
    """A `redis+sentinel://` or `rediss+sentinel://` URL; ConfigError saying what is wrong with one that is not.
    `timeout`: the socket timeouts of both sides, unless the URL's options say otherwise."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(f"not a Sentinel URL (redis+sentinel:// or rediss+sentinel://): {scheme}://")
    tls = SCHEMES[scheme]
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    if not hostlist:
        raise ConfigError("no sentinel address: redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE")
    sentinels = _hosts(hostlist)
    path = [urllib.parse.unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ConfigError("name the service the sentinels monitor: redis+sentinel://HOSTS/SERVICE[/DB]")
    service = path[0]
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    ours = {name: query.pop(name)[-1] for name in _SENTINEL_OPTIONS if name in query}
    if len(path) == 2:
        if not path[1].isdigit():
            raise ConfigError(f"database {path[1]!r} is not a number")
        query.setdefault("db", [path[1]])
    # The primary's options are a plain URL's: redis-py's own parser reads them, so they mean the same.
    plain = urllib.parse.urlunsplit(("rediss" if tls else "redis", f"{userinfo}@primary" if userinfo else "primary",
                                     "", urllib.parse.urlencode(query, doseq=True), ""))
    try:
        primary: dict[str, Any] = dict(parse_url(plain))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    primary.pop("host", None)
    primary.pop("connection_class", None)  # the Sentinel pool picks its own (SentinelManaged[SSL]Connection)
    tls_options = {k: v for k, v in primary.items() if k.startswith("ssl_")}
    if tls_options and not tls:
        raise ConfigError(f"{', '.join(sorted(tls_options))}: TLS options need rediss+sentinel://")
    if tls:
        primary["ssl"] = True
    if timeout is not None:
        primary.setdefault("socket_timeout", timeout)
        primary.setdefault("socket_connect_timeout", timeout)
    sentinel: dict[str, Any] = {k: primary[k] for k in ("socket_timeout", "socket_connect_timeout") if k in primary}
    if _flag("sentinel_ssl", ours["sentinel_ssl"]) if "sentinel_ssl" in ours else tls:
        sentinel.update(ssl=True, **tls_options)
    if ours.get("sentinel_username"):
        sentinel["username"] = ours["sentinel_username"]
    if ours.get("sentinel_password"):
        sentinel["password"] = ours["sentinel_password"]
    least = ours.get("min_other_sentinels", "0")
    if not least.isdigit():
        raise ConfigError(f"min_other_sentinels={least!r} is not a number")
    return SentinelTarget(sentinels, service, primary, sentinel, int(least))


class SentinelClient(aioredis.Redis):
    """The primary's client; closing it closes the sentinels' connections too (redis-py leaves them to us)."""

    watched_by: Sentinel | None = None  # not `sentinel`: that is redis-py's SENTINEL command

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.watched_by is not None:
            with contextlib.suppress(redis.exceptions.RedisError, OSError):
                await self.watched_by.aclose()


def client(url: str, timeout: float) -> aioredis.Redis:
    """The client for `url`: `timeout` seconds for one socket operation, connecting included (unless the URL
    says otherwise). ConfigError for a URL that names nothing (nothing is dialled here)."""
    if not is_sentinel(url):
        try:
            return aioredis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                           retry_on_timeout=False)
        except ValueError as exc:  # a URL redis-py cannot parse
            raise ConfigError(str(exc)) from None
    target = parse_sentinel(url, timeout)
    # No retries at a sentinel: the next one in the list is the retry, and redis-py's default (10, backing off up
    # to 1 s each, inside each of the primary's own retries) would outlast the call's deadline, which then says
    # only "TimeoutError". One at once at the primary: a pooled connection to a primary that died is dropped, and
    # the retry asks the sentinels where the new one is. Beyond that the caller's next period is the retry.
    sentinel = Sentinel(list(target.sentinels), min_other_sentinels=target.min_other_sentinels,
                        sentinel_kwargs={**target.sentinel, "retry": Retry(NoBackoff(), 0)})
    primary = sentinel.master_for(target.service, redis_class=SentinelClient, retry_on_timeout=False,
                                  retry=Retry(NoBackoff(), 1), **target.primary)
    primary.watched_by = sentinel
    return primary


def describe(exc: BaseException, url: str) -> str:
    """One line for a failed call: a Sentinel's "no primary" says which service and which sentinels, without the
    reprs of redis-py's client objects."""
    if isinstance(exc, MasterNotFoundError) and is_sentinel(url):
        target = parse_sentinel(url)
        where = ", ".join(f"{h}:{p}" for h, p in target.sentinels)
        if " : " in str(exc):  # redis-py appends the sentinels it could not reach
            return f"no sentinel at {where} answered for service {target.service!r}"
        return (f"the sentinels at {where} know no live primary of service {target.service!r} (a wrong name, or a "
                "failover under way)")
    return str(exc) or type(exc).__name__


def first_host(url: str) -> str | None:
    """The host of the server, or of the first sentinel: where this host's traffic to redis goes."""
    if is_sentinel(url):
        with contextlib.suppress(ConfigError):
            return parse_sentinel(url).sentinels[0][0]
        return None
    return urllib.parse.urlsplit(url).hostname


def redacted(url: str) -> str:
    """The URL without its passwords (the primary's, the sentinels'), for messages."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    if any(name in _SECRETS for name, _ in pairs):
        query = "&".join(f"{name}=***" if name in _SECRETS else urllib.parse.urlencode({name: value})
                         for name, value in pairs)
        parts = parts._replace(query=query)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
