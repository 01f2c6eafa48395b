"""The initial seeder (`swarmproxy cluster push FILE`): publish a transfer in redis, seed it, wait for the agents.

The pusher hashes FILE (the block engine's manifest: merkle root over 16 KiB leaves and the block hash layer),
stores it by hard link where it can (`DiskBlockStore.adopt`: no copy), starts a `SwarmService` that serves it,
and publishes the transfer record (manifest + layer + priority + which hosts) with its own member record as the
seeder, which sits in the root group of the overlay. Then, every period, it rewrites both (a redis restart loses
nothing) and its announcement, and waits until every agent it targets is FINISHED — the agents alive then, and
those that join while it runs (a late rack). It exits 0 only then; it exits 1 naming the others once each has
refused the transfer, made no progress for `--give-up-after` s, or been away that long (its host died:
`cluster.patience`). With `--no-wait` it returns once the transfer is published: the agents then have only each
other, so use it only for content some agent already holds.

It believes only what agents a trusted owner admitted reported, sealed (`cluster.identity`): a ghost registered in
redis is not waited for, and a forged FINISHED counts for nothing. An agent is done when its report says it holds
this push's content root under this push's file name.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import pathlib
import sys
import tempfile
import time
from collections.abc import Container
from dataclasses import dataclass

from cluster.coord import Coord
from cluster.discovery import RedisDiscovery
from cluster.division import EntryPlan
from cluster.errors import BadRecord, ConfigError, PushIncomplete, RedisUnavailable, TransferCancelled
from cluster.identity import Gate, Identity
from cluster.intent import CANCEL, PUSH, Intent, SignedIntent, SigningKey
from cluster.lab_stage import stage as lab_stage
from cluster.overlay import DC_REPS, RACK_REPS, Level, Location, View, merged, recovering
from cluster.patience import GIVE_UP_AFTER, Patience
from cluster.records import (
    FINISHED,
    NAMESPACE,
    RECONCILE_EVERY,
    REFUSED,
    SLOT_TTL,
    TRANSFER_TTL,
    MemberRecord,
    TransferRecord,
    transfer_id,
)
from cluster.run import read_view
from cluster.scope import FollowUp, Stillness, slots_settled
from cluster.stalls import StallWatch, stranded_by
from cluster.transport import LeveledTransport
from swarm.content.manifest import Manifest
from swarm.service.swarm_service import SwarmService
from swarm.store.disk import DiskBlockStore

__all__ = ["PushConfig", "push", "signed_transfer"]

log = logging.getLogger("swarmproxy.cluster")


@dataclass
class PushConfig:
    file: pathlib.Path
    redis_url: str
    priority: int = 0
    hosts: str = "*"
    host: str = "127.0.0.1"
    port: int = 0
    data_dir: pathlib.Path | None = None
    namespace: str = NAMESPACE
    reconcile: float = RECONCILE_EVERY
    wait: bool = True
    timeout: float | None = None
    quiet: bool = False
    upload_rate: float | None = None
    key: SigningKey | None = None  # the owner's key: agents act only on pushes a key they trust signed
    # Owner keys besides `key` whose admitted agents' reports this push believes (`cluster.identity`).
    trusted: frozenset[str] = frozenset()
    give_up_after: float = GIVE_UP_AFTER  # s without progress after which an agent is no longer waited for
    # The rack the seeder's host sits in (`push --dc --rack`), None: outside every rack (`View.shares_with_seeder`)
    site: Location | None = None


@dataclass
class PushResult:
    tid: str
    root: str
    size: int
    seconds: float
    seeder_sent: int
    agents: int

    @property
    def seeder_ratio(self) -> float:
        return self.seeder_sent / self.size if self.size else 0.0


def targeted(records: dict, pattern: str) -> set[str]:
    return {node for node, r in records.items() if fnmatch.fnmatchcase(f"{r.dc}/{r.rack}/{r.name}", pattern)}


def site_to_say(site: Location | None, agents: dict, pattern: str) -> Location | None:
    """The rack the seeder says it sits in (`MemberRecord.site`), decided once at the push: `site` when the other
    racks of its DC, among the agents registered and targeted, can fill every DC slot; else None (the seeder's
    rack then takes part as any rack). Its rack's representants leave the DC's slots to the others
    (`View.shares_with_seeder`); slots left free would be taken by a rack that comes late, and the root's split
    drawn again: the seeder would send again what it had sent one root member to another (seeder ratio 1.31-1.36
    with Tekel's rack 3 five seconds late). The agents cannot judge it themselves: a representant reads only the
    racks of its DC that have representants already."""
    if site is None:
        return None
    per_rack: dict[Location, int] = {}
    for node in targeted(agents, pattern):
        record = agents[node]
        if record.dc == site.dc and record.rack != site.rack:
            where = Location(record.dc, record.rack)
            per_rack[where] = per_rack.get(where, 0) + 1
    return site if sum(min(RACK_REPS, count) for count in per_rack.values()) >= DC_REPS else None


def sequence() -> int:
    """A push's sequence number for its file name: milliseconds of the owner's clock, so a later push of a name
    outranks an earlier one without any state to keep (agents refuse a lower one: a rollback)."""
    return time.time_ns() // 1_000_000


def signed_transfer(manifest: Manifest, layer: list[bytes], name: str, key: SigningKey, *, priority: int = 0,
                    hosts: str = "*", seeder: str = "", server: str = "") -> TransferRecord:
    """The transfer record of a push of `manifest` as `name`, with the owner's signed intent in it."""
    tid = transfer_id(manifest.root)
    intent = Intent(PUSH, tid, name, manifest.root.hex(), manifest.size, priority, hosts, sequence(),
                    time.time() + TRANSFER_TTL)
    return TransferRecord(tid, name, TransferRecord.pack(manifest.encode()), TransferRecord.pack(b"".join(layer)),
                          priority, time.time(), seeder, hosts, server, key.sign(intent).dump())


def outcome(agents: dict, members: dict[str, MemberRecord], nodes: set[str],
            stuck: dict[str, float] | None = None, gone: dict[str, float] | None = None,
            refused: dict[str, str] | None = None) -> str:
    """What each of `nodes` holds, by name: unreachable (gone for `gone` s), refused (why: its record's reason, or
    `refused`'s), fetching (how far; given up after `stuck` s without progress), or nothing heard."""
    said = []
    stuck, gone, refused = stuck or {}, gone or {}, refused or {}
    for node in sorted(nodes, key=lambda n: agents[n].name if n in agents else n):
        name = agents[node].name if node in agents else node[:12]
        member = members.get(node)
        if node in gone:
            said.append(f"{name}: unreachable (gone for {gone[node]:.0f} s)")
        elif node in refused and (member is None or member.state != REFUSED):
            said.append(f"{name}: refused ({refused[node]})")
        elif member is None and node in stuck:
            said.append(f"{name}: nothing reported for {stuck[node]:.0f} s (given up)")
        elif member is None:
            said.append(f"{name}: nothing reported")
        elif member.state == REFUSED:
            said.append(f"{name}: refused ({member.reason})")
        elif node in stuck:
            said.append(f"{name}: {member.progress:.0%} fetched, no progress for {stuck[node]:.0f} s (given up)")
        else:
            said.append(f"{name}: {member.progress:.0%} fetched")
    return "; ".join(said)


def cancel_is_genuine(text: bytes | str | None, tid: str, key: SigningKey) -> bool:
    """Whether a cancel posted for `tid` was signed by the owner's key (anyone else's is ignored)."""
    try:
        signed = SignedIntent.load(text)
    except BadRecord:
        return False
    return signed.intent.action == CANCEL and signed.intent.tid == tid and signed.verify(frozenset({key.public})) \
        is None


async def push(config: PushConfig, stop: asyncio.Event | None = None) -> PushResult:
    stop = stop or asyncio.Event()
    if config.key is None:
        raise ConfigError("a push must be signed: --key FILE (made by `swarmproxy cluster keygen`)")
    # The seeder's own identity, admitted by the owner's key on the spot: agents believe its records as an agent's.
    identity = Identity.issue(config.key, "seeder")
    coord = Coord(config.redis_url, config.namespace, identity=identity,
                  gate=Gate(config.trusted | {config.key.public}))
    await coord.ping()  # a clear error now rather than a seeder nobody can find
    with tempfile.TemporaryDirectory(prefix="swarmproxy-push-") as scratch:
        store = DiskBlockStore(pathlib.Path(config.data_dir or scratch) / "blocks")
        node_id, node = identity.node_id, identity.node
        by_host: dict = {}
        plan: list[EntryPlan] = []  # the latest entry plan, once read

        stage = lab_stage()  # the lab's switch (`cluster.lab_stage`); unset: every feature on

        def shown(root: bytes, peer_id: bytes) -> Container[int] | None:
            if not stage.division:
                return None  # the lab's stages before work division: every block to everyone
            peer = peer_id.hex()
            if not plan or peer not in plan[0].view.members:
                return frozenset()  # not known yet: shown at the next period (`reveal`)
            return plan[0].shown(node, peer)

        transport = LeveledTransport(None, by_host.get)
        discovery = RedisDiscovery(coord, node_id, config.host)
        service = SwarmService(store, {"tcp": transport}, discovery,
                               node_kwargs={"upload_rate": config.upload_rate}, node_id=node_id, shown=shown,
                               upload_throttle=transport.upload_throttle)
        try:
            manifest = await service.nodes["tcp"].seed_file(config.file)
            layer = list(store.hash_layer(manifest.root))
            await service.start(config.host, config.port)
            record = signed_transfer(manifest, layer, config.file.name, config.key, priority=config.priority,
                                     hosts=config.hosts, seeder=node, server=await coord.server_id())
            tid = record.tid
            site = site_to_say(config.site, await coord.agents(), config.hosts)
            if config.site is not None and site is None:
                log.info("the other racks of %s cannot fill its %d DC slots: %s takes part as any rack (the "
                         "seeder's copy and other racks' blocks share its uplink)", config.site.dc, DC_REPS,
                         config.site)
            me = MemberRecord(node, FINISHED, verified=manifest.num_blocks, blocks=manifest.num_blocks, seeder=True,
                              role="seeder", started=time.time(), root=manifest.root.hex(), name=record.name,
                              dc=site.dc if site else "", rack=site.rack if site else "")
            await coord.put_transfer(record)
            await coord.put_member(tid, me)
            service.share(manifest)
            await service.settled()
            await coord.wake_up()
            address = service.address
            assert address is not None  # (started above)
            _say(config, f"pushing {config.file} ({manifest.size} bytes) as transfer {tid} "
                         f"from {address[0]}:{address[1]}")
            started = time.monotonic()
            seen: set[str] = set()  # every targeted agent registered at some point of the push
            finished: set[str] = set()  # those that reported the pushed root under its name (and may have left)
            known: dict = {}  # their registrations, for their names
            members: dict[str, MemberRecord] = {}
            looked = False  # the last read succeeded
            follow_up, stillness = FollowUp(config.reconcile), Stillness(config.reconcile)
            view = View()
            stalls = StallWatch()
            patience = Patience(config.give_up_after, gap=2 * config.reconcile)
            while config.wait:
                try:
                    await coord.put_transfer(record)
                    await coord.put_member(tid, me)
                    await discovery.refresh()
                    agents = await coord.agents()
                    alive = targeted(agents, config.hosts)
                    by_host.clear()
                    by_host.update({r.host: r.location for r in agents.values()})
                    fresh, members = await read_view(coord, tid)  # everyone: one reader, O(N) a period
                    now = asyncio.get_running_loop().time()
                    stalled = stalls.observe_round(members, now) if stage.stealing else frozenset()
                    given_up = patience.observe_round({n: m for n, m in members.items() if not m.seeder}, now,
                                                      alive)
                    server_id, uptime = await coord.server()
                    # As the agents do (`cluster.run`): after redis came back empty, absence is no departure.
                    view = merged(view, fresh) if recovering(server_id, uptime, record.server, SLOT_TTL) else fresh
                    signature = (frozenset(view.members), frozenset(view.holders.items()))
                    # A slice once shown is never taken back: show slices only once the root group has stood
                    # still for half a period, not while the representants are still taking their slots; looked at
                    # again sooner while it changes and until it stood (`FollowUp`), as the agents do. At once when
                    # every targeted agent is in and every slot held: nothing can change but a failure.
                    at_once = slots_settled(view, alive)
                    if stillness.observe(signature, now, at_once):
                        plan[:] = [EntryPlan(view, manifest.num_blocks)]
                        log.debug("transfer %s: entry plan drawn from %d members, %d slots held (settled: %s)", tid,
                                  len(view.members), len(view.holders), at_once)
                    if plan:
                        plan[0].stalled = stalled  # work stealing: a stalled member is shown all
                        plan[0].stranded = stranded_by(members, view.members) if stage.stealing else {}
                        service.reveal()
                    posted = (await coord.cancelled([tid])).get(tid)
                    if posted is not None and cancel_is_genuine(posted, tid, config.key):
                        raise TransferCancelled(f"transfer {tid} was cancelled before every agent held it")
                except RedisUnavailable as exc:
                    log.warning("%s; retrying every %g s", exc, config.reconcile)
                    looked = False  # no plan looked for sooner: the next look would fail too
                else:
                    looked = True
                    # An admitted agent that reported on this transfer took it up (it judged itself targeted):
                    # waited for even when its registration cannot be read (gone, or removed from the index).
                    seen |= alive | {n for n, m in members.items() if not m.seeder}
                    known.update(agents)
                    finished |= {n for n, m in members.items() if m.state == FINISHED and not m.seeder
                                 and m.root == me.root and m.name == me.name and n in seen}
                    refused = {n: m.reason for n, m in members.items() if m.state == REFUSED and n in seen}
                    # The same bytes pushed under another name are one transfer (its id is the content's): an agent
                    # that holds them under the first name does not take the second up, and says so.
                    refused |= {n: f"holds this content as {m.name!r}, not under a second name"
                                for n, m in members.items() if m.state == FINISHED and not m.seeder
                                and n in seen - finished and m.name != me.name}
                    stuck = {n: patience.waited(n) for n in given_up & seen - finished - set(refused)}
                    away = {n: patience.absent(n) for n in seen - alive - finished - set(refused)}
                    gone = {n: t for n, t in away.items() if t >= config.give_up_after}
                    # Waited for: every agent seen, until it holds the file, refused it, made no progress for
                    # --give-up-after, or has been away (its host died) that long; only the first is a success.
                    settled = finished | set(refused) | set(stuck)
                    if seen and alive <= settled and set(away) <= set(gone) | settled:
                        if refused or stuck or gone:
                            raise PushIncomplete(f"{len(finished)}/{len(seen)} agents hold {config.file.name}; "
                                                 + outcome(known, members, seen - finished, stuck, gone, refused))
                        break
                    _say(config, f"{len(finished)}/{len(seen)} agents finished, "
                                 f"seeder sent {service.bytes_uploaded / max(1, manifest.size):.3f} x the file")
                if config.timeout is not None and time.monotonic() - started > config.timeout:
                    raise PushIncomplete(f"not every agent finished within {config.timeout:g} s: "
                                         + outcome(known, members, seen - finished))
                wait = follow_up.wait(looked and stillness.changed, stillness.due() if looked else None,
                                      asyncio.get_running_loop().time())
                try:
                    await asyncio.wait_for(stop.wait(), wait)
                except TimeoutError:
                    continue
                if config.wait:  # interrupted (SIGINT, SIGTERM): not a success
                    raise PushIncomplete(f"interrupted with {len(finished)}/{len(seen)} agents holding "
                                         f"{config.file.name}: " + outcome(known, members, seen - finished))
                break
            result = PushResult(tid, manifest.root.hex(), manifest.size, time.monotonic() - started,
                                transport.sent[Level.OUTSIDE] + transport.sent[Level.DC] + transport.sent[Level.RACK],
                                len(seen))
            return result
        finally:
            await service.stop()
            store.close()
            await coord.close()


def _say(config: PushConfig, text: str) -> None:
    if not config.quiet:
        print(text, file=sys.stderr, flush=True)


def result_json(result: PushResult) -> str:
    return json.dumps({"transfer": result.tid, "root": result.root, "size": result.size,
                       "seconds": round(result.seconds, 3), "seeder_sent": result.seeder_sent,
                       "seeder_ratio": round(result.seeder_ratio, 4), "agents": result.agents})
