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
    agent.runs = {"t": types.SimpleNamespace(record=types.SimpleNamespace(seeder=seeder.node_id.hex()),
                                             gives=lambda node: True)}
    manifest, _ = build_manifest([b"\x00" * (1 << 24)], 1 << 24)  # many more blocks than peers
    picked = agent.service.pick(other_rack + rack + [seeder], manifest)
    assert len(picked) == FETCH_PEERS
    assert picked[0] == seeder  # the root members' only source is never left out
    assert set(picked[1:]) <= set(rack)  # then the rack, before the other racks


def test_a_representant_takes_the_racks_its_entry_plan_has_give_it_blocks_before_other_racks(tmp_path):
    """Past FETCH_PEERS candidates, a parent rack in a block's tree left out shows a representant nothing until
    it stalls for 10 s (the simulator counted 86 of 120 representants so cut off at 1,200 agents)."""
    owner = SigningKey.generate()
    agent = Agent(AgentConfig("redis://127.0.0.1:1/0", "dc1", "r1", host="10.1.0.1", data_dir=tmp_path,
                              trusted_keys=frozenset({owner.public}), identity=Identity.issue(owner, "a1")))
    rack = [provider(i, f"10.1.0.{i + 2}") for i in range(19)]
    others = [provider(100 + i, f"10.{2 + i // 2}.0.{2 + i % 2}") for i in range(160)]  # 80 racks' representants
    parents = {p.node_id.hex() for p in others[-6:]}  # the last by name and address: they would be left out
    agent.learn([MemberRecord(p.node_id.hex(), dc="dc1", rack="r1", host=p.host) for p in rack] +
                [MemberRecord(p.node_id.hex(), dc="dc1", rack=f"r{2 + i // 2}", host=p.host)
                 for i, p in enumerate(others)])
    agent.runs = {"t": types.SimpleNamespace(record=types.SimpleNamespace(seeder="00"),
                                             gives=lambda node: node in parents or node in {p.node_id.hex()
                                                                                            for p in rack})}
    manifest, _ = build_manifest([b"\x00" * (1 << 24)], 1 << 24)
    picked = agent.service.pick(others + rack, manifest)
    assert len(picked) == FETCH_PEERS
    assert set(rack) <= set(picked) and parents <= {p.node_id.hex() for p in picked}
