"""How fast the cluster overlay forms, and what one agent asks redis per period, at hundreds to thousands of agents.

    .venv/bin/python -m bench.cluster_formation --agents 1200 --racks 40 [--dcs 1] [--reconcile 2] [--name NAME]

One real redis-server (a free port, a scratch directory, `--save ''`) and N cluster agents' coordination loops in
this one process: the real `cluster.agent.Agent.coordinate` loop (its period, follow-ups, wake-ups; for code
before it, `Agent.run`'s loop as it was) and reconcile (agent record, transfers, the `TransferRun` overlay
reconcile through the real `Coord` and overlay cores), but no block engine running (no listening socket, no
fetch: `BenchAgent`). Agents start at random phases of a period. A bench seeder publishes one transfer as
`swarmproxy cluster push` does (the transfer record, its member record as the seeder, a wake-up) and rewrites
both every period.

* formation_s: from the transfer record's publication until every agent's overlay view (`TransferRun.view`)
  holds every representant slot that can be filled (2 per rack, min(5, rack representants) per DC) and, for each
  agent, every slot and member it needs: its rack's slots and members; for a rack representant also its DC's
  rack slots and every DC slot with their holders' racks (`formed`). Nobody steps down, so it stays formed.
* commands_per_agent_period: `INFO commandstats` calls over a window of steady periods after formation, divided
  by the agents' reconciles in that window (the seeder's few commands included); likewise the server's CPU
  (usec) and the bytes redis sent (`total_net_output_bytes`: what the agents read).

Every agent runs in this process, so the wall-clock figures are this process's CPU (one core) as much as
redis's: the push's wake-up makes every agent reconcile at once, and here they queue for one core (`redis-py`
costs a few hundred microseconds of CPU a command), where on N hosts each has its own. `agent_reconcile_s` (the
mean wall time of one agent's reconcile, the event loop shared by all), `reconciles_per_agent_to_form` (the
rounds it took) and `redis_busy_to_form_s` (the server's own time for every command from the push to formed:
what N hosts would queue for) say how much of formation_s is the protocol.

Prints one JSON line and writes it to `bench/results/cluster_formation/NAME.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import pathlib
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping

from bench.cluster_harness import RedisServer, redis_missing
from cluster.agent import Agent, AgentConfig
from cluster.coord import Coord
from cluster.errors import BadRecord
from cluster.identity import Identity
from cluster.intent import SigningKey
from cluster.overlay import DC_REPS, RACK_REPS, Level, Location, Slot, View, dc_slots, rack_slots
from cluster.push import signed_transfer
from cluster.records import FINISHED, KEY_TTL, SLOT_TTL, MemberRecord, TransferRecord
from cluster.run import TransferRun
from swarm.content.manifest import build_manifest

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "cluster_formation"
POLL = 0.05  # s between two looks at the agents' views (in memory, no redis)
CALL_TIMEOUT = 120.0  # s: one process's event loop shared by every agent answers late under load, not never


def formed(locations: Mapping[str, Location], truth: Mapping[Slot, str], views: Mapping[str, View]) -> bool:
    """Whether the overlay is formed: every slot that can be held is (`truth`: who holds which slot), and every
    agent's view has the slots (and their holders as members) it acts on."""
    racks: dict[Location, list[str]] = {}
    for node, loc in locations.items():
        racks.setdefault(loc, []).append(node)
    for loc, nodes in racks.items():
        if sum(s in truth for s in rack_slots(loc)) < min(RACK_REPS, len(nodes)):
            return False
    rack_reps = {n for s, n in truth.items() if s.level is Level.RACK}
    for dc in {loc.dc for loc in racks}:
        candidates = sum(1 for n in rack_reps if locations[n].dc == dc)
        if sum(s in truth for s in dc_slots(dc)) < min(DC_REPS, candidates):
            return False
    every_dc = [s for dc in {loc.dc for loc in racks} for s in dc_slots(dc)]
    # A DC slot's holder is a DC representant only with a slot of its rack: those slots too, not their holders.
    their_racks = [s for s in truth if s.level is Level.DC for s in rack_slots(locations[truth[s]])]
    for node, loc in locations.items():
        view = views.get(node)
        if view is None:
            return False
        wanted = list(rack_slots(loc))
        if node in rack_reps:
            wanted += [s for other in racks if other.dc == loc.dc for s in rack_slots(other)] + every_dc
        if any(view.holders.get(s) != truth.get(s) for s in wanted + (their_racks if node in rack_reps else [])):
            return False
        needed = set(racks[loc]) | {truth[s] for s in wanted if s in truth}
        if not needed <= set(view.members):
            return False
    return True


class Counter:
    def __init__(self) -> None:
        self.reconciles = 0
        self.seconds = 0.0
        self.active = 0  # reconciles under way


OWNER = SigningKey.generate()  # the bench's owner key: its pushes are signed as a real owner's


