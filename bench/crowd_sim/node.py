"""One simulated client and its swarmproxy node: the real `DownloadCore`, fed as `proxy.download.fallback` feeds it.

Real: every decision of the download (`proxy.download.core`: when to look up, claim, park, switch, merge, reopen,
hand over; its transition, parking and discovery rules) and the judgement of each lookup's answer
(`swarm.trust.judge`: the quorum, the others fetching, those ahead), with the engine's own `agreed_manifest`.

Reproduced from the shells, not run (`proxy.download.fallback._Download`, `proxy.download.ledger.Ledger`,
`proxy.engine.SwarmEngine`):
- the events: the origin's head (`proxy.origin_head.describe` of SlowOrigin's headers), its body chunks as they
  land, a lookup's result when its latency is over, the swarm's verified chunks, the core's deadline;
- `LookAhead` starts the claims lookup that the next `StartLookup` then waits for (dropped if the head needs none);
- `ClaimFetching` puts an in-progress claim (root of zeros) under the URL's key, `EndClaim` and a claimer that
  ends without vouching withdraw it (`fetch_ended`); the claim time is the virtual clock's;
- `OriginComplete` with a complete spool and `publishable`: the node vouches (its manifest's root) and announces
  itself as a provider; `HandOver` of a finished swarm fetch announces it as a provider, never a voucher
  (`completed_from_peers`); storing and hashing take no time;
- a lookup's providers: `peers_for` (at most --fetch-peers) of the visible provider records, a random sample (a
  fetching node announces itself at once: `swarm_fetch`), looked up once a quorum is judged (`SwarmService.claims`:
  one more lookup latency, or one round trip where the node looked them up ahead of the quorum, below it:
  `SwarmEngine._ahead_of_quorum`); none: `no-provider`;
  a lookup slower than the engine's 5 s timeout: `lookup-failed`;
- `StartHead` (a T switch before any head): a HEAD on a new connection, in the origin's line for a slot as a GET
  is (`models.Origin`), answered at once when it gets one; `StopHead` closes it;
- with the origin plugin (`SimParams.origin_plugin`): a lookup for a head that carries the origin's manifest is one
  of providers alone (`SwarmEngine._find_published`: one lookup latency), none at all when the hinted head listed
  peers (`Swarm-Peers`: they are its providers at once; the first GET names the node's peer port, its index here),
  and the swarm fetch starts with the layer the field inlines, so the origin is its Range source at once when no
  provider is found.
Vouches are first-hand (each publisher's own address, its own network), so the quorum counts publishers.
Not modelled: `StartSegments` (a file of several 4 MiB segments), the adaptive T/R/W's memory (each lab client is a
fresh node, so it never applies), HTTPS, the node's CPU.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

from multidict import CIMultiDict

from proxy.download import actions as act
from proxy.download.core import DownloadCore
from proxy.download.settings import DownloadSettings
from proxy.engine import Found, Miss, agreed_manifest
from proxy.origin_head import OriginHead, describe
from server_plugin.publisher import LAYER_PREFIX
from swarm.content.manifest import HEADER as MANIFEST_HEADER
from swarm.content.manifest import HINT_HEADER, HINT_SWARM, Manifest, format_header
from swarm.discovery.seam import Provider, validator_bytes
from swarm.trust import IN_PROGRESS_ROOT, ManifestClaim, ManifestSource, Vouch, judge, leading
from swarm.trust.judge import Judgement

from .events import Timer
from .models import LOOKUP_TIMEOUT, OriginConn
from .ranges import Ranges
from .swarm_fetch import SwarmFetch

if TYPE_CHECKING:
    from .world import World


def origin_head(world: World, status: int, start: int, end: int, hinted: bool = False) -> OriginHead:
    """What `describe` makes of SlowOrigin's answer (its headers, as it sends them, and with `server_plugin` the
    manifest and, when `hinted`, `Swarm-Hint`, as `Publisher.headers` adds them); the same answer, made once."""
    if (head := world.heads.get((status, start, end, hinted))) is not None:
        return head
    size = len(world.content)
    headers = CIMultiDict({"ETag": world.etag, "Last-Modified": "Sat, 28 Nov 2026 00:00:00 GMT",
                           "Accept-Ranges": "bytes", "Cache-Control": "public, max-age=3600",
                           "Content-Type": "application/octet-stream", "Content-Length": str(end - start)})
    if status == 206:
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    if world.params.origin_plugin:  # a 200 or 206 of the published bytes carries it (`server_plugin.may_carry`)
        headers[MANIFEST_HEADER] = format_header(world.manifest, world.layer, LAYER_PREFIX + world.manifest.root.hex())
        if hinted:
            headers[HINT_HEADER] = HINT_SWARM
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    head = world.heads[(status, start, end, hinted)] = describe(world.url, CIMultiDict(), status, headers, raw)
    return head


class Node:
    """One client arriving at `arrival` and the download its node makes (see the module docstring)."""

    def __init__(self, world: World, index: int, arrival: float, settings: DownloadSettings, *, keep_events: bool):
        self.world, self.index, self.arrival = world, index, arrival
        self.host = f"n{index}"
        self.node_id = index.to_bytes(4, "big") + bytes(16)
        self.address = f"{11 + (index >> 16)}.{index >> 8 & 255}.{index & 255}.1"  # one /24 network each
        self.rng = random.Random(world.params.seed * 1_000_003 + index)
        self.core = DownloadCore(settings)
        self.conn: OriginConn | Ranges | None = None
        self.head_conn: OriginConn | None = None  # the HEAD a T switch before any head sent (`StartHead`)
        self.fetch: SwarmFetch | None = None
        self.timer: Timer | None = None
        self.deadline: float | None = None  # the timer's
        self.lookup: Timer | None = None
        self.ahead_at: float | None = None  # when the claims lookup started before the head ends (`LookAhead`)
        self.claimed_at = math.inf
        self.providers_warm: dict[bytes, float] = {}  # root -> when a lookup of its providers ended (`_judge`)
        self.listed: list[tuple[str, int]] = []  # the peers the origin's hinted head listed (`Swarm-Peers`)
        self.spool: int | None = None  # origin bytes spooled from offset 0 on, once a spool is open
        self.vouching = False
        self.head: OriginHead | None = None
        self.done_at: float | None = None
        self.delivered = 0
        self.exact = True
        self.error: str | None = None
        self.bytes_origin = self.bytes_peers = 0
        self.cause: str | None = None
        self.keep_events = keep_events
        self.events: list[str] = []
        self.first_hand_at: float | None = None  # when its vouch was put (it got every byte from the origin)
        self.held: set[int] = set()  # blocks it verified from peers, served to others while it fetches
        self.complete = False  # it holds (and serves) the whole file
        self.announced = False  # its provider record was put
        self.watchers: dict[SwarmFetch, None] = {}  # fetches connected to it: each gets a HAVE per block it gains

    # -- the shell's loop --------------------------------------------------------------------------------------
    def start(self) -> None:
        now = self.world.clock.now
        settings = self.world.settings
        self.conn = self._open_origin(now, 0, None, accepts=settings.leaves_at_hint(settings.before_head))
        self._run(self.core.start(now))

    def _run(self, actions: list[act.Action]) -> None:
        for action in actions:
            self._do(action)
        if self.core.done:
            self._finish()
            return
        deadline = self.core.next_deadline()
        if deadline == self.deadline:  # armed already (most events leave it where it was)
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.deadline = deadline
        if deadline is not None:
            self.timer = self.world.clock.timer(deadline, self._timer)

    def _timer(self) -> None:
        self.timer, self.deadline = None, None
        if not self.core.done:
            self._run(self.core.timer(self.world.clock.now))

    def _head_of(self, conn: OriginConn | Ranges | None):
        def head(status: int, start: int, end: int) -> None:
            if conn is None or conn is not self.conn or self.core.done or not self.core.wants_origin:
                return
            now = self.world.clock.now
            self.head = origin_head(self.world, status, start, end, conn.hinted)
            if conn.hinted and isinstance(conn, OriginConn):
                self.listed = conn.listed  # (every address is public: `dialable_peers` keeps them all)
            actions = self.core.origin_head(self.head, now)
            if not self.core.lookups.running:  # no lookup looks ahead for a download that needs none
                self.ahead_at = None
            self._run(actions)
        return head

    def _data_of(self, conn: OriginConn | None):
        def data(piece: bytes) -> None:
            if conn is None or conn is not self.conn or self.core.done or not self.core.wants_origin:
                return
            if self.spool is not None and self.core.origin_offset == self.spool:
                self.spool += len(piece)
            self._run(self.core.origin_data(piece, self.world.clock.now))
        return data

    # -- lookups (`SwarmEngine.find`, reproduced over the DHT model) ---------------------------------------------
    def _start_lookup(self, headless: bool) -> None:
        world, now = self.world, self.world.clock.now
        ends = now + world.dht.lookup_latency()
        published = self.core.known.published is not None  # `SwarmEngine._find_published`: providers only
        if published:
            self.ahead_at = None  # the claims lookup looking ahead is cancelled
            if self.listed:  # ... and not even they: the origin listed peers
                self.lookup = world.clock.timer(now, self._published)
                return
        elif self.ahead_at is not None:  # the claims lookup started before the head answers this one
            ends, self.ahead_at = max(now, self.ahead_at), None
        if ends - now > LOOKUP_TIMEOUT:
            self.lookup = world.clock.timer(now + LOOKUP_TIMEOUT, self._lookup_done, Miss("lookup-failed"))
        elif published:
            self.lookup = world.clock.timer(ends, self._published)
        else:
            self.lookup = world.clock.timer(ends, self._judge, headless)

    def _judge(self, headless: bool) -> None:
        world, now = self.world, self.world.clock.now
        known = self.core.known
        validator = validator_bytes(known.validator) if known.validator else None
        vouches = world.dht.vouches(now)
        verdict = judge(vouches, world.trust, known_size=known.size, known_validator=validator,
                        me=self.node_id, claimed_at=self.claimed_at, headless=headless)
        if verdict.accepted is None:
            if verdict.reason == "below-quorum" and (claim := leading(
                    vouches, known_size=known.size, known_validator=validator)) is not None:
                # `SwarmEngine._ahead_of_quorum`: its providers looked up in the background, once
                self.providers_warm.setdefault(claim.content_root, now + world.dht.lookup_latency())
            self._lookup_done(Miss(verdict.reason, verdict.detail, verdict.others, verdict.ahead))
            return
        # `SwarmService.claims` looks the trusted root's providers up after the claims: one more lookup, or one round
        # trip where a lookup of them ended moments ago (the one ahead of the quorum, above: `dht.node`'s warm ones)
        warm = self.providers_warm.get(verdict.accepted.content_root, math.inf) <= now
        self.lookup = world.clock.timer(now + (2 * world.net.delay if warm else world.dht.lookup_latency()),
                                        self._trusted, verdict)

    def _trusted(self, verdict: Judgement) -> None:
        world, now = self.world, self.world.clock.now
        accepted = verdict.accepted
        assert accepted is not None
        providers = world.dht.providers(now, world.peers_for(world.manifest))  # `pick`: peers_for at random
        if not providers:
            self._lookup_done(Miss("no-provider"))
            return
        manifest = agreed_manifest(world.url, accepted, self.head)
        found = Found(manifest or Manifest(size=accepted.size, block_size=accepted.block_size,
                                           root=accepted.content_root, url=world.url,
                                           validator=accepted.validator.decode("latin-1")), verdict.source, providers)
        if manifest is None:  # asked of a provider (`full_manifest`): one more round trip
            self.lookup = world.clock.timer(now + 2 * world.net.delay, self._lookup_done, found)
            return
        self._lookup_done(found)

    def _published(self) -> None:
        """The origin's manifest, trusted as is, with the providers its root has now (`_find_published`): its layer
        inline in the field (a file of at most `INLINE_HASHES` blocks; the layer endpoint is not modelled)."""
        world, known = self.world, self.core.known
        published = known.published
        assert published is not None
        if published.hashes is None:
            raise NotImplementedError("a hash layer at the origin's layer endpoint is not modelled")
        manifest = published.manifest(url=world.url, validator=known.validator, content_type=known.content_type)
        # The peers the origin listed (their ports stand for their indices, as a provider record's do), at most
        # peers_for of them at random as `SwarmService.pick` keeps; else the DHT's.
        want = world.peers_for(manifest)
        listed = self.listed if len(self.listed) <= want else self.rng.sample(self.listed, want)
        providers = [Provider(b"", host, port, 1) for host, port in listed] or \
            world.dht.providers(world.clock.now, want)
        self._lookup_done(Found(manifest, ManifestSource.ORIGIN, providers, list(published.hashes)))

    def _lookup_done(self, found: Found | Miss) -> None:
        self.lookup = None
        if self.core.done:
            return
        miss = found if isinstance(found, Miss) else Miss("")
        self._say(f"lookup: a {found.source} manifest" if isinstance(found, Found) else
                  f"lookup: {found} ({miss.others} fetching, {miss.ahead} of them ahead)")
        usable = found if isinstance(found, Found) else None
        self._run(self.core.lookup_done(usable, self.world.clock.now, miss.others, miss.ahead))

    # -- actions (`fallback._Download._do`, reproduced) ----------------------------------------------------------
    def _do(self, action: act.Action) -> None:  # noqa: C901 - one arm per action, as the shell's
        world, now = self.world, self.world.clock.now
        match action:
            case act.Deliver(source, data):
                start = self.delivered
                if world.content[start:start + len(data)] != data:
                    self.exact = False
                self.delivered += len(data)
                if source is act.Source.ORIGIN:
                    self.bytes_origin += len(data)
            case act.OpenSpool():
                self.spool = 0
            case act.ClaimFetching(size, block_size, validator):
                self._say("too few others fetch it: this node fetches it from the origin and will vouch")
                if self.claimed_at == math.inf:  # the engine keeps its first claim's time (`fetching`)
                    self.claimed_at = now
                claim = ManifestClaim(IN_PROGRESS_ROOT, size, block_size, validator_bytes(validator))
                world.dht.put(self.node_id, Vouch.seen(claim, self.node_id, self.address, frozenset(), now),
                              now, claim=True)
            case act.EndClaim():
                self._say("others ahead fetch it from the origin: leaving it to them")
                self._fetch_ended(vouching=False)
            case act.LookAhead():
                if self.ahead_at is None:
                    self.ahead_at = now + world.dht.lookup_latency()
            case act.StartLookup(headless):
                self._start_lookup(headless)
            case act.StopLookup():
                if self.lookup is not None:
                    self.lookup.cancel()
                    self.lookup = None
            case act.StartHead():
                self.head_conn = world.swarm_origin.get(self.host, now, self._head_answered, _no_body, head_only=True)
            case act.StopHead():
                if self.head_conn is not None:
                    world.swarm_origin.close(self.head_conn, now)
                    self.head_conn = None
            case act.Switch(cause, position, reason):
                self.cause = cause
                self._say(f"switch ({cause}) at byte {position}: {reason}")
            case act.StartSwarm(found, start, end):
                self._say(f"from {len(found.providers)} peers, bytes {start}-{end - 1}")
                self.fetch = SwarmFetch(world, self, found.manifest, [p.port for p in found.providers], start, end,
                                        self._swarm_chunk, self._swarm_end, self._swarm_failed, found.layer)
                self.fetch.start()
            case act.StartSegments():
                raise NotImplementedError("a file of several segments is not modelled (100 KB is one segment)")
            case act.StopSwarm():
                if self.fetch is not None:
                    self.fetch.stop()
            case act.CloseOrigin(reason):
                if reason:
                    self._say(f"origin closed: {reason}")
                self._close_origin(now)
            case act.ReopenOrigin(start, end, _, streams) if streams > 1:
                self._say(f"origin asked again from byte {start}, by {streams} Ranges at once")
                self.conn = Ranges(self, start, end, streams)
            case act.ReopenOrigin(start, end):
                self._say(f"origin asked again from byte {start}")
                self.conn = self._open_origin(now, start, end)
            case act.Note(text, event):
                if event:
                    self._say(text)
            case act.SwarmFailed(text) | act.Cut(text):
                self.error = text
            case act.Fail(error):
                self.error = f"failed: {error}"
            case act.OriginComplete(publishable):
                if publishable and self.spool == len(world.content):
                    self._publish(vouch=True)
            case act.Account(from_swarm):
                from_range = min(self.fetch.origin_bytes if self.fetch else 0, from_swarm)
                self.bytes_origin += from_range
                self.bytes_peers += from_swarm - from_range
            case act.HandOver(manifest, _, swarm_done, publishable):
                if manifest is not None and self.spool == len(world.content) and publishable:
                    self._publish(vouch=True)
                elif manifest is not None and swarm_done:
                    self._publish(vouch=False)
            case _:
                pass  # RelayHead, Respond, RejectManifest, WithdrawSegments, Finish: nothing to model

    def _open_origin(self, now: float, start: int, end: int | None, *, accepts: bool = False) -> OriginConn:
        """A GET (a Range from `start`, to `end` if given; saying it leaves at the hint when `accepts`, as the
        fallback's first GET does) whose head and bytes reach this node while it is its origin connection."""
        conn = self.world.swarm_origin.get(self.host, now, self._head_of(None), self._data_of(None), start, end,
                                           accepts=accepts, peer=(self.address, self.index) if accepts else None)
        conn.on_head, conn.on_data = self._head_of(conn), self._data_of(conn)
        return conn

    def _close_origin(self, now: float) -> None:
        if isinstance(self.conn, Ranges):
            self.conn.close(self.world.swarm_origin, now)
        elif self.conn is not None:
            self.world.swarm_origin.close(self.conn, now)
        self.conn = None

    def _head_answered(self, status: int, start: int, end: int) -> None:
        if self.head_conn is None:  # stopped: its answer comes to nobody
            return
        self.head_conn = None
        if not self.core.done:
            self._run(self.core.head_answered(origin_head(self.world, status, start, end)))

    def _swarm_chunk(self, data: bytes) -> None:
        if not self.core.done:
            self._run(self.core.swarm_data(data, self.world.clock.now))

    def _swarm_end(self) -> None:
        if not self.core.done:
            self._run(self.core.swarm_end(self.world.clock.now))

    def _swarm_failed(self, reason: str) -> None:
        if not self.core.done:
            self._run(self.core.swarm_failed(reason, self.world.clock.now))

    def _publish(self, *, vouch: bool) -> None:
        """Store and share (`Ledger`): vouch for the root if every byte came from the origin, and be a provider."""
        world, now = self.world, self.world.clock.now
        if vouch:
            self.vouching = True
            self.first_hand_at = now
            world.dht.put(self.node_id, Vouch.seen(world.claim, self.node_id, self.address, frozenset(), now), now)
        self.complete = True
        self.announce()

    def announce(self) -> None:
        """Put its provider record (once: a fetch's announcement stands for the complete copy too)."""
        if not self.announced:
            self.announced = True
            # Its port stands for its index: peers are named by index (`swarm_fetch`)
            self.world.dht.announce(Provider(self.node_id, self.host, self.index, 1), self.world.clock.now)
            self.world.holders += 1

    def gained(self, block: int) -> None:
        """Its fetch verified `block`: it serves it, and tells every fetch connected to it."""
        self.held.add(block)
        for watcher in list(self.watchers):
            watcher.have(self.index, block)

    def _fetch_ended(self, *, vouching: bool) -> None:
        self.claimed_at = math.inf
        if not vouching:
            self.world.dht.put(self.node_id, None, self.world.clock.now, claim=True)  # `_will_not_vouch`

    def _finish(self) -> None:
        if self.done_at is not None:
            return
        now = self.world.clock.now
        self.done_at = now
        for timer in (self.timer, self.lookup):
            if timer is not None:
                timer.cancel()
        self.timer = self.lookup = None
        claimed = self.core.parking.claimed
        for action in self.core.abort():
            self._do(action)
        self._close_origin(now)
        if self.head_conn is not None:  # a HEAD still in the origin's line leaves it
            self.world.swarm_origin.close(self.head_conn, now)
            self.head_conn = None
        if claimed:
            self._fetch_ended(vouching=self.vouching)
        self.world.finished(self)

    def _say(self, text: str) -> None:
        if self.keep_events:
            self.events.append(f"+{self.world.clock.now - self.arrival:.2f}s {text}")

    def record(self) -> dict:
        duration = (self.done_at - self.arrival) if self.done_at is not None else None
        exact = self.exact and self.delivered == len(self.world.content) and self.error is None
        record: dict[str, object] = {
            "client": self.index, "arrival": round(self.arrival, 4),
            "duration_s": None if duration is None else round(duration, 4), "bytes": self.delivered, "exact": exact,
            "bytes_origin": self.bytes_origin, "bytes_peers": self.bytes_peers, "causes": [self.cause or "origin"],
            "vouched": self.first_hand_at is not None}
        if self.error:
            record["error"] = self.error
        if self.keep_events:
            record["events"] = [self.events]
        return record


def _no_body(piece: bytes) -> None:
    """A HEAD's answer has no body."""
