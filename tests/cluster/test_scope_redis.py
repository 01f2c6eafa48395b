"""What one agent reads per period, against a real redis-server: agents run in this process (the real `Agent`
reconcile and `Coord`, no block engine: `bench.cluster_formation.BenchAgent`), one after the other in a fixed
order, so who takes which slot is known. No sleep, no fixed port."""

from __future__ import annotations

import pytest

from bench.cluster_formation import BenchAgent, formed
from bench.cluster_harness import redis_missing
from cluster.agent import AgentConfig
from cluster.coord import Coord
from cluster.identity import Identity
from cluster.intent import SigningKey
from cluster.overlay import Location
from cluster.push import signed_transfer
from cluster.records import FINISHED, MemberRecord, ProviderRecord
from swarm.content.manifest import build_manifest

pytestmark = pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))

OWNER = SigningKey.generate()
SEEDER_IDENTITY = Identity.issue(OWNER, "seeder")
SEEDER = SEEDER_IDENTITY.node


class World:
    def __init__(self, directory, url: str) -> None:
        self.directory = directory
        self.url = url
        self.agents: list[BenchAgent] = []
        self.probe = Coord(url, identity=SEEDER_IDENTITY)  # writes as the pusher does
        self.tid = ""

    def add(self, dc: str, rack: str, count: int) -> list[BenchAgent]:
        added = []
        for _ in range(count):
            i = len(self.agents)
            # Hosts of one length: the records read must weigh the same whatever the agent's number.
            config = AgentConfig(self.url, dc, rack, host=f"10.0.0.{100 + i}", data_dir=self.directory / f"a{i}",
                                 trusted_keys=frozenset({OWNER.public}), identity=Identity.issue(OWNER, f"a{i:04d}"))
            agent = BenchAgent(config)
            agent.address = (config.host, 7000)
            self.agents.append(agent)
            added.append(agent)
        return added

    async def push(self) -> None:
        manifest, layer = build_manifest([b"\x00" * 65536], 65536)
        record = signed_transfer(manifest, layer, "f", OWNER, seeder=SEEDER, server=await self.probe.server_id())
        self.tid = record.tid
        await self.probe.put_transfer(record)
        await self.probe.put_member(self.tid, MemberRecord(SEEDER, FINISHED, verified=1, blocks=1, seeder=True,
                                                           role="seeder"))

    async def rounds(self, count: int = 3, agents=None) -> None:
        for _ in range(count):
            for agent in agents or self.agents:
                await agent.reconcile()

    def views(self):
        runs = {a.node: a.runs[self.tid] for a in self.agents}
        truth = {s: node for node, run in runs.items() for s in run.rep.held}
        return {a.node: a.location for a in self.agents}, truth, {n: r.view for n, r in runs.items()}

    async def cost(self, agent: BenchAgent) -> tuple[dict[str, int], int]:
        """The commands (by name) and bytes redis sent for one reconcile of `agent`."""
        before = await self.probe.redis.info("commandstats")
        sent = int((await self.probe.redis.info("stats"))["total_net_output_bytes"])
        await agent.reconcile()
        sent = int((await self.probe.redis.info("stats"))["total_net_output_bytes"]) - sent
        after = await self.probe.redis.info("commandstats")
        calls = {k: int(v["calls"]) - int(before.get(k, {"calls": 0})["calls"]) for k, v in after.items()}
        return {k: n for k, n in calls.items() if n and k != "cmdstat_info"}, sent

    async def close(self) -> None:
        for agent in self.agents:
            await agent.coord.close()
            agent.store.close()
        await self.probe.close()


@pytest.fixture
async def make_world(tmp_path, redis_server):
    worlds = []

    def make(name: str) -> World:
        redis_server.client().flushall()  # one server, one world at a time
        world = World(tmp_path / name, redis_server.url)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        await world.close()


