"""The pusher's flow first, live (`cluster.run.TransferRun.pusher`, `PolicyConfig.priority_others`): a real
redis-server, the real pusher (`cluster.push.push`) and four real agents (`cluster.agent.Agent`, one rack) in this
process, over TCP on 127.0.x.y. A root member's fetch marks its connection to the pusher, and only that one, as its
priority source (by the node id of the pusher's handshake), and while the pusher still has requests outstanding no
other source is given work beyond `priority_others` busy ones.

What each fetch's request policy decides is watched at its public events (the real methods, wrapped): the marking
by `add_peer`'s `priority`, the limit from the sources' outstanding requests around each event. No fixed port (every
listener binds port 0), no sleep: the push returns once every agent holds the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from bench.cluster_harness import redis_missing
from cluster.agent import Agent, AgentConfig
from cluster.identity import Identity
from cluster.intent import SigningKey
from cluster.push import PushConfig, push
from swarm.core.picker import BlockState
from swarm.core.policy import PolicyConfig, Request, RequestPolicy

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))]

PUSHER_HOST = "127.0.0.2"  # the pusher's listener: how this test, not the product, tells its connections apart
OTHERS = 1  # the agents' priority_others: a root member of a rack of four has three other sources, more than 1
SIZE = 4 << 20  # 256 blocks of 16 KiB
PUSHER_RATE = 8_000_000  # B/s: the pusher still owes the root members blocks once their rack peers hold some
RECONCILE = 0.2  # s: the overlay forms and the entry plan is drawn in a few periods
PICKABLE = (BlockState.MISSING, BlockState.FAILED)
EVENTS = ("add_peer", "on_have", "set_cap", "on_source_lost", "on_block", "on_verified", "on_hash_failure",
          "on_bad_hash_layer", "on_reject", "refill", "on_timeout")


class Watch:
    """Every request policy's events, as the fetches of the agents in this process call them."""

    def __init__(self) -> None:
        self.added: list[tuple[object, bool]] = []  # (source, marked) for every source any fetch added
        self.marked: dict[RequestPolicy, object] = {}  # a policy -> its priority source
        self.checked = 0  # events that gave another source work while the priority source had requests out
        self.over: list[str] = []  # ... and left more than OTHERS other sources busy
        self.held = 0  # events after which another source sat idle holding a block nobody was asked for

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in EVENTS:
            monkeypatch.setattr(RequestPolicy, name, self._wrapped(getattr(RequestPolicy, name), name))

    def _wrapped(self, real, name: str):
        def event(policy: RequestPolicy, *args, **kwargs):
            if name == "add_peer":
                self.added.append((args[0], kwargs.get("priority", False)))
                if kwargs.get("priority"):
                    self.marked[policy] = args[0]
            marked = self.marked.get(policy)
            before = self._state(policy, marked)
            actions = real(policy, *args, **kwargs)
            if before is not None:
                self._check(policy, marked, before, actions)
            return actions

        return event

    @staticmethod
    def _state(policy: RequestPolicy, marked: object) -> tuple[set[int], bool] | None:
        if marked is None or marked not in policy.sources():
            return None
        return set(policy.outstanding(marked)), policy.is_snubbed(marked)

    def _check(self, policy: RequestPolicy, marked: object, before: tuple[set[int], bool], actions: list) -> None:
        after = self._state(policy, marked)
        # Only events throughout which the priority source had requests out and answered (none of its requests
        # was answered, lost or expired in it): then, and only then, the limit holds for every request given.
        if after is None or not before[0] or before[1] or after[1] or not before[0] <= after[0]:
            return
        others = [s for s in policy.sources() if s is not marked]
        busy = [s for s in others if policy.outstanding(s)]
        if any(isinstance(a, Request) and a.source is not marked for a in actions):
            self.checked += 1
            if len(busy) > OTHERS:
                self.over.append(f"{len(busy)} other sources busy beside the pusher's")
        states = policy.picker.states()
        if any(not policy.outstanding(s) and not policy.is_snubbed(s)
               and any(state in PICKABLE and policy.picker.has(s, b) for b, state in enumerate(states))
               for s in others):
            self.held += 1


async def test_a_root_members_connection_to_the_pusher_is_its_priority_source(tmp_path, redis_server, monkeypatch):
    watch = Watch()
    watch.install(monkeypatch)
    owner = SigningKey.generate()
    agents = []
    for i in range(4):
        agent = Agent(AgentConfig(redis_server.url, "dc1", "r1", host=f"127.0.1.{10 + i}",
                                  data_dir=tmp_path / f"a{i}", reconcile=RECONCILE,
                                  trusted_keys=frozenset({owner.public}), identity=Identity.issue(owner, f"a{i}")))
        agent.service.nodes["tcp"].policy = PolicyConfig(priority_others=OTHERS)
        agents.append(agent)
    stop = asyncio.Event()
    loops: list[asyncio.Task] = []
    try:
        for agent in agents:  # registered before the push, which targets the agents it reads
            await agent.start()
            await agent.reconcile()
        loops = [asyncio.ensure_future(agent.coordinate(stop)) for agent in agents]
        path = tmp_path / "image.bin"
        path.write_bytes(os.urandom(SIZE))
        result = await push(PushConfig(path, redis_server.url, host=PUSHER_HOST, data_dir=tmp_path / "seeder",
                                       reconcile=RECONCILE, quiet=True, key=owner, upload_rate=PUSHER_RATE,
                                       timeout=60), stop)
        assert result.agents == 4
        for i in range(4):
            assert (tmp_path / f"a{i}" / "files" / "image.bin").read_bytes() == path.read_bytes()
    finally:
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)
        for agent in agents:
            with contextlib.suppress(Exception):
                await agent.close()

    to_pusher = [marked for source, marked in watch.added if source.remote_address[0] == PUSHER_HOST]
    others = [marked for source, marked in watch.added if source.remote_address[0] != PUSHER_HOST]
    assert to_pusher and all(to_pusher), "every fetch's connection to the pusher is its priority source"
    assert not any(others), "no other connection is"
    assert watch.checked, "the pusher had requests out while other sources were given work"
    assert not watch.over, watch.over
    assert watch.held, "the limit held a source with blocks for us back at least once"
