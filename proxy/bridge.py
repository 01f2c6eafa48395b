"""The BitTorrent bridge in the proxy (`--bt-listen`): what this node shares is seeded, and exported on request.

`Bridge.start` runs a `Seeder` on the node's one session (`bittorrent.session`, owned by `proxy.internet`) that
follows what the engine shares. Only what may leave this machine for the BitTorrent world is seeded and exported
(`refusal`), a rule stricter than our own swarm's: no URL carrying a credential (`url_privacy`), no origin on a
private network, even one listed with `--share-private-origins`, no name that may resolve to one (`--local-domains`,
or a name not resolved to public addresses alone in this run before the content was shared: of what the store kept
from an earlier run, shared again at start, only content from public address literals is seeded), and no content
without a URL to judge its origin by (a download's segments). The admin API's `/_swarm/torrent` and `swarmproxy torrent
export` read `export`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from yarl import URL

import addresses
from swarm.content.manifest import Manifest
from swarm.content.torrent import Torrent, magnet_link

from .exposure import is_local_name
from .url_privacy import url_reason

if TYPE_CHECKING:
    from bittorrent.seeder import Seeder
    from bittorrent.session import BtSession

log = logging.getLogger("swarmproxy")


@dataclass(frozen=True)
class Export:
    """A seeded content's torrent, its magnet link and what the link names."""

    manifest: Manifest
    torrent: Torrent
    magnet: str
    display_name: str | None
    web_seed: str | None
    peer: tuple[str, int] | None

    def shown(self) -> dict[str, object]:
        v1 = self.torrent.info_hash_v1
        return {"root": self.manifest.root.hex(), "info_hash": self.torrent.info_hash_hex,
                "info_hash_v1": v1.hex() if v1 is not None else None, "size": self.manifest.size,
                "name": self.display_name, "magnet": self.magnet, "web_seed": self.web_seed,
                "peer": f"{self.peer[0]}:{self.peer[1]}" if self.peer else None}


class Bridge:
    """The session and its seeder, for one proxy (`ProxyServer` starts and stops it)."""

    def __init__(self, engine, resolver, session: BtSession | None, *, local_domains: tuple[str, ...]) -> None:
        self.engine = engine
        self.resolver = resolver  # proxy.origin_resolver.OriginResolver: which names resolved to public addresses
        self.session: BtSession | None = session  # the node's one session (`proxy.internet`), started and stopped there
        self.local_domains = local_domains
        self.seeder: Seeder | None = None

    def start(self) -> None:
        from bittorrent.seeder import Seeder  # libtorrent's import: only when the bridge runs

        assert self.session is not None
        self.seeder = Seeder(self.session, self.engine.store, refusal=self.refusal)
        self.engine.service.watch_shares(self.seeder.on_share)

    def refusal(self, manifest: Manifest) -> str | None:
        """Why `manifest`'s content may not go to the BitTorrent world, or None (see the module docstring)."""
        url = manifest.url
        if url is None:  # a segment, or a file seeded by `swarmproxy swarm seed`: where it came from is not known
            return "it has no URL to judge its origin by"
        if (reason := url_reason(url)) is not None:
            return f"its URL may not be announced ({reason})"
        host = (urlsplit(url).hostname or "").strip("[]")
        if addresses.parse(host) is not None:
            return None if addresses.is_public(host) else "its origin is on a private network"
        if is_local_name(host, self.local_domains):
            return "its origin's name is local"
        if not self.resolver.resolved_public(host):
            return "its origin's name did not resolve to public addresses alone in this run"
        return None

    async def export(self, root: bytes, *, hybrid: bool = False) -> Export | None:
        """The torrent of `root` and its magnet link, if it is seeded (nothing else is ever exported); `hybrid`:
        the one with a v1 part too, made on first request (one SHA-1 pass over the file) and seeded from then on."""
        if self.seeder is None or (seeding := self.seeder.seeded(root)) is None:
            return None
        torrent = await self.seeder.hybrid(root) if hybrid else seeding.torrent
        if torrent is None:
            return None
        manifest = seeding.manifest
        url = manifest.url
        name = unquote(urlsplit(url).path.rsplit("/", 1)[-1]) or None if url else None
        address = self.session.address if self.session is not None else None
        peer = None
        if address is not None:
            host: str | None = address[0]
            if host in ("0.0.0.0", "::"):  # listening everywhere: the address others see this node at, if known
                discovery = self.engine.discovery
                host = discovery.own_host() if discovery is not None else None
                if host is not None and (":" in host) != (address[0] == "::"):
                    host = None  # of the other family than the listener: nobody would answer there
            peer = (host, address[1]) if host else None
        return Export(manifest, torrent, magnet_link(torrent, display_name=name, peers=[peer] if peer else [],
                                                     web_seeds=[url] if url else []),
                      name, url, peer)

    def find(self, url: str) -> bytes | None:
        """The root of the newest seeded content of `url` (compared as the proxy stores URLs), if any."""
        if self.seeder is None:
            return None
        try:
            wanted = str(URL(url))
        except ValueError:
            return None
        for root, seeding in reversed(list(self.seeder.seeding.items())):
            if seeding.manifest.url == wanted:
                return root
        return None

    def status(self) -> dict[str, object]:
        return self.seeder.status() if self.seeder is not None else {"listen": None}

    def stop(self) -> None:
        """Stop seeding (the session itself is `proxy.internet`'s to stop, after)."""
        if self.seeder is not None:
            self.seeder.close()
