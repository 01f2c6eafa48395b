"""The cluster overlay on a shaped network: hosts in network namespaces, rack bridges, a core, `tc tbf` uplinks.

    .venv/bin/python -m bench.cluster_netns [--size 32Mi] [--racks 2] [--per-rack 3] [--uplink 2M] [--json]
        [--runs N] [--out FILE] [--keep DIR] [--congestion cubic|bbr] [--mtu 9000] [--calibrate]
        [--blackhole SECONDS] [--reconcile SECONDS]

Topology (one flat /24 in a random 10.x.y.0 so that parallel runs never collide; every name carries a random
prefix and is deleted at the end, also on failure):

```
 root namespace: the test (redis-server, reads counters) ── veth ──┐
 seeder namespace ──────────────────────────────────────── veth ──┤ core namespace: bridge br0
 background sender namespace ────────────────────────────── veth ──┤
                                  ┌── dn1 ═ tbf ═ uplink ─ rack 1 namespace: bridge br0 ── veth ── host namespaces
                                  └── dn2 ═ tbf ═ uplink ─ rack 2 namespace: bridge br0 ── veth ── host namespaces
```

A rack's uplink is the veth pair `dn{r}` (core side) / `uplink` (rack side); `--uplink RATE` shapes it with a token
bucket filter on both ends' egress (downlink = `dn{r}`'s transmit, uplink = `uplink`'s), for the racks listed in
`--shaped` (default: rack 1 only, the bottleneck). The kernel has TBF and HTB but no netem: links have
rate, not delay. Host links are unshaped veths.

The bench command runs one push through it and prints the makespan against the lower bound of `bench.cluster_bound`
(Babenhauserheide §3.0.2) for this topology. Its JSON also says where the time went: the shaped link's use second by
second, each way (`shaped_link`, `shaped_link_upward`: wire bytes over the rate), the packets its two queues dropped
(`shaped_link_drops_per_second`), the bytes redis sent into the shaped racks in copies of the file
(`redis_into_shaped_racks`, if iptables is installed), and every member's role, finish time and bytes by level
(`members`); `--keep DIR` keeps the agents' logs; `--runs N` pushes N times and reports the median ratio;
`--congestion NAME` sets the hosts' TCP congestion control (docs/cluster.md, "TCP congestion control"); `--mtu N`
every link's MTU; `--calibrate` first measures what one bulk TCP flow carries across the shaped link alone and
reports the makespans against the bound at that payload rate too; `tests/cluster/test_netns.py` runs the same
topology with a competing background TCP flow and checks the copies per rack downlink and the flow's reserve.

Needs root, `ip`, `tc`, network namespaces and `sch_tbf` (`netns_missing()` says which is lacking); redis-server
runs in the root namespace on the test's own veth address.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from bench.background_flow import BackgroundFlow
from bench.blackhole import Blackhole
from bench.cluster_bound import Link, makespan_bound
from bench.cluster_harness import LAB_RECONCILE, Cluster, RedisServer, redis_missing, wait_until
from bench.cluster_sim import figures
from bench.link_meters import LinkSampler, counts_per_second, link_phases
from bench.netns import ALLOWED_CC, READ_TIMEOUT, allow_congestion, tear_down
from bench.netns import run as _run
from bench.netns import tool as _tool
from cluster.run import manifest_of
from cluster.throttle import RESERVE
from swarm.content.sizes import parse_rate, parse_size

MiB = 1 << 20
BURST = 64 * 1024  # tbf bucket, bytes: at least one GSO super-packet, else tbf would drop it
# The most a packet waits in the tbf queue: a datacenter switch's shallow buffer. A deep one (100 ms) lets a bulk
# TCP flow bloat every round trip, and the push, whose requests are paced by round trips, then takes less than
# the throttle allows it: the reserve would be kept with or without the throttle, and the test prove nothing.
TBF_LATENCY = "20ms"
GOAL = 1.15  # makespan / bound the cluster mode aims at (its issue's goal; docs/cluster.md reports against it)

def _shape(ns: str, dev: str, rate: float) -> None:
    """A token bucket filter on `dev`'s egress in `ns`: what leaves it is held to `rate` bytes/s."""
    _run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{int(rate * 8)}bit", "burst", str(BURST),
         "latency", TBF_LATENCY)


