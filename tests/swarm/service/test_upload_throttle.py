"""SwarmNode's `upload_throttle` hook over the memory transport, in one event loop: the Throttle it gives for a
served connection paces that connection's BLOCKs, and only that connection's.

Time is the loop's own: a throttle either lets a block go every 20 ms (asserted as a lower bound on how far the
loop's clock advanced, never an upper one) or one every 1000 s (a send that is certainly still waiting). Waiting
is synchronised on messages and on the throttle's own refusals, never on elapsed time."""

from __future__ import annotations

import asyncio

import pytest

from swarm.core.throttle import Throttle, TokenBucket, on_the_wire
from swarm.net import wire
from swarm.net.memory import MemoryTransport
from swarm.service.node import SwarmNode
from swarm.service.swarm_service import SwarmService
from swarm.store.memory import MemoryBlockStore
from tests.swarm.service.test_node import BLOCK, Swarm, content, download
from tests.swarm.service.test_node_hooks import handshake, next_of

STEP = 0.02  # seconds per block of the pacing throttle
STUCK = BLOCK / 1000  # bytes/s: after its burst, the next block waits 1000 s


class Recorded(Throttle):
    """A one-bucket Throttle (a burst of one block) that records what it let go and when it refused."""

    def __init__(self, rate: float) -> None:
        super().__init__("peer", TokenBucket(rate, BLOCK))
        self.taken: list[tuple[float, float]] = []  # (now, bytes) of every consume that succeeded
        self.refused = 0
        self.waiting = asyncio.Event()  # set at the first refusal: a send is waiting on it

    def consume(self, n: float, now: float) -> bool:
        ok = super().consume(n, now)
        if ok:
            self.taken.append((now, n))
        else:
            self.refused += 1
            self.waiting.set()
        return ok


class Hook:
    """`upload_throttle`: the throttle given for a client's address (as the seed sees it), None for the others;
    every question recorded."""

    def __init__(self) -> None:
        self.throttles: dict[tuple[str, int], Throttle] = {}
        self.asked: list[tuple[str, int]] = []

    def __call__(self, connection) -> Throttle | None:
        self.asked.append(connection.remote_address)
        return self.throttles.get(connection.remote_address)


@pytest.fixture
async def swarm():
    s = Swarm()
    yield s
    await s.close()


def serving_counters(seed: SwarmNode, client):
    [counters] = [link.counters for link in seed.links() if link.serving and link.address == client.local_address]
    return counters


def request_all(connection, blocks: int) -> None:
    for block in range(blocks):
        connection.send_nowait(wire.Request(block, 0, BLOCK))


async def test_a_throttled_connection_gets_its_blocks_no_faster_than_its_throttle_lets_them_go(swarm):
    hook = Hook()
    seed, address, manifest = await swarm.seed(content(6 * BLOCK), upload_throttle=hook)
    client, _ = await handshake(swarm, address, manifest.root)
    throttle = hook.throttles[client.local_address] = Recorded(on_the_wire(BLOCK) / STEP)
    loop = asyncio.get_running_loop()
    began = loop.time()
    request_all(client, 6)
    blocks = [await next_of(client, wire.Block) for _ in range(6)]
    took = loop.time() - began
    assert sorted(b.block for b in blocks) == list(range(6))
    assert b"".join(bytes(b.data) for b in sorted(blocks, key=lambda b: b.block)) == content(6 * BLOCK)
    # Every block was taken from the throttle, asked for each one, its bytes on the wire (the cap is a link's), and
    # the sends waited for it: the first went on the burst, each of the five others one STEP later at least.
    assert hook.asked == [client.local_address] * 6
    assert [n for _, n in throttle.taken] == [on_the_wire(BLOCK)] * 6 and throttle.refused > 0
    assert all(later - earlier >= STEP * (1 - 1e-6) for (earlier, _), (later, _) in zip(throttle.taken,
                                                                                        throttle.taken[1:]))
    assert took >= 5 * STEP * (1 - 1e-6)
    assert serving_counters(seed, client).bytes_sent == 6 * BLOCK
    client.abort()


