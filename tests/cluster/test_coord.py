"""The redis shell and the redis-backed Discovery against a real redis-server (skipped without one)."""

from __future__ import annotations

import asyncio

import pytest

from bench.cluster_harness import free_port, redis_missing
from cluster.coord import Coord, redacted
from cluster.discovery import RedisDiscovery
from cluster.errors import RedisUnavailable
from cluster.overlay import Level, Location, Slot
from cluster.records import AgentRecord, MemberRecord, TransferRecord
from swarm.discovery import Discovery, Provider

needs_redis = pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))

SLOT = Slot(Level.RACK, "d", "r", 0)


@pytest.fixture
async def coord(redis_server):
    c = Coord(redis_server.url, "test")
    yield c
    await c.close()


@needs_redis
async def test_slot_first_come_first_served_and_only_the_holder_refreshes(coord):
    assert await coord.claim("t", SLOT, "a")
    assert not await coord.claim("t", SLOT, "b")
    assert await coord.refresh("t", SLOT, "a")
    assert not await coord.refresh("t", SLOT, "b")
    assert await coord.holders("t", [SLOT, Slot(Level.DC, "d", "", 0)]) == {SLOT: "a"}
    ttl = await coord.redis.pttl(coord.keys.slot("t", SLOT))
    assert 0 < ttl <= coord.slot_ttl * 1000


@needs_redis
async def test_indexes_forget_expired_keys(coord):
    await coord.put_agent("n1", AgentRecord("127.0.0.1", 1, "d", "r"))
    await coord.put_agent("n2", AgentRecord("127.0.0.2", 2, "d", "r"))
    await coord.redis.delete(coord.keys.agent("n1"))  # as its TTL would
    assert set(await coord.agents()) == {"n2"}
    assert await coord.redis.smembers(coord.keys.agents) == {b"n2"}


@needs_redis
async def test_a_bad_record_is_skipped(coord):
    await coord.put_member("t", MemberRecord("good"))
    await coord.redis.set(coord.keys.member("t", "bad"), b"{not json")
    await coord.redis.sadd(coord.keys.members("t"), "bad")
    assert set(await coord.members("t")) == {"good"}


@needs_redis
async def test_hostile_values_and_ids_are_skipped_never_a_crash(coord):
    """A stranger's writes: a record nested deeper than the parser's recursion, an id that is not UTF-8."""
    await coord.put_member("t", MemberRecord("good"))
    await coord.redis.set(coord.keys.member("t", "deep"), b"[" * 5000)
    await coord.redis.sadd(coord.keys.members("t"), "deep", b"\xff\xfe")
    await coord.redis.sadd(coord.keys.rack("t", Location("d", "r")), "deep", b"\xff")
    await coord.redis.sadd(coord.keys.agents, b"\xff")
    await coord.redis.sadd(coord.keys.transfers, b"\xfe")
    assert set(await coord.members("t")) == {"good"}
    assert await coord.agents() == {} and await coord.transfers() == {}
    records, _ = await coord.scope("t", Location("d", "r"), deep=True)
    assert records == {}


@needs_redis
async def test_transfer_restored_only_if_missing(coord):
    record = TransferRecord("t1", "f", "", "", priority=1)
    assert await coord.put_transfer(record, only_if_missing=True)
    other = TransferRecord("t1", "other", "", "")
    assert not await coord.put_transfer(other, only_if_missing=True)
    assert (await coord.transfers())["t1"] == record
    await coord.cancel("t1", "signed")
    assert await coord.cancelled(["t1", "t2"]) == {"t1": b"signed"}


@needs_redis
async def test_wake_up_reaches_a_listener(coord):
    woken = asyncio.Event()
    listener = asyncio.ensure_future(coord.listen_wake(woken))
    try:
        async with asyncio.timeout(10):
            while not woken.is_set():  # the subscription may not be in place for the first message: at most once
                await coord.wake_up()
                await asyncio.wait([asyncio.ensure_future(woken.wait())], timeout=0.2)
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)


