"""The origin's own manifest (server_plugin's `Swarm-Manifest` field): its hash layer fetched and checked.

The strongest trust there is (docs/ARCHITECTURE.md "Content identity, integrity and trust"): the bytes come from
the same origin, so a manifest it publishes in the same response is as trustworthy as the body itself. Still
checked: the field must parse, describe the size the response announces, and belong to a response without
`Content-Encoding` (`proxy.origin_head.published`, pure); a layer fetched from the origin must hash to the root.
Anything else is ignored with a log line, and the download goes on as if the origin had published nothing.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from yarl import URL

from swarm.content.manifest import OriginManifest
from swarm.content.merkle import HASH_SIZE
from swarm.errors import PeerError

log = logging.getLogger("swarmproxy.origin_manifest")

LAYER_TIMEOUT = 10.0  # s for the layer request as a whole: the origin is slow, or we would not be swarming
# 2**20 hashes: 64 GiB in 64 KiB blocks (the plugin aims at ~2048 blocks a file); a larger claim is not held in memory.
MAX_LAYER_BYTES = (1 << 20) * HASH_SIZE


async def fetch_layer(session: aiohttp.ClientSession, url: str, manifest: OriginManifest) -> list[bytes] | None:
    """The hash layer from the origin's layer path, verified against the root; None if it cannot be had."""
    if manifest.hashes is not None:
        return list(manifest.hashes)
    assert manifest.layer_path is not None
    origin = URL(url).origin()
    target = origin.join(URL(manifest.layer_path))
    if target.origin() != origin:  # parse_header allows only same-origin paths; this is the last guard
        log.warning("ignoring a hash layer at %s: not on the origin %s", target, origin)
        return None
    expected = manifest.manifest().num_blocks * HASH_SIZE
    if expected > MAX_LAYER_BYTES:
        log.info("not fetching a hash layer of %d bytes from %s (at most %d)", expected, target, MAX_LAYER_BYTES)
        return None
    try:
        async with asyncio.timeout(LAYER_TIMEOUT):
            async with session.get(target, allow_redirects=False, headers={"Accept-Encoding": "identity"}) as answer:
                if answer.status != 200:
                    raise ValueError(f"status {answer.status}")
                raw = await _read_at_most(answer.content, expected + 1)  # one more: a longer body is wrong too
    except (TimeoutError, aiohttp.ClientError, ValueError, OSError) as exc:
        log.info("no hash layer from %s: %s", target, exc or type(exc).__name__)
        return None
    layer = [raw[i:i + HASH_SIZE] for i in range(0, len(raw), HASH_SIZE)]
    try:
        if len(raw) != expected:
            raise PeerError(f"{len(raw)} bytes, expected {expected}")
        await asyncio.to_thread(manifest.manifest().verify_layer, layer)  # a large layer is seconds of hashing
    except PeerError as exc:
        log.warning("the origin's hash layer at %s does not match its manifest: %s", target, exc)
        return None
    return layer


async def _read_at_most(content: aiohttp.StreamReader, limit: int) -> bytes:
    """Up to `limit` bytes of a body: `read(n)` returns what is buffered, one network read, not n bytes."""
    raw = bytearray()
    while len(raw) < limit and (chunk := await content.read(limit - len(raw))):
        raw += chunk
    return bytes(raw)