async def test_a_connection_without_a_throttle_is_not_held_back_by_one_that_waits_on_its_own(swarm):
    hook = Hook()
    seed, address, manifest = await swarm.seed(content(6 * BLOCK), upload_throttle=hook)
    stuck, _ = await handshake(swarm, address, manifest.root)
    free, _ = await handshake(swarm, address, manifest.root, peer=b"\x08" * 32)
    throttle = hook.throttles[stuck.local_address] = Recorded(STUCK)
    request_all(stuck, 6)
    assert (await next_of(stuck, wire.Block)).block == 0  # the burst; the next waits 1000 s
    await throttle.waiting.wait()
    request_all(free, 6)
    assert sorted([(await next_of(free, wire.Block)).block for _ in range(6)]) == list(range(6))
    assert hook.asked.count(free.local_address) == 6  # asked, and given None: unlimited
    assert len(throttle.taken) == 1
    assert serving_counters(seed, stuck).blocks_sent == 1
    assert serving_counters(seed, free).blocks_sent == 6
    stuck.abort()
    free.abort()


async def test_without_throttles_a_fetch_goes_as_before_and_the_hook_is_asked_for_every_block(swarm):
    hook = Hook()  # gives no throttle to anyone
    data = content(5 * BLOCK + 77)
    seed, seed_address, manifest = await swarm.seed(data, upload_throttle=hook)
    leecher, _ = await swarm.node()
    assert await download(leecher, manifest, [seed_address]) == data
    assert len(hook.asked) == manifest.num_blocks == 6 and len(set(hook.asked)) == 1
    assert seed.bytes_uploaded == len(data)
    assert SwarmNode(MemoryBlockStore(), MemoryTransport(swarm.network)).upload_throttle is None  # the default


async def test_a_throttle_given_from_the_third_block_on_paces_from_then_on(swarm):
    """As for a peer whose level the caller learns late: the hook is asked for each block, not once."""
    throttle = Recorded(STUCK)
    asked = []

    def hook(connection):
        asked.append(connection)
        return throttle if len(asked) > 2 else None

    seed, address, manifest = await swarm.seed(content(6 * BLOCK), upload_throttle=hook)
    client, _ = await handshake(swarm, address, manifest.root)
    request_all(client, 6)
    assert sorted([(await next_of(client, wire.Block)).block for _ in range(3)]) == [0, 1, 2]
    await throttle.waiting.wait()
    assert len(throttle.taken) == 1  # the third block, on the burst; the fourth waits
    assert serving_counters(seed, client).blocks_sent == 3
    client.abort()


async def test_a_connection_closed_while_its_block_waits_on_the_throttle_ends_cleanly(swarm):
    loop = asyncio.get_running_loop()
    unhandled = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        hook = Hook()
        seed, address, manifest = await swarm.seed(content(4 * BLOCK), upload_throttle=hook)
        client, _ = await handshake(swarm, address, manifest.root)
        throttle = hook.throttles[client.local_address] = Recorded(STUCK)
        request_all(client, 2)
        assert (await next_of(client, wire.Block)).block == 0
        await throttle.waiting.wait()  # block 1's send waits 1000 s for the throttle
        tasks = set(seed._tasks)  # serving the connection, and that send
        assert tasks and not any(task.done() for task in tasks)
        client.abort()
        async with asyncio.timeout(10):  # they end when the connection does, not when the throttle would allow
            assert await asyncio.gather(*tasks) == [None] * len(tasks)  # none raised, none was cancelled
        assert not seed._tasks and seed.links() == []
        assert len(throttle.taken) == 1  # the closed connection took nothing more
        assert seed.bytes_uploaded == BLOCK
    finally:
        loop.set_exception_handler(previous)
    assert unhandled == []


async def test_the_service_gives_every_node_the_upload_throttle(swarm):
    hook = Hook()
    service = SwarmService(MemoryBlockStore(), {"memory": MemoryTransport(swarm.network)}, None,
                           upload_throttle=hook)
    assert [node.upload_throttle for node in service.nodes.values()] == [hook]
