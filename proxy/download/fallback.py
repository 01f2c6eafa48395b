"""The fallback download's asyncio shell: one loop that feeds `proxy.download.core` and executes its actions.

For a GET that passes the request side of the publish gate (`proxy.publish_gate`) the request goes to the
origin; the core decides everything after that (when to switch, what to deliver from which producer, when to
reopen, cut or hand over — see its docstring). This module only waits: for the origin's head and body, a lookup,
a HEAD, the block engine's next verified chunk, or the core's next deadline, and turns each into an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncGenerator, Iterable

import aiohttp
from aiohttp import web
from yarl import URL

import addresses
from swarm.content.manifest import ACCEPT_HEADER, ACCEPT_HINT
from swarm.content.peer_field import accept_field
from swarm.content.segments import Segments
from swarm.errors import SwarmError
from swarm.trust import ManifestSource

from ..engine import Found, Miss, SwarmEngine, url_key
from ..errors import ClientGone
from ..exposure import PRIVATE_ORIGIN, Origin, may_share, may_swarm_name
from ..origin import OriginStream, connected_address, describe_failure, head
from ..origin_head import OriginHead, describe, piece_refused, range_request, synthesized_headers
from ..origin_resolver import OriginResolver
from ..publish_gate import request_gate
from ..ranges import parse_range
from ..relay import RelayedResponse, _copy_body, response_for
from ..spool import Spool
from ..stats import RequestRecord, Stats
from . import actions as act
from .adaptive import Adaptive, Outcome, Probe
from .core import DownloadCore
from .discovery_rule import DEFAULT_LARGE, DiscoveryRule
from .ledger import Ledger
from .parking import ParkingSettings
from .ranged_origin import RangedOrigin
from .segments import SegmentedFetch, SegmentTrust, SpoolVouches
from .settings import DownloadSettings
from .transition import DEFAULT_EARLY_LOOKUP, TransitionSettings

log = logging.getLogger("swarmproxy.fallback")


def _drop(future: asyncio.Future | None) -> None:
    """Cancel a wait no longer needed; a failed one's error is retrieved, so asyncio does not log it."""
    if future is not None:
        future.cancel()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())


