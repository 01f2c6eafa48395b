"""Asking peers for a root's manifest (`wire.ManifestRequest`), the shell of `SwarmNode.fetch_manifest`.

Kept apart from `swarm.service.node`, which opens the connections (`open_connection`: the HANDSHAKE on the root):
this only asks each peer in turn and checks what it answers against the root, so whoever a caller was told of
cannot hand it another content's manifest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from swarm.content.manifest import Manifest, decode
from swarm.errors import FetchFailed, PeerError, TransportError
from swarm.net import wire
from swarm.net.transport import Address
from swarm.service.claims_query import Connect

__all__ = ["fetch_manifest"]


async def fetch_manifest(connect: Connect, root: bytes, peers: Iterable[Address], *, timeout: float) -> Manifest:
    """The manifest of `root` from the first of `peers` whose manifest has that root (`connect`: a session on
    `root`, `SwarmNode.open_connection`); `timeout` s for each connection and as many for its answer. Raises
    `FetchFailed`, saying what each peer did, when none gives it."""
    errors = []
    for address in peers:
        try:
            connection = await connect(address, root, timeout)
        except (TimeoutError, TransportError, PeerError) as exc:
            errors.append(f"{address[0]}:{address[1]}: {exc}")
            continue
        try:
            connection.send_nowait(wire.ManifestRequest())
            async with asyncio.timeout(timeout):
                while (message := await connection.receive()) is not None:
                    if isinstance(message, wire.ManifestResponse):
                        manifest = decode(message.data)
                        if manifest.root != root:
                            raise PeerError("its manifest has another root")
                        return manifest
            raise PeerError("closed without sending the manifest")
        except (TimeoutError, PeerError, TransportError) as exc:
            errors.append(f"{address[0]}:{address[1]}: {exc or type(exc).__name__}")
        finally:
            connection.abort("manifest fetched")
    raise FetchFailed(f"no peer gave the manifest of {root.hex()}: " + ("; ".join(errors) or "no peers"))
