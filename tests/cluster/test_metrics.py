"""The agent's Prometheus metrics, from a stand-in agent."""

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from cluster.metrics import AgentCollector
from cluster.overlay import Level


def test_metrics_by_level_role_and_blocks():
    transport = SimpleNamespace(received={Level.RACK: 10, Level.DC: 20, Level.OUTSIDE: 0},
                                sent={Level.RACK: 1, Level.DC: 0, Level.OUTSIDE: 0})
    run = SimpleNamespace(role=lambda: "rack", verified=lambda: 3, manifest=SimpleNamespace(num_blocks=8))
    agent = SimpleNamespace(transport=transport, runs={"t1": run}, unreachable_since=None,
                            limits=lambda: {Level.RACK: None, Level.DC: 5e6, Level.OUTSIDE: 1e6})
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent))
    text = generate_latest(registry).decode()
    assert 'swarmproxy_cluster_bytes_total{direction="received",level="dc"} 20.0' in text
    assert 'swarmproxy_cluster_throttle_bytes_per_second{level="dc"} 5e+06' in text
    assert 'level="rack"} ' not in text.split("throttle")[1].split("# HELP")[0]  # unlimited: absent
    assert 'swarmproxy_cluster_role{role="rack",transfer="t1"} 1.0' in text
    assert 'swarmproxy_cluster_blocks{state="total",transfer="t1"} 8.0' in text
    assert "swarmproxy_cluster_redis_up 1.0" in text