class BenchAgent(Agent):
    """An agent whose block engine does not run: it reconciles (records, slots, views) and fetches nothing."""

    counter = Counter()

    def _begin(self, transfer: TransferRecord) -> None:
        with contextlib.suppress(BadRecord):
            self.runs[transfer.tid] = TransferRun(self, transfer)

    async def reconcile(self) -> None:
        began = time.monotonic()
        self.counter.active += 1
        try:
            await super().reconcile()
        finally:
            self.counter.active -= 1
        self.counter.reconciles += 1
        self.counter.seconds += time.monotonic() - began


class Bench:
    def __init__(self, args: argparse.Namespace, directory: pathlib.Path, url: str,
                 agent_class: type[BenchAgent] = BenchAgent) -> None:
        """`agent_class`: `bench.cluster_redis_load` gives one that also asks redis what the engine does."""
        self.args = args
        self.agent_class = agent_class
        self.url = url
        self.agents: list[BenchAgent] = []
        self.counter = BenchAgent.counter = Counter()
        for i in range(args.agents):
            rack = i % args.racks
            dc = rack % args.dcs
            # `ttl_scale` (bench.cluster_redis_load): TTLs stretched with the period, for a run slowed down.
            scale = getattr(args, "ttl_scale", 1.0)
            config = AgentConfig(url, f"dc{dc}", f"r{rack}", host=f"10.{dc}.{rack}.{i // args.racks}",
                                 data_dir=directory / f"a{i}", reconcile=args.reconcile,
                                 key_ttl=KEY_TTL * scale, slot_ttl=SLOT_TTL * scale,
                                 trusted_keys=frozenset({OWNER.public}), identity=Identity.issue(OWNER, f"a{i}"))
            agent = self.agent_class(config)
            # Not the default 3 s: every agent shares this process's event loop, where an answer is read late.
            agent.coord.timeout = CALL_TIMEOUT
            agent.coord.redis.connection_pool.connection_kwargs.update(socket_timeout=CALL_TIMEOUT,
                                                                       socket_connect_timeout=CALL_TIMEOUT)
            agent.address = (config.host, 7000)
            self.agents.append(agent)

    async def agent_loop(self, agent: BenchAgent, stop: asyncio.Event) -> None:
        """`Agent.run` without the engine and the throttle loop (`Agent.coordinate`)."""
        await asyncio.sleep(random.random() * self.args.reconcile)  # agents started at different times
        try:
            if hasattr(agent, "coordinate"):
                await agent.coordinate(stop)
            else:  # the code before `Agent.coordinate`: its `Agent.run` loop, as it was
                agent._spawn(agent.coord.listen_wake(agent.woken))
                while not stop.is_set():
                    await agent.reconcile()
                    agent.woken.clear()
                    waits = [asyncio.ensure_future(e.wait()) for e in (stop, agent.woken)]
                    await asyncio.wait(waits, timeout=agent.config.reconcile, return_when=asyncio.FIRST_COMPLETED)
                    for waiter in waits:
                        waiter.cancel()
        finally:
            for task in list(agent._tasks):  # its wake-up listener
                task.cancel()
            await asyncio.gather(*agent._tasks, return_exceptions=True)
            await agent.coord.close()

    async def quiet(self, most: float = 10.0) -> None:
        """Until no agent is reconciling (at most `most` s: agents out of step may never all rest at once)."""
        deadline = time.monotonic() + most
        while self.counter.active and time.monotonic() < deadline:
            await asyncio.sleep(0.005)  # polls an in-memory counter

    def state(self, tid: str) -> tuple[dict[str, Location], dict[Slot, str], dict[str, View]]:
        locations = {a.node: a.location for a in self.agents}
        truth: dict[Slot, str] = {}
        views: dict[str, View] = {}
        for agent in self.agents:
            run = agent.runs.get(tid)
            if run is not None:
                views[agent.node] = run.view
                truth.update({s: agent.node for s in run.rep.held})
        return locations, truth, views


async def commandstats(client: Coord) -> tuple[int, int, int]:
    """Calls and usec over every command, and the bytes redis has sent, so far."""
    stats = await client.redis.info("commandstats")
    calls = sum(int(v["calls"]) for v in stats.values())
    usec = sum(int(v["usec"]) for v in stats.values())
    sent = int((await client.redis.info("stats"))["total_net_output_bytes"])
    return calls, usec, sent


async def seeder_loop(coord: Coord, record: TransferRecord, me: MemberRecord, every: float,
                      stop: asyncio.Event) -> None:
    """What `cluster.push` writes every period (it also reads every member, to wait for them: not measured)."""
    while not stop.is_set():
        await coord.put_transfer(record)
        await coord.put_member(record.tid, me)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


