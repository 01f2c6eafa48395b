"""Real nodes over the memory transport: providers that hold the root and never answer a HASH_REQUEST make a fetch
fail for the missing layer, not at its stall watchdog (the rule: tests/swarm/core/test_fetch_layer.py). The layer's
timeout is made short: the rule, not its length, is under test."""

from __future__ import annotations

import pytest

from swarm.core import fetch as fetch_module
from swarm.core.policy import PolicyConfig
from swarm.errors import FetchFailed
from swarm.net import wire
from swarm.net.memory import MemoryNetwork, MemoryTransport
from swarm.service.node import SwarmNode
from swarm.store.memory import MemoryBlockStore
from tests.swarm.core.test_fetch_layer import DATA, LAYER, MANIFEST


class WithholdingNode(SwarmNode):
    """Serves the root, its blocks too, but never answers a HASH_REQUEST: not the layer, not a REJECT."""

    def _apply_serve(self, connection, core, actions) -> None:
        kept = [a for a in actions if not isinstance(getattr(a, "message", None), wire.HashResponse)]
        super()._apply_serve(connection, core, kept)


class Origin:
    """An origin Range source that answers at once, and counts what it was asked."""

    def __init__(self) -> None:
        self.bytes_received = 0

    async def fetch(self, offset: int, length: int) -> bytes:
        self.bytes_received += length
        return DATA[offset:offset + length]


@pytest.fixture
async def nodes(monkeypatch):
    monkeypatch.setattr(fetch_module, "LAYER_TIMEOUT", 0.05)
    network, started = MemoryNetwork(), []

    async def node(cls=SwarmNode):
        started.append(cls(MemoryBlockStore(), MemoryTransport(network),
                           policy=PolicyConfig(request_timeout=1.0, retry_backoff=0.2)))
        return started[-1], await started[-1].start(f"10.0.1.{len(started)}", 0)

    yield node
    for each in started:
        await each.close()


async def seed(node) -> None:
    node.store.create(MANIFEST, LAYER, pin=True)
    for block in range(MANIFEST.num_blocks):
        offset, length = MANIFEST.block_span(block)
        assert node.store.write_block(MANIFEST.root, block, DATA[offset:offset + length])
    node.share(MANIFEST.root)


async def test_a_fetch_from_providers_that_withhold_the_layer_fails_for_it_not_at_the_watchdog(nodes) -> None:
    providers = []
    for _ in range(2):
        withholder, address = await nodes(WithholdingNode)
        await seed(withholder)
        providers.append(address)
    leecher, _ = await nodes()
    origin = Origin()
    # A stall watchdog far longer than the layer's timeout: the fetch must end by the layer rule.
    with pytest.raises(FetchFailed, match="no peer sent the hash layer"):
        async for _ in leecher.fetch(MANIFEST, providers, origin=origin, stall_timeout=20.0):
            pass
    assert origin.bytes_received == 0


async def test_an_honest_provider_behind_a_withholding_one_still_serves(nodes) -> None:
    withholder, bad = await nodes(WithholdingNode)
    await seed(withholder)
    honest, good = await nodes()
    await seed(honest)
    leecher, _ = await nodes()
    got = b"".join([chunk async for chunk in leecher.fetch(MANIFEST, [bad, good], stall_timeout=20.0)])
    assert got == DATA
