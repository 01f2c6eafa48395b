"""What one redis holds for N agents: commands per second at formation and in steady state, its CPU and memory,
and the number of agents (and commands/s) at which its one core would be saturated.

    .venv/bin/python -m bench.cluster_redis_load --agents 2600 --racks 104 [--dcs 1] [--slow 10] [--ceiling]

One real redis-server (a free port, `--save ''`) and N real agent coordinators in this one process: the real
`Agent.coordinate` loop and reconcile, `cluster.coord.Coord` and the overlay cores (`bench.cluster_formation`'s
`BenchAgent`: no block engine), plus a pusher that writes what `cluster push` writes every period and reads what
it reads (every agent record and every member record: O(N), the one reader that grows with N).

N agents share this process's one core, where on hosts each has its own: a reconcile costs this process a few
milliseconds (signatures, redis-py), so 2,600 agents cannot all reconcile every 2 s here. `--slow K` runs the whole
clock K times slower (period, key and slot TTLs): each agent sends the same commands per period, and redis holds
the same keys. What is measured is then per agent and per period, and per command, from redis's own counters
(`INFO`: `total_commands_processed`, `used_cpu_user` + `used_cpu_sys` of the server process, `used_memory`,
`DBSIZE`); what the same N agents at the real period would ask of redis follows by arithmetic:

* ops_per_s = commands per agent per period x N / period;
* core_use = redis CPU seconds per agent per period x N / period (1.0 = its one core, saturated);
* saturation_agents = period / redis CPU per agent per period; saturation_ops_per_s = 1 / redis CPU per command:
  where sharding (a redis per transfer, or per DC) would have to start, for this command mix on this machine.

`achieved_ops_per_s` is what this process made redis do (slowed down, its own core the limit). `--ceiling` also
runs `redis-benchmark` (SET, GET, MGET of 10 keys; 50 clients) against the same server: the machine's ceiling for
the simplest commands, beside the mix's.

Prints one JSON line and writes it to `bench/results/cluster_redis_load/NAME.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from bench.cluster_formation import CALL_TIMEOUT, OWNER, POLL, Bench, BenchAgent, formed, prepare_process, record
from bench.cluster_harness import RedisServer, redis_missing
from bench.redis_meter import RedisMeter, per, whose
from cluster.coord import Coord
from cluster.identity import Identity
from cluster.push import signed_transfer
from cluster.records import FINISHED, KEY_TTL, MemberRecord, ProviderRecord, TransferRecord
from swarm.content.manifest import build_manifest

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "cluster_redis_load"


async def counters(client: Coord) -> dict[str, float]:
    """redis's own counters now: commands processed, its process's CPU seconds, memory, bytes in and out, keys."""
    token = whose.set("probe")  # (this look's own bytes are not an agent's)
    try:
        info = await client.redis.info()
        keys = await client.redis.dbsize()
        by_command = await client.redis.info("commandstats")
    finally:
        whose.reset(token)
    return {"commands": float(info["total_commands_processed"]),
            "cpu_s": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
            "used_memory": float(info["used_memory"]), "dataset": float(info["used_memory_dataset"]),
            "clients": float(info.get("mem_clients_normal", 0)), "connections": float(info["connected_clients"]),
            "net_in": float(info["total_net_input_bytes"]), "net_out": float(info["total_net_output_bytes"]),
            **{f"usec:{name.removeprefix('cmdstat_')}": float(v["usec"]) for name, v in by_command.items()},
            **{f"calls:{name.removeprefix('cmdstat_')}": float(v["calls"]) for name, v in by_command.items()},
            "keys": float(keys), "at": time.monotonic()}


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    kept = ("commands", "cpu_s", "at", "net_in", "net_out")
    return {k: after[k] - before.get(k, 0.0) for k in after if k in kept or k.startswith(("usec:", "calls:"))}


def by_command(window: dict[str, float], periods: float) -> dict[str, dict[str, float]]:
    """redis's own time and calls per command (`INFO commandstats`; a script's inner commands counted apart), per
    agent period, most time first."""
    rows = {k[5:]: {"usec": round(v / periods, 1), "calls": round(window.get("calls:" + k[5:], 0.0) / periods, 2)}
            for k, v in window.items() if k.startswith("usec:") and v}
    return dict(sorted(rows.items(), key=lambda item: -item[1]["usec"]))


class EngineAgent(BenchAgent):
    """A bench agent that also asks redis what its block engine would while it fetches: its provider record
    rewritten every reconcile (`RedisDiscovery.refresh`, once it announced the content) and one provider lookup a
    period (the fetch's top-up, `provider_topup` = the period, while it has fewer peers than it takes)."""

    def _begin(self, transfer: TransferRecord) -> None:
        super()._begin(transfer)
        run = self.runs.get(transfer.tid)
        if run is not None and self.address is not None:
            self.discovery.announced[run.root] = ProviderRecord(self.address[0], self.address[1])

    moving = False  # every member record says something new each period, as while a push runs (`MovingAgent`)

    def receive_rate(self) -> float:
        # While a push runs every agent's record changes each period (blocks verified, rate, bytes by level); here
        # nothing is fetched, so the rate stands for all of them.
        return float(self.counter.reconciles) if self.moving else super().receive_rate()

    async def _reconcile(self) -> None:
        await super()._reconcile()
        for run in list(self.runs.values()):
            async for _ in self.discovery.find_providers(run.root):
                pass


class MovingAgent(EngineAgent):
    """`--moving`: an `EngineAgent` whose member record changes every period."""

    moving = True


async def pusher_loop(coord: Coord, record: TransferRecord, me: MemberRecord, every: float,
                      stop: asyncio.Event) -> None:
    """What `cluster push` asks of redis every period: its transfer and member record written, every agent's and
    every member's record read (to know whom to wait for), and the server read."""
    whose.set("pusher")  # this task's bytes are the pusher's (`bench.redis_meter`)
    while not stop.is_set():
        await coord.put_transfer(record)
        await coord.put_member(record.tid, me)
        await coord.agents()
        await coord.members(record.tid)
        await coord.server()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


async def run(args: argparse.Namespace, directory: pathlib.Path, url: str) -> dict:
    period = args.reconcile * args.slow
    args.reconcile, args.ttl_scale = period, args.slow  # what `Bench` builds its agents with
    meter = RedisMeter().install()
    probe = Coord(url, timeout=CALL_TIMEOUT, identity=Identity.issue(OWNER, "seeder"), key_ttl=KEY_TTL * args.slow)
    empty = await counters(probe)
    agent_class = (MovingAgent if args.moving else EngineAgent) if args.engine else BenchAgent
    bench = Bench(args, directory, url, agent_class)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    tasks = [asyncio.ensure_future(bench.agent_loop(a, stop)) for a in bench.agents]
    try:
        while bench.counter.reconciles < 2 * args.agents:  # every agent registered, about twice over
            await asyncio.sleep(POLL)  # polls an in-memory counter
        registered = await counters(probe)
        manifest, layer = build_manifest([b"\x00" * args.size], args.size)
        seeder = probe.identity.node if probe.identity else ""
        record = signed_transfer(manifest, layer, "bench.bin", OWNER, seeder=seeder, server=await probe.server_id())
        me = MemberRecord(seeder, FINISHED, verified=manifest.num_blocks, blocks=manifest.num_blocks, seeder=True,
                          role="seeder")
        before_push, metered = await counters(probe), meter.snapshot()
        began, at_push = loop.time(), bench.counter.reconciles
        await probe.put_transfer(record)
        await probe.put_member(record.tid, me)
        await probe.wake_up()
        pushing = asyncio.ensure_future(pusher_loop(probe, record, me, period, stop))
        while True:
            looked = time.process_time()
            if formed(*bench.state(record.tid)):
                break
            if loop.time() - began > args.timeout:
                raise TimeoutError(f"not formed within {args.timeout:g} s")
            # Polls the agents' in-memory views, at most a third of the time: one look walks every agent's view, and
            # the agents that share this process's core wait while it does.
            await asyncio.sleep(max(POLL, 2 * (time.process_time() - looked)))
        to_form, form_bytes = delta(await counters(probe), before_push), meter.since(metered)
        form_reconciles = bench.counter.reconciles - at_push
        await asyncio.sleep(period)  # one more period: every agent back on its period after the wake-up's burst
        await bench.quiet(most=period)
        start, reconciles, metered = await counters(probe), bench.counter.reconciles, meter.snapshot()
        while bench.counter.reconciles < reconciles + args.periods * args.agents:
            await asyncio.sleep(POLL)  # polls an in-memory counter
        await bench.quiet(most=period)
        end, steady_bytes = await counters(probe), meter.since(metered)
        steady = delta(end, start)
        agent_periods = (bench.counter.reconciles - reconciles) or 1
        per_period = steady["commands"] / agent_periods  # the pusher's share spread over the agents
        cpu_per_period = steady["cpu_s"] / agent_periods
        real = args.reconcile / args.slow  # the period the figures are projected to
        return {
            "agents": args.agents, "racks": args.racks, "dcs": args.dcs, "period_s": real, "slowed": args.slow,
            "commands_per_agent_period": round(per_period, 2),
            "redis_cpu_us_per_agent_period": round(cpu_per_period * 1e6, 1),
            "redis_cpu_us_per_command": round(steady["cpu_s"] / max(1, steady["commands"]) * 1e6, 2),
            "ops_per_s": round(per_period * args.agents / real),
            "core_use": round(cpu_per_period * args.agents / real, 3),
            "saturation_agents": round(real / cpu_per_period) if cpu_per_period else None,
            "saturation_ops_per_s": round(steady["commands"] / steady["cpu_s"]) if steady["cpu_s"] else None,
            "achieved_ops_per_s": round(steady["commands"] / steady["at"]),
            "formation_commands": round(to_form["commands"]),
            "formation_commands_per_agent": round(to_form["commands"] / args.agents, 1),
            "formation_redis_cpu_s": round(to_form["cpu_s"], 3),
            "used_memory_bytes": round(end["used_memory"]),
            "used_memory_per_agent_bytes": round((end["used_memory"] - empty["used_memory"]) / args.agents),
            # The keys' share, and the connections' (two per agent: commands, wake-ups; their buffers)
            "dataset_bytes": round(end["dataset"]),
            "dataset_per_agent_bytes": round((end["dataset"] - empty["dataset"]) / args.agents),
            "client_buffers_bytes": round(end["clients"]), "connections": round(end["connections"]),
            "used_memory_before_push_bytes": round(registered["used_memory"]),
            "keys": round(end["keys"]),
            "periods_measured": round(agent_periods / args.agents, 2),
            # Bytes per agent per period, from redis's own counters (`total_net_input_bytes`: what every client
            # sent it; `total_net_output_bytes`: what it sent them, the pusher's share spread over the agents), in
            # steady state and from the push to formed (per agent reconcile in that time, and per agent in all);
            # then by call (`bench.redis_meter`), the same bytes counted in this process.
            "bytes_in_per_agent_period": round(steady["net_in"] / agent_periods),
            "bytes_out_per_agent_period": round(steady["net_out"] / agent_periods),
            "formation_bytes_in_per_agent": round(to_form["net_in"] / args.agents),
            "formation_bytes_out_per_agent": round(to_form["net_out"] / args.agents),
            "formation_reconciles_per_agent": round(form_reconciles / args.agents, 2),
            "formation_bytes_in_per_agent_reconcile": round(to_form["net_in"] / max(1, form_reconciles)),
            "formation_bytes_out_per_agent_reconcile": round(to_form["net_out"] / max(1, form_reconciles)),
            "engine_reads": args.engine, "moving": args.moving,
            "by_call_per_agent_period": per(steady_bytes, agent_periods),
            "redis_usec_by_command_per_agent_period": by_command(steady, agent_periods),
            "formation_by_call_per_agent": per(form_bytes, args.agents),
        }
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        if "pushing" in locals():
            await asyncio.gather(pushing, return_exceptions=True)
        await probe.close()
        meter.uninstall()


def ceiling(server: RedisServer) -> dict[str, float]:
    """`redis-benchmark`'s requests per second for the simplest commands, on this machine (its clients share the
    cores with the server)."""
    out = subprocess.run(["redis-benchmark", "-h", server.host, "-p", str(server.port), "-q", "-n", "200000",
                          "-c", "50", "-t", "set,get,mset"], capture_output=True, text=True, timeout=300).stdout
    found = {}
    for line in out.replace("\r", "\n").splitlines():
        match = re.match(r"^\s*(\S+)(?: \(.*\))?: ([0-9.]+) requests per second", line)
        if match:
            found[match.group(1).lower()] = float(match.group(2))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_redis_load", description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--racks", type=int, default=4)
    parser.add_argument("--dcs", type=int, default=1)
    parser.add_argument("--reconcile", type=float, default=2.0, help="the agents' real period, s (default 2)")
    parser.add_argument("--slow", type=float, default=1.0,
                        help="run the clock this many times slower (period and TTLs), for N this process cannot "
                             "keep on the real period; figures are per period, projected back (default 1)")
    parser.add_argument("--periods", type=int, default=3, help="steady periods to count over")
    parser.add_argument("--size", type=int, default=1 << 20, help="bytes of the (never transferred) content")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--no-engine", dest="engine", action="store_false",
                        help="leave out what the block engine asks of redis (a provider record rewritten and one "
                             "provider lookup a period, `EngineAgent`), as the runs before it did")
    parser.add_argument("--moving", action="store_true",
                        help="every agent's member record changes every period, as while a push moves data (its "
                             "rate stands for its progress and byte counts); default: they change only with roles")
    parser.add_argument("--ceiling", action="store_true", help="also run redis-benchmark against the same server")
    parser.add_argument("--name", help="result file name (default AGENTSxRACKS)")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    if (missing := redis_missing()) is not None:
        print(missing, file=sys.stderr)
        return 2
    prepare_process(args.agents)
    with tempfile.TemporaryDirectory(prefix="cluster-redis-load-") as scratch:
        server = RedisServer(pathlib.Path(scratch) / "redis")
        server.start()
        try:
            figures = asyncio.run(run(args, pathlib.Path(scratch) / "agents", server.url))
            if args.ceiling:
                figures["redis_benchmark_requests_per_s"] = ceiling(server)
        finally:
            server.stop()
    record(args, "bench.cluster_redis_load", argv, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