async def run(args: argparse.Namespace, directory: pathlib.Path, url: str) -> dict:
    bench = Bench(args, directory, url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    tasks = [asyncio.ensure_future(bench.agent_loop(a, stop)) for a in bench.agents]
    seeding_as = Identity.issue(OWNER, "seeder")  # as `cluster push` does: its records are sealed
    probe = Coord(url, timeout=CALL_TIMEOUT, identity=seeding_as)
    try:
        registered = time.monotonic()
        while bench.counter.reconciles < 2 * args.agents:  # every agent has reconciled about twice: settled
            await asyncio.sleep(POLL)  # polls an in-memory counter
        registered = time.monotonic() - registered
        manifest, layer = build_manifest([b"\x00" * args.size], args.size)
        seeder = seeding_as.node
        record = signed_transfer(manifest, layer, "bench.bin", OWNER, seeder=seeder, server=await probe.server_id())
        me = MemberRecord(seeder, FINISHED, verified=manifest.num_blocks, blocks=manifest.num_blocks, seeder=True,
                          role="seeder")
        before_push = await commandstats(probe)
        reconciles_at_push = bench.counter.reconciles
        began = loop.time()
        await probe.put_transfer(record)
        await probe.put_member(record.tid, me)
        await probe.wake_up()
        seeding = asyncio.ensure_future(seeder_loop(probe, record, me, args.reconcile, stop))
        formation = None
        while formation is None:
            if formed(*bench.state(record.tid)):
                formation = loop.time() - began
            elif loop.time() - began > args.timeout:
                raise TimeoutError(f"not formed within {args.timeout:g} s")
            else:
                await asyncio.sleep(POLL)  # polls the agents' in-memory views
        to_form = await commandstats(probe)
        reconciles_to_form = bench.counter.reconciles - reconciles_at_push
        await asyncio.sleep(args.reconcile)  # one more period: the views settled, every agent back on its period
        # The window opens and closes while no reconcile is under way (the push's wake-up put the agents in step)
        # and spans `periods` reconciles of every agent: no reconcile is counted in part.
        await bench.quiet()
        start, reconciles, time_spent = await commandstats(probe), bench.counter.reconciles, bench.counter.seconds
        while bench.counter.reconciles < reconciles + args.periods * args.agents:
            await asyncio.sleep(POLL)  # polls an in-memory counter
        await bench.quiet()
        end = await commandstats(probe)
        count = bench.counter.reconciles - reconciles
        assert formed(*bench.state(record.tid)), "formed once, then not: someone stepped down"
        reps = {s: n for s, n in bench.state(record.tid)[1].items()}
        return {
            "agents": args.agents, "racks": args.racks, "dcs": args.dcs, "reconcile_s": args.reconcile,
            "formation_s": round(formation, 3),
            "reconciles_per_agent_to_form": round(reconciles_to_form / args.agents, 2),
            "commands_per_agent_to_form": round((to_form[0] - before_push[0]) / args.agents, 1),
            "redis_busy_to_form_s": round((to_form[1] - before_push[1]) / 1e6, 3),
            "commands_per_agent_period": round((end[0] - start[0]) / max(1, count), 2),
            "redis_usec_per_agent_period": round((end[1] - start[1]) / max(1, count), 1),
            "bytes_read_per_agent_period": round((end[2] - start[2]) / max(1, count)),
            "agent_reconcile_s": round((bench.counter.seconds - time_spent) / max(1, count), 4),
            "periods_measured": round(count / args.agents, 2),
            "rack_representants": sum(s.level is Level.RACK for s in reps),
            "dc_representants": sum(s.level is Level.DC for s in reps),
            "registration_s": round(registered, 2),
        }
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        if "seeding" in locals():
            await asyncio.gather(seeding, return_exceptions=True)
        await probe.close()


def commit() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=pathlib.Path(__file__).resolve().parent).stdout.strip()
    return ""


def prepare_process(agents: int) -> None:
    """What a bench running `agents` coordinators in this process needs: quiet logs, file descriptors for two
    redis connections an agent, and the event loop the agent command runs (uvloop where installed)."""
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * agents + 256)), hard))
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_formation", description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--racks", type=int, default=4)
    parser.add_argument("--dcs", type=int, default=1)
    parser.add_argument("--reconcile", type=float, default=2.0, help="the agents' period, s (default 2)")
    parser.add_argument("--periods", type=int, default=3, help="steady periods to count commands over")
    parser.add_argument("--size", type=int, default=1 << 20, help="bytes of the (never transferred) content")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--name", help="result file name (default AGENTSxRACKS)")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    if (missing := redis_missing()) is not None:
        print(missing, file=sys.stderr)
        return 2
    prepare_process(args.agents)
    with tempfile.TemporaryDirectory(prefix="cluster-formation-") as scratch:
        server = RedisServer(pathlib.Path(scratch) / "redis")
        server.start()
        try:
            figures = asyncio.run(run(args, pathlib.Path(scratch) / "agents", server.url))
        finally:
            server.stop()
    record(args, "bench.cluster_formation", argv, figures)
    return 0


def record(args: argparse.Namespace, module: str, argv: list[str] | None, figures: dict) -> None:
    """Print a cluster bench's figures as one JSON line, named, with the commit and the command that made them,
    and write it to `args.out`/NAME.json (NAME: --name, or AGENTSxRACKS)."""
    name = args.name or f"{args.agents}x{args.racks}"
    line = json.dumps({"name": name, "commit": commit(),
                       "command": f".venv/bin/python -m {module} {' '.join(argv or sys.argv[1:])}", **figures})
    print(line)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