class Fallback:
    """One per proxy: the `relay.SwarmHook` that answers swarmable GETs."""

    def __init__(self, engine: SwarmEngine, session: aiohttp.ClientSession, stats: Stats, *,
                 first_byte_timeout: float, min_rate: float, rate_window: float, max_spool: int,
                 early_lookup: float = DEFAULT_EARLY_LOOKUP, block_size: int | None = None,
                 adaptive: bool = True, discover_size: int = DEFAULT_LARGE,
                 share_private_origins: Iterable[Origin] = (), local_domains: Iterable[str] = (),
                 resolver: OriginResolver | None = None) -> None:
        """`share_private_origins`, `local_domains`: `--share-private-origins` and `--local-domains`: content from a
        non-public address is swarmed only from a listed origin (`proxy.exposure.may_share`). `resolver`: the origin
        session's, asked whether a name led to such addresses before anything is looked up ahead of its head."""
        self.resolver = resolver
        self.engine, self.session, self.stats = engine, session, stats
        self.settings = DownloadSettings(
            TransitionSettings(first_byte_timeout, min_rate, rate_window, early_lookup),
            max_spool=max_spool, sharing=engine.sharing, block_size=block_size,
            parking=ParkingSettings(after=engine.trust.vouchers if engine.discovery is not None else 0),
            discovery=DiscoveryRule(discover_size))
        self.private_origins, self.local_domains = tuple(share_private_origins), tuple(local_domains)
        # Every download is made with `settings`, except its T/R/W: those are chosen per download (`_choose`).
        self.flags = self.settings.transition
        self.adaptive = Adaptive(self.flags) if adaptive else None  # --no-adaptive: the flags, always
        self.tasks: set[asyncio.Task] = set()

    async def get(self, request: web.BaseRequest, url: URL, headers: list[tuple[str, str]],
                  record: RequestRecord) -> web.StreamResponse | None:
        decision = request_gate("GET", str(url), request.headers.items())
        # Several ranges or odd units: the origin answers those as it likes.
        ranges = "Range" in request.headers and parse_range(request.headers.get("Range")) is None
        if not decision.swarmable or ranges:
            record.swarm_skipped = "ranges" if decision.swarmable else decision.reason
            return None
        # The GET goes out first, its download worked out while the origin answers: one turn of the loop in which
        # the origin's task sends the request, instead of this download's T/R/W, core and ledger on every GET's way
        # out (about 60 µs a request, more than that turn).
        # A name that may be this machine's or its network's (localhost, a single label, .lan, an unlisted
        # private literal): nothing is looked up before its head says where the connection went (`may_share`).
        before_head = may_swarm_name(url.raw_host or "", url.port or 80, self.local_domains, self.private_origins)
        # Only the first GET says it leaves at the hint: a Range asked for later wants its bytes. (A client's own
        # field never gets here: `relay` and `mitm` drop it.)
        # With it, the port our peers reach us at when we serve what we fetch: a busy origin lists us to the clients
        # after us (`swarm.content.peer_field`), as it lists those before us to us.
        accepts = [(ACCEPT_HEADER, accept_field(ACCEPT_HINT, self._peer_port()))] \
            if self.settings.leaves_at_hint(before_head) else []
        origin = OriginStream(self.session, url, headers + accepts)
        first = asyncio.ensure_future(origin.next())
        sent = asyncio.get_running_loop().time()
        try:
            await asyncio.sleep(0)
            settings = self._choose(url, record, before_head)
            download = _Download(self, request, url, headers, record, settings, sent)
        except BaseException:  # cancelled in that turn (or a bug): the request goes with it, as in `run`'s end
            _drop(first)
            origin.close()
            raise
        complete = False
        try:
            response = await download.run(origin, first)
            complete = record.error is None
            return response
        finally:
            if self.adaptive is not None:
                self._learn(url, download.core.probe, record, complete)

    def _peer_port(self) -> int | None:
        """The port this node serves what it fetches on, or None when it shares nothing."""
        address = self.engine.address if self.engine.sharing else None
        return address[1] if address is not None else None

    def _choose(self, url: URL, record: RequestRecord, before_head: bool) -> DownloadSettings:
        """The next download's settings, with the T/R/W of the adaptive core for the URL's host (else the flags),
        shown in its record, and `before_head` (one `replace`: it is per request)."""
        transition, record.trw_source, host_slow = self.flags, "flags (--no-adaptive)", False
        if self.adaptive is not None:
            choice = self.adaptive.choose(url.raw_host or "", asyncio.get_running_loop().time())
            transition, record.trw_source, host_slow = choice.settings, choice.why, choice.host_slow
        record.first_byte_timeout = transition.first_byte_timeout
        record.min_rate = transition.min_rate
        record.rate_window = transition.rate_window
        return dataclasses.replace(self.settings, transition=transition, host_slow=host_slow, before_head=before_head)

    def _learn(self, url: URL, probe: Probe, record: RequestRecord, complete: bool) -> None:
        """Tell the adaptive core how the download went, once it ended (however it ended)."""
        assert self.adaptive is not None
        now = asyncio.get_running_loop().time()
        outcome = Outcome(probe, ended=now, cause=record.transition, size=record.bytes_origin + record.bytes_peers,
                          from_peers=record.bytes_peers, complete=complete)
        record.switch_verdict = self.adaptive.learn(url.raw_host or "", outcome, now)

    def spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def settled(self) -> None:
        """Wait until every finished download has been stored and announced (tests use this, never sleeps)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
        await self.engine.settled()

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class _Download:
    """The waits and the I/O of one download; every decision is its `DownloadCore`'s."""

    def __init__(self, owner: Fallback, request: web.BaseRequest, url: URL, headers: list[tuple[str, str]],
                 record: RequestRecord, settings: DownloadSettings, sent: float) -> None:
        """`sent`: the loop's time when the GET went out (the first byte timeout counts from then)."""
        self.owner, self.request, self.url, self.headers, self.record = owner, request, url, headers, record
        self.engine = owner.engine
        self.loop = asyncio.get_running_loop()
        self.began = sent
        self.core = DownloadCore(settings, range_header=request.headers.get("Range"),
                                 if_range=request.headers.get("If-Range"))
        self.origin: OriginStream | RangedOrigin | None = None
        self.response: web.StreamResponse | None = None
        self.spool: Spool | None = None
        self.chunks: AsyncGenerator[bytes, None] | None = None  # the block engine's verified chunks, once it runs
        self.vouches: SpoolVouches | None = None  # said it fetches from the origin: vouches segment by segment
        self.vouched_before: list[SegmentTrust] = []  # vouches of a claim it gave up, withdrawn with the rest
        self.segmented = False  # taken segment by segment (`StartSegments`)
        self.origin_head: OriginHead | None = None  # the origin's answer to our GET, once it came
        self.ledger = Ledger(owner, str(url), record, self.core)
        # What is awaited, in the order the events are fed when several are ready at once: a HEAD's answer before
        # the lookup it qualifies, the origin before the lookup (its own answer beats a manifest's) and before
        # the swarm (it was first).
        self.waits: dict[str, asyncio.Future | None] = dict.fromkeys(("head", "origin", "lookup", "swarm"))
        self.claims_ahead: asyncio.Future | None = None  # the claims lookup started with the GET (`look_ahead`)

    def _say(self, text: str) -> None:
        """One line of the request's `events`: what was decided and why."""
        self.record.event(self.loop.time() - self.began, text)

    async def run(self, origin: OriginStream, first: asyncio.Future) -> web.StreamResponse | None:
        """`origin`, `first`: the GET, already sent, and the wait for its head (`Fallback.get`)."""
        core, self.origin, self.waits["origin"] = self.core, origin, first
        try:
            await self._execute(core.start(self.began))
            while not core.done:
                await self._step()
            return self.response
        finally:
            try:
                await self._execute(core.abort())
            finally:  # even when the stop is cancelled too
                for future in [*self.waits.values(), self.claims_ahead]:
                    _drop(future)
                if self.origin is not None:
                    self.origin.close()
                if self.spool is not None:
                    self.spool.close()
                self.ledger.finished(core.delivered[act.Source.ORIGIN])
                if self.vouches is not None:
                    self.vouches.release()
                if core.parking.claimed:
                    self.engine.fetch_ended(str(self.url), vouching=self.ledger.vouching)

    async def _step(self) -> None:
        core, waits = self.core, self.waits
        if waits["origin"] is None and core.wants_origin and self.origin is not None:
            head = waits["head"]
            # Bytes already read go in now, in the order `waits` gives (only a HEAD's answer comes before them).
            if (head is None or not head.done()) and (ready := self.origin.ready()) is not None:
                await self._execute(self._event("origin", ready))
                return
            waits["origin"] = asyncio.ensure_future(self.origin.next())
        if waits["swarm"] is None and core.wants_swarm:
            waits["swarm"] = asyncio.ensure_future(self._next_chunk())
        deadline = core.next_deadline()
        timeout = None if deadline is None else max(0.0, deadline - self.loop.time())
        pending = [f for f in waits.values() if f is not None]
        if not pending and timeout is None:
            raise RuntimeError(f"the download's core waits for nothing in phase {core.phase.value}")
        if pending:
            done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        else:  # only time: e.g. the origin broke off and the next lookup is due later
            assert timeout is not None  # (refused above)
            await asyncio.sleep(timeout)
            done = set()
        if not done:
            await self._execute(core.timer(self.loop.time()))
        for name, future in waits.items():
            if core.done or future is None or future not in done or waits[name] is not future:
                continue  # an earlier event's actions may have stopped it
            waits[name] = None
            await self._execute(self._event(name, future.result()))

    def _event(self, name: str, result) -> list[act.Action]:
        core, now = self.core, self.loop.time()
        if name == "head":
            return core.head_answered(result)
        if name == "lookup":
            found, others, ahead = result
            return core.lookup_done(found, now, others, ahead)
        kind, value = result
        if name == "swarm":
            if kind == "data":
                if self.segmented and self.spool is not None and core.swarm_position == self.spool.received:
                    self.spool.feed(value)  # verified segment by segment: the spool can become the whole file
                return core.swarm_data(value, now)
            return core.swarm_end(now) if kind == "end" else core.swarm_failed(value, now)
        if kind == "head":
            address = self.origin.connected_address if self.origin else None
            self.origin_head = describe(str(self.url), self.request.headers, value.status, value.headers,
                                        value.raw_headers, origin_address=address)
            if self.origin_head.swarmable and not may_share(address, self.url.port or 80, self.owner.private_origins):
                # Where the connection really went decides, not the name: a private address nobody listed.
                self.origin_head = dataclasses.replace(self.origin_head, swarmable=False, reason=PRIVATE_ORIGIN)
            actions = core.origin_head(self.origin_head, now)
            if not core.lookups.running:  # not shared, small, or fast enough to need no lookup: none looks ahead
                _drop(self.claims_ahead)
                self.claims_ahead = None
            return actions
        if kind == "head_failed":
            return core.origin_head_failed(value, now)
        if kind == "data":
            if self.spool is not None and core.origin_offset == self.spool.received:
                self.spool.feed(value)
                if self.vouches is not None:
                    self.vouches.fed(self.spool)
            return core.origin_data(value, now)
        return core.origin_end(now) if kind == "end" else core.origin_failed(value, now)

    async def _execute(self, actions: list[act.Action]) -> None:
        for i, action in enumerate(actions):
            try:
                await self._do(action)
            except BaseException:
                # A client gone or a cancellation mid-list: the swarm is still stopped, counted and handed over.
                for rest in actions[i if isinstance(action, act.StopSwarm) else i + 1:]:
                    if isinstance(rest, (act.StopSwarm, act.Account, act.HandOver)):
                        with contextlib.suppress(Exception):
                            await self._do(rest)
                raise

    async def _do(self, action: act.Action) -> None:  # noqa: C901 - one arm per action, nothing else
        match action:
            case act.Deliver(source, data):
                await self._write(data)
                if source is act.Source.ORIGIN:
                    self.record.bytes_origin += len(data)
                else:
                    self.ledger.swarm_delivered(len(data))  # split at its fetch's end (`Account`)
            case act.RelayHead():
                assert isinstance(self.origin, OriginStream) and self.origin.upstream is not None  # (the first answer)
                self.response = response_for(self.origin.upstream)
                await self.response.prepare(self.request)
            case act.RelayAsIs(reason):
                log.debug("not swarmable (%s): %s", reason, self.url)
                self.ledger.skipped(reason)
                assert isinstance(self.origin, OriginStream) and self.origin.upstream is not None
                upstream = self.origin.upstream
                self.response = response_for(upstream)
                await self.response.prepare(self.request)
                await _copy_body(upstream, self.response, self.request, self.record)
            case act.Respond(status, start, end, manifest, described):
                fields = synthesized_headers(manifest, status, start, end, described)
                self.response = RelayedResponse(status=status)  # names the request's record, a 416 too
                for name, value in fields:
                    self.response.headers.add(name, value)
                if status == 416:
                    self.response.content_length = 0
                    return  # no body: aiohttp's handler prepares and ends it
                await self.response.prepare(self.request)
            case act.OpenSpool(size, block_size):
                self.spool = Spool(self.engine.spool_dir, size, block_size=block_size)
            case act.ClaimFetching(size, block_size, validator):
                self._say("too few others fetch it: this node fetches it from the origin and will vouch")
                self.engine.fetching(str(self.url), size=size, block_size=block_size, validator=validator)
                self.vouches = SpoolVouches(SegmentTrust(self.engine), url_key(str(self.url)), validator,
                                            self.engine.service.spawn)
            case act.EndClaim():
                self._say("others ahead fetch it from the origin: leaving it to them")
                if self.vouches is not None:  # it vouches for no more segments: later spool bytes may be peers'
                    self.vouches.release()
                    self.vouched_before.append(self.vouches.trust)  # still withdrawn if the body proves wrong
                    self.vouches = None
                log.info("%s: others ahead fetch it from the origin: this download leaves it to them", self.url)
                self.engine.fetch_ended(str(self.url), vouching=False)
            case act.LookAhead():  # the head is late, or the host was slow recently: its DHT part starts now
                if self.claims_ahead is None and self._leads_to_shareable():
                    self.claims_ahead = self.engine.look_ahead(str(self.url))
            case act.StartLookup(headless):
                self.waits["lookup"] = asyncio.ensure_future(self._find(headless))
            case act.StartHead():
                self.waits["head"] = asyncio.ensure_future(head(self.owner.session, self.url, self.headers,
                                                                self.request.headers))
            case act.StopLookup() | act.StopHead():
                name = "lookup" if isinstance(action, act.StopLookup) else "head"
                _drop(self.waits[name])
                self.waits[name] = None
            case act.Switch(cause, position, reason):
                self._say(f"switch ({cause}) at byte {position}: {reason}")
                log.info("%s: switching to the swarm at byte %d (%s)", self.url, position, reason)
                self.ledger.switched(cause)
            case act.StartSwarm(found, start, end):
                self.ledger.skipped(None)
                self.record.manifest_source = found.source
                self.record.peers = [f"{p.host}:{p.port}" for p in found.providers]
                self._say(f"from {len(found.providers)} peers, bytes {start}-{end - 1}")
                origin = self.engine.origin_source(str(self.url), found.manifest)
                self.chunks = self.engine.fetch(found, origin=origin, start=start, end=end,
                                                report=self.ledger.report)
            case act.StartSegments(start, end, block_size, origin_rate):
                self.ledger.skipped(None)
                self.record.manifest_source, self.segmented = ManifestSource.SEGMENTS, True
                known = self.core.known
                assert known.size is not None and known.validator is not None
                fetch = SegmentedFetch(self.engine, str(self.url), url_key(str(self.url)),
                                       Segments(known.size, block_size), validator=known.validator,
                                       parking=self.core.settings.parking,
                                       origin_rate=origin_rate, report=self.ledger.report)
                fetch.sources = self.record.segments  # filled as each segment starts
                fetch.taken = self.core.parking.segment_taken
                fetch.event = self._say
                self.ledger.segments = fetch  # how strongly its segments were vouched for, at the hand-over
                self.chunks = fetch.chunks(start, end)
            case act.StopSwarm():
                await self._stop("swarm")
                if self.chunks is not None:
                    with contextlib.suppress(Exception):
                        await self.chunks.aclose()  # stops the fetch, which fills its report
            case act.CloseOrigin(reason):
                if reason:
                    self._say(f"origin closed: {reason}")
                    log.info("%s: %s", self.url, reason)
                await self._stop("origin")
                if self.origin is not None:
                    self.origin.close()
                    self.origin = None
            case act.ReopenOrigin(start, end, validator, streams):
                self._say(f"origin asked again from byte {start}" + (f", by {streams} Ranges at once"
                                                                        if streams > 1 else ""))
                log.info("%s: asking the origin again from byte %d", self.url, start)
                if self.origin is not None:
                    self.origin.close()
                self.origin = RangedOrigin(self.owner.session, self.url, self.headers, start=start, end=end,
                                           streams=streams, validator=validator, check=self._piece_refused) \
                    if streams > 1 and validator else \
                    OriginStream(self.owner.session, self.url, range_request(self.headers, start, end, validator))
            case act.RejectManifest(source):
                self.ledger.rejected(source)
            case act.SwarmFailed(text):
                self.record.swarm_error = text
            case act.Note(text, event):
                if event:  # else the lookup's own line says it
                    self._say(text)
                log.info("%s: %s", self.url, text)
            case act.OriginComplete(publishable):
                spool, self.spool = self.spool, None  # first: a client holding the whole body may hang up at once
                self.ledger.origin_complete(spool, publishable, self.response)
            case act.WithdrawSegments(why):
                log.warning("%s: %s: withdrawing every segment it shared", self.url, why)
                trusts = [*self.vouched_before, self.vouches and self.vouches.trust,
                          self.ledger.segments and self.ledger.segments.trust]
                for trust in trusts:
                    if trust:
                        trust.withdraw_all(why)
            case act.Account(from_swarm):
                self.ledger.account(from_swarm)
            case act.HandOver(manifest, fetch_start, swarm_done, publishable, vouch):
                if self.ledger.hand_over(manifest, fetch_start, swarm_done, self.spool, publishable, vouch,
                                         self.response):
                    self.spool = None  # handed over: the download no longer closes it
            case act.Finish():
                await self._write(None)
            case act.Cut(reason):
                self.record.error = reason
                if self.request.transport is not None:
                    self.request.transport.close()
                raise ClientGone(reason)
            case act.Fail(error):
                timeout = self.owner.session.timeout
                raise describe_failure(error, self.url.raw_host or "", self.url.explicit_port,
                                       connect_timeout=timeout.sock_connect, read_timeout=timeout.sock_read) from None

    # -- what is awaited -----------------------------------------------------------------------------------------

    async def _find(self, headless: bool) -> tuple[object, int, int]:
        """A trusted manifest and its providers, or None (a failed lookup found nothing: the origin goes on); the
        weight of the others fetching the same version from the origin, and of those ahead of us (`Miss.ahead`)."""
        core, looked_ahead, self.claims_ahead = self.core, self.claims_ahead, None
        if headless and not self._leads_to_shareable():
            _drop(looked_ahead)
            self._say("lookup: not before the origin's address is known")
            return None, 0, 0
        try:
            known = core.known  # what the origin's head said, if it came
            found = await self.engine.find(str(self.url), known_size=known.size, known_validator=known.validator,
                                           published=known.published, content_type=known.content_type,
                                           headless=headless, origin_head=lambda: self.origin_head,
                                           looked_ahead=looked_ahead,
                                           peers=self.origin_head.peers if self.origin_head is not None else ())
        except SwarmError as exc:  # the engine's own (a Discovery's errors end in a lookup that found nothing)
            log.info("%s: a swarm lookup failed: %s", self.url, exc)
            found = Miss("lookup-failed")
        except Exception:  # a bug: said loudly, with its traceback, and the origin alone goes on
            log.exception("swarmproxy bug: the swarm lookup of %s raised", self.url)
            found = Miss("lookup-bug", "an internal error; see the log")
        miss = found if isinstance(found, Miss) else Miss("")
        self._say(f"lookup: a {found.source} manifest" if isinstance(found, Found) else
                    f"lookup: {found} ({miss.others} fetching, {miss.ahead} of them ahead)")
        return self.ledger.usable(found), miss.others, miss.ahead

    def _piece_refused(self, response: aiohttp.ClientResponse, lo: int, hi: int) -> str | None:
        """Why a Range answer cannot be bytes `lo..hi` of the representation served (`RangedOrigin`'s check): the
        same version, exactly the bytes asked, and from an address whose content may be shared, as the first was."""
        if not may_share(connected_address(response), self.url.port or 80, self.owner.private_origins):
            return "a piece's answer came from an address whose content may not be shared"
        known = self.core.known
        encoding = self.origin_head.content_encoding if self.origin_head is not None else None
        return piece_refused(describe(str(self.url), self.request.headers, response.status, response.headers,
                                      response.raw_headers), known.size, known.validator, encoding, lo, hi)

    def _leads_to_shareable(self) -> bool:
        """Before the head: did the URL's name resolve to addresses whose content may be shared? (A literal was
        judged by `may_swarm_name`; a name resolving to a private address nobody listed never reaches the DHT.)"""
        host, resolver = self.url.raw_host or "", self.owner.resolver
        return addresses.parse(host) is not None or resolver is None or resolver.resolved_shareable(host)

    async def _next_chunk(self) -> tuple[str, object]:
        try:
            assert self.chunks is not None  # (asked for only while the swarm runs)
            return "data", await anext(self.chunks)
        except StopAsyncIteration:
            return "end", None
        except Exception as exc:  # FetchFailed, or anything else the engine hit
            return "failed", str(exc)

    async def _stop(self, name: str) -> None:
        """Cancel a producer's read and wait: one aiohttp reader at a time; a running generator cannot close."""
        future, self.waits[name] = self.waits[name], None
        if future is not None:
            future.cancel()
            await asyncio.gather(future, return_exceptions=True)

    async def _write(self, data: bytes | None) -> None:
        """Send `data`, or end the response (None)."""
        assert self.response is not None  # (written only after the head went out)
        try:
            await (self.response.write_eof() if data is None else self.response.write(data))
        except (ConnectionError, RuntimeError) as exc:
            raise ClientGone(f"client closed the connection: {exc}") from None