def netns_missing() -> str | None:
    """Why the namespace topology cannot be built here, or None."""
    if (why := redis_missing()) is not None:
        return why
    if os.geteuid() != 0:
        return "network namespaces and tc need root"
    for tool in ("ip", "tc"):
        if _tool(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2; scripts/test.sh installs it)"
    probe = f"spprobe{secrets.token_hex(3)}"
    try:
        _run("ip", "netns", "add", probe)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"network namespaces are not permitted here: {exc}"
    try:
        _run("ip", "-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
        _run("tc", "-n", probe, "qdisc", "add", "dev", "probe0", "root", "tbf", "rate", "8mbit", "burst", "64kb",
             "latency", TBF_LATENCY)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"veth or the tbf qdisc is not available: {exc}"
    finally:
        subprocess.run([_tool("ip") or "ip", "netns", "del", probe], capture_output=True, timeout=READ_TIMEOUT)
    return None


def _free_subnet() -> str:
    """A 10.x.y /24 that no address or route of the root namespace uses."""
    taken = _run("ip", "-4", "-o", "addr") + _run("ip", "-4", "route")
    for _ in range(100):
        subnet = f"10.{secrets.randbelow(50) + 200}.{secrets.randbelow(256)}"
        if f"{subnet}." not in taken:
            return subnet
    raise RuntimeError("no free 10.x.y.0/24 subnet")


@dataclass
class Host:
    name: str
    ns: str
    address: str
    rack: int | None  # None: attached to the core

    @property
    def prefix(self) -> list[str]:
        return [_tool("ip") or "ip", "netns", "exec", self.ns]


@dataclass
class Topology:
    """Namespaces, bridges and shaped uplinks; `close()` deletes all of them (and ends what runs inside)."""

    racks: int
    per_rack: int
    uplink: float  # bytes/s of a shaped rack uplink, each direction
    shaped: tuple[int, ...] = (1,)
    # Beyond the two-level default (`swarmproxy lab cluster-*`): racks of different sizes (hosts per rack, in rack
    # order; empty: `per_rack` each), the seeder in a rack (None: on the core), every host's own link shaped at
    # this rate each way (None: unshaped), and the seeder behind a shaped link of its own into the core (the DC
    # link, with a background sender `dcbg` beside it and a receiver `corebg` on the core; None: no such link).
    rack_sizes: tuple[int, ...] = ()
    seeder_rack: int | None = None
    host_rate: float | None = None
    seeder_link: float | None = None
    # TCP congestion control in every host's namespace (None: the machine's default, which a new namespace
    # inherits: Debian's is cubic, some kernels' bbr). See `allow_congestion`.
    congestion: str | None = None
    # Every link's MTU (None: the kernel's 1500). Ethernet, IP and TCP headers take 66 of a 1514-byte frame: at a
    # datacenter's jumbo frames (9000) 0.7 % of the wire, not 4.5 %; the bound counts the whole rate as payload.
    mtu: int | None = None
    allowed_before: str | None = None  # the machine's allowed list, to put back on close
    tag: str = field(default_factory=lambda: f"sp{secrets.token_hex(3)}")
    subnet: str = ""
    namespaces: list[str] = field(default_factory=list)
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def core(self) -> str:
        return f"{self.tag}-core"

    @property
    def test_address(self) -> str:
        return f"{self.subnet}.1"

    def size_of(self, rack: int) -> int:
        return self.rack_sizes[rack - 1] if self.rack_sizes else self.per_rack

    @property
    def agent_count(self) -> int:
        return sum(self.size_of(rack) for rack in range(1, self.racks + 1))

    def build(self) -> Topology:
        if self.congestion is not None:
            self.allowed_before = allow_congestion(self.congestion)
        self.subnet = _free_subnet()
        self._ns(self.core)
        self._bridge(self.core)
        # The test's own veth: redis listens on it, and the test reads redis and the counters through it.
        _run("ip", "link", "add", "name", f"{self.tag}t", "type", "veth", "peer", "name", "test", "netns", self.core)
        _run("ip", "addr", "add", f"{self.test_address}/24", "dev", f"{self.tag}t")
        _run("ip", "link", "set", f"{self.tag}t", "up")
        self._port(self.core, "test")
        for rack in range(1, self.racks + 1):
            ns = self._ns(f"{self.tag}-r{rack}")
            self._bridge(ns)
            _run("ip", "link", "add", "name", "uplink", "netns", ns, "type", "veth", "peer", "name", f"dn{rack}",
                 "netns", self.core)
            self._port(ns, "uplink")
            self._port(self.core, f"dn{rack}")
            if rack in self.shaped:
                _shape(self.core, f"dn{rack}", self.uplink)
                _shape(ns, "uplink", self.uplink)
        if self.seeder_link is not None:
            dc = self._ns(f"{self.tag}-dc")
            self._bridge(dc)
            _run("ip", "link", "add", "name", "dcup", "netns", dc, "type", "veth", "peer", "name", "dcl",
                 "netns", self.core)
            self._port(dc, "dcup")
            self._port(self.core, "dcl")
            _shape(self.core, "dcl", self.seeder_link)
            _shape(dc, "dcup", self.seeder_link)
            self._host("seeder", 0, 2)
            self._host("dcbg", 0, 4)
            self._host("corebg", None, 5)
        else:
            self._host("seeder", self.seeder_rack, 2, shaped=True)
        self._host("bgsend", None, 3)
        for rack in range(1, self.racks + 1):
            for i in range(1, self.size_of(rack) + 1):
                self._host(f"r{rack}h{i}", rack, 10 * rack + i, shaped=True)
            self._host(f"r{rack}bg", rack, 10 * rack + 9)
        if self.mtu is not None:
            self._set_mtu(self.mtu)
        return self

    def _set_mtu(self, mtu: int) -> None:
        """Every interface of the topology at `mtu`, the test's own veth in the root namespace too."""
        _run("ip", "link", "set", "dev", f"{self.tag}t", "mtu", str(mtu))
        for ns in self.namespaces:
            for link in json.loads(_run("ip", "-n", ns, "-j", "link", "show")):
                if link["ifname"] != "lo":
                    _run("ip", "-n", ns, "link", "set", "dev", link["ifname"], "mtu", str(mtu))

    def _ns(self, name: str) -> str:
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        _run("ip", "-n", name, "link", "set", "lo", "up")
        return name

    @staticmethod
    def _bridge(ns: str) -> None:
        _run("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", ns, "link", "set", "br0", "up")

    @staticmethod
    def _port(ns: str, dev: str) -> None:
        _run("ip", "-n", ns, "link", "set", "dev", dev, "master", "br0")
        _run("ip", "-n", ns, "link", "set", "dev", dev, "up")

    def _host(self, name: str, rack: int | None, last: int, shaped: bool = False) -> Host:
        """A host on the core (rack None), in a rack, or behind the seeder's DC link (rack 0); `shaped`: its own
        link at `host_rate`, if any (the agents' and the seeder's, not the background flows')."""
        ns = self._ns(f"{self.tag}-{name}")
        bridge_ns = self.core if rack is None else f"{self.tag}-dc" if rack == 0 else f"{self.tag}-r{rack}"
        _run("ip", "link", "add", "name", "eth0", "netns", ns, "type", "veth", "peer", "name", name, "netns", bridge_ns)
        self._port(bridge_ns, name)
        if shaped and self.host_rate is not None:
            _shape(ns, "eth0", self.host_rate)  # its upload
            _shape(bridge_ns, name, self.host_rate)  # its download
        if self.congestion is not None:
            _run("ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={self.congestion}")
        host = Host(name, ns, f"{self.subnet}.{last}", rack)
        _run("ip", "-n", ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        self.hosts[name] = host
        return host

    def rack_hosts(self, rack: int) -> list[Host]:
        return [self.hosts[f"r{rack}h{i}"] for i in range(1, self.size_of(rack) + 1)]

    def downlink_bytes(self, rack: int) -> int:
        """Bytes the core sent into rack `rack` (its uplink's downward direction), headers included."""
        return self._tx(self.core, f"dn{rack}")

    def uplink_bytes(self, rack: int) -> int:
        return self._tx(f"{self.tag}-r{rack}", "uplink")

    def dc_link_bytes(self) -> int:
        """Bytes sent into the core over the seeder's DC link (`seeder_link`), headers included."""
        return self._tx(f"{self.tag}-dc", "dcup")

    def congestion_control(self) -> str:
        """The TCP congestion control the hosts' namespaces use."""
        ns = next(iter(self.hosts.values())).ns
        return _run("ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv4/tcp_congestion_control").strip()

    def count_from_test(self, rack: int) -> bool:
        """Count, in each host of rack `rack`, the bytes it receives from the test's address: redis's answers,
        the one server there (`bytes_from_test`). False if iptables is not installed."""
        if _tool("iptables") is None:
            return False
        for host in self.rack_hosts(rack):
            _run("ip", "netns", "exec", host.ns, "iptables", "-w", "-A", "INPUT", "-s", self.test_address)
        return True

    def bytes_from_test(self, rack: int) -> int:
        """IP bytes rack `rack`'s hosts received from the test's address since `count_from_test`."""
        total = 0
        for host in self.rack_hosts(rack):
            for line in _run("ip", "netns", "exec", host.ns, "iptables", "-w", "-nvxL", "INPUT").splitlines()[2:]:
                fields = line.split()
                if len(fields) >= 8 and fields[-2] == self.test_address:
                    total += int(fields[1])
        return total

    def downlink_drops(self, rack: int) -> int:
        """Packets the tbf of rack `rack`'s downlink dropped (its queue full: more than TBF_LATENCY waiting)."""
        return self._drops(self.core, f"dn{rack}")

    def uplink_drops(self, rack: int) -> int:
        return self._drops(f"{self.tag}-r{rack}", "uplink")

    @staticmethod
    def _drops(ns: str, dev: str) -> int:
        qdiscs = json.loads(_run("tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev))
        return sum(q.get("drops", 0) for q in qdiscs if q.get("root"))

    @staticmethod
    def _tx(ns: str, dev: str) -> int:
        return json.loads(_run("ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev))[0]["stats64"]["tx"]["bytes"]

    def spawn(self, host: Host, argv: list[str], **popen) -> subprocess.Popen:
        process = subprocess.Popen([*host.prefix, *argv], **popen)
        self.processes.append(process)
        return process

    def close(self) -> None:
        tear_down(self.processes, self.namespaces)
        subprocess.run([_tool("ip") or "ip", "link", "del", f"{self.tag}t"], capture_output=True,
                       timeout=READ_TIMEOUT)
        if self.allowed_before is not None:
            ALLOWED_CC.write_text(self.allowed_before)
            self.allowed_before = None


@dataclass
class NetnsRun:
    """One push through a built `Topology`: agents in every rack host, the seeder in the core."""

    topology: Topology
    directory: pathlib.Path
    agent_args: dict[int, list[str]] = field(default_factory=dict)  # per rack: extra agent flags
    push_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # for agents and pusher (the lab's `cluster.lab_stage`)
    secure: bool = False  # redis as documented for production: TLS, one ACL user (`bench.secure_redis`)
    reconcile: float = LAB_RECONCILE  # the agents' and pusher's period
    redis: RedisServer | None = None
    cluster: Cluster | None = None

    def start(self, later: Iterable[int] = ()) -> Cluster:
        """redis and every rack's agents but those of the racks in `later` (`join` starts them), registered."""
        self.redis = RedisServer(self.directory / "redis", host=self.topology.test_address, secure=self.secure)
        self.redis.start()
        self.cluster = Cluster(self.directory, self.redis, reconcile=self.reconcile)
        self.cluster.env.update(self.env)
        now = [rack for rack in range(1, self.topology.racks + 1) if rack not in set(later)]
        for rack in now:
            self.join(rack)
        count = sum(self.topology.size_of(rack) for rack in now)
        wait_until(lambda: len(self.cluster.registered()) == count, 60, f"{count} agents registered")
        return self.cluster

    def join(self, rack: int) -> None:
        """Start rack `rack`'s agents (without waiting for them)."""
        assert self.cluster is not None
        for host in self.topology.rack_hosts(rack):
            agent = self.cluster.add_agent(host.name, host.address, "dc1", f"r{rack}", start=False)
            agent.args += self.agent_args.get(rack, [])
            agent.prefix = host.prefix
            self.cluster.start(agent)

    def push(self, payload: pathlib.Path) -> subprocess.Popen:
        assert self.cluster is not None
        seeder = self.topology.hosts["seeder"]
        # A seeder in a rack says so, as an operator pushing from one of the racks' hosts would (`push --rack`).
        site = () if self.topology.seeder_rack is None else ("--dc", "dc1", "--rack", f"r{self.topology.seeder_rack}")
        return self.cluster.push(payload, *self.push_args, *site, host=seeder.address, prefix=tuple(seeder.prefix))

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop_all()
        if self.redis is not None:
            self.redis.stop()


MTU_RANGE = (1280, 65535)  # IPv6's minimum; a veth's largest


def mtu_problem(mtu: int | None) -> str | None:
    """What is wrong with `mtu` as every link's MTU (None: the kernel's default, nothing)."""
    low, high = MTU_RANGE
    return None if mtu is None or low <= mtu <= high else f"--mtu must be from {low} to {high}"


def write_payload(path: pathlib.Path, size: int) -> None:
    with open(path, "wb") as out:
        for offset in range(0, size, MiB):
            out.write(os.urandom(min(size - offset, MiB)))


def bound_for(topology: Topology, size: int, block_size: int) -> dict:
    """Babenhauserheide's bound for this topology: the hosts' own links are not shaped (the machine's CPU is
    their only limit, counted as unlimited), so the shaped rack downlinks, each of which every byte of the file
    must cross once, are the bottleneck; the start-up pipeline is one block over such a link."""
    links = [Link(f"rack {r} downlink", size, topology.uplink) for r in topology.shaped]
    return makespan_bound(size, topology.agent_count, links=links, block_size=block_size)


CALIBRATE_WARM_UP = 2.0  # s of a lone bulk flow before its goodput is read (slow start and the queue filling)
CALIBRATE_FOR = 8.0  # s over which it is read


def tcp_goodput(topology: Topology, seconds: float = CALIBRATE_FOR) -> dict:
    """What one bulk TCP flow carries across rack 1's shaped downlink of `topology` (built here, and torn down),
    alone, as a fraction of the link's rate: the payload rate the bound's fluid model takes the whole rate to be
    (TCP/IP and Ethernet headers take the rest: 1448 payload bytes in 1514 on the wire at most)."""
    try:
        topology.build()
        flow = BackgroundFlow(topology, rack=1)
        time.sleep(CALIBRATE_WARM_UP)  # a measurement window, not a wait for a condition
        start, wire = time.monotonic(), topology.downlink_bytes(1)
        got = flow.received_at(start)
        time.sleep(seconds)
        end = time.monotonic()
        payload = flow.received_at(end) - got
        return {"goodput": round(payload / (end - start) / topology.uplink, 4),
                "wire_use": round((topology.downlink_bytes(1) - wire) / (end - start) / topology.uplink, 4),
                "tcp_congestion_control": topology.congestion_control(), "seconds": seconds}
    finally:
        topology.close()


def bench(size: int, topology: Topology, directory: pathlib.Path, fault: Blackhole | None = None,
          reconcile: float = LAB_RECONCILE) -> dict:
    """One push of `size` bytes through `topology` (built and torn down here), in `directory`; `fault` mid-push;
    the agents' and pusher's period `reconcile`."""
    racks, uplink = topology.racks, topology.uplink
    run = NetnsRun(topology, directory, reconcile=reconcile)
    try:
        topology.build()
        run.start()
        payload = directory / "payload.bin"
        write_payload(payload, size)
        before = {r: topology.downlink_bytes(r) for r in range(1, racks + 1)}
        # What redis sends the shaped racks' hosts crosses their downlink beside the push: counted apart.
        redis_counted = all([topology.count_from_test(r) for r in topology.shaped])
        sampler = LinkSampler(topology, rack=topology.shaped[0])
        upward = LinkSampler(topology, rack=topology.shaped[0], upward=True)
        # Packets the shaped link's queues dropped, each way: a full queue one way holds back the other way's
        # requests and TCP acknowledgements.
        drops = {way: LinkSampler(topology, rack=topology.shaped[0], read=read)
                 for way, read in (("down", topology.downlink_drops), ("up", topology.uplink_drops))}
        wall_minus_monotonic = time.time() - time.monotonic()  # to put the samples on the records' clock
        push = run.push(payload)
        assert run.cluster is not None
        if fault is not None:
            fault.start(topology, run.cluster)
        out, _ = push.communicate(timeout=1800)
        if push.returncode != 0:
            raise RuntimeError(f"push failed ({push.returncode}): see {directory / 'push.log'}")
        result = json.loads(out)
        tid = result["transfer"]
        wait_until(lambda: run.cluster.all_finished(tid), 60, "every agent FINISHED")
        seen = figures(run.cluster, tid, size, result)
        record = run.cluster.transfers()[tid]
        manifest = manifest_of(record)[0]
        bound = bound_for(topology, size, manifest.block_size)
        # The makespan proper: from the transfer's publication to the last agent's FINISHED, both as the
        # processes wrote them (wall clock, one machine); the pusher's own figure adds up to one of its polling
        # periods before it notices.
        last = max(m.finished for m in run.cluster.members(tid).values() if not m.seeder)
        seen["makespan_s"] = round(last - record.created, 3)
        seen["pusher_seconds"] = result["seconds"]
        names = {agent.node: name for name, agent in run.cluster.agents.items()}
        seen["members"] = {names.get(m.node, "seeder" if m.seeder else m.node): {
            "role": m.role, "finished_s": round(m.finished - record.created, 3), "received": m.received,
            "sent": m.sent} for m in run.cluster.members(tid).values()}
        seen["downlink_iface_copies"] = {f"r{r}": round((topology.downlink_bytes(r) - before[r]) / size, 4)
                                         for r in range(1, racks + 1)}
        if redis_counted:  # IP bytes, headers included (as the interface counters count them)
            seen["redis_into_shaped_racks"] = {f"r{r}": round(topology.bytes_from_test(r) / size, 4)
                                               for r in topology.shaped}
        seen["uplink_bytes_per_s"] = uplink
        seen["shaped_racks"] = list(topology.shaped)
        seen["bound"] = bound
        seen["makespan_over_bound"] = round(seen["makespan_s"] / bound["seconds"], 4)
        sampler.stop()
        upward.stop()
        for counter in drops.values():
            counter.stop()
        start, end = record.created - wall_minus_monotonic, last - wall_minus_monotonic
        seen["shaped_link"] = link_phases(sampler.samples, start, end, size, uplink)
        seen["shaped_link_upward"] = link_phases(upward.samples, start, end, size, uplink)
        seen["shaped_link_drops_per_second"] = {way: counts_per_second(counter.samples, start, end)
                                                for way, counter in drops.items()}
        seen["block_size"] = manifest.block_size
        seen["tcp_congestion_control"] = topology.congestion_control()
        seen["mtu"] = topology.mtu or 1500
        if fault is not None:
            seen["blackhole"] = fault.report
        return seen
    finally:
        run.stop()
        topology.close()


def _topology(args: argparse.Namespace) -> Topology:
    return Topology(args.racks, args.per_rack, args.uplink, congestion=args.congestion, mtu=args.mtu)


def _one_run(args: argparse.Namespace, run: int) -> dict:
    fault = None if args.blackhole is None else Blackhole(args.blackhole)
    if args.keep is not None:
        directory = args.keep / f"run{run}" if args.runs > 1 else args.keep
        directory.mkdir(parents=True, exist_ok=True)
        return bench(args.size, _topology(args), directory, fault, args.reconcile)
    with tempfile.TemporaryDirectory(prefix="cluster-netns-") as scratch:
        return bench(args.size, _topology(args), pathlib.Path(scratch), fault, args.reconcile)


def _summary(result: dict, uplink: float) -> str:
    return (f"{result['agents']} agents, {result['size']} bytes, rack 1 uplink {uplink:.0f} B/s: makespan "
            f"{result['makespan_s']:.2f} s, bound {result['bound']['seconds']:.2f} s ({result['bound']['limit']}), "
            f"ratio {result['makespan_over_bound']:.3f}; seeder ratio {result['seeder_ratio']:.3f}; copies per rack "
            f"downlink (agents) <= {result['max_uplink_copies']:.3f}, (interface, headers included) "
            f"{result['downlink_iface_copies']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=32 * MiB, help="file size (default: 32Mi)")
    parser.add_argument("--racks", type=int, default=2, help="racks (default: 2)")
    parser.add_argument("--per-rack", type=int, default=3, help="agents per rack (default: 3)")
    parser.add_argument("--uplink", type=parse_rate, default=2_000_000,
                        help="rack 1's uplink rate in bytes/s, each direction (default: 2M = 2 000 000)")
    parser.add_argument("--runs", type=int, default=1,
                        help="push this many times, one after the other, and report each ratio and their median "
                             "(a single run moves by 0.1 and more on a shared machine; default: 1)")
    parser.add_argument("--congestion", default=None, metavar="NAME",
                        help="TCP congestion control in the hosts' namespaces (cubic, bbr, reno; default: the "
                             "machine's, /proc/sys/net/ipv4/tcp_congestion_control)")
    parser.add_argument("--mtu", type=int, default=None,
                        help="every link's MTU (default: 1500; a datacenter's jumbo frames: 9000): headers take "
                             "4.5 %% of the shaped link's rate at 1500, 0.7 %% at 9000")
    parser.add_argument("--calibrate", action="store_true",
                        help=f"first measure what one bulk TCP flow carries across rack 1's downlink alone "
                             f"({CALIBRATE_FOR:g} s), and report each makespan also against the bound at that "
                             "payload rate (`makespan_over_goodput_bound`)")
    parser.add_argument("--blackhole", type=float, default=None, metavar="SECONDS",
                        help="drop everything between the seeder and rack 1's root member for this long, from 4 s "
                             "after the push's start (bench/blackhole.py)")
    parser.add_argument("--reconcile", type=float, default=LAB_RECONCILE, metavar="SECONDS",
                        help=f"the agents' and pusher's period in seconds (default: {LAB_RECONCILE:g}, the lab's; "
                             "the product's default is 2)")
    parser.add_argument("--json", action="store_true", help="print only the JSON")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="also write the JSON to this file")
    parser.add_argument("--keep", type=pathlib.Path, default=None,
                        help="run in this directory and keep it (the agents' and redis's logs), instead of a "
                             "temporary one (with --runs, one directory per run in it)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.reconcile <= 0:
        parser.error("--runs must be at least 1, --reconcile above 0")
    if (problem := mtu_problem(args.mtu)) is not None:
        parser.error(problem)
    if (why := netns_missing()) is not None:
        print(f"cluster_netns: {why}", file=sys.stderr)
        return 2
    calibration = tcp_goodput(_topology(args)) if args.calibrate else None
    results = []
    for run in range(1, args.runs + 1):
        results.append(_one_run(args, run))
        if args.runs > 1 and not args.json:
            print(f"run {run}/{args.runs}: " + _summary(results[-1], args.uplink), flush=True)
    result = results[-1] if args.runs == 1 else {
        "runs": results, "ratios": [r["makespan_over_bound"] for r in results],
        "median_makespan_over_bound": statistics.median(r["makespan_over_bound"] for r in results)}
    if calibration is not None:
        # The bound again at the payload rate one TCP flow gets from the link (not part of Babenhauserheide's).
        result["calibration"] = calibration
        for r in results:
            r["makespan_over_goodput_bound"] = round(r["makespan_over_bound"] * calibration["goodput"], 4)
        result["median_makespan_over_goodput_bound"] = statistics.median(
            r["makespan_over_goodput_bound"] for r in results)
    result["command"] = "python -m bench.cluster_netns " + " ".join(argv if argv is not None else sys.argv[1:])
    result["reserve_default"] = RESERVE
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    elif args.runs == 1:
        print(_summary(result, args.uplink))
    else:
        print(f"ratios {result['ratios']}: median {result['median_makespan_over_bound']:.3f}, "
              f"{sum(r <= GOAL for r in result['ratios'])} of {args.runs} within {GOAL}")
    if calibration is not None and not args.json:
        print(f"one bulk TCP flow alone carries {calibration['goodput']:.3f} of the link's rate as payload "
              f"({calibration['tcp_congestion_control']}); against the bound at that rate: "
              + (f"median {result['median_makespan_over_goodput_bound']:.3f}" if args.runs > 1
                 else f"{result['makespan_over_goodput_bound']:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
