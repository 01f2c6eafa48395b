"""What the origin publishes: manifests of its representations, computed once and cached (framework-neutral).

A `Representation` is what a resolver says a request will be answered with: a cache key, its validator (the
strong ETag the response will carry, or None to accept whatever strong ETag it carries), its size, and a way to
read its bytes. `Publisher.manifest(rep)` hashes the bytes once (in a worker thread: a 1 GB file takes a few
seconds of SHA-256) and keeps the manifest and hash layer; concurrent requests for the same representation
wait for the one computation. `Publisher.layer(root)` answers the layer endpoint.

Load: `enter()`/`leave()` count the GETs in flight for published representations; from `busy_at` on, responses
carry `Swarm-Hint: swarm`, asking swarm-aware clients to take the rest from peers at once (docs/ARCHITECTURE.md,
"Origin help"). A client that ignores it loses nothing.

Hold: a client whose GET says `Swarm-Accept: hint` closes a hinted response at its head, so the body a busy origin
would start sending it at once is bytes nobody reads. Such a response's body waits up to `hold` s (`hold_for`) for
the client to leave; one still there after it gets its body, late but whole. On the crowd simulator, once nothing
else kept the origin busy between newcomers, their first chunks went out before their FINs came: held, the origin
sent 0.012 % of the direct clients' bytes at 100,000 clients instead of 0.26 % (bench/README.md).

Peers: a hinted head to such a GET that names its client's peer port (`Swarm-Accept: hint, peer=6881`) lists
clients hinted before it (`Swarm-Peers`, `PeerPool`), so that it fetches from them at once instead of after a DHT
lookup (`swarm.content.peer_field`). The address is the request's (aiohttp's `request.remote`, ASGI's
`scope["client"]`), never a forwarded field's: behind a reverse proxy or CDN, have the server hand the client's
address on (`uvicorn --proxy-headers --forwarded-allow-ips`, an aiohttp middleware that sets `request.remote`)
or pass `list_peers=False`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable

# The plugin needs only the content identity: ManifestError is the one `swarm.content.manifest` raises.
from swarm.content.manifest import (
    HEADER,
    HINT_HEADER,
    HINT_SWARM,
    Manifest,
    ManifestError,
    accepts_hint,
    build_manifest,
    format_header,
)
from swarm.content.peer_field import PEERS_HEADER, format_peers, peer_port

from .errors import NotPublishable
from .peer_pool import PeerPool

log = logging.getLogger("swarmproxy.server_plugin")

LAYER_PREFIX = "/.well-known/swarm-layer/"
DEFAULT_BUSY_AT = 32  # GETs in flight from which responses ask clients to swarm
DEFAULT_CACHE = 1024  # representations whose manifests are kept
# Seconds a hinted body waits for a client that said it leaves at the hint: its FIN comes one round trip after the
# head left (a continent away: 0.1-0.3 s); a client that stays after all is the one that pays it.
DEFAULT_HOLD = 1.0


@dataclasses.dataclass(frozen=True)
class Representation:
    key: str  # what identifies the bytes on this server (a path); with `version`, the cache key
    size: int
    read: Callable[[], Iterable[bytes]]  # the bytes, in order, as many chunks as it likes
    validator: str | None = None  # the strong ETag the response will carry; None: whatever strong one it has
    version: object = None  # e.g. (mtime_ns, size) of a file: a change means another manifest


@dataclasses.dataclass(frozen=True)
class Published:
    manifest: Manifest
    layer: tuple[bytes, ...]

    @functools.cached_property
    def raw_layer(self) -> bytes:
        """The layer as the endpoint serves it, joined once."""
        return b"".join(self.layer)

    @property
    def header(self) -> str:
        return format_header(self.manifest, self.layer, LAYER_PREFIX + self.manifest.root.hex())


class Publisher:
    def __init__(self, *, busy_at: int = DEFAULT_BUSY_AT, cache: int = DEFAULT_CACHE,
                 block_size: int | None = None, hold: float = DEFAULT_HOLD, peers: PeerPool | None = None,
                 list_peers: bool = True) -> None:
        if busy_at < 1 or cache < 1:
            raise ValueError("busy_at and cache must be at least 1")
        if not 0 <= hold <= 60:
            raise ValueError("hold must be between 0 and 60 seconds")
        self.block_size = block_size  # None: swarm.content.manifest's rule by size
        self.busy_at = busy_at
        self.hold = hold  # 0: bodies are never held
        self.in_flight = 0
        self.held = 0  # hinted bodies held for a client that said it leaves at the hint
        self.left_in_hold = 0  # ... whose client left before the hold ended: bodies never sent
        self.layer_bytes = 0  # bytes sent by the layer endpoint (the lab counts them as origin bytes)
        self.peers = peers or PeerPool()
        # False behind a reverse proxy or CDN that does not hand the client's address on: the plugin would list the
        # proxy's address, with ports clients chose (SECURITY.md)
        self.list_peers = list_peers
        self._cache_size = cache
        self._entries: collections.OrderedDict[tuple, Published] = collections.OrderedDict()
        self._by_root: dict[bytes, Published] = {}
        self._computing: dict[tuple, asyncio.Future[Published]] = {}

    # -- load ---------------------------------------------------------------------------------------------------

    def enter(self) -> None:
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    @property
    def busy(self) -> bool:
        return self.in_flight >= self.busy_at

    def headers(self, published: Published, *, method: str = "HEAD", remote: str | None = None,
                accept: str | None = None, now: float | None = None) -> dict[str, str]:
        """The fields of a response carrying `published`, to a `method` request from the address `remote` whose
        `Swarm-Accept` field is `accept`: a busy origin's hint and, to a GET that leaves at it, the peers hinted
        before (`PeerPool.exchange`, which then lists this client if it named its peer port)."""
        fields = {HEADER: published.header}
        if self.busy:
            fields[HINT_HEADER] = HINT_SWARM
            if self.list_peers and method == "GET" and accepts_hint(accept):
                peers = self.peers.exchange(published.manifest.root, remote, peer_port(accept),
                                            time.monotonic() if now is None else now)
                if peers:
                    fields[PEERS_HEADER] = format_peers(peers)
        return fields

    def hold_for(self, method: str, hinted: bool, accept: str | None) -> float:
        """Seconds to hold the body of a response to `method` whose fields were just made (`hinted`: they ask the
        client to swarm) for a client whose `Swarm-Accept` field is `accept`; 0: send it at once."""
        return self.hold if method == "GET" and hinted and accepts_hint(accept) else 0.0

    # -- manifests ----------------------------------------------------------------------------------------------

    async def manifest(self, rep: Representation) -> Published:
        """The manifest of `rep`, computed at most once at a time; `NotPublishable` if its bytes cannot be had."""
        key = (rep.key, rep.version, rep.size)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry
        running = self._computing.get(key)
        if running is None:
            running = self._computing[key] = asyncio.ensure_future(asyncio.to_thread(self._compute, rep))
            running.add_done_callback(lambda _: self._computing.pop(key, None))
        entry = await asyncio.shield(running)
        self._remember(key, entry)
        return entry

    def _compute(self, rep: Representation) -> Published:
        try:
            manifest, layer = build_manifest(rep.read(), rep.size, block_size=self.block_size)
        except (OSError, ManifestError, ValueError) as exc:
            # ValueError: the bytes did not add up to `size` (the file changed while it was read).
            raise NotPublishable(f"{rep.key}: {exc}") from exc
        return Published(manifest, tuple(layer))

    def _remember(self, key: tuple, entry: Published) -> None:
        if key in self._entries:
            return
        self._entries[key] = entry
        self._by_root[entry.manifest.root] = entry
        while len(self._entries) > self._cache_size:
            _, old = self._entries.popitem(last=False)
            if not any(e.manifest.root == old.manifest.root for e in self._entries.values()):
                self._by_root.pop(old.manifest.root, None)

    def layer(self, root_hex: str) -> bytes | None:
        """The raw hash layer of a published root (the layer endpoint), None if unknown."""
        try:
            root = bytes.fromhex(root_hex)
        except ValueError:
            return None
        entry = self._by_root.get(root)
        return None if entry is None else entry.raw_layer
