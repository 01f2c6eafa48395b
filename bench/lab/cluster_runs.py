"""One push (or one libtorrent swarm) through a built `bench.cluster_netns.Topology`, measured: the part the
`swarmproxy lab cluster-tekel|cluster-shared|cluster-late` scenarios share.

What a push is measured by: the makespan from the transfer's publication to the last agent's FINISHED (both as
the processes wrote them, wall clock, one machine), every agent's finish time, the seeder's upload ratio (the
pusher's own count), the copies of the file that entered each rack from outside it by its agents' own per-level
counters (`bench.cluster_sim.figures`; block bytes only), and beside them what each rack's downlink interface
carried (headers, requests and redis's replies included).

Honesty (as the browser lab's `bench.lab.honesty`): a run is VALID only when every receiver holds the pushed
bytes exactly (sha256) and the machine's CPU was not the limit: both cores busy `BUSY_LIMIT` of the run or more
and a shaped link's rate is no longer what paced it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import threading
import time
from dataclasses import dataclass, field

from bench.cluster_harness import LAB_RECONCILE, wait_until
from bench.cluster_netns import NetnsRun, Topology
from bench.cluster_sim import figures
from bench.lab.honesty import BUSY_LIMIT, _machine_ticks
from cluster.lab_stage import LAB_STAGE_ENV
from cluster.run import manifest_of

PUSH_TIMEOUT = 900.0  # s: a push slower than this is a failed run (the throttle-only stage takes ~2 min at 32 MiB)
CPU_EVERY = 1.0  # s between two readings of the machine's CPU counters (a measurement period, not a wait)


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def children_cpu() -> float:
    """CPU seconds of this process's children that ended so far (the agents, pusher, redis and sessions of the
    runs before: each is waited for when its run stops)."""
    times = os.times()
    return times.children_user + times.children_system


class OwnCpu:
    """The CPU a run's own processes took (its agents, pusher, redis, sessions), read once they have ended: the
    machine may be busy with other jobs too."""

    def __init__(self) -> None:
        self.began, self.children = time.monotonic(), children_cpu()

    def total(self) -> dict:
        """Their CPU seconds, and their share of the machine's cores over the run (set-up included)."""
        used, wall = children_cpu() - self.children, time.monotonic() - self.began
        return {"own_cpu_s": round(used, 1), "own_cpu_share": round(used / (wall * (os.cpu_count() or 1)), 3)}


class CpuWatch:
    """The machine's CPU use (/proc/stat, all cores) second by second, in a thread, until `stop()`."""

    def __init__(self) -> None:
        self.busy: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = _machine_ticks()
        while not self._stop.wait(CPU_EVERY):  # the sampling period
            now = _machine_ticks()
            if now is not None and last is not None and now[1] > last[1]:
                self.busy.append((now[0] - last[0]) / (now[1] - last[1]))
            last = now

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=5)
        mean = sum(self.busy) / len(self.busy) if self.busy else 0.0
        return {"machine_busy_mean": round(mean, 3), "machine_busy_max": round(max(self.busy, default=0.0), 3),
                "cpu_bound": mean >= BUSY_LIMIT}


@dataclass
class PushSetup:
    """What a run asks of the cluster: a lab stage, extra agent flags per rack, pusher flags, a late rack."""

    stage: str = "stealing"
    secure: bool = True
    agent_args: dict[int, list[str]] = field(default_factory=dict)
    push_args: list[str] = field(default_factory=list)
    late_rack: int | None = None  # its agents start `late_by` s after the push is published
    late_by: float = 0.0
    reconcile: float = LAB_RECONCILE  # the agents' and the pusher's period


def _roles(members) -> dict[str, int]:
    counts: dict[str, int] = {}
    for member in members:
        if not member.seeder:
            counts[member.role] = counts.get(member.role, 0) + 1
    return counts


def redis_output(run: NetnsRun) -> int:
    assert run.redis is not None
    with run.redis.client() as client:
        return int(client.info("stats")["total_net_output_bytes"])