async def measured(make_world, name: str, per_rack: int, racks: int, target: int) -> tuple[dict, int]:
    """What agent `target` of rack r0 (4 agents) costs, with `racks` - 1 more racks of `per_rack` agents."""
    world = make_world(name)
    world.add("d1", "r0", 4)
    for r in range(1, racks):
        world.add("d1", f"r{r}", per_rack)
    await world.push()
    await world.rounds()
    assert formed(*world.views())
    cost = await world.cost(world.agents[target])
    await world.close()
    return cost


async def test_a_members_reads_do_not_grow_with_the_other_racks(make_world):
    """A plain member (the last of rack r0) reads its rack: the same commands and bytes whether its rack is
    alone or one of ten."""
    alone_calls, alone_bytes = await measured(make_world, "alone", 4, 1, 3)
    among_calls, among_bytes = await measured(make_world, "among", 4, 10, 3)
    assert among_calls == alone_calls
    # The same records: their sizes differ only by a digit here and there (times, counters in INFO's reply);
    # reading the other 36 members' records would add about 14 kB.
    assert abs(among_bytes - alone_bytes) < 200, (alone_bytes, among_bytes)


async def test_a_representants_reads_do_not_grow_with_the_other_racks_members(make_world):
    """A DC representant (the first agent of rack r0) reads its rack and the representants above it, not the
    members of the other racks: the same with 3 or 8 agents in each of the other 9 racks."""
    few_calls, few_bytes = await measured(make_world, "few", 3, 10, 0)
    many_calls, many_bytes = await measured(make_world, "many", 8, 10, 0)
    assert many_calls == few_calls
    assert abs(many_bytes - few_bytes) < 200, (few_bytes, many_bytes)


async def test_views_are_scoped_and_the_overlay_forms_across_dcs_and_for_a_late_rack(make_world):
    world = make_world("scoped")
    for dc, rack in (("d1", "r1"), ("d1", "r2"), ("d1", "r3"), ("d2", "x1")):
        world.add(dc, rack, 3)
    await world.push()
    await world.rounds()
    assert formed(*world.views())
    locations, truth, views = world.views()
    by_name = {(a.location.rack, i % 3): a.node for i, a in enumerate(world.agents)}
    plain, rep, dc2_rep = by_name[("r1", 2)], by_name[("r1", 0)], by_name[("x1", 0)]
    assert set(views[plain].members) == {n for n, loc in locations.items() if loc == Location("d1", "r1")}
    assert views[rep].is_dc_rep(rep) and views[rep].may_talk(rep, SEEDER) and views[rep].may_talk(rep, dc2_rep)
    assert views[rep].may_talk(rep, by_name[("r3", 1)])  # rack representants of one DC
    assert not views[rep].may_talk(rep, by_name[("r2", 2)])  # a plain member of another rack: not even read
    assert sum(1 for s in truth if s.level.name == "DC") == 5 + 2  # d1: 5 of its 6 rack reps; d2: its 2
    # The representants' hosts were learnt from their records (the transport's levels), not a plain member's.
    agent = world.agents[0]
    assert agent.location_of_host("10.0.0.103") == Location("d1", "r2")  # r2's first, a representant
    assert agent.location_of_host("10.0.0.105") is None  # r2's third, a plain member
    late = world.add("d1", "late", 3)
    await world.rounds(1, late)
    await world.rounds(2)
    assert formed(*world.views())
    late_rep = late[0].node
    assert world.agents[0].runs[world.tid].view.may_talk(rep, late_rep)
    assert late[0].runs[world.tid].view.may_talk(late_rep, rep)


