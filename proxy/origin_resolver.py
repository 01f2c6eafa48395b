"""Resolving origin names, with the DNS-rebinding rule (`proxy.exposure.screen`) applied to every answer before
anything connects to it.

One `OriginResolver` sits in the origin session's connector (`proxy.origin.make_session`): aiohttp connects only to
the addresses `resolve` returns and caches exactly those, so no second resolution can slip another address in
between a check and a connection. That session carries everything the proxy fetches: the relay, WebSocket
upgrades, the fallback download, its HEAD probes, `--mitm-hosts` and `/_swarm/fetch`. CONNECT tunnels ask the same
resolver (`addresses_for`) and connect to what it returned.

The resolver underneath is injectable: the system's (`getaddrinfo`, which honours /etc/hosts, the search domain and
mDNS like the browser would) by default, a `StaticResolver` in tests and the bench, which never send a query.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

import addresses

from .errors import OriginError
from .exposure import Origin, is_internal, may_share, rebinding_refusal, screen

log = logging.getLogger("swarmproxy.resolver")

REMEMBERED_NAMES = 1024  # names whose last answer `resolved_shareable` can tell, the least recently resolved forgotten


class RebindingRefused(OSError):
    """A public name resolved only to addresses it may not reach. An OSError like every other failure to connect,
    so each shell that handles those (the fallback download's head, a HEAD probe) handles this one too;
    `proxy.origin.describe_failure` answers it with a 403 carrying `message`."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, message)
        self.message = message


def _result(host: str, address: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return ResolveResult(hostname=host, host=address, port=port, family=family, proto=0,
                         flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)


class StaticResolver(AbstractResolver):
    """Answers from a table, name -> addresses, and never sends a query: tests and the bench use it, since
    nothing they run may ask real DNS. A name not in the table does not exist."""

    def __init__(self, table: Mapping[str, Sequence[str]]) -> None:
        self.table = {name.lower().rstrip("."): list(found) for name, found in table.items()}
        self.asked: list[str] = []  # every name resolved, in order: a test can see what reached DNS

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        self.asked.append(host)
        found = self.table.get(host.lower().rstrip("."))
        if not found:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        wanted = {socket.AF_INET: ".", socket.AF_INET6: ":"}.get(family)
        results = [_result(host, address, port) for address in found if wanted is None or wanted in address]
        if not results:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return results

    async def close(self) -> None:
        """Holds nothing."""


class OriginResolver(AbstractResolver):
    """`base`'s answers with the rebinding rule applied: a public name keeps its public addresses (and the
    `origins` listed); when none is left, `RebindingRefused`. `base` defaults to the system's resolver."""

    def __init__(self, base: AbstractResolver | None = None, *, local_domains: Iterable[str] = (),
                 origins: Iterable[Origin] = ()) -> None:
        self._base = base
        self.local_domains = tuple(local_domains)
        self.origins = tuple(origins)
        self._shareable: OrderedDict[str, bool] = OrderedDict()  # name -> its last answer may be shared
        self._public: OrderedDict[str, bool] = OrderedDict()  # name -> its last answer was public addresses only

    def _base_resolver(self) -> AbstractResolver:
        if self._base is None:  # made on first use: ThreadedResolver wants the running loop
            self._base = ThreadedResolver()
        return self._base

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._base_resolver().resolve(host, port, family)
        found = [result["host"] for result in results]
        kept, refused = screen(host, port, found, local_domains=self.local_domains, origins=self.origins)
        if refused:
            log.warning("%s: not connecting to %s (a public name resolving to non-public addresses: DNS "
                        "rebinding?)", host, ", ".join(found[i] for i in refused))
        self._remember(host, bool(kept) and all(may_share(found[i], port, self.origins) for i in kept),
                       bool(kept) and all(addresses.is_public(found[i]) for i in kept))
        if not kept:
            raise RebindingRefused(rebinding_refusal(host, port, [found[i] for i in refused]))
        return [results[i] for i in kept]

    def _remember(self, host: str, shareable: bool, public: bool) -> None:
        for memory, value in ((self._shareable, shareable), (self._public, public)):
            memory[host] = value
            memory.move_to_end(host)
            while len(memory) > REMEMBERED_NAMES:
                memory.popitem(last=False)

    def resolved_shareable(self, host: str) -> bool:
        """Whether `host`'s last answer held only addresses whose content may be shared (public, or listed): the
        fallback download looks a URL up before its head only then, so that a public-looking name of a private
        origin (an intranet's, not under --local-domains) never reaches the DHT. False until it was resolved."""
        return self._shareable.get(host, False)

    def resolved_public(self, host: str) -> bool:
        """Whether `host`'s last answer held public addresses only (not a listed private origin either): what the
        BitTorrent bridge exports must come from one (`proxy.bridge`). False until it was resolved."""
        return self._public.get(host, False)

    async def addresses_for(self, host: str, port: int, *, local_client: bool) -> list[ResolveResult]:
        """Where a CONNECT tunnel (or a remote client's request) to host:port may go: an IP literal as it is, a
        name through `resolve`; for a client not on this machine, public addresses only (OriginError 403 if
        none)."""
        if addresses.parse(host) is not None:
            results = [_result(host, host.strip("[]"), port)]
        else:
            results = await self.resolve(host, port, socket.AF_UNSPEC)
        if local_client:
            return results
        allowed = [result for result in results if not is_internal(result["host"])]
        if not allowed:
            raise OriginError(403, f"forbidden: {host}:{port} is an internal address and the client is not "
                                   "on this machine")
        return allowed

    async def close(self) -> None:
        if self._base is not None:
            await self._base.close()
