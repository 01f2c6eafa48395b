"""The redis shell: every read and write of the coordination state (`cluster.records` says what is where).

Each call either succeeds or raises `RedisUnavailable` with one line saying why (the server is down, refused the
command, timed out): callers in a loop log it and retry next period, commands print it and exit. A record that
does not parse is skipped (`BadRecord`), never trusted. With an identity, what this process writes under its node
id is sealed (`cluster.identity`); with a gate, only records an admitted agent sealed are read (the rest skipped).

Indexes (sets of ids) are pruned as their keys expire: a set member whose key is gone is removed when read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TypeVar

import redis.exceptions

from cluster.errors import BadRecord, ConfigError, RedisUnavailable
from cluster.fresh import DIGEST_HEX, ReadCache, WriteMemo
from cluster.identity import Gate, Identity
from cluster.overlay import Location, Slot, rack_slots
from cluster.records import (
    KEY_TTL,
    NAMESPACE,
    PRIMARY_TTL,
    SLOT_TTL,
    TRANSFER_TTL,
    AgentRecord,
    Keys,
    MemberRecord,
    ProviderRecord,
    TransferRecord,
    build,
    fields_of,
    unverified,
)
from cluster.redis_url import client, describe, redacted
from cluster.scope import across, empty_dcs, empty_racks, rep_racks

__all__ = ["Coord", "redacted"]

log = logging.getLogger("swarmproxy.cluster")

T = TypeVar("T")

CALL_TIMEOUT = 3.0  # seconds for one redis call, connecting included: a dead server is noticed this fast
WAKE_RETRY = 1.0  # seconds between attempts to resubscribe to the wake-up channel
WAKE_POLL = 1.0  # seconds one read of the channel waits (below the socket timeout, which would drop it)

# Refresh a slot's TTL only if we still hold it: a GET then PEXPIRE would refresh a slot another took in between.
_REFRESH = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end
"""
# When a server became the primary, as its uptime then: a replica promoted by a failover has been up for long, but as
# the primary it is as young as a restarted server and may lack the last writes like it
# (`cluster.overlay.recovering`). The `primary` key names the run id one of us first saw as the primary and its uptime
# then; a promoted replica inherits the old primary's, which names another run id, so the first reader rewrites it.
# Every reader thus agrees on the time, which is the server's own (its uptime). Run once per server a client meets:
# a script with INFO inside cost 39 µs of redis time a call (measured at 2,600 agents), the plain INFO 6.
_PRIMARY = """
local seen = redis.call('get', KEYS[1])
if seen then
  local sid, since = string.match(seen, '^(%w+) (%d+)$')
  if sid == ARGV[1] and tonumber(since) <= tonumber(ARGV[2]) then return tonumber(since) end
end
redis.call('set', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'px', ARGV[3])
return tonumber(ARGV[2])
"""
# Delete a provider key only if it is ours (withdraw), likewise.
_DELETE_IF = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""
# MGET, but a key whose value has the digest the reader sent (ARGV, '' for none) answers 0, not its value: a reader
# re-reads only what changed (`cluster.fresh`). One MGET inside per thousand keys (Lua's stack bounds `unpack`).
_CHANGED = f"""
local out = {{}}
local first = 1
while first <= #KEYS do
  local last = math.min(first + 999, #KEYS)
  local values = redis.call('mget', unpack(KEYS, first, last))
  for k = 1, #values do
    local i = first + k - 1
    local value = values[k]
    if value and ARGV[i] ~= '' and string.sub(redis.sha1hex(value), 1, {DIGEST_HEX}) == ARGV[i] then out[i] = 0
    else out[i] = value end
  end
  first = last + 1
end
return out
"""
# Extend a key's TTL only if it holds the value whose digest the writer sent (what it wrote last): else 0, and the
# writer writes it whole (it expired, a restart lost it, a promoted replica holds an older value, a stranger wrote).
_EXTEND = f"""
local value = redis.call('mget', KEYS[1])[1]
if value and string.sub(redis.sha1hex(value), 1, {DIGEST_HEX}) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_CHANGED_SHA, _EXTEND_SHA = (hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()  # EVALSHA: not resent
                             for script in (_CHANGED, _EXTEND))


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _text(value: bytes | str | None) -> str | None:
    """A value as text; None for one that is not UTF-8 (a stranger's write: skipped like any bad record)."""
    try:
        return value.decode() if isinstance(value, bytes) else value
    except UnicodeDecodeError:
        return None


def _names(members: Iterable[bytes | str]) -> list[str]:
    """The ids in an index, sorted; any that are not text are left out."""
    return sorted(name for name in map(_text, members) if name)


def _raised(answers: list) -> list:
    """A pipeline's answers (run with `raise_on_error=False`), its first error raised: but a script the server does
    not know yet (NOSCRIPT), which the caller sends whole instead."""
    for answer in answers:
        if isinstance(answer, Exception) and not isinstance(answer, redis.exceptions.NoScriptError):
            raise answer
    return answers


def _held(slots: list[Slot], values: list) -> dict[Slot, str]:
    return {s: v for s, v in zip(slots, map(_text, values)) if v is not None}


Loader = Callable[[str, bytes | str], object]  # (node id, the value read) -> the record, or BadRecord
SKIPS_REMEMBERED = 4096  # (key, why) pairs said at WARNING once: a writer who keeps a bad record there floods no log
_said: OrderedDict[tuple[str, str], None] = OrderedDict()


def _skipping(key: str, why: str) -> None:
    said = (key, why) in _said
    _said[(key, why)] = None
    _said.move_to_end((key, why))
    while len(_said) > SKIPS_REMEMBERED:
        _said.popitem(last=False)
    log.log(logging.DEBUG if said else logging.WARNING, "skipping %s: %s", key, why)


def _records(values: Mapping[str, bytes | str | None], key: Callable[[str], str], load: Loader) -> dict:
    """The records that are there and parse (and open); one that does not is skipped, never trusted."""
    found = {}
    for ident, value in values.items():
        if value is None:
            continue
        try:
            found[ident] = load(ident, value)
        except BadRecord as exc:
            _skipping(key(ident), str(exc))
    return found


class Coord:
    def __init__(self, url: str, namespace: str = NAMESPACE, *, timeout: float = CALL_TIMEOUT,
                 key_ttl: float = KEY_TTL, slot_ttl: float = SLOT_TTL, identity: Identity | None = None,
                 gate: Gate | None = None) -> None:
        """`identity`: seal what is written under its node id; `gate`: read only sealed records it opens."""
        self.url = url
        self.identity, self.gate = identity, gate
        self.keys = Keys(namespace)
        self.key_ttl, self.slot_ttl = key_ttl, slot_ttl
        try:
            self.redis = client(url, timeout)  # one server, or the primary a Sentinel names (`cluster.redis_url`)
        except ConfigError as exc:
            raise RedisUnavailable(f"bad redis URL {redacted(url)!r}: {exc}") from None
        self.timeout = timeout
        self._primary: tuple[str, int] | None = None  # (run id, its uptime when it became the primary): `server`
        self.server_reads, self.last_server = 0, ""  # how often `server` read it, and what it read last
        self.held = ReadCache()  # the values last read, re-read only where changed (`cluster.fresh`)
        self.written = WriteMemo()  # what this process last wrote, only its TTL extended while unchanged

    async def close(self) -> None:
        with contextlib.suppress(redis.exceptions.RedisError, OSError):
            await self.redis.aclose()

    async def _guard(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(self.timeout * 2):
                return await call()
        except (TimeoutError, redis.exceptions.RedisError, OSError) as exc:
            detail = describe(exc, self.url)
            raise RedisUnavailable(f"redis at {redacted(self.url)}: {detail}") from None

    def _seal(self, kind: str, where: str, record, *, fresh: bool = True, now: float | None = None) -> str:
        """What to write at `where`: the record sealed by our identity, or as it is without one. A record that
        needs no freshness (a provider's) is sealed at time 0, so that the same record always reads the same. A
        transfer record is never sealed (the owner's signed intent inside it is what agents check)."""
        if self.identity is None or kind == "transfer":
            return record.dump()
        return self.identity.seal(kind, where, fields_of(record), now if fresh else 0.0)

    def _write(self, pipe, kind: str, key: str, record, ttl: int, *, fresh: bool = True,
               read_back: bool = False) -> str | None:
        """Queue the write of `record` at `key` on `pipe`: the record sealed anew, or, if it is what we last wrote
        there and its seal is recent (`cluster.fresh.WriteMemo`), only its TTL extended if the key still holds
        it (`_EXTEND`). For the latter the digest sent: the caller hands the answer to `_kept`, which writes the
        record whole if the key did not hold it. The pipeline runs with `raise_on_error=False` (`_raised`).
        `read_back`: we read this key again (`scope` reads our own member record with our rack's), so what we
        write is held as read (`ReadCache.wrote`)."""
        now = time.time()
        # Provider records are sealed at time 0 and transfer records not at all: nothing in them goes stale.
        if (held := self.written.unchanged(key, record, now, timed=fresh and kind != "transfer")) is not None:
            pipe.evalsha(_EXTEND_SHA, 1, key, held, ttl)
            return held
        value = self._seal(kind, key, record, fresh=fresh, now=now)
        pipe.set(key, value, px=ttl)
        self._wrote(key, record, now, value, read_back)
        return None

    def _wrote(self, key: str, record, now: float, value: str, read_back: bool) -> None:
        """Note a whole write: for the next TTL extension (`WriteMemo`) and, `read_back`, for the next read."""
        self.written.wrote(key, record, now, value)
        if read_back:
            self.held.wrote(key, value)

    async def _kept(self, held: str | None, answer: object, kind: str, key: str, record, ttl: int, *,
                    fresh: bool = True, read_back: bool = False) -> None:
        """After `_write`: a TTL extension that found the key not holding what we wrote becomes a whole write."""
        if held is None:
            return
        if isinstance(answer, redis.exceptions.NoScriptError):  # a server new to the script: sent whole once
            answer = await self.redis.eval(_EXTEND, 1, key, held, ttl)
        if not answer:
            self.written.lost(key)
            now = time.time()
            value = self._seal(kind, key, record, fresh=fresh, now=now)
            await self.redis.set(key, value, px=ttl)
            self._wrote(key, record, now, value, read_back)

    async def _changed(self, keys: list[str]) -> list[bytes | str | None]:
        """The values at `keys`, as MGET would answer, but only those that changed since we last read them sent
        over (`_CHANGED`; `cluster.fresh.ReadCache`)."""
        if not keys:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            asking = self._ask(pipe, keys)
            answers = list(await pipe.execute(raise_on_error=False))
        return await self._answered(keys, asking, answers)

    def _ask(self, pipe, keys: list[str]) -> tuple[list[int], list[int], list[str]]:
        """Queue on `pipe` the read of `keys`: those held and unchanged at the last read by the script, with their
        digests; the rest (not held, or changing: comparing would cost redis a hash for nothing) by a plain MGET,
        which costs it less than a script handling their values."""
        digests = self.held.ask(keys)
        asked = [i for i, d in enumerate(digests) if d]
        whole = [i for i, d in enumerate(digests) if not d]
        if whole:
            pipe.mget([keys[i] for i in whole])
        if asked:
            pipe.evalsha(_CHANGED_SHA, len(asked), *(keys[i] for i in asked), *(digests[i] for i in asked))
        return whole, asked, digests

    async def _answered(self, keys: list[str], asking: tuple[list[int], list[int], list[str]],
                        answers: list) -> list[bytes | str | None]:
        """The values of `keys` from the answers `_ask` queued (taken off the front of `answers`)."""
        whole, asked, digests = asking
        replies: list[object] = [None] * len(keys)
        if whole:
            if isinstance(got := answers.pop(0), Exception):
                raise got
            for i, value in zip(whole, got):
                replies[i] = value
        if asked:
            got = answers.pop(0)
            if isinstance(got, redis.exceptions.NoScriptError):  # a server new to the script: sent whole once
                got = await self.redis.eval(_CHANGED, len(asked), *(keys[i] for i in asked),
                                            *(digests[i] for i in asked))
            elif isinstance(got, Exception):
                raise got
            for i, value in zip(asked, got):
                replies[i] = value
        return self.held.settle(keys, replies)

    def _loader(self, kind: str, cls, where: Callable[[str], str], *, fresh: bool = True) -> Loader:
        gate = self.gate
        if gate is None:
            return lambda ident, value: build(cls, unverified(value, kind), kind)

        def load(ident: str, value: bytes | str):
            record = build(cls, gate.open(kind, where(ident), ident, value, fresh=fresh), kind)
            if getattr(record, "node", ident) != ident:
                raise BadRecord(f"{kind} record: names another node")
            return record
        return load

    # -- the server ---------------------------------------------------------------------------------------------

    async def server_id(self) -> str:
        """The server's run id: it changes whenever redis restarts."""
        return (await self.server())[0]

    async def server(self) -> tuple[str, float]:
        """The server's run id and how long it has been the primary, in seconds (its uptime, unless a failover
        promoted it later: `_PRIMARY`)."""
        info = await self._guard(lambda: self.redis.info("server"))
        run_id, uptime = str(info.get("run_id", "")), int(info.get("uptime_in_seconds", 0))
        if self._primary is None or self._primary[0] != run_id:
            since = await self._guard(lambda: self.redis.eval(_PRIMARY, 1, self.keys.primary, run_id, uptime,
                                                              _ms(PRIMARY_TTL)))
            self._primary = (run_id, int(since))
        self.server_reads, self.last_server = self.server_reads + 1, run_id
        return run_id, float(max(0, uptime - self._primary[1]))

    async def ping(self) -> None:
        await self._guard(self.redis.ping)

    # -- agents -------------------------------------------------------------------------------------------------

    async def put_agent(self, node: str, record: AgentRecord) -> None:
        async def go():
            key, ttl = self.keys.agent(node), _ms(self.key_ttl)
            async with self.redis.pipeline(transaction=False) as pipe:
                extended = self._write(pipe, "agent", key, record, ttl)
                pipe.sadd(self.keys.agents, node)
                answers = _raised(await pipe.execute(raise_on_error=False))
            await self._kept(extended, answers[0], "agent", key, record, ttl)
        await self._guard(go)

    async def agents(self) -> dict[str, AgentRecord]:
        return await self._indexed(self.keys.agents, self.keys.agent,
                                   self._loader("agent", AgentRecord, self.keys.agent))

    async def _indexed(self, index: str, key: Callable[[str], str], load: Loader) -> dict:
        async def go():
            ids = _names(await self.redis.smembers(index))
            values = await self._changed([key(i) for i in ids])
            gone = [i for i, v in zip(ids, values) if v is None]
            if gone:
                await self.redis.srem(index, *gone)
            return ids, values
        ids, values = await self._guard(go)
        return _records(dict(zip(ids, values)), key, load)

    # -- transfers ----------------------------------------------------------------------------------------------

    async def put_transfer(self, record: TransferRecord, *, only_if_missing: bool = False) -> bool:
        """Write (or, with `only_if_missing`, restore after a redis restart) a transfer; refreshes its TTL."""
        async def go():
            key, ttl = self.keys.transfer(record.tid), _ms(TRANSFER_TTL)
            async with self.redis.pipeline(transaction=False) as pipe:
                extended = None
                if only_if_missing:
                    pipe.set(key, record.dump(), px=ttl, nx=True)
                else:  # the pusher's, every period: the whole hash layer only when the key is gone
                    extended = self._write(pipe, "transfer", key, record, ttl)
                pipe.sadd(self.keys.transfers, record.tid)
                written, _ = _raised(await pipe.execute(raise_on_error=False))
            await self._kept(extended, written, "transfer", key, record, ttl)
            return extended is not None or bool(written)
        return await self._guard(go)

    async def transfers(self, known: Mapping[str, TransferRecord] | None = None) -> dict[str, TransferRecord]:
        """The transfers in redis. Those in `known` are only checked to be still there, not read again: a record
        never changes, and it carries the whole hash layer (tens of KiB to MiB), which every agent reading every
        period would pull across every rack uplink."""
        if not known:
            return await self._indexed(self.keys.transfers, self.keys.transfer,
                                       lambda ident, value: TransferRecord.load(value))

        async def go():
            ids = _names(await self.redis.smembers(self.keys.transfers))
            old = [i for i in ids if i in known]
            new = [i for i in ids if i not in known]
            async with self.redis.pipeline(transaction=False) as pipe:
                for ident in old:
                    pipe.exists(self.keys.transfer(ident))
                there = await pipe.execute() if old else []
            values = await self.redis.mget([self.keys.transfer(i) for i in new]) if new else []
            gone = [i for i, n in zip(old, there) if not n] + [i for i, v in zip(new, values) if v is None]
            if gone:
                await self.redis.srem(self.keys.transfers, *gone)
            return [i for i, n in zip(old, there) if n], new, values
        still, new, values = await self._guard(go)
        found = {ident: known[ident] for ident in still}
        for ident, value in zip(new, values):
            if value is None:
                continue
            try:
                found[ident] = TransferRecord.load(value)
            except BadRecord as exc:
                _skipping(self.keys.transfer(ident), str(exc))
        return found

    async def cancel(self, tid: str, signed: str) -> None:
        """Post the owner's signed cancel of `tid` (`cluster.intent`)."""
        await self._guard(lambda: self.redis.set(self.keys.cancel(tid), signed.encode(), px=_ms(TRANSFER_TTL)))
        await self.wake_up()

    async def cancelled(self, tids: Iterable[str]) -> dict[str, bytes | str]:
        """The cancels posted for any of `tids`: transfer id -> what was posted (a signed cancel, or not)."""
        tids = list(tids)
        if not tids:
            return {}
        values = await self._guard(lambda: self.redis.mget([self.keys.cancel(t) for t in tids]))
        return {t: v for t, v in zip(tids, values) if v is not None}

    async def forget_transfer(self, tid: str) -> None:
        async def go():
            await self.redis.delete(self.keys.transfer(tid))
            await self.redis.srem(self.keys.transfers, tid)
        await self._guard(go)

    # -- members and slots --------------------------------------------------------------------------------------

    async def put_member(self, tid: str, record: MemberRecord) -> None:
        """The member's record, and its entry in the indexes others find it by (`cluster.scope`): the seeders',
        its rack's, and as a representant its DC's list of racks and the list of DCs."""
        ttl = _ms(self.key_ttl)

        def indexed(pipe, key: str, value: str) -> None:
            pipe.sadd(key, value)
            pipe.pexpire(key, ttl)

        async def go():
            key = self.keys.member(tid, record.node)
            async with self.redis.pipeline(transaction=False) as pipe:
                extended = self._write(pipe, "member", key, record, ttl, read_back=True)
                pipe.sadd(self.keys.members(tid), record.node)
                location = record.location
                if record.seeder:
                    indexed(pipe, self.keys.seeders(tid), record.node)
                elif location is not None:
                    indexed(pipe, self.keys.rack(tid, location), record.node)
                    if record.representant:
                        indexed(pipe, self.keys.racks(tid, location.dc), location.rack)
                        indexed(pipe, self.keys.dcs(tid), location.dc)
                answers = _raised(await pipe.execute(raise_on_error=False))
            await self._kept(extended, answers[0], "member", key, record, ttl, read_back=True)
        await self._guard(go)

    async def scope(self, tid: str, location: Location, deep: bool
                    ) -> tuple[dict[str, MemberRecord], dict[Slot, str]]:
        """The member records and slot holders one agent at `location` acts on (`cluster.scope`): its rack's;
        `deep`, also the representants' above it. Index entries whose keys are gone are pruned on the way."""
        keys = self.keys
        mine = rack_slots(location)

        async def go():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.smembers(keys.rack(tid, location))
                pipe.mget([keys.slot(tid, s) for s in mine])
                if deep:
                    pipe.smembers(keys.racks(tid, location.dc))
                    pipe.smembers(keys.dcs(tid))
                    pipe.smembers(keys.seeders(tid))
                first = await pipe.execute()
            rack_nodes = _names(first[0])
            holders = _held(mine, first[1])
            racks, dcs, seeders = (_names(first[2]), _names(first[3]), _names(first[4])) if deep else ([], [], [])
            slots = across(location, racks, dcs) if deep else []
            nodes = rack_nodes + seeders
            read = [keys.member(tid, n) for n in nodes]
            async with self.redis.pipeline(transaction=False) as pipe:
                asking = self._ask(pipe, read)  # only what changed comes over (`_changed`)
                if slots:
                    pipe.mget([keys.slot(tid, s) for s in slots])
                second = list(await pipe.execute(raise_on_error=False))
            values = dict(zip(nodes, await self._answered(read, asking, second)))
            if slots:
                if isinstance(slot_values := second.pop(0), Exception):
                    raise slot_values
                holders.update(_held(slots, slot_values))
            wanted = sorted(set(holders.values()) - set(values))
            if wanted:
                values.update(zip(wanted, await self._changed([keys.member(tid, n) for n in wanted])))
            where = lambda n: keys.member(tid, n)  # noqa: E731
            records = _records(values, where, self._loader("member", MemberRecord, where))
            more = rep_racks(holders, records, [*mine, *slots]) if deep else []
            if more:
                holders.update(_held(more, await self.redis.mget([keys.slot(tid, s) for s in more])))
            pruned = [(keys.rack(tid, location), [n for n in rack_nodes if values.get(n) is None]),
                      (keys.seeders(tid), [n for n in seeders if values.get(n) is None])]
            if deep:
                pruned += [(keys.racks(tid, location.dc), empty_racks(location.dc, racks, holders)),
                           (keys.dcs(tid), empty_dcs(dcs, holders))]
            pruned = [(key, gone) for key, gone in pruned if gone]
            if pruned:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for key, gone in pruned:
                        pipe.srem(key, *gone)
                    await pipe.execute()
            return records, holders
        return await self._guard(go)

    async def members(self, tid: str) -> dict[str, MemberRecord]:
        where = lambda n: self.keys.member(tid, n)  # noqa: E731
        return await self._indexed(self.keys.members(tid), where, self._loader("member", MemberRecord, where))

    async def holders(self, tid: str, slots: list[Slot]) -> dict[Slot, str]:
        if not slots:
            return {}
        return _held(slots, await self._guard(lambda: self.redis.mget([self.keys.slot(tid, s) for s in slots])))

    async def claim(self, tid: str, slot: Slot, node: str) -> bool:
        """Take `slot` if free (SET NX): first come, first served, atomic in redis."""
        done = await self._guard(lambda: self.redis.set(self.keys.slot(tid, slot), node, nx=True,
                                                        px=_ms(self.slot_ttl)))
        return bool(done)

    async def refresh(self, tid: str, slot: Slot, node: str) -> bool:
        """Extend our hold on `slot`; False if it is not ours (any more)."""
        done = await self._guard(lambda: self.redis.eval(_REFRESH, 1, self.keys.slot(tid, slot), node,
                                                         _ms(self.slot_ttl)))
        return bool(done)

    # -- providers (the Discovery of cluster.discovery) ----------------------------------------------------------

    async def announce(self, root: bytes, node: str, record: ProviderRecord) -> None:
        async def go():
            key, ttl = self.keys.provider(root, node), _ms(self.key_ttl)
            async with self.redis.pipeline(transaction=False) as pipe:
                extended = self._write(pipe, "provider", key, record, ttl, fresh=False)
                pipe.sadd(self.keys.providers(root), node)
                answers = _raised(await pipe.execute(raise_on_error=False))
            await self._kept(extended, answers[0], "provider", key, record, ttl, fresh=False)
        await self._guard(go)

    async def withdraw(self, root: bytes, node: str, record: ProviderRecord) -> None:
        key = self.keys.provider(root, node)
        self.written.lost(key)  # announced again, it is written whole
        await self._guard(lambda: self.redis.eval(_DELETE_IF, 1, key, self._seal("provider", key, record, fresh=False)))

    async def providers(self, root: bytes, nodes: Iterable[str] | None = None) -> dict[str, ProviderRecord]:
        """The providers of `root`: every one announced, or only those of `nodes` (the peers an agent may talk
        to: its view, not every provider of a transfer every agent of the cluster holds)."""
        where = lambda n: self.keys.provider(root, n)  # noqa: E731
        load = self._loader("provider", ProviderRecord, where, fresh=False)
        if nodes is None:
            return await self._indexed(self.keys.providers(root), where, load)
        nodes = list(dict.fromkeys(nodes))  # in the caller's order: the first found are the first taken
        if not nodes:
            return {}
        values = await self._guard(lambda: self._changed([where(n) for n in nodes]))
        return _records(dict(zip(nodes, values)), where, load)

    # -- wake-ups -----------------------------------------------------------------------------------------------

    async def wake_up(self) -> None:
        """Tell agents to reconcile now (at most once: an agent that misses it reconciles next period)."""
        with contextlib.suppress(RedisUnavailable):
            await self._guard(lambda: self.redis.publish(self.keys.wake, b"1"))

    async def listen_wake(self, woken: asyncio.Event) -> None:
        """Set `woken` on every wake-up message, resubscribing whenever the connection drops; runs until
        cancelled."""
        while True:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.keys.wake)
                while True:
                    message = await pubsub.get_message(timeout=WAKE_POLL)
                    if message is not None:
                        woken.set()
            except (redis.exceptions.RedisError, OSError) as exc:
                log.debug("wake-up channel lost: %s", exc)
            finally:
                with contextlib.suppress(redis.exceptions.RedisError, OSError):
                    await pubsub.aclose()
            await asyncio.sleep(WAKE_RETRY)  # a retry interval: nothing to wait for but time