async def test_scope_prunes_what_expired_and_providers_are_looked_up_by_node(make_world):
    world = make_world("prune")
    world.add("d1", "r1", 3)
    world.add("d1", "r2", 2)
    await world.push()
    await world.rounds()
    coord, keys, tid = world.probe, world.probe.keys, world.tid
    gone = world.agents[2]  # a plain member of r1
    await coord.redis.delete(keys.member(tid, gone.node))  # its record expired
    await coord.redis.delete(*(keys.slot(tid, s) for s in world.agents[3].runs[tid].rep.held))  # r2's slots too
    await coord.redis.delete(*(keys.slot(tid, s) for s in world.agents[4].runs[tid].rep.held))
    records, holders = await coord.scope(tid, world.agents[0].location, deep=True)
    assert gone.node not in records and world.agents[1].node in records and SEEDER in records
    assert not any(s.rack == "r2" for s in holders)
    assert gone.node.encode() not in await coord.redis.smembers(keys.rack(tid, gone.location))
    assert await coord.redis.smembers(keys.racks(tid, "d1")) == {b"r1"}
    root = bytes(32)
    for node in ("01" * 32, "02" * 32):
        await coord.announce(root, node, ProviderRecord("10.0.0.1", 1))
    assert set(await coord.providers(root, ["02" * 32, "03" * 32])) == {"02" * 32}
    assert set(await coord.providers(root)) == {"01" * 32, "02" * 32}
    assert await coord.providers(root, []) == {}


async def steady_period(world: World, root: bytes) -> tuple[int, int]:
    """Bytes redis received and sent per agent over one round of every agent's reconcile, each followed by the
    provider lookup its fetch makes every period (`Agent.provider_rank`)."""
    before = await world.probe.redis.info("stats")
    for agent in world.agents:
        await agent.reconcile()
        [_ async for _ in agent.discovery.find_providers(root)]
    after = await world.probe.redis.info("stats")
    return tuple((int(after[k]) - int(before[k])) // len(world.agents)  # type: ignore[return-value]
                 for k in ("total_net_input_bytes", "total_net_output_bytes"))


async def test_a_steady_period_moves_only_what_changed(make_world):
    """Once the overlay stands and no record changes (no push moving data, or every agent done), records an agent
    read before are not sent again, records it wrote before only have their TTL extended (`cluster.fresh`), and the
    server is read once a reconcile. Measured here (two racks of four, every agent announcing the content, one
    provider lookup each): 1.6 kB from redis and 4.3 kB to it per agent period (mostly key names), where the code
    before sent every record it acts on again (and the server's INFO twice): 9.1 kB and 5.6 kB."""
    world = make_world("steady")
    world.add("d1", "r0", 4)
    world.add("d1", "r1", 4)
    await world.push()
    await world.rounds()
    assert formed(*world.views())
    root = world.agents[0].runs[world.tid].root
    for agent in world.agents:  # as the engine does once it holds blocks
        await agent.discovery.announce(root, agent.address or ("", 0))
    await steady_period(world, root)  # every record written and read once since
    received, sent = await steady_period(world, root)
    assert sent < 3_000, sent
    assert received < 5_000, received
    assert formed(*world.views())


async def test_a_changed_record_is_read_again_and_a_lost_one_written_again(make_world):
    world = make_world("changes")
    world.add("d1", "r0", 3)
    await world.push()
    await world.rounds()
    coord, keys, tid = world.probe, world.probe.keys, world.tid
    first, last = world.agents[0], world.agents[-1]
    last.runs[tid].resumed_with = 7  # its record now says something new
    await world.rounds(1, [last, first])
    records, _ = await first.coord.scope(tid, first.location, deep=True)
    assert records[last.node].resumed == 7
    await coord.redis.delete(keys.member(tid, last.node), keys.agent(last.node))  # lost (a failover, say)
    await coord.redis.script_flush()  # and the server never saw the read script (it restarted)
    await world.rounds(1, [last, first])
    assert await coord.redis.exists(keys.member(tid, last.node), keys.agent(last.node)) == 2
    records, _ = await first.coord.scope(tid, first.location, deep=True)
    assert records[last.node].resumed == 7
    # An older value where it wrote (a replica promoted before the last write reached it): written again at once.
    await coord.redis.set(keys.member(tid, last.node), b"an older value")
    await world.rounds(1, [last])
    assert await coord.redis.get(keys.member(tid, last.node)) not in (None, b"an older value")
    records, _ = await first.coord.scope(tid, first.location, deep=True)
    assert records[last.node].resumed == 7
    assert formed(*world.views())
