"""What the cluster keeps in redis (sans-I/O): key names and the records under them, as JSON.

Everything is a key with a TTL that its owner rewrites every reconcile period (or, when the record says the same as
the one it last wrote, whose TTL it extends: `cluster.fresh`), so that state nobody keeps up disappears by itself
and a redis that restarted empty is filled again within one period:

| key (under the namespace, default `swarmproxy:cluster`) | value | owner, TTL |
|---|---|---|
| `agent:{node}`                 | `AgentRecord` (host, port, dc, rack)       | the agent, `KEY_TTL` |
| `agents`                       | set of node ids (an index, pruned)         | the agents |
| `transfer:{id}` | `TransferRecord` (manifest, layer, ...) | pusher (agents restore it), `TRANSFER_TTL` |
| `transfers`                    | set of transfer ids (an index, pruned)     | as above |
| `cancel:{id}`                  | the owner's signed cancel (`cluster.intent`) | `cancel`, `TRANSFER_TTL` |
| `t:{id}:member:{node}`         | `MemberRecord` (progress, state, bytes, role, location) | the member, `KEY_TTL` |
| `t:{id}:members`               | set of node ids (an index, pruned)  | the members; read by pusher, `status` |
| `t:{id}:rack:{dc}:{rack}`      | set of the rack's members' node ids (an index, pruned) | the members, `KEY_TTL` |
| `t:{id}:racks:{dc}`            | set of the DC's racks with a representant (pruned) | the representants, `KEY_TTL` |
| `t:{id}:dcs`                   | set of the DCs with a representant (pruned) | the representants, `KEY_TTL` |
| `t:{id}:seeders`               | set of seeder node ids (an index, pruned)  | the pushers, `KEY_TTL` |
| `t:{id}:slot:rack:{dc}:{rack}:{i}` | the holder's node id               | `SET NX` by the first, `SLOT_TTL` |
| `t:{id}:slot:dc:{dc}:{i}`      | the holder's node id                       | as above, refreshed by the holder |
| `prov:{root}:{node}`           | `ProviderRecord` (host, port, transports)  | the provider, `KEY_TTL` |
| `prov:{root}`                  | set of node ids (an index, pruned)         | the providers |
| `primary` | `RUN_ID UPTIME`: a run id first seen as the primary, its uptime then | its first reader, `PRIMARY_TTL` |

The channel `wake` only wakes agents up (pub/sub is at-most-once): a lost message costs one reconcile period.
A member is PENDING until its record says FINISHED, or REFUSED (with its reason: not enough disk space).

An agent reads its rack's index, and a representant the racks', DCs' and seeders' indexes and the slots they
lead to (`cluster.scope`): never the whole transfer's `members`, which is N records for each of N agents.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from cluster.errors import BadRecord, ConfigError
from cluster.overlay import Level, Location, Slot

R = TypeVar("R")  # a record class

__all__ = ["AgentRecord", "Keys", "MemberRecord", "ProviderRecord", "TransferRecord", "build", "check_name",
           "fields_of", "unverified"]

NAMESPACE = "swarmproxy:cluster"
RECONCILE_EVERY = 2.0  # seconds between an agent's reconciles (--reconcile)
KEY_TTL = 15.0  # seconds an agent's, member's or provider's key lives unless rewritten (several periods)
SLOT_TTL = 15.0  # seconds a representant slot outlives its holder's last refresh
DISK_RESERVE = 1 << 30  # bytes an agent keeps free on its data dir's disk: a transfer that would take them is refused
TRANSFER_TTL = 7 * 86400.0  # a transfer nobody keeps up (no pusher, no agent that has it) is forgotten after this
PRIMARY_TTL = 30 * 86400.0  # the `primary` marker; should it expire on a live server, one slot TTL of grace follows

PENDING, FINISHED, REFUSED = "PENDING", "FINISHED", "REFUSED"  # REFUSED: the agent will not take it (`reason`)
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def check_name(kind: str, value: str) -> str:
    """Rack and DC names go into key names: letters, digits, '.', '_', '-' only."""
    if not _NAME.match(value):
        raise ConfigError(f"{kind} {value!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return value


class Keys:
    def __init__(self, namespace: str = NAMESPACE) -> None:
        self.ns = namespace

    def agent(self, node: str) -> str:
        return f"{self.ns}:agent:{node}"

    @property
    def agents(self) -> str:
        return f"{self.ns}:agents"

    def transfer(self, tid: str) -> str:
        return f"{self.ns}:transfer:{tid}"

    @property
    def transfers(self) -> str:
        return f"{self.ns}:transfers"

    def cancel(self, tid: str) -> str:
        return f"{self.ns}:cancel:{tid}"

    def member(self, tid: str, node: str) -> str:
        return f"{self.ns}:t:{tid}:member:{node}"

    def members(self, tid: str) -> str:
        return f"{self.ns}:t:{tid}:members"

    def rack(self, tid: str, location: Location) -> str:
        return f"{self.ns}:t:{tid}:rack:{location.dc}:{location.rack}"

    def racks(self, tid: str, dc: str) -> str:
        return f"{self.ns}:t:{tid}:racks:{dc}"

    def dcs(self, tid: str) -> str:
        return f"{self.ns}:t:{tid}:dcs"

    def seeders(self, tid: str) -> str:
        return f"{self.ns}:t:{tid}:seeders"

    def slot(self, tid: str, slot: Slot) -> str:
        if slot.level is Level.RACK:
            return f"{self.ns}:t:{tid}:slot:rack:{slot.dc}:{slot.rack}:{slot.index}"
        return f"{self.ns}:t:{tid}:slot:dc:{slot.dc}:{slot.index}"

    def provider(self, root: bytes, node: str) -> str:
        return f"{self.ns}:prov:{root.hex()}:{node}"

    def providers(self, root: bytes) -> str:
        return f"{self.ns}:prov:{root.hex()}"

    @property
    def wake(self) -> str:
        return f"{self.ns}:wake"

    @property
    def primary(self) -> str:
        return f"{self.ns}:primary"


def _load(data: bytes | str | None, kind: str) -> dict[str, Any]:
    if data is None:
        raise BadRecord(f"no {kind} record")
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: '[[[[...' nested deep
        raise BadRecord(f"{kind} record: {exc}") from None
    if not isinstance(value, dict):
        raise BadRecord(f"{kind} record is not an object")
    return value


# Fields a record leaves out while they are empty: an agent of the version before them refuses a record with a
# field it does not know (`build`), so during a rolling upgrade it reads every record that does not need them.
_LEFT_OUT_EMPTY = ("stranded",)


def fields_of(record: object) -> dict[str, Any]:
    """A record's fields as written to redis (`_LEFT_OUT_EMPTY`)."""
    value: dict[str, Any] = asdict(record)  # type: ignore[call-overload]
    for name in _LEFT_OUT_EMPTY:
        if name in value and not value[name]:
            del value[name]
    return value


