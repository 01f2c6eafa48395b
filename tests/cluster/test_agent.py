"""The agent's choice of providers (`cluster.agent.Agent.provider_rank`, `FETCH_PEERS`): no redis, no sockets."""

from __future__ import annotations

import types

from cluster.agent import FETCH_PEERS, Agent, AgentConfig
from cluster.identity import Identity
from cluster.intent import SigningKey
from cluster.records import MemberRecord
from swarm.content.manifest import build_manifest
from swarm.discovery import Provider


def provider(index: int, host: str) -> Provider:
    return Provider(index.to_bytes(20, "big"), host, 7000, 1)


def test_a_root_member_in_a_big_rack_takes_the_seeder_and_its_nearest_peers_first(tmp_path):
    owner = SigningKey.generate()
    agent = Agent(AgentConfig("redis://127.0.0.1:1/0", "dc1", "r1", host="10.1.0.1", data_dir=tmp_path,
                              trusted_keys=frozenset({owner.public}), identity=Identity.issue(owner, "a1")))
    rack = [provider(i, f"10.1.0.{i + 2}") for i in range(100)]  # a rack of 101 agents
    other_rack = [provider(200 + i, f"10.2.0.{i + 2}") for i in range(10)]
    seeder = provider(999, "10.9.0.1")  # outside the DC
    agent.learn([MemberRecord(p.node_id.hex(), dc="dc1", rack="r1", host=p.host) for p in rack] +
                [MemberRecord(p.node_id.hex(), dc="dc1", rack="r2", host=p.host) for p in other_rack])
    agent.runs = {"t": types.SimpleNamespace(record=types.SimpleNamespace(seeder=seeder.node_id.hex()))}
    manifest, _ = build_manifest([b"\x00" * (1 << 24)], 1 << 24)  # many more blocks than peers
    picked = agent.service.pick(other_rack + rack + [seeder], manifest)
    assert len(picked) == FETCH_PEERS
    assert picked[0] == seeder  # the root members' only source is never left out
    assert set(picked[1:]) <= set(rack)  # then the rack, before the other racks