def push_once(topology: Topology, setup: PushSetup, payload: pathlib.Path, directory: pathlib.Path,
              on_started=None) -> dict:
    own = OwnCpu()
    result = _push_once(topology, setup, payload, directory, on_started)
    result.update(own.total())  # the run's processes have ended (`NetnsRun.stop`): their CPU is counted
    return result


def _push_once(topology: Topology, setup: PushSetup, payload: pathlib.Path, directory: pathlib.Path,
               on_started=None) -> dict:
    """One push of `payload` to every rack's agents, measured (see the module's docstring). `on_started(run)`
    is called once the push is under way (the background flows' samplers start there)."""
    size = payload.stat().st_size
    run = NetnsRun(topology, directory, agent_args=setup.agent_args, push_args=setup.push_args,
                   env={LAB_STAGE_ENV: setup.stage}, secure=setup.secure, reconcile=setup.reconcile)
    racks = range(1, topology.racks + 1)
    try:
        later = () if setup.late_rack is None else (setup.late_rack,)
        cluster = run.start(later=later)
        before = {r: topology.downlink_bytes(r) for r in racks}
        upward = {r: topology.uplink_bytes(r) for r in racks}
        redis_before = redis_output(run)
        cpu = CpuWatch()  # from the push on (the agents' start-up is not the push's)
        push = run.push(payload)
        tid = str(wait_until(lambda: next(iter(cluster.transfers()), None), 60, "the transfer published"))
        record = cluster.transfers()[tid]
        joined_at = None
        if setup.late_rack is not None:
            # The experiment's own delay (Kraken's issue 244: a rack that comes late), counted from publication.
            time.sleep(max(0.0, record.created + setup.late_by - time.time()))
            joined_at = time.time()
            run.join(setup.late_rack)
        if on_started is not None:
            on_started(run)
        out, _ = push.communicate(timeout=PUSH_TIMEOUT)
        if push.returncode != 0:
            raise RuntimeError(f"push failed ({push.returncode}): see {directory / 'push.log'}")
        result = json.loads(out)
        wait_until(lambda: cluster.all_finished(tid), 60, "every agent FINISHED")
        machine = cpu.stop()
        redis_bytes = redis_output(run) - redis_before
        through = {r: topology.downlink_bytes(r) - before[r] for r in racks}
        out_of = {r: topology.uplink_bytes(r) - upward[r] for r in racks}
        members = cluster.members(tid)
        names = {agent.node: name for name, agent in cluster.agents.items()}
        finish = {names[m.node]: m.finished - record.created for m in members.values() if not m.seeder}
        digest = sha256(payload)
        held = {name: agent.data_dir / "files" / payload.name for name, agent in cluster.agents.items()}
        exact = {name: path.exists() and sha256(path) == digest for name, path in held.items()}
        seen = figures(cluster, tid, size, result)
        manifest = manifest_of(record)[0]
        problems = [f"{name} does not hold the pushed bytes" for name, ok in exact.items() if not ok]
        if machine["cpu_bound"]:
            problems.append(f"the machine's CPU was busy {machine['machine_busy_mean']:.0%} on average "
                            f"(limit {BUSY_LIMIT:.0%}): the CPU, not the links, may have set the pace")
        return {
            "system": f"cluster ({setup.stage})", "stage": setup.stage, "secure_redis": setup.secure,
            "size": size, "block_size": manifest.block_size, "agents": len(cluster.agents),
            "makespan_s": round(max(finish.values()), 3), "finish_s": {n: round(t, 3) for n, t in finish.items()},
            "spread_s": round(max(finish.values()) - min(finish.values()), 3),
            "seeder_ratio": round(result["seeder_ratio"], 4),
            # The block bytes that entered each rack from outside it, as its agents counted them (by level); the
            # interface's count beside it also carries headers, requests and redis's replies (all of them, TLS
            # included, in `redis_copies`: redis cannot say which rack they went to).
            "rack_copies": {name.split("/")[-1]: rack["uplink_copies"] for name, rack in seen["racks"].items()},
            "rack_downlink_iface_copies": {f"r{r}": round(through[r] / size, 4) for r in racks},
            "rack_uplink_iface_copies": {f"r{r}": round(out_of[r] / size, 4) for r in racks},
            "redis_copies": round(redis_bytes / size, 4),
            "roles": {names[m.node]: m.role for m in members.values() if not m.seeder},
            # Who uploaded (copies of the file each role's agents sent, on average): with every host's link capped,
            # a pipeline at the bound needs every host near one copy.
            "upload_copies_by_role": {role: round(sum(sum(m.sent.values()) for m in members.values()
                                                      if m.role == role) / size / count, 3)
                                      for role, count in _roles(members.values()).items()},
            "late_rack_joined_s": None if joined_at is None else round(joined_at - record.created, 3),
            "published_wall": record.created,
            **machine, "valid": not problems, "problems": problems,
        }
    finally:
        run.stop()


