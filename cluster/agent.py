"""The cluster agent: one per host, taking part in every transfer it is asked to (`swarmproxy cluster agent`).

It is a `SwarmService` (the block engine the proxy uses) over `RedisDiscovery` and a `LeveledTransport`, plus a
reconcile loop. Every `reconcile` seconds, or at once when a wake-up arrives on the pub/sub channel, it:

1. rewrites its agent record and its provider announcements (TTL keys: a restarted redis is refilled here);
2. reads the transfers, starts a `TransferRun` for each new one it is targeted by, stops the cancelled ones: each
   push and each cancel only if a key the agent trusts signed it, and it is no replay or rollback
   (`cluster.intent`; what it accepted is kept in DATA_DIR); a push of a name already pushed replaces the older one;
3. reconciles each run: member record, overlay role, slots, reading only the part of the overlay it acts on
   (`cluster.scope`), then the redis server's run id and uptime (the overlay core gives the slot holders a head
   start of one slot TTL of uptime after a restart, `cluster.overlay`); the locations and addresses of the peers
   it meets are learnt from those records;
4. if the run id changed since its last reconcile (redis restarted, perhaps empty), restores the transfers of its
   runs that redis lost (it has their manifest). The server is read once a reconcile, by the runs, or by the agent
   when no run did (an INFO reply is 0.6 kB, read twice a reconcile before).

While its views change (a push arrived, representants are taking their slots) it looks again after a fraction of
the period (`cluster.scope.FollowUp`), so that an overlay forms in well under a period.

If redis cannot be reached it says so once (then every minute) and retries every period; the fetches under way
go on with the peers they have, and nothing is lost when redis comes back: every key is rewritten by its owner.

Transfers are fetched one at a time, highest priority first (older first among equals); a higher-priority push
preempts a running fetch, whose verified blocks stay in the store for later. The agent keeps serving everything
it holds complete.

The node id (the cluster identity in redis) is the public key of the agent's identity (`cluster.identity`: made
by `swarmproxy cluster admit`, the owner's admission inside), so a restarted agent re-reads its role: its slots are
still under its id. Everything it writes under that id is sealed with it, and it believes only the records of
agents a trusted owner admitted. The block store is re-verified on start (`swarm.store.disk`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import logging
import os
import pathlib
import shutil
import time
from collections.abc import Container, Iterable
from dataclasses import dataclass, field

from cluster.coord import Coord
from cluster.discovery import RedisDiscovery
from cluster.division import provider_order
from cluster.errors import BadRecord, ConfigError, RedisUnavailable
from cluster.identity import Gate, Identity
from cluster.intent import CANCEL, PUSH, Ledger, SignedIntent
from cluster.lab_stage import stage
from cluster.overlay import Level, Location
from cluster.records import (
    DISK_RESERVE,
    KEY_TTL,
    NAMESPACE,
    RECONCILE_EVERY,
    SLOT_TTL,
    AgentRecord,
    MemberRecord,
    TransferRecord,
)
from cluster.run import STALL_TIMEOUT, TransferRun
from cluster.scope import FollowUp
from cluster.throttle import RESERVE, Capacities, Planner, cpu_idle_between, parse_proc_stat
from cluster.transport import LeveledTransport
from cluster.turns import BENCHED_PERIODS, STARVED_PERIODS, Turns
from swarm.service.swarm_service import SwarmService
from swarm.store.disk import DiskBlockStore

__all__ = ["Agent", "AgentConfig"]

log = logging.getLogger("swarmproxy.cluster")

LINGER = 30 * 86400.0  # s a complete transfer stays shared: the cluster's content is wanted until cancelled
PROVIDER_WAIT = 1.0  # s to collect providers from redis (one round trip; the default is for the DHT)
# Peers a fetch takes: every one the overlay lets it talk to, up to the connections a serving node accepts
# (`SwarmNode(max_peers=)`); the proxy's 16 would leave some out of a rack of 20, at random.
FETCH_PEERS = 64
UNREACHABLE_REPEAT = 60.0  # s between repeated "redis unreachable" warnings


@dataclass
class AgentConfig:
    redis_url: str
    dc: str
    rack: str
    host: str = "127.0.0.1"
    port: int = 0
    data_dir: pathlib.Path = field(default_factory=lambda: pathlib.Path("."))
    name: str = ""
    namespace: str = NAMESPACE
    reconcile: float = RECONCILE_EVERY
    key_ttl: float = KEY_TTL
    slot_ttl: float = SLOT_TTL
    capacities: Capacities = field(default_factory=Capacities)
    reserve: float = RESERVE
    stall_timeout: float = STALL_TIMEOUT
    trusted_keys: frozenset[str] = frozenset()  # owner keys: whose signed pushes and cancels it acts on, and whose
    # admitted agents' reports it believes (`cluster.identity`)
    identity: Identity | None = None  # this agent's key and the owner's admission of it (required)
    disk_reserve: int = DISK_RESERVE  # bytes of the data dir's disk a transfer may never take


LEDGER_FILE = "intents.json"  # in the data dir: what the agent accepted, so a restart refuses the same replays


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.data_dir = pathlib.Path(config.data_dir)
        self.location = Location(config.dc, config.rack)
        self.name = config.name or f"{config.host}"
        if config.identity is None:
            raise ConfigError("an agent needs its identity: --identity FILE (made by `swarmproxy cluster admit`)")
        # Its id is its public key: a restarted agent (the same identity file) is the same member, and no record
        # can speak for another agent's id.
        self.identity = config.identity
        self.node_id, self.node = self.identity.node_id, self.identity.node
        # After redis restarted, non-holders leave free slots to their holders for as long as a slot outlives its
        # holder's last refresh anyway: a holder whose loop is slow (a busy host) still gets its slot back.
        self.grace = config.slot_ttl
        self.stall_timeout = config.stall_timeout
        self.stage = stage()  # the lab's switch (`cluster.lab_stage`); unset: every feature on
        self.coord = Coord(config.redis_url, config.namespace, key_ttl=config.key_ttl, slot_ttl=config.slot_ttl,
                           identity=self.identity, gate=Gate(config.trusted_keys))
        self.store = DiskBlockStore(self.data_dir / "blocks")
        self.planner = Planner(config.capacities, reserve=config.reserve)
        self.transport = LeveledTransport(self.location, self.location_of_host, self.planner.meter.on_bytes)
        self.discovery = RedisDiscovery(self.coord, self.node_id, config.host, allowed=self._allowed,
                                        candidates=self._candidates)
        self.service = SwarmService(self.store, {"tcp": self.transport}, self.discovery, linger=LINGER,
                                    provider_wait=PROVIDER_WAIT, node_id=self.node_id, shown=self._shown,
                                    upload_throttle=self.transport.upload_throttle,
                                    provider_refresh=(), provider_topup=config.reconcile,
                                    provider_rank=self.provider_rank, fetch_peers=FETCH_PEERS)
        # Learnt from the member records read (`learn`), merged, never shrunk: an agent's location does not
        # change, and after redis restarted empty a peer that has not rewritten its record yet would otherwise
        # count as "outside" for a period.
        self.locations: dict[str, Location] = {}
        self.by_host: dict[str, Location] = {}
        self.runs: dict[str, TransferRun] = {}
        self.known_transfers: dict[str, TransferRecord] = {}
        self.changed = asyncio.Event()
        self.woken = asyncio.Event()
        self.address: tuple[str, int] | None = None
        self.server_id: str | None = None
        self.unreachable_since: float | None = None
        self._warned_at = 0.0
        self._cpu: tuple[int, int] | None = None
        self._rate_mark: tuple[float, int] = (time.monotonic(), 0)
        self._rate = 0.0
        self._tasks: set[asyncio.Task] = set()
        self.ledger = Ledger(_read_json(self.data_dir / LEDGER_FILE))
        self.turns = Turns(STARVED_PERIODS * config.reconcile, BENCHED_PERIODS * config.reconcile)
        self.refused: dict[str, str] = {}  # transfer id -> why its push or cancel was refused (said once)
        self.refused_intents: dict[str, str] = {}  # transfer id -> the push refused (a changed record is judged anew)

    # -- lookups for the transport and discovery ----------------------------------------------------------------

    def location_of_host(self, host: str) -> Location | None:
        return self.by_host.get(host)

    def location_of_node(self, node: str) -> Location | None:
        return self.location if node == self.node else self.locations.get(node)

    def learn(self, records: Iterable[MemberRecord]) -> None:
        """Where the members read are, and their addresses: the transport's levels and counters need them."""
        for record in records:
            if (location := record.location) is not None:
                self.locations[record.node] = location
                if record.host:
                    self.by_host[record.host] = location

    def _shown(self, root: bytes, peer: bytes) -> Container[int] | None:
        """What a peer we serve is shown (the engine's `shown` hook): its share of the entry plan, by the id it
        gave in its handshake, which is its cluster id; everything of a root no run is about."""
        run = next((r for r in self.runs.values() if r.root == root), None)
        return None if run is None or not self.stage.division else run.shown(peer.hex())

    def _allowed(self, root: bytes, node: str) -> bool:
        run = next((r for r in self.runs.values() if r.root == root), None)
        return run is not None and (not self.stage.overlay or run.may_talk(node))

    def _candidates(self, root: bytes) -> list[str] | None:
        """The only providers worth looking up: those in the run's view (no run: any, as before), in the order
        a fetch takes them (`provider_order`): the service keeps the first `PROVIDER_POOL` found."""
        run = next((r for r in self.runs.values() if r.root == root), None)
        if run is None or not self.stage.overlay:  # (the lab's stage without the overlay: every provider)
            return None
        view = run.view

        def order(node: str) -> int:
            return provider_order(view.members[node].seeder, int(view.level(self.node, node)), run.gives(node))

        return sorted((n for n in view.members if run.may_talk(n)), key=order)

    def distance(self, connection) -> int:
        """How far a peer is (rack 0, DC 1, outside 2): the engine leaves a block to a nearer peer that is fetching
        it (START) or holds it (nearest first) rather than ask a farther one (`swarm.core.starts`)."""
        return int(self.transport.level_of(connection.remote_address[0]))

    def provider_rank(self, provider) -> int:
        """Which providers a fetch takes first when it cannot take all (more than FETCH_PEERS): a transfer's
        seeder (the root members' only source), then the nearest (rack, DC, outside), at each distance first
        those the entry plan has show us blocks (`cluster.division.provider_order`). With the engine's nearest
        first, a rack peer left out would let both of a rack's representants pull the same blocks across the
        uplink; so the fetch also looks for new providers every reconcile period (a rack peer announces when its
        fetch starts), not on the engine's DHT-paced schedule of up to 8 s."""
        node = provider.node_id.hex()
        seeder = any(run.record.seeder == node for run in self.runs.values())
        gives = any(run.gives(node) for run in self.runs.values())
        return provider_order(seeder, int(self.transport.level_of(provider.host)), gives)

    def receive_rate(self) -> float:
        return self._rate

    # -- life -----------------------------------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        self.address = await self.service.start(self.config.host, self.config.port)
        log.info("cluster agent %s (%s) on %s:%d, node %s", self.name, self.location, *self.address, self.node[:16])
        return self.address

    async def run(self, stop: asyncio.Event) -> None:
        await self.start()
        self._spawn(self._throttle_loop())
        try:
            await self.coordinate(stop)
        finally:
            await self.close()

    async def coordinate(self, stop: asyncio.Event) -> None:
        """Reconcile every period, sooner while the views change (`FollowUp`), at once when woken; until `stop`."""
        follow_up = FollowUp(self.config.reconcile)
        self._spawn(self.coord.listen_wake(self.woken))
        while not stop.is_set():
            # A pending plan is looked for sooner only after a reconcile that read what it reads: while redis is
            # away, or a reconcile fails, the next look would fail too, and the period paces the retries.
            looked = False
            try:
                await self.reconcile()
                looked = self.unreachable_since is None
            except Exception:  # noqa: BLE001 - the loop must outlive anything redis holds; the next period retries
                log.exception("reconcile failed; retrying in %g s", self.config.reconcile)
            self.woken.clear()
            runs = [r for r in self.runs.values() if not r.cancelled]
            dues = [due for r in runs if (due := r.stillness.due()) is not None] if looked else []
            wait = follow_up.wait(any(r.view_changed for r in runs), min(dues, default=None),
                                  asyncio.get_running_loop().time())  # the runs' `Stillness` clock
            waits = [asyncio.ensure_future(e.wait()) for e in (stop, self.woken)]
            await asyncio.wait(waits, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waits:
                waiter.cancel()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.service.stop()
        await self.coord.close()
        self.store.close()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- reconcile ------------------------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        self._update_rate()
        try:
            await self._reconcile()
        except RedisUnavailable as exc:
            if self.unreachable_since is None or time.monotonic() - self._warned_at > UNREACHABLE_REPEAT:
                log.warning("%s; retrying every %g s (transfers under way go on with the peers they have)",
                            exc, self.config.reconcile)
                self._warned_at = time.monotonic()
            self.unreachable_since = self.unreachable_since or time.monotonic()
            return
        if self.unreachable_since is not None:
            log.warning("redis is reachable again after %.1f s; state rewritten",
                        time.monotonic() - self.unreachable_since)
            self.unreachable_since = None
        self.changed.set()

    async def _reconcile(self) -> None:
        assert self.address is not None
        record = AgentRecord(self.address[0], self.address[1], self.location.dc, self.location.rack, self.name)
        # Written for the pusher and `status`; not read back: every agent reading every agent's record every
        # period would be N² reads. The peers' locations come with their member records (`learn`).
        await self.coord.put_agent(self.node, record)
        await self.discovery.refresh()
        transfers = await self.coord.transfers(self.known_transfers)  # a known record is not read again
        self.known_transfers = dict(transfers)
        reads = self.coord.server_reads
        cancels = await self.coord.cancelled(set(transfers) | set(self.runs))
        cancelled = {tid for tid, text in cancels.items() if self._admit(tid, text, CANCEL) is not None}
        for tid in cancelled & set(self.runs):
            self._cancel(self.runs[tid])
        for tid, transfer in transfers.items():
            if tid not in self.runs and tid not in cancelled and self._targeted(transfer):
                self._begin(transfer)
        now = time.monotonic()
        for run in list(self.runs.values()):
            if run.refused:  # said in its member record, and nothing else: it takes no part
                await self.coord.put_member(run.tid, run.member_record())
            elif not run.cancelled:
                self.turns.observe(run.tid, run.verified(), now)
                await run.reconcile(self.coord)
        # The server as a run read it after its view, else read now: after the transfers either way, so a restart
        # that emptied redis before they were read is seen here at the latest.
        server_id = self.coord.last_server if self.coord.server_reads != reads else await self.coord.server_id()
        if self.server_id not in (None, server_id):
            for tid, run in self.runs.items():
                # Redis restarted and may have lost it (before or after the transfers were read): we have its
                # manifest, put it back if it is missing (SET NX).
                if not run.cancelled:
                    await self.coord.put_transfer(run.record, only_if_missing=True)
                    self.known_transfers[tid] = run.record
        self.server_id = server_id  # only now: a reconcile cut short by redis going away again is redone whole
        self.service.reveal()  # the plan may show peers more now

    def _targeted(self, transfer: TransferRecord) -> bool:
        return fnmatch.fnmatchcase(f"{self.location.dc}/{self.location.rack}/{self.name}", transfer.hosts)

    def _admit(self, tid: str, text: str | bytes | None, action: str,
                fields: tuple | None = None) -> SignedIntent | None:
        """The signed intent `text` if the agent may act on it for transfer `tid` now (and notes it), else None:
        unsigned, signed by a key it does not trust, not for this transfer (`fields`: what the record says:
        name, priority, hosts, root, size), a replay or a rollback (`cluster.intent.Ledger`). Said once."""
        try:
            signed = SignedIntent.load(text)
        except BadRecord as exc:
            self._refuse(tid, action, str(exc))
            return None
        intent = signed.intent
        if intent.action != action or intent.tid != tid or (fields is not None and fields != (
                intent.name, intent.priority, intent.hosts, intent.root, intent.size)):
            self._refuse(tid, action, "its signed intent is for another transfer or other fields")
            return None
        if (problem := self.ledger.judge(signed, self.config.trusted_keys, time.time())) is not None:
            self._refuse(tid, action, problem)
            return None
        if self.ledger.state().get(intent.name) != [intent.seq, intent.tid, action == CANCEL]:
            self.ledger.accept(signed)
            try:
                _write_json(self.data_dir / LEDGER_FILE, self.ledger.state())
            except OSError as exc:  # a full disk: this run remembers it; a restart before the next write would not
                log.warning("cannot save what this agent accepted in %s: %s", LEDGER_FILE, exc.strerror or exc)
        self.refused.pop(tid, None)
        return signed

    def _refuse(self, tid: str, action: str, why: str) -> None:
        if self.refused.get(tid) != why:
            self.refused[tid] = why
            log.warning("transfer %s: refusing its %s: %s", tid, action, why)
        return None

    def _begin(self, transfer: TransferRecord) -> None:
        if self.refused_intents.get(transfer.tid) == transfer.intent:
            return  # refused before, unchanged since: not decoded and judged again every period
        try:
            run = TransferRun(self, transfer)
        except BadRecord as exc:
            log.warning("ignoring %s", exc)
            self.refused_intents[transfer.tid] = transfer.intent
            return
        fields = (transfer.name, transfer.priority, transfer.hosts, run.root.hex(), run.manifest.size)
        if self._admit(transfer.tid, transfer.intent, PUSH, fields) is None:
            self.refused_intents[transfer.tid] = transfer.intent
            return
        self.runs[transfer.tid] = run
        if (short := self._short_of_space(run)) is not None:  # reported in its member record; a restart asks again
            run.refused = short
            log.warning("transfer %s: refusing it: %s", run.tid, short)
            return
        for older in [r for r in self.runs.values() if r.record.name == transfer.name and r is not run
                      and not r.cancelled and not r.refused]:
            log.info("transfer %s: replaced by %s, a later push of %s", older.tid, transfer.tid, transfer.name)
            self._cancel(older)  # its copy in files/ is replaced once the new one is complete
        log.info("transfer %s: %s, %d bytes, priority %d", run.tid, transfer.name, run.manifest.size,
                 transfer.priority)
        run.fetch_task = self._spawn(run.fetch_loop(self.may_fetch, self.changed))

    def _short_of_space(self, run: TransferRun) -> str | None:
        """Why the data dir's disk cannot take `run`'s missing bytes and keep `disk_reserve` free, or None."""
        try:
            free = shutil.disk_usage(self.data_dir).free
        except OSError as exc:
            return f"cannot tell the free space of {self.data_dir}: {exc.strerror or exc}"
        if run.missing_at_start > free - self.config.disk_reserve:
            return (f"not enough disk space: {run.missing_at_start} bytes to fetch, {free} free, "
                    f"{self.config.disk_reserve} kept in reserve")
        return None

    def _cancel(self, run: TransferRun) -> None:
        if run.cancelled:
            return
        run.cancelled = True
        self.turns.forget(run.tid)
        self.changed.set()  # its fetch loop sees `cancelled` and stops
        if run.done.is_set():
            log.info("transfer %s: cancelled; the complete copy stays in files/", run.tid)
        else:
            self._spawn(self._drop(run))

    async def _drop(self, run: TransferRun) -> None:
        if run.fetch_task is not None:  # the store entry goes only once the fetch writing into it has stopped
            await asyncio.gather(run.fetch_task, return_exceptions=True)
        log.info("transfer %s: cancelled; dropping what was fetched", run.tid)
        self.service.abandon(run.root)  # unserved and dropped from the store ...
        self.service.withdraw(run.root, "transfer cancelled")  # ... and no longer announced in redis

    def may_fetch(self, run: TransferRun) -> bool:
        """One fetch at a time, highest priority first, none that starves (`cluster.turns`): may `run` go?"""
        waiting = [(r.record.sort_key(), r.tid) for r in self.runs.values()
                   if not r.cancelled and not r.refused and not r.done.is_set()]
        return self.turns.pick(waiting, time.monotonic()) == run.tid

    # -- measured rates, CPU, throttle ----------------------------------------------------------------------------

    def _update_rate(self) -> None:
        received = sum(self.transport.received.values())
        then, before = self._rate_mark
        now = time.monotonic()
        if now > then:
            self._rate = (received - before) / (now - then)
        self._rate_mark = (now, received)

    def _cpu_idle(self) -> float | None:
        try:
            sample = parse_proc_stat(pathlib.Path("/proc/stat").read_text())
        except OSError:
            return None
        if sample is None:
            return None
        before, self._cpu = self._cpu, sample
        return None if before is None else cpu_idle_between(before, sample)

    async def _throttle_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.transport.tally()  # the planner's measured rates include the bytes sent until now
            limits = self.planner.plan(loop.time(), self._cpu_idle())
            self.transport.set_limits(limits, loop.time())
            await asyncio.sleep(self.planner.every)  # the plan's period: nothing to wait for but time

    def limits(self) -> dict[Level, float | None]:
        return dict(self.planner.limits)


def _read_json(path: pathlib.Path) -> dict:
    """A small state file, or {} when it is missing or damaged (the agent then knows less, never more)."""
    with contextlib.suppress(OSError, ValueError):
        value = json.loads(path.read_text())
        if isinstance(value, dict):
            return value
    return {}


def _write_json(path: pathlib.Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(value, sort_keys=True))
    os.replace(tmp, path)
