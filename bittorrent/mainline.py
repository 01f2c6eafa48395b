"""`MainlineDirectory`: a provider directory (`swarm.discovery.seam.ProviderDirectory`) on the BitTorrent Mainline
DHT, through the embedded session's DHT (BEP 5), for the Internet mode (docs/ARCHITECTURE.md, "The Internet mode").

A Mainline entry is a bare address and port under a 20-byte key, with no protocol tag and no id, so:

* a content root is announced with our peer port under `root_key(root)`, a key only our nodes derive (a stock
  client never looks it up, and never finds our port where it expects BitTorrent);
* a provider found there has no node id of its own: it is named by its address (`address_id`), which is what the
  composite directory keeps one of anyway;
* an entry cannot be withdrawn and lives about 30 minutes on the storing nodes: `withdraw` stops re-announcing,
  and a stale entry costs whoever finds it one failed connection (what the peer sends is checked against the root
  as ever: a directory needs no trust).

Claims and vouches are not stored on Mainline: they are asked of the peers found, directly (a claim store of this
backend is the next step of the Internet mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING

from swarm.discovery.seam import UNSPECIFIED_HOSTS, Provider, TransportFlags

from .errors import BridgeError

if TYPE_CHECKING:
    from .session import BtSession

__all__ = ["MainlineDirectory", "root_key", "address_id", "REANNOUNCE", "LOOKUP_SECONDS"]

log = logging.getLogger("swarmproxy.bittorrent")

ROOT_KEY_PREFIX = b"swarmproxy-root-v1"  # (docs/ARCHITECTURE.md: our peer port goes on keys only we derive)
MAX_PROVIDERS = 200  # addresses taken from one lookup: a key crowded by a stranger's announcements costs no more
REANNOUNCE = 15 * 60.0  # seconds between two announcements of one root: half an entry's life on the storing nodes
# Seconds a lookup listens for answers at most: it ends sooner once the DHT says no lookup is under way
# (`bittorrent.lookups`; with others at once, once the last ends). Mainline lookups take 0.1-0.2 s at the median, a
# few seconds at worst; the engine's own wait (`provider_wait`) is shorter.
LOOKUP_SECONDS = 5.0


def root_key(root: bytes) -> bytes:
    """The Mainline key our peer port is announced under for content `root`."""
    return hashlib.sha1(ROOT_KEY_PREFIX + root).digest()


def address_id(host: str, port: int) -> bytes:
    """A provider's name when all the DHT gives is its address."""
    return hashlib.sha1(f"mainline {host} {port}".encode()).digest()


class MainlineDirectory:
    """Announce and find content roots on the session's Mainline DHT."""

    name = "mainline"
    errors: tuple[type[Exception], ...] = (BridgeError,)

    def __init__(self, session: BtSession) -> None:
        if session.dht_nodes is None:
            raise BridgeError("the BitTorrent session runs without its DHT")
        self.session = session
        self._node_id = os.urandom(20)  # nobody else sees it: providers here are named by address
        self._announcing: dict[bytes, asyncio.Task] = {}
        self._closed = False  # after close, an announcement starts nothing (the session is going)
        # Whether our peer port is worth announcing (`swarm.core.reachability`: not while peers in two networks
        # could not connect back to it); the Internet mode sets it once the engine listens.
        self.may_announce: Callable[[], bool] = lambda: True
        self.lookups = self.found = 0

    @property
    def node_id(self) -> bytes:
        return self._node_id

    def own_host(self) -> str | None:
        """Our address as the DHT's nodes say they see it (BEP 42's `ip` field; libtorrent's `external_ip_alert`),
        or, bound to one address, that one once a node has answered; None before: there is nobody to announce to
        yet. (The storing nodes take the address they see us at anyway, BEP 5: this only says when to start.)"""
        session = self.session
        if session.port_maps.external_address is not None:
            return session.port_maps.external_address
        session.post_dht_stats()  # the count read below is the one asked for last time
        if session.host not in UNSPECIFIED_HOSTS and session.dht_node_count:
            return session.host
        return None

    async def announce(self, root: bytes, address: tuple[str, int], transports: int = TransportFlags.TCP) -> None:
        if self._closed:
            raise BridgeError("the Mainline DHT is shutting down")
        self._stop(root)
        self._announcing[root] = asyncio.ensure_future(self._keep_announced(root, address[1]))

    async def withdraw(self, root: bytes) -> None:
        self._stop(root)  # what the storing nodes hold expires on its own

    async def find_providers(self, root: bytes) -> AsyncGenerator[Provider, None]:
        """Providers as nodes answer, until the lookup is over (at most `LOOKUP_SECONDS`) or the caller closes it."""
        self.lookups += 1
        key = root_key(root)
        heard = self.session.dht_lookup(key)
        seen: set[tuple[str, int]] = set()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LOOKUP_SECONDS):
                    while (batch := await heard.get()) is not None:
                        for host, port in batch:
                            if (host, port) in seen or not 0 < port < 65536 or len(seen) >= MAX_PROVIDERS:
                                continue
                            seen.add((host, port))
                            self.found += 1
                            yield Provider(address_id(host, port), host, port, TransportFlags.TCP)
        finally:
            self.session.dht_lookup_over(key, heard)

    def status(self) -> dict[str, object]:
        return {**self.session.dht_status(), "announced": len(self._announcing), "lookups": self.lookups,
                "providers_found": self.found}

    def close(self) -> None:
        self._closed = True
        for root in list(self._announcing):
            self._stop(root)

    def _stop(self, root: bytes) -> None:
        task = self._announcing.pop(root, None)
        if task is not None:
            task.cancel()

    async def _keep_announced(self, root: bytes, port: int) -> None:
        key = root_key(root)
        while True:
            if self.may_announce():  # (an unreachable node still downloads; it just names no address that fails)
                with contextlib.suppress(RuntimeError):  # the session stopped: the next turn is cancelled anyway
                    self.session.dht_announce(key, port)
            await asyncio.sleep(REANNOUNCE)
