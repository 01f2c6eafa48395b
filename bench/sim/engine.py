"""One push of the cluster overlay mode, simulated on a virtual clock over the link model of `bench.sim.links`.

What runs here is the product's own sans-I/O code; what is reproduced is the asyncio shell around it:

* **real cores, called as the agents call them**: every agent's download is a `swarm.core.fetch.FetchCore` (the
  piece picker `swarm.core.picker`, the request policy with its timeouts and snubbing `swarm.core.policy`, Tekel's
  START and nearest first `swarm.core.starts`), built as `cluster.run` builds it (whole file rarest first,
  `window=0`, `distance` = rack 0 / DC 1 / outside 2 as `Agent.distance`, the seeder a priority source as
  `cluster.run.TransferRun.pusher` marks it, its flow first for a root member whose share lags as `cluster.lag`
  finds it every reconcile period from the bytes each received by level), fed the wire messages the engine's
  shell would feed it (BITFIELD, HAVE, START, BLOCK) and answered with what it asks (REQUEST, CANCEL, Announce);
  the overlay's roles come from `cluster.overlay.Representation` claiming slots in a `View`; what a server shows
  each peer across a level is `cluster.division.EntryPlan.shown`, with `StallWatch` read every reconcile period
  (work stealing); each agent's upload limits per level come from `cluster.throttle.Planner` (when it is given
  capacities), fed the bytes it sent; which providers a fetch takes is `SwarmService._choose` with the agent's
  `provider_rank` rule (`cluster.division.provider_order`: the seeder first, then the nearest, at each distance
  first the peers the entry plan has show this agent blocks) and `FETCH_PEERS`.
* **reproduced, not the product's code**: the serving side (`swarm.core.serve.ServeCore` is not run: a connection
  sends the blocks asked of it one after the other, first asked first sent, shows what `EntryPlan.shown` allows,
  never takes a HAVE back, and refuses nothing: the fetch asks only for what it was shown); redis (slots are taken
  in one random order of the agents, the rack slots in the first reconcile, the DC slots in the follow-up; every
  agent reads the same records, so one `StallWatch` stands for all); the time the overlay takes to form
  (`Setup.formation`, 0.45 s: when the pusher's first request goes out, measured with `bench.seeder_flows`); every
  provider is known from the start and none leaves, and a fetch's `FETCH_PEERS` are ranked among all its
  candidates (the agent's discovery stops at the first 64 found: its choice can only be worse); blocks are not
  hashed (`SimManifest`: no bytes exist); one transfer, so `cluster.turns` has nothing to decide; the seeder is not
  throttled; a HAVE is not delivered to a receiver that has verified the block already (it changes nothing the
  fetch decides: see `_verified`); no round-trip time (a request reaches its server at once); headers only as a
  factor on every link's rate (`Setup.wire`: 1 by default, left out).

Time: flows get their max-min fair rates (`Network.rates`) again once per `quantum` of virtual time (one block at
the fastest host rate: 7 ms for 2 MiB at 300 MB/s) when the set of busy connections changed; between two such
instants a connection keeps its rate, a block's end is an exact event, and a connection that becomes busy waits for
the next instant (at most one quantum). No wall clock, no asyncio: `run()` is a loop over a heap of events.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from bench.sim.links import Network
from bench.sim.topology import Setup
from cluster.agent import FETCH_PEERS
from cluster.division import EntryPlan, provider_order
from cluster.lag import LagWatch
from cluster.overlay import Level, Location, Member, Representation, View
from cluster.push import site_to_say
from cluster.records import RECONCILE_EVERY, AgentRecord
from cluster.stalls import StallWatch
from cluster.throttle import Capacities, Planner
from swarm.content.manifest import Manifest
from swarm.core.fetch import Announce, Close, FetchCore, Finished, Send, Verified
from swarm.core.policy import PolicyConfig
from swarm.net import wire
from swarm.service.swarm_service import PEER_SPARE, SwarmService

__all__ = ["Result", "SimManifest", "Simulation"]


class SimManifest(Manifest):
    """A manifest whose blocks and layer are not hashed: the simulation moves no bytes, only their count."""

    __slots__ = ()

    def verify_layer(self, layer) -> None:  # noqa: ARG002 - nothing to check: no content exists
        return None

    def verify_block(self, layer, index, data) -> None:  # noqa: ARG002 - as above
        return None


@dataclass
class _Record:
    """What `StallWatch.observe_round` reads of a member record."""

    verified: int
    blocks: int
    fetching: bool = True
    role: str = ""
    received: dict[str, int] = field(default_factory=dict)  # what `cluster.lag.LagWatch` reads


@dataclass(eq=False, slots=True)
class Conn:
    """One connection: `server` sends `receiver` the blocks it asked for, one after the other."""

    server: int
    receiver: int
    flow: int
    level: Level
    shown: Container[int] | None
    queue: deque[int] = field(default_factory=deque)
    sending: int = -1  # the block on the wire, -1 when idle
    label: str = field(init=False)  # `level.label`, a property that builds the string: read on every block

    def __post_init__(self) -> None:
        self.label = self.level.label


class _Distances(dict):
    """peer -> its distance, asked of `level` once per peer: the fetch core asks on every pick for a far source,
    and a dict's own lookup is a C call where the lambda was three Python ones."""

    def __init__(self, level: Callable[[Any], int]) -> None:
        super().__init__()
        self.level = level

    def __missing__(self, peer: Any) -> int:
        distance = self[peer] = self.level(peer)
        return distance


