"""Prometheus metrics of one agent (`swarmproxy cluster agent --metrics HOST:PORT`), read at scrape time.

* `swarmproxy_cluster_bytes_total{direction="received|sent", level="rack|dc|outside"}` — block bytes by level,
  from `cluster.transport.LeveledTransport`'s counters: only representants have dc/outside bytes;
* `swarmproxy_cluster_throttle_bytes_per_second{level}` — the upload limit in force (absent: unlimited);
* `swarmproxy_cluster_role{transfer, role}` — 1 for this agent's role in each transfer (peer, rack, dc);
* `swarmproxy_cluster_blocks{transfer, state="verified|total"}` — pieces;
* `swarmproxy_cluster_redis_up` — 1 when the last reconcile reached redis.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["AgentCollector", "serve_metrics"]

ROLES = ("peer", "rack", "dc")


class AgentCollector:
    def __init__(self, agent) -> None:
        self.agent = agent

    def collect(self):
        agent = self.agent
        transport = agent.transport
        moved = CounterMetricFamily("swarmproxy_cluster_bytes", "Block bytes by level and direction",
                                    labels=["direction", "level"])
        for direction, counts in (("received", transport.received), ("sent", transport.sent)):
            for level, count in counts.items():
                moved.add_metric([direction, level.label], count)
        yield moved
        limits = GaugeMetricFamily("swarmproxy_cluster_throttle_bytes_per_second",
                                   "Upload limit in force per level (absent: unlimited)", labels=["level"])
        for level, rate in agent.limits().items():
            if rate is not None:
                limits.add_metric([level.label], rate)
        yield limits
        role = GaugeMetricFamily("swarmproxy_cluster_role", "This agent's role per transfer",
                                 labels=["transfer", "role"])
        blocks = GaugeMetricFamily("swarmproxy_cluster_blocks", "Blocks per transfer", labels=["transfer", "state"])
        for tid, run in list(agent.runs.items()):
            mine = run.role()
            for name in ROLES:
                role.add_metric([tid, name], 1.0 if name == mine else 0.0)
            blocks.add_metric([tid, "verified"], run.verified())
            blocks.add_metric([tid, "total"], run.manifest.num_blocks)
        yield role
        yield blocks
        up = GaugeMetricFamily("swarmproxy_cluster_redis_up", "1 when the last reconcile reached redis")
        up.add_metric([], 0.0 if agent.unreachable_since is not None else 1.0)
        yield up


def serve_metrics(agent, host: str, port: int):
    """Serve the agent's metrics over HTTP (prometheus_client's server, in its own thread)."""
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent))
    return start_http_server(port, addr=host, registry=registry)
