"""`TransferRun`: one agent's part in one transfer — its overlay role, its member record, and its fetch.

Every reconcile period (`reconcile`): write this member's record (PENDING or FINISHED, progress, bytes by level,
role, location), read the part of the overlay it acts on (`cluster.scope`: its rack, and for a representant the
representants above it), let the overlay core (`cluster.overlay.Representation`) decide which slots to refresh,
take back or claim, and do it with `SET NX` / a guarded refresh.

The fetch (`fetch_loop`) runs `SwarmService.fetch` with the providers the overlay allows, whenever the agent's
scheduler lets this transfer go (higher priority first); it stops early when preempted or cancelled (what it
verified stays in the store) and starts again, from the store, when allowed. Every block is verified against the
manifest's layer, itself checked against the root the pusher published, before it is stored as valid.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pathlib
import time
from collections.abc import Callable, Container

from cluster.coord import Coord
from cluster.division import EntryPlan
from cluster.errors import BadRecord, RedisUnavailable
from cluster.lag import LagWatch
from cluster.overlay import Level, Representation, Slot, View, merged
from cluster.records import FINISHED, PENDING, REFUSED, MemberRecord, TransferRecord
from cluster.scope import Stillness, assemble
from cluster.scope import deep as scope_deep
from cluster.stalls import STRANDED_KEPT, StallWatch, stranded_by
from swarm.content.manifest import Manifest, decode
from swarm.core.policy import PolicyConfig
from swarm.errors import FetchFailed, HashMismatch, StoreError, SwarmError
from swarm.service.swarm_service import SwarmService

__all__ = ["TransferRun"]

log = logging.getLogger("swarmproxy.cluster")

STALL_TIMEOUT = 60.0  # s without a verified block before a fetch is restarted with fresh providers


def manifest_of(record: TransferRecord) -> tuple[Manifest, list[bytes]]:
    """The manifest and layer a pusher published, the layer checked against the manifest's root."""
    try:
        manifest = decode(record.unpack(record.manifest))
        layer = record.layer_hashes()
        manifest.verify_layer(layer)
    except (SwarmError, ValueError) as exc:  # ManifestError, HashMismatch
        raise BadRecord(f"transfer {record.tid}: {exc}") from None
    return manifest, layer