@needs_redis
async def test_discovery_filters_by_the_overlay_and_survives_a_flush(coord):
    root = bytes(range(32))
    me = RedisDiscovery(coord, b"\x01" * 32, "127.0.0.1", allowed=lambda r, node: node != "03" * 32)
    assert isinstance(me, Discovery)
    for byte, host in ((2, "127.0.0.2"), (3, "127.0.0.3")):
        await RedisDiscovery(coord, bytes([byte]) * 32, host).announce(root, ("0.0.0.0", 4000 + byte))
    await me.announce(root, ("0.0.0.0", 4001))
    found = [p async for p in me.find_providers(root)]
    assert [(p.host, p.port) for p in found] == [("127.0.0.2", 4002)]  # not itself, not the filtered one
    assert isinstance(found[0], Provider)
    await coord.redis.flushall()  # redis restarted empty
    await me.refresh()
    other = RedisDiscovery(coord, b"\x02" * 32, "127.0.0.2")
    assert [p.address async for p in other.find_providers(root)] == [("127.0.0.1", 4001)]
    await me.withdraw(root)
    assert [p async for p in other.find_providers(root)] == []


async def test_unreachable_redis_is_one_clear_error():
    coord = Coord(f"redis://:secret@127.0.0.1:{free_port()}/0", timeout=0.5)
    with pytest.raises(RedisUnavailable) as error:
        await coord.ping()
    assert "secret" not in str(error.value) and "127.0.0.1" in str(error.value)
    discovery = RedisDiscovery(coord, b"\x01" * 32, "127.0.0.1")
    with pytest.raises(discovery.errors):
        await discovery.announce(bytes(32), ("0.0.0.0", 1))
    assert bytes(32) in discovery.announced  # kept, to be written when redis is back
    await coord.close()


def test_bad_url_is_a_cluster_error():
    with pytest.raises(RedisUnavailable):
        Coord("http://nowhere")


def test_redacted():
    assert redacted("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert redacted("redis://h:1/0") == "redis://h:1/0"


@needs_redis
async def test_a_server_is_as_young_as_its_time_as_the_primary(coord, redis_server):
    """`server()`: the run id, and the seconds since one of us first saw that run id as the primary (its uptime
    then is kept in the `primary` marker): a promoted replica inherits the old primary's marker and starts at 0."""
    run_id, age = await coord.server()
    uptime = int((await coord.redis.info("server"))["uptime_in_seconds"])
    assert len(run_id) == 40 and 0 <= age <= 1
    assert (await coord.redis.get(coord.keys.primary)).decode().split()[0] == run_id
    assert 0 < await coord.redis.pttl(coord.keys.primary)

    async def met_now() -> tuple[str, float]:  # a client meeting this server for the first time
        other = Coord(redis_server.url, "test")
        try:
            return await other.server()
        finally:
            await other.close()

    await coord.redis.set(coord.keys.primary, f"{run_id} 0")  # first seen at its start: as old as its uptime
    assert (await met_now())[1] >= uptime
    for inherited in ("f" * 40 + " 0", "not a marker", f"{run_id} 99999999"):  # the old primary's, a stranger's
        await coord.redis.set(coord.keys.primary, inherited)
        assert await met_now() == (run_id, 0.0)
        seen, since = (await coord.redis.get(coord.keys.primary)).decode().split()
        assert seen == run_id and int(since) >= uptime


@needs_redis
async def test_a_member_reads_its_own_record_back_as_a_digest_unless_another_write_came_between(coord, redis_server):
    """`scope` reads the rack's member records, ours among them: what we just wrote does not come back over the
    wire (~1 kB a period on the rack's downlink), yet a value another wrote since does, and the read gives what
    MGET would."""
    where = Location("d", "r")
    replies: list[list] = []
    settle = coord.held.settle

    def spy(keys, answers):
        replies.append(list(answers))
        return settle(keys, answers)
    coord.held.settle = spy
    mine = MemberRecord("me", verified=3, blocks=8, dc="d", rack="r")
    await coord.put_member("t", mine)
    records, _ = await coord.scope("t", where, deep=False)
    assert records["me"] == mine
    assert replies[-1] == [0]  # the script's "unchanged": the value stayed in redis
    mine = MemberRecord("me", verified=4, blocks=8, dc="d", rack="r")  # the next period's
    await coord.put_member("t", mine)
    records, _ = await coord.scope("t", where, deep=False)
    assert records["me"] == mine and replies[-1] == [0]
    other = Coord(redis_server.url, "test")  # another writer of the same key since (a stranger, a stale replica)
    try:
        await other.put_member("t", MemberRecord("me", verified=1, blocks=8, dc="d", rack="r"))
    finally:
        await other.close()
    records, _ = await coord.scope("t", where, deep=False)
    assert records["me"].verified == 1, "what redis holds, not what we last wrote"
    await coord.redis.delete(coord.keys.member("t", "me"))
    records, _ = await coord.scope("t", where, deep=False)
    assert "me" not in records
