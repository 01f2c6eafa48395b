"""A few seconds of blackhole between the seeder and one root member mid-push (`bench.cluster_netns --blackhole S`).

A datacenter path that drops everything for a few seconds (a switch or link flapping, a full shallow queue that
keeps dropping one flow's retransmissions) leaves the TCP connections across it in retransmission back-off: the
retransmission timeout doubles with each lost try (0.2, 0.4, 0.8 ... s), so after 8 s of loss a connection may
wait 6 s more before it tries again, idle long after the path is back. The lab's outliers at MTU 9000 were such
connections (docs/cluster.md, "TCP retransmission timeouts behind the outliers"); they come by chance, in about one
run of twenty. This makes one on purpose, on the connection that hurts most: the seeder's to the root member in the
shaped rack, the only source of that member's slice of the file (`cluster.division`).

From `at` seconds after the transfer's publication, for `seconds`, every packet between the seeder's address and
that member's host is dropped in the host's namespace, both ways (iptables INPUT and OUTPUT); redis, on the test's
address, still answers it. What was done is in `report`: the member, its role, when the rules went in and out.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from bench.cluster_harness import Cluster, wait_until
from bench.netns import run as _run

__all__ = ["Blackhole"]


class Hosts(Protocol):
    """What the blackhole needs of `bench.cluster_netns.Topology`: its hosts by name (the seeder's is "seeder")."""

    hosts: dict


@dataclass
class Blackhole:
    seconds: float
    at: float = 4.0  # seconds after the transfer's publication
    rack: str = "r1"  # the root member in this rack (the shaped one), else any root member
    report: dict = field(default_factory=dict)

    def start(self, topology: Hosts, cluster: Cluster) -> threading.Thread:
        thread = threading.Thread(target=self._run, args=(topology, cluster), name="blackhole", daemon=True)
        thread.start()
        return thread

    def _run(self, topology: Hosts, cluster: Cluster) -> None:
        try:
            tid = str(wait_until(lambda: next(iter(cluster.transfers()), None), 120, "the transfer published"))
            created = cluster.transfers()[tid].created
            time.sleep(max(0.0, created + self.at - time.time()))  # the fault's schedule, not a synchronisation
            names = {agent.node: name for name, agent in cluster.agents.items()}
            roots = sorted((m.rack != self.rack, names[m.node]) for m in cluster.members(tid).values()
                           if m.role == "dc" and m.node in names)
            if not roots:
                self.report["error"] = f"no root member {self.at} s into the push"
                return
            target = roots[0][1]
            host, seeder = topology.hosts[target], topology.hosts["seeder"].address
            rules = [("INPUT", "-s", seeder), ("OUTPUT", "-d", seeder)]
            for chain, way, address in rules:
                _run("ip", "netns", "exec", host.ns, "iptables", "-w", "-I", chain, way, address, "-j", "DROP")
            began = time.time()
            time.sleep(self.seconds)  # how long the path drops everything
            for chain, way, address in rules:
                _run("ip", "netns", "exec", host.ns, "iptables", "-w", "-D", chain, way, address, "-j", "DROP")
            self.report.update(member=target, role="dc", began_s=round(began - created, 3),
                               ended_s=round(time.time() - created, 3), seconds=self.seconds)
        except Exception as exc:  # a lab thread: the run goes on without the fault, and says why
            self.report["error"] = f"{type(exc).__name__}: {exc}"