def _dump(value: object) -> str:
    return json.dumps(fields_of(value), separators=(",", ":"), sort_keys=True)


def _build(cls: type[R], data: bytes | str | None, kind: str) -> R:
    return build(cls, _load(data, kind), kind)


def unverified(data: bytes | str | None, kind: str) -> dict[str, Any]:
    """A record's fields, sealed or not, without opening the seal (`cluster.identity.Gate` does): for a reader with
    no key to check against (`status` without --trust-key), which says so."""
    value = _load(data, kind)
    record = value.get("record")
    return record if isinstance(record, dict) and "signature" in value else value


def build(cls: type[R], value: dict[str, Any], kind: str) -> R:
    """A record of class `cls` from its fields (as `asdict` gave them); BadRecord if they are not its fields."""
    try:
        return cls(**value)
    except TypeError as exc:
        raise BadRecord(f"{kind} record: {exc}") from None


@dataclass(frozen=True)
class AgentRecord:
    host: str
    port: int
    dc: str
    rack: str
    name: str = ""

    @property
    def location(self) -> Location:
        return Location(self.dc, self.rack)

    def dump(self) -> str:
        return _dump(self)

    @classmethod
    def load(cls, data: bytes | str | None) -> AgentRecord:
        return _build(cls, data, "agent")


