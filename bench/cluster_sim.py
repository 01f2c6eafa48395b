"""The cluster overlay's figures on one machine: 3 racks x 4 agents (real processes on 127.0.0.x) and one real
redis-server; one push; the seeder's upload ratio and the copies of the file that crossed each rack's uplink.

    .venv/bin/python -m bench.cluster_sim [--size 64Mi] [--dcs 1] [--racks 3] [--per-rack 4] [--secure] [--json]

* seeder upload ratio = bytes the pusher sent / file size (issue 22's goal <= 1.05; Tekel 1.12);
* copies per rack uplink = bytes the rack's agents received from outside the rack (their DC and outside
  counters, `cluster.transport.LeveledTransport`) / file size (goal <= 1.10);
* makespan = seconds from the push to the last agent FINISHED;
* redis commands = commands the server processed from the push's start to its end (every agent's and the
  pusher's), and per agent and second.

`--secure` runs redis as docs/cluster.md's production setup (TLS only, an ACL user: `bench/secure_redis.py`):
beside a plain run, what TLS costs.

There is no link shaping here (loopback, one machine, CPU shared by every agent): the makespan is CPU-bound and
is reported, not compared with Babenhauserheide's bound, which needs the namespace topology of the lab issue.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

from bench.cluster_harness import Cluster, RedisServer, redis_missing, wait_until
from cluster.overlay import Level
from swarm.content.sizes import parse_size


def figures(cluster: Cluster, tid: str, size: int, push_result: dict) -> dict:
    members = cluster.members(tid)
    racks: dict[str, dict] = {}
    for agent in cluster.agents.values():
        record = members.get(agent.node or "")
        if record is None:
            continue
        rack = racks.setdefault(f"{agent.dc}/{agent.rack}", {"uplink_bytes": 0, "representants": 0,
                                                             "cross_rack_by_non_representants": 0})
        across = record.received.get(Level.DC.label, 0) + record.received.get(Level.OUTSIDE.label, 0)
        rack["uplink_bytes"] += across
        if record.role in ("rack", "dc"):
            rack["representants"] += 1
        else:
            rack["cross_rack_by_non_representants"] += across
    for rack in racks.values():
        rack["uplink_copies"] = round(rack["uplink_bytes"] / size, 4)
    return {
        "size": size, "agents": len(cluster.agents), "makespan_s": push_result["seconds"],
        "seeder_ratio": push_result["seeder_ratio"],
        "max_uplink_copies": max(r["uplink_copies"] for r in racks.values()),
        "racks": racks,
        "extra_bytes": sum(m.extra_bytes for m in members.values()),
    }


def commands(server: RedisServer) -> int:
    with server.client() as client:
        return int(client.info("stats")["total_commands_processed"])


def run(size: int, racks: int, per_rack: int, directory: pathlib.Path, dcs: int = 1, secure: bool = False) -> dict:
    server = RedisServer(directory / "redis", secure=True) if secure else RedisServer(directory / "redis")
    server.start()
    cluster = Cluster(directory, server)
    try:
        for d in range(1, dcs + 1):
            for r in range(1, racks + 1):
                for a in range(1, per_rack + 1):
                    cluster.add_agent(f"d{d}r{r}a{a}", f"127.{d}.{r}.{a + 10}", f"dc{d}", f"r{r}")
        wait_until(lambda: len(cluster.registered()) == dcs * racks * per_rack, 60, "agents registered")
        payload = directory / "payload.bin"
        with open(payload, "wb") as out:
            left = size
            while left:
                chunk = os.urandom(min(left, 1 << 20))
                out.write(chunk)
                left -= len(chunk)
        before = commands(server)
        started = time.monotonic()
        push = cluster.push(payload)
        out, _ = push.communicate(timeout=1800)
        if push.returncode != 0:
            raise RuntimeError(f"push failed ({push.returncode}): see {directory / 'push.log'}")
        result = json.loads(out)
        result["seconds"] = round(time.monotonic() - started, 3)
        ops = commands(server) - before
        tid = result["transfer"]
        wait_until(lambda: cluster.all_finished(tid), 60, "every agent FINISHED")
        agents = dcs * racks * per_rack
        return {**figures(cluster, tid, size, result), "secure": secure, "redis_commands": ops,
                "redis_commands_per_agent_s": round(ops / agents / max(result["seconds"], 1e-9), 2)}
    finally:
        cluster.stop_all()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=64 << 20, help="file size (default: 64Mi)")
    parser.add_argument("--dcs", type=int, default=1, help="datacenters (default: 1)")
    parser.add_argument("--racks", type=int, default=3, help="racks per datacenter (default: 3)")
    parser.add_argument("--per-rack", type=int, default=4, help="agents per rack (default: 4)")
    parser.add_argument("--secure", action="store_true",
                        help="redis with TLS and an ACL user, as docs/cluster.md's production setup")
    parser.add_argument("--json", action="store_true", help="print only the JSON")
    args = parser.parse_args(argv)
    if (why := redis_missing()) is not None:
        print(f"cluster_sim: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cluster-sim-") as scratch:
        result = run(args.size, args.racks, args.per_rack, pathlib.Path(scratch), args.dcs, args.secure)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['agents']} agents, {result['size']} bytes: makespan {result['makespan_s']:.2f} s, "
              f"seeder upload ratio {result['seeder_ratio']:.3f}, copies per rack uplink <= "
              f"{result['max_uplink_copies']:.3f}; redis: {result['redis_commands']} commands "
              f"({result['redis_commands_per_agent_s']}/agent/s){', TLS + ACL' if args.secure else ''}")
        for name, rack in sorted(result["racks"].items()):
            print(f"  {name}: {rack['uplink_copies']:.3f} copies in, {rack['representants']} representants, "
                  f"{rack['cross_rack_by_non_representants']} cross-rack bytes by others")
    return 0


if __name__ == "__main__":
    sys.exit(main())