def libtorrent_once(topology: Topology, payload: pathlib.Path, piece_size: int, directory: pathlib.Path) -> dict:
    """One unorganised libtorrent swarm on the same hosts: the seeder's session and one per agent host."""
    from .cluster_bt import Swarm, make_torrent

    size = payload.stat().st_size
    directory.mkdir(parents=True, exist_ok=True)
    torrent = directory / "payload.torrent"
    torrent.write_bytes(make_torrent(payload, piece_size))
    receivers = [h.name for r in range(1, topology.racks + 1) for h in topology.rack_hosts(r)]
    racks = range(1, topology.racks + 1)
    own = OwnCpu()
    swarm = Swarm(topology, torrent, directory, "seeder", receivers, payload)
    counts: dict[str, dict] = {}
    try:
        before = {r: topology.downlink_bytes(r) for r in racks}
        upward = {r: topology.uplink_bytes(r) for r in racks}
        cpu = CpuWatch()
        began = swarm.start()
        swarm.wait(PUSH_TIMEOUT)
        machine = cpu.stop()
        through = {r: topology.downlink_bytes(r) - before[r] for r in racks}
        out_of = {r: topology.uplink_bytes(r) - upward[r] for r in racks}
    finally:
        counts = swarm.stop()
    machine.update(own.total())
    digest = sha256(payload)
    exact = {n: (directory / n / payload.name).exists() and sha256(directory / n / payload.name) == digest
             for n in receivers}
    finish = {n: t - began for n, t in swarm.finished.items()}
    problems = [f"{n} did not finish with the exact bytes" for n in receivers if n not in finish or not exact[n]]
    if machine["cpu_bound"]:
        problems.append(f"the machine's CPU was busy {machine['machine_busy_mean']:.0%} on average "
                        f"(limit {BUSY_LIMIT:.0%}): the CPU, not the links, may have set the pace")
    return {
        "system": "libtorrent (unorganised)", "size": size, "block_size": piece_size, "agents": len(receivers),
        "makespan_s": round(max(finish.values()), 3) if len(finish) == len(receivers) else None,
        "finish_s": {n: round(t, 3) for n, t in finish.items()},
        "spread_s": round(max(finish.values()) - min(finish.values()), 3) if finish else None,
        "seeder_ratio": round(counts.get("seeder", {}).get("up", 0) / size, 4),
        # Interface counts (headers included: libtorrent's pieces cannot be told apart on the wire by rack).
        "rack_copies": {f"r{r}": round(through[r] / size, 4) for r in racks},
        "rack_downlink_iface_copies": {f"r{r}": round(through[r] / size, 4) for r in racks},
        "rack_uplink_iface_copies": {f"r{r}": round(out_of[r] / size, 4) for r in racks},
        "libtorrent_version": __import__("libtorrent").__version__,
        **machine, "valid": not problems, "problems": problems,
    }