@dataclass(frozen=True)
class TransferRecord:
    """A push: the manifest (encoded, base64) and its hash layer (32-byte hashes, concatenated, base64)."""

    tid: str
    name: str
    manifest: str
    layer: str
    priority: int = 0
    created: float = 0.0
    seeder: str = ""
    hosts: str = "*"  # which agents take part: a glob on "dc/rack/name"
    server: str = ""  # the run id of the redis server it was published on (`cluster.overlay.Representation`)
    intent: str = ""  # the owner's signed push (`cluster.intent.SignedIntent.dump`): agents act on nothing else

    def dump(self) -> str:
        return _dump(self)

    @classmethod
    def load(cls, data: bytes | str | None) -> TransferRecord:
        return _build(cls, data, "transfer")

    @staticmethod
    def pack(blob: bytes) -> str:
        return base64.b64encode(blob).decode("ascii")

    @staticmethod
    def unpack(text: str) -> bytes:
        try:
            return base64.b64decode(text, validate=True)
        except ValueError as exc:
            raise BadRecord(f"transfer record: {exc}") from None

    def layer_hashes(self, hash_size: int = 32) -> list[bytes]:
        blob = self.unpack(self.layer)
        if len(blob) % hash_size:
            raise BadRecord("transfer record: the layer is not a whole number of hashes")
        return [blob[i:i + hash_size] for i in range(0, len(blob), hash_size)]

    def sort_key(self) -> tuple[int, float, str]:
        """Higher priority first, then older first."""
        return (-self.priority, self.created, self.tid)


@dataclass(frozen=True)
class MemberRecord:
    """One member's part in a transfer, rewritten every period (the per-peer stats)."""

    node: str
    state: str = PENDING
    reason: str = ""  # why a REFUSED member will not take the transfer
    verified: int = 0
    blocks: int = 0
    seeder: bool = False
    role: str = "peer"  # peer, rack, dc (representant levels), seeder
    fetching: bool = True  # False while it waits for a transfer of higher priority: no progress, yet not stalled
    rate: float = 0.0  # bytes/s received, recent
    # Block bytes by level label ("rack", "dc", "outside"), this agent's over all its transfers: the transport
    # counts per connection, not per content.
    received: dict[str, int] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    extra_bytes: int = 0  # block bytes received beyond what was missing when this agent (re)started
    resumed: int = 0  # blocks found verified in the store when the agent (re)started
    hash_failures: int = 0
    banned: int = 0
    started: float = 0.0
    finished: float = 0.0
    # Where the member is and its peer address: an agent learns the locations of the peers it acts on from the
    # records it reads (its rack's, the representants'), not from every agent's record.
    dc: str = ""
    rack: str = ""
    host: str = ""
    # What it holds, as its signed report says (`cluster.identity`): the pushed content root (hex) under which
    # file name. A push counts a member FINISHED only for its own root and name.
    root: str = ""
    name: str = ""
    # The sources (node ids, hex) its requests timed out on while they alone held blocks it lacks: the other
    # servers show it those blocks (`cluster.stalls`). Left out of the record while empty (`fields_of`).
    stranded: Sequence[str] = ()

    @property
    def location(self) -> Location | None:
        return Location(self.dc, self.rack) if self.dc and self.rack and not self.seeder else None

    @property
    def site(self) -> Location | None:
        """The rack a seeder's host sits in, if the pusher was told (`push --dc --rack`)."""
        return Location(self.dc, self.rack) if self.dc and self.rack and self.seeder else None

    @property
    def representant(self) -> bool:
        return self.role in ("rack", "dc")

    @property
    def progress(self) -> float:
        return 1.0 if self.blocks == 0 and self.state == FINISHED else (self.verified / self.blocks
                                                                          if self.blocks else 0.0)

    def dump(self) -> str:
        return _dump(self)

    @classmethod
    def load(cls, data: bytes | str | None) -> MemberRecord:
        return _build(cls, data, "member")


@dataclass(frozen=True)
class ProviderRecord:
    host: str
    port: int
    transports: int = 1

    def dump(self) -> str:
        return _dump(self)

    @classmethod
    def load(cls, data: bytes | str | None) -> ProviderRecord:
        return _build(cls, data, "provider")


def transfer_id(root: bytes) -> str:
    """A transfer is named by its content: pushing the same bytes twice is one transfer."""
    return root.hex()[:16]