class TransferRun:
    def __init__(self, agent, record: TransferRecord) -> None:
        self.agent = agent
        self.record = record
        self.tid = record.tid
        self.manifest, self.layer = manifest_of(record)
        self.root = self.manifest.root
        self.node: str = agent.node
        self.rep = Representation(self.node, grace=agent.grace)
        self.view = View()
        self.plan = EntryPlan(self.view, self.manifest.num_blocks)
        self.stillness = Stillness(agent.config.reconcile)
        self.stalls = StallWatch()
        self._stranded: dict[str, frozenset[str]] = {}  # who names stopped sources (`cluster.stalls`), last read
        self.lag = LagWatch(self.node)  # a root member behind the others' shares: the pusher's flow first
        self.cancelled = False
        self.refused = ""  # why this agent will not take it (disk space): reported, never fetched
        self.done = asyncio.Event()
        self.started = time.time()
        self.finished_at = 0.0
        self.resumed_with = self.verified()  # blocks already verified in the store when this run began
        # Bytes still missing then: whatever is received beyond them was fetched twice (endgame duplicates, or
        # blocks received but not yet stored when a killed agent died).
        self.missing_at_start = self.manifest.size - sum(
            self.manifest.block_span(b)[1] for b in self._held_blocks())
        self.fetch_task: asyncio.Task | None = None
        if self.resumed_with:
            log.info("transfer %s: resuming with %d of %d blocks verified in the store", self.tid,
                     self.resumed_with, self.manifest.num_blocks)

    @property
    def service(self) -> SwarmService:
        return self.agent.service

    def verified(self) -> int:
        store = self.agent.store
        with contextlib.suppress(StoreError, KeyError):
            if self.root in store:
                return store.info(self.root).verified
        return 0

    def _held_blocks(self) -> list[int]:
        store = self.agent.store
        with contextlib.suppress(StoreError, KeyError):
            if self.root in store:
                return list(store.have(self.root).blocks())
        return []

    def complete(self) -> bool:
        with contextlib.suppress(StoreError):
            return self.root in self.agent.store and self.agent.store.complete(self.root)
        return False

    # -- the overlay --------------------------------------------------------------------------------------------

    def role(self) -> str:
        if self.view.is_dc_rep(self.node):
            return "dc"
        return "rack" if self.view.is_rack_rep(self.node) else "peer"

    def member_record(self) -> MemberRecord:
        transport = self.agent.transport
        verified = self.verified()
        location, address = self.agent.location, self.agent.address
        return MemberRecord(
            node=self.node, dc=location.dc, rack=location.rack, host=address[0] if address else "",
            state=REFUSED if self.refused else FINISHED if self.done.is_set() else PENDING, reason=self.refused,
            verified=verified,
            blocks=self.manifest.num_blocks, role=self.role(), rate=self.agent.receive_rate(),
            fetching=self.agent.may_fetch(self),
            received={level.label: n for level, n in transport.received.items()},
            sent={level.label: n for level, n in transport.sent.items()},
            extra_bytes=max(0, sum(transport.received.values()) - self.missing_at_start),
            hash_failures=self.agent.service.nodes["tcp"].fetch_totals.hash_failures,
            banned=self.agent.service.nodes["tcp"].fetch_totals.banned,
            started=self.started, finished=self.finished_at, resumed=self.resumed_with,
            stranded=tuple(peer.hex() for peer in self.service.stranded(self.root)[:STRANDED_KEPT]),
            root=self.manifest.root.hex(), name=self.record.name)

    async def _read(self, coord: Coord, deep: bool) -> tuple[View, dict[str, MemberRecord]]:
        records, holders = await coord.scope(self.tid, self.agent.location, deep)
        self.agent.learn(records.values())
        return assemble(records, holders), records

    async def reconcile(self, coord: Coord) -> None:
        await coord.put_member(self.tid, self.member_record())
        deep = scope_deep(self.view, self.node, self.rep.held)
        view, records = await self._read(coord, deep)
        if not deep and view.is_rack_rep(self.node):  # restarted: its slots are still under its id
            deep = True
            view, records = await self._read(coord, deep)
        # The server read *after* the view: had redis restarted empty between an earlier read of it and the view,
        # the empty slots would look free to claim before their holders could take them back.
        server_id, uptime = await coord.server()
        self.rep.on_server(server_id, uptime, self.record.server)
        if self.rep.recovering:
            # Redis came back empty: who has not rewritten its keys yet is still there. Dropping it would redraw
            # the entry plan (and what was revealed is never taken back) and cut peers off for nothing. Our own
            # slots excepted: we see them as they are, to take them back.
            view = merged(self.view, view, keep_own=self.node)
        plan = self.rep.plan(view)
        for slot in plan.refresh:
            if not await coord.refresh(self.tid, slot, self.node):
                log.warning("transfer %s: lost the %s slot while refreshing it", self.tid, _name(slot))
        for slot in plan.retake:
            if await coord.claim(self.tid, slot, self.node):
                view.holders[slot] = self.node
        for slot in plan.lost:
            log.warning("transfer %s: another node holds our %s slot since redis restarted; stepping aside",
                        self.tid, _name(slot))
        claims = plan.claim
        while claims:
            for slot in claims:
                if await coord.claim(self.tid, slot, self.node):
                    self.rep.on_claimed(slot)
                    log.info("transfer %s: representant of %s", self.tid, _name(slot))
                    if not deep:  # a new rack representant stands for its DC on what the levels above say
                        deep = True
                        view, records = await self._read(coord, deep)
                    view.holders[slot] = self.node
                    break
                holder = (await coord.holders(self.tid, [slot])).get(slot)
                if holder is not None:
                    view.holders[slot] = holder
            else:
                break
            claims = self.rep.plan(view).claim  # a rack representant may stand for its DC next
        now = asyncio.get_running_loop().time()
        stalled = self.stalls.observe_round(records, now)  # work stealing (`cluster.division`): shown everything
        if not self.agent.stage.stealing:  # the lab's stage without work stealing (`cluster.lab_stage`)
            stalled = frozenset()
        before, was_lagging = self.role(), self.lag.lagging
        self.set_view(view, now)
        if stalled - self.plan.stalled:
            log.info("transfer %s: no progress for %g s from %s: shown every block", self.tid, self.stalls.after,
                     ", ".join(sorted(n[:12] for n in stalled - self.plan.stalled)))
        self.plan.stalled = stalled
        stranded = stranded_by(records, view.members) if self.agent.stage.stealing else {}
        if set(stranded.items()) - set(self._stranded.items()):
            log.info("transfer %s: requests timed out on the only sources of some blocks: %s",
                     self.tid, "; ".join(f"{node[:12]} on {', '.join(sorted(s[:12] for s in sources))}"
                                         for node, sources in sorted(stranded.items())))
        self.plan.stranded = self._stranded = stranded
        if self.agent.stage.division and self.lag.observe(self.plan.root, records, self.manifest.block_size) \
                and not was_lagging:
            log.info("transfer %s: our share from the pusher lags the other root members': its flow first",
                     self.tid)
        if self.role() != before:
            await coord.put_member(self.tid, self.member_record())

    def set_view(self, view: View, now: float) -> None:
        self.view = view
        # The entry plan depends on who is there and who holds which slot only. A block once shown is never taken
        # back, so a new plan is drawn only from a view that stood still for half a period (`cluster.scope.Stillness`):
        # not while a rack's representants are still taking their slots one after the other (every node then
        # agrees on the plan).
        signature = (frozenset(view.members), frozenset(view.holders.items()))
        if self.stillness.observe(signature, now):
            self.plan = EntryPlan(view, self.manifest.num_blocks)
            log.debug("transfer %s: entry plan drawn from %d members, %d slots held", self.tid, len(view.members),
                      len(view.holders))

    @property
    def view_changed(self) -> bool:
        """Whether the last reconcile's view differed from the one before (`cluster.scope.FollowUp`)."""
        return self.stillness.changed

    def shown(self, node: str | None) -> Container[int] | None:
        """The blocks this node shows `node` when serving it (`cluster.division.EntryPlan`); nothing to a peer
        not in the view yet: the next reconcile reveals what it may see."""
        if node is None or node not in self.view.members:
            return frozenset()
        return self.plan.shown(self.node, node)

    def gives(self, node: str) -> bool:
        """Whether `node` is to show this node blocks (`EntryPlan.gives`); every peer in the lab's stages before
        the division."""
        return node in self.view.members and (not self.agent.stage.division or self.plan.gives(node, self.node))

    def may_talk(self, node: str) -> bool:
        return self.view.may_talk(self.node, node)

    def pusher(self, peer_id: bytes) -> bool:
        """The fetch's `priority` hook: whether a peer, by the node id its handshake gave (its cluster id, as
        `shown` is asked by), is this transfer's seeder, whose flow the other sources make room for
        (`PolicyConfig.priority_others`). The pusher's uplink feeds every root member; beside their 64 peers its
        flow got a sliver of their downlinks, and it idled. By id, not by the address the provider record gave:
        a hostname or another spelling of an IPv6 address would match no connection's address, silently."""
        return peer_id.hex() == self.record.seeder

    def policy(self) -> PolicyConfig:
        """The node's request policy, with the pusher's flow first while this root member's share lags
        (`cluster.lag`): its far sources held to `PolicyConfig.priority_far_others` while the pusher has blocks
        for it."""
        return dataclasses.replace(self.service.nodes["tcp"].policy or PolicyConfig(), priority_first=self.lag)

    # -- fetching -----------------------------------------------------------------------------------------------

    async def fetch_loop(self, allowed: Callable[[TransferRun], bool], changed: asyncio.Event) -> None:
        """Fetch until complete (or cancelled), whenever `allowed(self)`. Between attempts it waits for `changed`
        (set after every reconcile) or one period, whichever comes first: redis may be away."""
        while not self.complete():
            if self.cancelled:
                return
            if not allowed(self):
                await self._wait(changed)
                continue
            providers = await self.service.providers(self.root)
            if not providers:
                await self._wait(changed)  # the next reconcile, or a wake-up, may bring some
                continue
            try:
                # Rarest first over the whole file, not a streaming window at the delivery point (every member
                # would ask the level above for the same first blocks), into the store rather than held in
                # memory until delivered in order; and START across levels (`Agent.distance`).
                chunks = self.service.fetch(self.manifest, self.service.pick(providers, self.manifest),
                                            layer=self.layer, stall_timeout=self.agent.stall_timeout, window=0,
                                            into_store=True,
                                            distance=self.agent.distance if self.agent.stage.stealing else None,
                                            priority=self.pusher, policy=self.policy())
                async with contextlib.aclosing(chunks):
                    async for _ in chunks:
                        if self.cancelled or not allowed(self):  # preempted: what it verified stays stored
                            break
            except FetchFailed as exc:
                log.info("transfer %s: fetch stopped (%s); starting again with fresh providers", self.tid, exc)
                await self._wait(changed)
        if not self.cancelled:
            await self._finish()

    async def _wait(self, changed: asyncio.Event) -> None:
        changed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(changed.wait(), self.agent.config.reconcile)

    async def _finish(self) -> None:
        self.service.completed(self.manifest)
        self.finished_at = time.time()
        try:
            await asyncio.to_thread(self.export)
        except (OSError, StoreError, HashMismatch) as exc:
            # Verified and served, but not under its name: the push must not count it as held (it says why).
            self.refused = f"cannot write files/{self.record.name}: {getattr(exc, 'strerror', None) or exc}"
            log.warning("transfer %s: %s", self.tid, self.refused)
        self.done.set()
        log.info("transfer %s: complete (%d bytes, %s)", self.tid, self.manifest.size, self.record.name)
        with contextlib.suppress(RedisUnavailable):
            await self.agent.coord.put_member(self.tid, self.member_record())
            await self.agent.coord.wake_up()

    def export(self) -> pathlib.Path:
        """The content as a file in the data dir's `files/`: a hard link to the store's verified data file (no
        copy), else a copy of every block read back verified. A file of that name holding other bytes (an older
        push of the name) is replaced at once (a rename): a reader sees the old file or the new one, never a mix.
        """
        files = self.agent.data_dir / "files"
        files.mkdir(parents=True, exist_ok=True)
        target = files / (pathlib.Path(self.record.name).name or self.tid)
        store = self.agent.store
        location = store.block_location(self.root, 0) if self.manifest.size else None
        with contextlib.suppress(OSError):
            if location is not None and os.path.samefile(location.path, target):
                return target  # already this content, linked
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        try:
            if location is not None:
                os.link(location.path, tmp)
            else:
                raise OSError("no data file")
        except OSError:
            with open(tmp, "wb") as out:
                for block in range(self.manifest.num_blocks):
                    out.write(store.read_block(self.root, block, verify=True))
        os.replace(tmp, target)
        return target


async def read_view(coord: Coord, tid: str) -> tuple[View, dict[str, MemberRecord]]:
    """A transfer's whole overlay, every member and every slot holder, as redis has them now; and the member
    records they come from. For the pusher and `status` (one reader, O(N)); an agent reads its part (`_read`)."""
    records = await coord.members(tid)
    view = assemble(records, {})
    view.holders = await coord.holders(tid, view.slots())
    return view, records


def _name(slot: Slot) -> str:
    return f"rack {slot.dc}/{slot.rack}" if slot.level is Level.RACK else f"DC {slot.dc}"