@dataclass
class Result:
    setup: dict
    num_blocks: int
    finish: list[float]  # per agent, virtual seconds from the push (inf: did not finish)
    received: list[dict[str, int]]  # per agent, bytes by level
    sent: list[dict[str, int]]
    seeder_sent: int
    rack_in: list[int]  # per rack, bytes its agents received from outside the rack
    roles: list[str]
    held_bytes: list[int]  # per agent, bytes of the blocks it verified (each counted once)
    stalled: int  # agents `StallWatch` found without progress for STEAL_AFTER s (then shown everything)
    entry_gaps: dict  # `Simulation.entry_gaps()` at set-up
    closes: int
    events: int
    recomputes: int
    virtual_end: float
    links: dict[str, float] = field(default_factory=dict)  # bytes carried by the rack and core links


class Simulation:
    def __init__(self, setup: Setup, *, quantum: float | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.setup = setup
        self.rng = random.Random(setup.seed)
        random.seed(setup.seed)  # `SwarmService._choose` draws from the module's generator
        self.progress = progress or (lambda _line: None)
        size, block = setup.size, setup.block
        self.manifest = SimManifest(size=size, block_size=block, root=self.rng.randbytes(32))
        self.blocks = self.manifest.num_blocks
        self.layer = [b"\0" * 32] * self.blocks
        self.lengths = [self.manifest.block_span(b)[1] for b in range(self.blocks)]
        self.payload = {length: bytes(length) for length in {self.manifest.block_span(b)[1] for b in
                                                             (0, self.blocks - 1)}}
        n = setup.agents
        self.n = n
        self.seeder = n  # index of the seeder; agents are 0 .. n-1
        self.rack_of = [rack for rack, size in enumerate(setup.sizes) for _ in range(size)]
        self.nodes = [self.rng.randbytes(8).hex() for _ in range(n + 1)]
        self.locations = [Location("dc0", f"r{r:04d}") for r in self.rack_of]
        rates = [r for r in (setup.host_up, setup.host_down) if r is not None]
        # A quarter of a block at the fastest host rate: a connection waits at most that for its rate, a small
        # part of a block's time on a host link shared by several connections.
        self.quantum = quantum or (block / max(rates) if rates else 0.005)
        self.held = [bytearray(self.blocks) for _ in range(n)] + [bytearray(b"\1" * self.blocks)]
        self.verified = [0] * n + [self.blocks]
        self.finish = [math.inf] * n
        self.received = [{lv.label: 0 for lv in Level} for _ in range(n + 1)]
        self.sent = [{lv.label: 0 for lv in Level} for _ in range(n + 1)]
        self.closes = 0
        self.events = 0
        self.recomputes = 0
        self._build_network()
        self._form_overlay()
        self.gaps = self.entry_gaps()  # at set-up: the stall watch's reveals close them later

    # -- topology -------------------------------------------------------------------------------------------------

    def _build_network(self) -> None:
        s, net = self.setup, Network()
        self.net = net

        def payload(rate: float | None) -> float | None:  # what a link of `rate` carries of BLOCKs (`Setup.wire`)
            return None if rate is None else rate / s.wire

        self.up = [net.link(f"host {i} up", payload(s.host_up)) for i in range(self.n)]
        self.down = [net.link(f"host {i} down", payload(s.host_down)) for i in range(self.n)]
        self.up.append(net.link("seeder up", payload(s.seeder_up)))
        self.down.append(Network.NONE)
        self.rack_up = [net.link(f"rack {r} up", payload(s.rack_rates(r)[0])) for r in range(s.racks)]
        self.rack_down = [net.link(f"rack {r} down", payload(s.rack_rates(r)[1])) for r in range(s.racks)]
        self.core = net.link("DC core", payload(s.core))
        self.planners: list[Planner] | None = None
        self.throttle_links: list[dict[Level, int]] = []
        if s.throttle_host is not None:
            caps = Capacities(host=s.throttle_host)
            self.planners = [Planner(caps, reserve=s.reserve) for _ in range(self.n)]
            for i, planner in enumerate(self.planners):
                self.throttle_links.append({lv: net.link(f"host {i} throttle {lv.label}", planner.limits[lv])
                                            for lv in Level})

    def level(self, a: int, b: int) -> Level:
        if a == self.seeder or b == self.seeder:
            return Level.OUTSIDE
        return Level.RACK if self.rack_of[a] == self.rack_of[b] else Level.DC

    def _route(self, server: int, receiver: int) -> list[int]:
        route = [self.up[server], self.down[receiver]]
        level = self.level(server, receiver)
        if server != self.seeder and self.planners is not None:
            route.append(self.throttle_links[server][level])
        if server == self.seeder:
            site, rack = self.setup.seeder_rack, self.rack_of[receiver]
            if site is None:  # off the core
                route += [self.core, self.rack_down[rack]]
            elif site != rack:  # in a rack: out through its uplink
                route += [self.rack_up[site], self.core, self.rack_down[rack]]
        elif level is not Level.RACK:
            route += [self.rack_up[self.rack_of[server]], self.core, self.rack_down[self.rack_of[receiver]]]
        return route

    # -- the overlay: roles, the entry plan, who fetches from whom -------------------------------------------------

    def _form_overlay(self) -> None:
        members = [Member(self.nodes[i], self.locations[i]) for i in range(self.n)]
        members.append(Member(self.nodes[self.seeder], None, 1.0, seeder=True, site=self._site()))
        view = View.of(members)
        reps = [Representation(self.nodes[i]) for i in range(self.n)]
        order = list(range(self.n))
        self.rng.shuffle(order)  # who reaches redis first: SET NX gives each slot to the first to ask
        for _round in ("first reconcile", "follow-up"):  # rack slots, then the rack representants' DC slots
            for i in order:
                for slot in reps[i].plan(view).claim:
                    if slot not in view.holders:
                        view.holders[slot] = self.nodes[i]
                        reps[i].on_claimed(slot)
                        break
        self.view = view
        self.plan = EntryPlan(view, self.blocks)
        self.watch = StallWatch()
        self.index = {node: i for i, node in enumerate(self.nodes)}
        self.roles = ["dc" if view.is_dc_rep(self.nodes[i]) else "rack" if view.is_rack_rep(self.nodes[i])
                      else "member" for i in range(self.n)]
        self.conns: dict[tuple[int, int], Conn] = {}
        self.serving: list[list[Conn]] = [[] for _ in range(self.n + 1)]
        self.sources: list[list[int]] = []
        wanted = max(1, min(FETCH_PEERS, self.blocks + PEER_SPARE))  # `SwarmService.peers_for_blocks`
        # `View.may_talk` (two peers share a group) for every pair would be N² calls, each walking the slots:
        # hours at 2,600 agents. The same answer from each node's `View.groups`, asked once: its groups' members.
        groups = [view.groups(node) for node in self.nodes]
        in_group: dict[tuple[str, ...], list[int]] = {}
        for j, joined in enumerate(groups):
            for group in joined:
                in_group.setdefault(group, []).append(j)
        for i in range(self.n):
            me = self.nodes[i]
            found = sorted({j for group in groups[i] for j in in_group[group]} - {i})

            def rank(j: int, i: int = i, me: str = me) -> int:  # `Agent.provider_rank`
                return provider_order(j == self.seeder, int(self.level(i, j)), self.plan.gives(self.nodes[j], me))

            chosen = SwarmService._choose(found, wanted, rank)
            self.sources.append(chosen)
            for j in chosen:
                shown = self.plan.shown(self.nodes[j], me)
                conn = Conn(j, i, self.net.flow(self._route(j, i)), self.level(i, j), shown)
                self.conns[(j, i)] = conn
                self.serving[j].append(conn)
        self.net.ready()
        self.by_flow = {c.flow: c for c in self.conns.values()}
        self.rem0 = np.zeros(len(self.by_flow))
        self.t0 = np.zeros(len(self.by_flow))
        self.rate = np.zeros(len(self.by_flow))
        self.ends = np.full(len(self.by_flow), np.inf)  # when the block on each flow is through (inf: idle)

    def _site(self) -> Location | None:
        """The rack the pusher says it sits in, decided as `cluster.push` decides it from the agents' records."""
        rack = self.setup.seeder_rack
        if rack is None:
            return None
        records = {self.nodes[i]: AgentRecord("", 0, loc.dc, loc.rack, self.nodes[i])
                   for i, loc in enumerate(self.locations)}
        return site_to_say(Location("dc0", f"r{rack:04d}"), records, "*")

    def entry_gaps(self) -> dict:
        """Entry points the fetch cap cut off: blocks a rack representant is to bring into its rack (`EntryPlan`)
        that no server among its chosen providers (`FETCH_PEERS`) will show it across a level. Until `StallWatch`
        finds it without progress for STEAL_AFTER s, such a block enters the rack through nobody. Known at set-up."""
        reps = [i for i in range(self.n) if self.roles[i] != "member"]
        cut, blocks, entered = 0, 0, 0
        everything = frozenset(range(self.blocks))
        for r in reps:
            owners = self.plan.rack.get(self.locations[r]) or []
            mine = {b for b, owner in enumerate(owners) if owner == self.nodes[r]}
            shown: set[int] = set()
            for j in self.sources[r]:
                conn = self.conns[(j, r)]
                if conn.level is not Level.RACK:
                    shown |= everything if conn.shown is None else {b for b in mine if b in conn.shown}
            entered += len(mine)
            if mine - shown:
                cut, blocks = cut + 1, blocks + len(mine - shown)
        return {"rack_reps": len(reps), "reps_cut_off": cut, "blocks_without_server": blocks,
                "blocks_to_bring_in": entered}

    # -- the event loop -------------------------------------------------------------------------------------------

    def run(self, *, max_virtual: float = 3600.0, wall_budget: Callable[[], bool] | None = None) -> Result:
        """Simulate until every agent holds the file, `max_virtual` s pass, or `wall_budget()` says stop."""
        self.now = 0.0
        self._heap: list[tuple[float, int, int, tuple]] = []  # (time, kind order, seq, what)
        self._seq = 0
        self.timer_at: list[float | None] = [None] * self.n
        self.dirty = False
        self._push(self.setup.formation, 0, ("start",))
        self._push(self.setup.formation + RECONCILE_EVERY, 2, ("reconcile",))
        if self.planners is not None:
            self._push(0.0, 2, ("throttle",))
        self.unfinished = self.n
        next_recompute, next_report = 0.0, 1.0
        active = self.net.active
        while self.unfinished and self.now < max_virtual:
            if self.dirty and self.now >= next_recompute:
                self._recompute()
                next_recompute = self.now + self.quantum
            busy = active.any()
            horizon = self.now + self.quantum if busy else (self._heap[0][0] if self._heap else max_virtual)
            self.horizon = horizon = max(horizon, self.now)
            if busy:
                for flow in np.flatnonzero(self.ends <= horizon):
                    self._push(float(self.ends[flow]), 1, ("block", int(flow)))
            while self._heap and self._heap[0][0] <= horizon and self.unfinished:
                when, _, _, what = heapq.heappop(self._heap)
                self.now = max(self.now, when)
                self._handle(when, what)
            self.now = max(self.now, horizon)
            if self.now >= next_report:
                next_report = self.now + 1.0
                done = self.n - self.unfinished
                self.progress(f"  t={self.now:6.2f} s virtual: {done}/{self.n} agents complete, "
                              f"{sum(self.verified[:self.n]) / (self.n * self.blocks):.1%} of all blocks")
                if wall_budget is not None and wall_budget():
                    self.progress("  stopped: out of wall time")
                    break
        return self._result()

    def _push(self, when: float, order: int, what: tuple) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, order, self._seq, what))

    def _handle(self, when: float, what: tuple) -> None:
        self.events += 1
        kind = what[0]
        if kind == "block":
            if self.ends[what[1]] == when:  # else stale: its rate changed, or it was already taken
                self._block_sent(what[1])
        elif kind == "timer":
            i = what[1]
            if self.timer_at[i] == when and self.finish[i] == math.inf:
                self.timer_at[i] = None
                self._act(i, self.cores[i].on_timer(self.now), True)
        elif kind == "start":
            self._start()
        elif kind == "reconcile":
            self._reconcile()
            self._push(self.now + RECONCILE_EVERY, 2, ("reconcile",))
        elif kind == "throttle":
            self._throttle()

    def _recompute(self) -> None:
        """Bring every busy connection's bytes up to now at its old rate, then give them their new rates."""
        self.recomputes += 1
        self.dirty = False
        which, rates = self.net.rates()
        now = self.now
        old = np.flatnonzero(self.rate > 0)
        self.rem0[old] = np.maximum(self.rem0[old] - self.rate[old] * (now - self.t0[old]), 0.0)
        self.t0[old] = now
        self.rate[:] = 0.0
        self.ends[:] = np.inf
        self.rate[which] = rates
        self.t0[which] = now
        with np.errstate(divide="ignore"):
            self.ends[which] = now + self.rem0[which] / rates
        self.ends[self.ends <= self.now] = self.now  # a block done to within rounding ends now

    # -- what the agents do ---------------------------------------------------------------------------------------

    def _start(self) -> None:
        """The entry plan is drawn and every fetch starts: connections, handshakes, BITFIELDs."""
        self.cores: list[FetchCore] = []
        self.lags = [LagWatch(self.nodes[i]) for i in range(self.n)]
        for i in range(self.n):
            # `cluster.run.TransferRun.pusher`: a connection to the seeder is a priority source (only the root members
            # have one); its flow first while this root member's share lags (`cluster.lag`, as `TransferRun.lag`)
            core = FetchCore(self.manifest, self.layer, config=PolicyConfig(priority_first=self.lags[i]), window=0,
                             rng=random.Random(self.rng.random()), distance=self._distance_of(i),
                             priority=self._is_seeder)
            self.cores.append(core)
        for i in range(self.n):
            core = self.cores[i]
            self._act(i, core.start(self.now))
            for j in self.sources[i]:
                conn = self.conns[(j, i)]
                self._act(i, core.add_peer(j, self.now))
                blocks = self.holding(j, conn.shown) if self.verified[j] else []
                self._act(i, core.on_message(j, wire.Bitfield.from_blocks(self.blocks, blocks), self.now))

    def _is_seeder(self, peer: Any) -> bool:
        return peer == self.seeder

    def _distance_of(self, i: int) -> Callable[[Any], int]:
        """`Agent.distance` for agent `i`: rack 0, DC 1, outside (the seeder) 2."""
        return _Distances(lambda peer: int(self.level(i, peer))).__getitem__

    def _act(self, i: int, actions: list, timers: bool = False) -> None:
        """Carry out what agent `i`'s fetch core asked for. Its next deadline is asked again only when it may have
        come sooner: after it sent something (a request arms a timeout), or a START was noted or its timer fired
        (`timers`). Nothing else arms one here: a retry's back-off follows a timeout (on the timer) or a REJECT (no
        server refuses in this model), and a block verified with no new request only made deadlines later."""
        sent = timers
        for action in actions:
            if isinstance(action, Send):
                sent = True
                message = action.message
                peer = cast(int, action.peer)
                if isinstance(message, wire.Request):
                    self._request(self.conns[(peer, i)], message.block)
                elif isinstance(message, wire.Cancel):
                    conn = self.conns[(peer, i)]
                    if message.block in conn.queue:
                        conn.queue.remove(message.block)
            elif isinstance(action, Announce):
                self._announce(i, action.block)
            elif isinstance(action, Verified):
                self._verified(i, action.block)
            elif isinstance(action, Finished):
                self.finish[i] = self.now
                self.unfinished -= 1
                for j in self.sources[i]:
                    self._stop(self.conns[(j, i)])
            elif isinstance(action, Close):
                self.closes += 1
                closed = self.conns.get((cast(int, action.peer), i))
                if closed is not None:
                    self._stop(closed)
        if sent and self.finish[i] == math.inf:
            deadline, armed = self.cores[i].next_deadline(), self.timer_at[i]
            if deadline is not None and (armed is None or deadline < armed):
                self.timer_at[i] = deadline
                self._push(deadline, 3, ("timer", i))

    def _request(self, conn: Conn, block: int) -> None:
        conn.queue.append(block)
        if conn.sending < 0:
            self._send_next(conn)

    def _send_next(self, conn: Conn) -> None:
        flow = conn.flow
        if not conn.queue:
            conn.sending = -1
            self.ends[flow] = np.inf
            if self.net.active[flow]:
                self.net.active[flow] = False
                self.rem0[flow] = self.rate[flow] = 0.0
                self.dirty = True
            return
        conn.sending = conn.queue.popleft()
        length = self.lengths[conn.sending]
        self.rem0[flow], self.t0[flow] = length, self.now
        if self.rate[flow] > 0:  # busy already: the next block follows at the same rate
            end = self.ends[flow] = self.now + length / self.rate[flow]
            if end <= self.horizon:  # else the loop finds it at a later step
                self._push(float(end), 1, ("block", flow))
        else:
            self.net.active[flow] = True
            self.dirty = True

    def _stop(self, conn: Conn) -> None:
        """The receiver closed the connection (its fetch is over): nothing more is sent on it."""
        conn.queue.clear()
        self._send_next(conn)

    def _block_sent(self, flow: int) -> None:
        conn = self.by_flow[flow]
        block, server, receiver = conn.sending, conn.server, conn.receiver
        length = self.lengths[block]
        self.net.carry(flow, length)
        self.sent[server][conn.label] += length
        self.received[receiver][conn.label] += length
        if self.planners is not None and server != self.seeder:
            self.planners[server].meter.on_bytes(conn.level, length)
        conn.sending = -1
        self._send_next(conn)
        if self.finish[receiver] == math.inf:
            self._act(receiver, self.cores[receiver].on_message(server, wire.Block(block, 0, self.payload[length]),
                                                                self.now))

    def holding(self, j: int, shown: Container[int] | None) -> list[int]:
        """The blocks `j` holds that a peer shown `shown` sees."""
        held, blocks = self.held[j], []
        block = held.find(1)
        while block != -1:
            if shown is None or block in shown:
                blocks.append(block)
            block = held.find(1, block + 1)
        return blocks

    def _verified(self, i: int, block: int) -> None:
        if self.held[i][block]:
            return
        self.held[i][block] = 1
        self.verified[i] += 1
        have, held, finish, cores, now = wire.Have(block), self.held, self.finish, self.cores, self.now
        for conn in self.serving[i]:
            # Not to a receiver that verified the block already: there the HAVE changes nothing its fetch decides
            # (the picker never picks a verified block again; only counts kept for that block would move), and
            # most HAVEs are such in a rack where every member takes the same block.
            receiver = conn.receiver
            if not held[receiver][block] and finish[receiver] == math.inf \
                    and (conn.shown is None or block in conn.shown):
                actions = cores[receiver].on_message(i, have, now)
                if actions:  # most HAVEs ask for nothing, and `_act` of nothing does nothing
                    self._act(receiver, actions)

    def _announce(self, i: int, block: int) -> None:
        """START to the peers `i` serves that may see the block (`ServeCore` sends no START about a hidden one)."""
        start = wire.Start(block)
        for conn in self.serving[i]:
            if (conn.shown is None or block in conn.shown) and self.finish[conn.receiver] == math.inf:
                self._act(conn.receiver, self.cores[conn.receiver].on_message(i, start, self.now), True)

    def _reconcile(self) -> None:
        """Every period: the member records are read, stalled members are shown everything (work stealing)."""
        records = {self.nodes[i]: _Record(self.verified[i], self.blocks, role=self.roles[i],
                                          received=self.received[i]) for i in range(self.n)}
        stalled = self.watch.observe_round(records, self.now)
        for i in range(self.n):
            if self.roles[i] == "dc":
                self.lags[i].observe(self.plan.root, records, self.setup.block)
        newly = stalled - self.plan.stalled
        self.plan.stalled = self.plan.stalled | stalled  # what was shown is never taken back
        for node in newly:
            i = self.index[node]
            for j in self.sources[i]:
                conn = self.conns[(j, i)]
                before, conn.shown = conn.shown, None
                if before is not None and self.finish[i] == math.inf:
                    for block in self.holding(j, None):
                        if block not in before:
                            self._act(i, self.cores[i].on_message(j, wire.Have(block), self.now))

    def _throttle(self) -> None:
        assert self.planners is not None
        for i, planner in enumerate(self.planners):
            limits = planner.plan(self.now)
            for level, link in self.throttle_links[i].items():
                self.net.set_capacity(link, limits[level])
        self.dirty = True
        self._push(self.now + self.planners[0].every, 2, ("throttle",))

    def _result(self) -> Result:
        racks = self.setup.racks
        rack_in = [0] * racks
        for i in range(self.n):
            rack_in[self.rack_of[i]] += self.received[i]["dc"] + self.received[i]["outside"]
        links = {name: self.net.carried[k] for k, name in enumerate(self.net.names)
                 if name.startswith(("rack", "DC"))}
        held_bytes = [sum(self.lengths[b] for b in self.holding(i, None)) for i in range(self.n)]
        return Result(self.setup.describe(), self.blocks, list(self.finish), self.received[:self.n],
                      self.sent[:self.n], sum(self.sent[self.seeder].values()), rack_in, self.roles, held_bytes,
                      len(self.plan.stalled), self.gaps, self.closes, self.events, self.recomputes,
                      self.now, links)
