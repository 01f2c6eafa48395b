"""The fallback download: origin first, swarm when slow, one seamless and verified response.

For a GET that passes the request side of the publish gate (`proxy.publish_gate`):

1. The request goes to the origin. A `TransitionPolicy` watches the bytes (headers count) against the clock.
2. While the origin is fast, the body is relayed as is (and spooled + hashed, so this node can share it).
3. When the policy fires (`T`: no first byte in time; `R`: rate under R over the last W seconds; `died`: the
   origin broke off mid-body), the engine looks for a trusted manifest and providers. None → the origin goes on
   alone: swarming never makes a download fail that the origin alone would finish.
4. Otherwise the rest comes from two producers, merged strictly in order by offset: the origin body, still
   open and still read, and the block engine (peers plus the origin as a capped Range source). Whichever is
   ahead delivers; the other's bytes below the delivery point are dropped. Nothing reaches the client twice or
   with a gap, and every swarm byte was verified against the manifest's root.
5. The bytes the origin sent before the switch are checked against the manifest: the swarm fetch starts at the
   block holding the last origin byte delivered, and its (verified) bytes must equal the origin's there. A
   mismatch means the manifest is not the origin's content: the swarm is dropped before any of its bytes go out.

The client's own Range is honoured: forwarded to the origin, and answered 206 with our own Content-Range when
the swarm answers before the origin has said anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
from aiohttp import web
from yarl import URL

from swarm.manifest import MAX_BLOCKS

from . import headers as hdr
from .engine import Found, SwarmEngine
from .origin import describe_failure
from .origin_manifest import hinted, published
from .publish_gate import content_length_of, gate, request_gate
from .ranges import content_range, parse_content_range, parse_range
from .relay import ClientGone, RelayedResponse, _copy_body, response_for
from .spool import Spool
from .stats import RequestRecord, Stats
from .transition import TransitionPolicy

log = logging.getLogger("swarmproxy.fallback")

TAIL_LIMIT = 4 << 20  # the largest block size: enough origin bytes to check the first swarm block against
# What a headless answer from a DHT manifest is labelled with (and `nosniff`) while the origin has not said what it
# serves: a peer's manifest names a Content-Type that nothing verifies (the root covers only the bytes), and a
# type chosen by a stranger, such as text/html for an http:// URL, would run its script in the origin's name.
_UNVOUCHED_TYPE = "application/octet-stream"


class OriginGone(Exception):
    """The origin stream ended early, broke, or answered something we cannot use."""


def manifest_validator(headers) -> str | None:
    """What the manifest records as validator: the strong ETag as sent, else Last-Modified (DESIGN.md)."""
    etag = headers.get("ETag")
    if etag and not etag.strip().startswith("W/"):
        return etag.strip()
    modified = headers.get("Last-Modified")
    return modified.strip() if modified else None


def _head_size(upstream: aiohttp.ClientResponse) -> int:
    # The status line and fields as they came (approximately): headers count as bytes for T and R.
    return 16 + sum(len(k) + len(v) + 4 for k, v in upstream.raw_headers)


class _OriginReader:
    """The origin body as (offset, bytes) pieces; the response may still be on its way (`T` switches)."""

    def __init__(self, upstream: aiohttp.ClientResponse | None, offset: int,
                 pending: asyncio.Future | None = None, accept=None) -> None:
        self.upstream = upstream
        self.offset = offset
        self.pending = pending  # the GET whose headers have not arrived yet
        self.accept = accept  # upstream -> starting offset, or raises OriginGone
        self.done = False

    async def read(self) -> tuple[int, bytes]:
        if self.upstream is None:
            assert self.pending is not None and self.accept is not None
            try:
                self.upstream = await self.pending
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                raise OriginGone(f"origin request failed: {type(exc).__name__}: {exc}") from None
            try:
                self.offset = self.accept(self.upstream)
            except OriginGone:
                self.upstream.close()  # not ours to read: free the connection now
                raise
        try:
            chunk = await self.upstream.content.readany()
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
            raise OriginGone(f"origin stopped mid-response: {type(exc).__name__}") from None
        offset = self.offset
        self.offset += len(chunk)
        if not chunk:
            self.done = True
        return offset, chunk

    def close(self) -> None:
        if self.pending is not None and not self.pending.done():
            self.pending.cancel()
        if self.upstream is not None:
            self.upstream.close()


REPOLL_SECONDS = (1.0, 2.0, 3.0, 5.0)


def _drop(future: asyncio.Future | None) -> None:
    """Cancel a read or lookup we no longer wait for; one that already failed has its error retrieved, so
    asyncio does not log it as never retrieved."""
    if future is None:
        return
    future.cancel()
    future.add_done_callback(lambda f: f.cancelled() or f.exception())


def _found_or_none(lookup: asyncio.Future) -> Found | None:
    """The result of a finished lookup; a failed one found nothing (the origin goes on, a later lookup may find)."""
    if lookup.cancelled():
        return None
    if (exc := lookup.exception()) is not None:
        log.warning("a swarm lookup failed: %r", exc)
        return None
    return lookup.result()


class Fallback:
    """One per proxy: the `relay.SwarmHook` that answers swarmable GETs."""

    def __init__(self, engine: SwarmEngine, session: aiohttp.ClientSession, stats: Stats, *,
                 first_byte_timeout: float, min_rate: float, rate_window: float, max_spool: int,
                 early_lookup: float = 0.5, block_size: int | None = None) -> None:
        self.engine = engine
        self.session = session
        self.stats = stats
        self.settings = (first_byte_timeout, min_rate, rate_window, early_lookup)
        self.max_spool = max_spool
        self.block_size = block_size  # of the manifests we make from origin bytes; None: by size (--block-size)
        self.tasks: set[asyncio.Task] = set()
        # Seconds between lookups while a switched download still crawls from the origin (the last repeats).
        self.repoll: tuple[float, ...] = REPOLL_SECONDS

    async def get(self, request: web.BaseRequest, url: URL, headers: list[tuple[str, str]],
                  record: RequestRecord) -> web.StreamResponse | None:
        decision = request_gate("GET", str(url), request.headers.items())
        if not decision.swarmable:
            return None
        if "Range" in request.headers and parse_range(request.headers.get("Range")) is None:
            return None  # several ranges or odd units: the origin answers those as it likes
        return await _Download(self, request, url, headers, record).run()

    def spool(self, size: int, block_size: int | None = None) -> Spool:
        """A spool for `size` bytes from the origin, hashed in `block_size` blocks (given: a manifest's), else
        in --block-size blocks, else by the size rule, which is also used where --block-size would make more
        blocks than a manifest may have."""
        if block_size is None and self.block_size and -(-size // self.block_size) <= MAX_BLOCKS:
            block_size = self.block_size
        return Spool(self.engine.spool_dir, size, block_size=block_size)

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
    def __init__(self, owner: Fallback, request: web.BaseRequest, url: URL, headers: list[tuple[str, str]],
                 record: RequestRecord) -> None:
        self.owner, self.request, self.url, self.headers, self.record = owner, request, url, headers, record
        self.engine = owner.engine
        self.loop = asyncio.get_running_loop()
        self.policy = TransitionPolicy(*owner.settings)
        self.spool: Spool | None = None
        self.response: web.StreamResponse | None = None
        self.tail = bytearray()  # the last origin bytes delivered (for the manifest check), up to TAIL_LIMIT
        self.tail_end = 0
        self.delivered_from_origin = 0
        self.delivered_from_swarm = 0
        self.publishable = False
        self.accounted = False
        self.handed_over = False
        self.promised_start = 0  # where our own (T-case) response starts
        self.size: int | None = None
        self.validator: str | None = None
        self.published = None  # the origin's own manifest (server plugin), if it sent one
        self.hinted = False  # ... and asked us to swarm at once
        self.ranges = False  # the origin said Accept-Ranges: bytes
        self.reopen = False  # we closed the origin stream ourselves: on a swarm failure, reopen it at a Range
        self.content_type: str | None = None

    # -- the origin phase ------------------------------------------------------------------------------------------

    async def run(self) -> web.StreamResponse:
        self.policy.start(self.loop.time())
        task = asyncio.ensure_future(self.owner.session.request(
            "GET", self.url, headers=self.headers, allow_redirects=False, compress=None))
        try:
            upstream = await self._headers(task)
            if upstream is None:
                return await self._switch_before_headers(task)
            try:
                return await self._stream(upstream)
            finally:
                upstream.release()
        finally:
            if not task.done():
                task.cancel()
            if self.spool is not None:
                self.spool.close()

    async def _headers(self, task: asyncio.Future) -> aiohttp.ClientResponse | None:
        """The origin's response head, or None when `T` fires first."""
        while True:
            deadline = self.policy.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - self.loop.time())
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if done:
                try:
                    upstream = task.result()
                except Exception as exc:
                    raise describe_failure(exc, self.url.raw_host or "", self.url.explicit_port) from None
                self.policy.on_bytes(_head_size(upstream), self.loop.time())
                return upstream
            if self.policy.check(self.loop.time()) is not None:
                return None

    async def _stream(self, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        request = self.request
        decision = gate("GET", str(self.url), request.headers.items(), upstream.status, upstream.headers.items())
        response = self.response = response_for(upstream)
        if not decision.swarmable:
            log.debug("not swarmable (%s): %s", decision.reason, self.url)
            self.policy.finish()
            await response.prepare(request)
            await _copy_body(upstream, response, request, self.record)
            return response
        self.publishable = True
        self.size = content_length_of(upstream.status, upstream.headers.items())
        self.validator = manifest_validator(upstream.headers)
        self.published = published(upstream.headers, self.size)
        self.hinted = self.published is not None and hinted(upstream.headers)
        self.ranges = upstream.headers.get("Accept-Ranges", "").strip().lower() == "bytes"
        self.content_type = upstream.headers.get("Content-Type")
        start, end = 0, self.size
        if upstream.status == 206:
            start, end, _ = parse_content_range(upstream.headers.get("Content-Range"))  # the gate checked it
        elif self.size is not None and self.size <= self.owner.max_spool and self.engine.sharing:
            self.spool = self.owner.spool(self.size, self.published.block_size if self.published else None)
        self.tail_end = start
        await response.prepare(request)
        reader = _OriginReader(upstream, start)
        position = start
        pending: asyncio.Future | None = None
        early: asyncio.Future | None = None  # the early lookup (see the crowd rule in proxy.transition)
        looked_early = False
        found: Found | None = None
        cause: str | None = None
        try:
            while position < end:
                if self.hinted:  # before any body byte: the origin published its manifest, asks us to swarm
                    cause = self.policy.hint(self.loop.time())
                    reason = "the origin asks clients to swarm"
                    break
                pending = pending or asyncio.ensure_future(reader.read())
                now = self.loop.time()
                due = None if looked_early else self.policy.lookup_due_at()
                if due is not None and now >= due:
                    due, looked_early = None, True
                    if self.policy.slow_so_far(now):  # else fast enough: no lookup for this download
                        log.info("%s: the origin is slow so far; looking for peers already", self.url)
                        early = asyncio.ensure_future(self._find(0.0))
                deadlines = [d for d in (self.policy.next_deadline(), due) if d is not None]
                timeout = max(0.0, min(deadlines) - now) if deadlines else None
                waiting = {pending} if early is None or early.done() else {pending, early}
                done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if early in done:
                    found = _found_or_none(early)
                    if found is not None and self.policy.crowd(self.loop.time()) is None:
                        found = None  # the origin sped up meanwhile: stay
                if pending in done:
                    finished, pending = pending, None
                    try:
                        _, chunk = finished.result()
                    except OriginGone as exc:
                        cause, reason = "died", str(exc)
                        break
                    if not chunk:
                        cause, reason = "died", f"origin ended the body after {position - start} of {end - start} bytes"
                        break
                    self.policy.on_bytes(len(chunk), self.loop.time())
                    await self._deliver_origin(chunk)
                    position += len(chunk)
                cause = self.policy.check(self.loop.time())
                if cause is not None:
                    reason = f"transition {cause}" if cause != "crowd" else "the swarm has it and the origin is slow"
                    break
            else:
                self.policy.finish()
                self._origin_complete()  # first: a client holding the whole body may hang up at once
                await self._end(response)
                return response
            log.info("%s: switching to the swarm at byte %d (%s)", self.url, position, reason)
            if pending is not None:
                # The read may have completed after wait() returned: its bytes must not be lost. Otherwise wait
                # for the cancellation, since aiohttp allows only one reader at a time.
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
                if not pending.cancelled():
                    try:
                        _, chunk = pending.result()
                    except OriginGone:
                        cause = "died" if cause is None else cause
                        reader = None
                    else:
                        if chunk:
                            await self._deliver_origin(chunk)
                            position += len(chunk)
                pending = None
            if position >= end:  # that last read finished it
                self.policy.finish()
                self._origin_complete()
                await self._end(response)
                return response
            under_way = None  # an early lookup still running becomes the switch's first lookup
            if early is not None and not early.done():
                under_way, early = early, None
            # A trusted copy found early serves whichever cause switched (R may have fallen due just before).
            await self._swarm(cause, position, end, None if cause == "died" else reader, found=found,
                              lookup=under_way)
            return response
        finally:
            _drop(pending)
            _drop(early)

    # -- switching -------------------------------------------------------------------------------------------------

    async def _swarm(self, cause: str, position: int, end: int, reader: _OriginReader | None, *,
                     found: Found | None = None, lookup: asyncio.Future | None = None) -> None:
        """Finish the response from `position` on: from the swarm if it can, else the origin alone.

        While the origin still delivers, a lookup that finds nothing is repeated (`Fallback.repoll`): in a
        flash crowd the first copies complete and are vouched for a few seconds after the crowd arrived, and
        everyone still crawling should move to them then (Pack polled every 5 s).
        """
        self._count_transition(cause)
        polls = 0
        if found is not None:  # an early lookup found it: no second lookup
            await self._merge(found, position, end, reader)
            return
        find = lookup or asyncio.ensure_future(self._find(0.0))
        pending: asyncio.Future | None = None
        try:
            while reader is not None:
                if find.done():
                    found = _found_or_none(find)
                    if found is not None:
                        break
                    wait = self.owner.repoll[min(polls, len(self.owner.repoll) - 1)]
                    polls += 1
                    log.info("%s: no usable manifest or provider yet; the origin goes on, asking again in %g s",
                             self.url, wait)
                    find = asyncio.ensure_future(self._find(wait))
                pending = pending or asyncio.ensure_future(reader.read())
                await asyncio.wait({find, pending}, return_when=asyncio.FIRST_COMPLETED)
                if not pending.done():
                    continue
                finished, pending = pending, None
                try:
                    offset, chunk = finished.result()
                except OriginGone as exc:
                    log.info("%s: origin gone during the lookup: %s", self.url, exc)
                    reader = None
                    break
                if not chunk:
                    reader = None
                    break
                piece = chunk[position - offset:end - offset]
                await self._deliver_origin(piece)
                position += len(piece)
                if position >= end:
                    self.policy.finish()
                    self._origin_complete()
                    await self._end(self.response)
                    return
            if found is None:
                await asyncio.wait({find})  # the origin is gone: the lookup under way is the last chance
                found = _found_or_none(find)
        except BaseException:
            _drop(pending)  # a client gone, a cut, the proxy stopping: the read's outcome no longer matters
            raise
        finally:
            if not find.done():
                find.cancel()
                await asyncio.gather(find, return_exceptions=True)
        if found is not None:
            await self._merge(found, position, end, reader, pending)
            return
        self.record.error = None
        self._cut(f"origin_cut: the origin broke off after {position} bytes and no peer has the rest")

    async def _find(self, after: float):
        if after:
            await asyncio.sleep(after)  # the poll interval: nothing to wait for but time
        return await self.engine.find(str(self.url), known_size=self.size, known_validator=self.validator,
                                      published=self.published, content_type=self.content_type)

    async def _switch_before_headers(self, task: asyncio.Future) -> web.StreamResponse:
        """`T` fired: the origin has said nothing yet. Answer from the swarm if a manifest is found in time."""
        self._count_transition("T")
        # The DHT lookup races a HEAD to the origin: a HEAD that answers first tells which version the origin
        # serves now, so a manifest of an older version is not used.
        head = asyncio.ensure_future(self.owner.session.head(self.url, headers=self.headers, allow_redirects=False))
        described: tuple[str | None, str | None] | None = None  # the HEAD's Content-Type and -Encoding
        try:
            found = await self.engine.find(str(self.url), headless=True)
            if found is not None and head.done() and not head.cancelled() and head.exception() is None:
                answer = head.result()
                if answer.status == 200 and not self._same_version(answer, found.manifest):
                    log.info("%s: the origin's HEAD shows another version than the manifest; not swarming",
                             self.url)
                    found = None
                elif answer.status == 200:
                    described = answer.headers.get("Content-Type"), answer.headers.get("Content-Encoding")
        finally:
            if not head.done():
                head.cancel()
            elif not head.cancelled() and head.exception() is None:
                head.result().release()
        if found is None or (task.done() and not task.exception()):
            # No manifest, or the origin answered meanwhile: its own response is the better one.
            log.info("%s: %s", self.url, "the origin answered during the lookup" if found else
                     "no usable manifest or provider; waiting for the origin")
            upstream = await self._headers_no_switch(task)
            try:
                return await self._stream_after(upstream)
            finally:
                upstream.release()
        manifest = found.manifest
        self.size, self.validator = manifest.size, manifest.validator
        status, start, end = self._client_range(manifest.size, manifest.validator)
        if status == 416:
            return web.Response(status=416, headers={"Content-Range": f"bytes */{manifest.size}"})
        self.promised_start = start
        response = self.response = RelayedResponse(status=status)
        if described is None and found.source in ("quorum", "any"):
            described = (_UNVOUCHED_TYPE, None)
        for name, value in self._synthesized_headers(manifest, status, start, end, described):
            response.headers.add(name, value)
        await response.prepare(self.request)
        self.tail_end = start
        if start == 0 and end == manifest.size and self.engine.sharing and manifest.size <= self.owner.max_spool:
            # In the manifest's blocks: the swarm fills the same store entry, and a root has one block size.
            self.spool = self.owner.spool(manifest.size, manifest.block_size)
        reader = _OriginReader(None, 0, pending=task, accept=lambda up: self._accept_late(up, manifest))
        await self._merge(found, start, end, reader)
        return response

    async def _headers_no_switch(self, task: asyncio.Future) -> aiohttp.ClientResponse:
        try:
            return await task
        except Exception as exc:
            raise describe_failure(exc, self.url.raw_host or "", self.url.explicit_port) from None

    async def _stream_after(self, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        """The origin answered after `T`: relay it; switch (once) later only if it fails or crawls."""
        self.policy = TransitionPolicy(*self.owner.settings)
        self.policy.start(self.loop.time())
        self.policy.on_bytes(_head_size(upstream), self.loop.time())
        return await self._stream(upstream)

    @staticmethod
    def _same_version(answer: aiohttp.ClientResponse, manifest) -> bool:
        size = content_length_of(answer.status, answer.headers.items())
        validator = manifest_validator(answer.headers)
        return (size is None or size == manifest.size) and (validator is None or validator == manifest.validator)

    def _reopen(self, position: int, end: int, manifest) -> _OriginReader:
        """The origin again, from `position`: the swarm failed after we had closed the origin's stream."""
        log.info("%s: the swarm failed; asking the origin again from byte %d", self.url, position)
        headers = [(k, v) for k, v in self.headers if k.lower() not in ("range", "if-range")]
        headers.append(("Range", f"bytes={position}-{end - 1}"))
        if manifest.validator:
            headers.append(("If-Range", manifest.validator))
        task = asyncio.ensure_future(self.owner.session.request(
            "GET", self.url, headers=headers, allow_redirects=False, compress=None))
        self.promised_start = position
        return _OriginReader(None, 0, pending=task, accept=lambda up: self._accept_late(up, manifest))

    def _accept_late(self, upstream: aiohttp.ClientResponse, manifest) -> int:
        """The origin's late answer is used only if it is the representation we are serving."""
        if upstream.status not in (200, 206):
            raise OriginGone(f"origin answered {upstream.status}")
        decision = gate("GET", str(self.url), self.request.headers.items(), upstream.status, upstream.headers.items())
        if not decision.swarmable:  # e.g. private after all: do not keep, store or announce any of it
            self.publishable = False
            raise OriginGone(f"the origin's answer may not be shared ({decision.reason})")
        self.publishable = True
        validator = manifest_validator(upstream.headers)
        size = content_length_of(upstream.status, upstream.headers.items())
        if size != manifest.size or (manifest.validator and validator != manifest.validator):
            raise OriginGone("the origin now serves another version than the manifest describes")
        start = 0
        if upstream.status == 206:
            parsed = parse_content_range(upstream.headers.get("Content-Range"))
            if parsed is None:
                raise OriginGone("origin sent a 206 without a usable Content-Range")
            start = parsed[0]
        if start > self.promised_start:
            raise OriginGone(f"the origin answered from byte {start}, we serve from {self.promised_start}")
        return start

    def _client_range(self, size: int, validator: str | None) -> tuple[int, int, int]:
        spec = parse_range(self.request.headers.get("Range"))
        if_range = self.request.headers.get("If-Range")
        if spec is None or (if_range is not None and if_range.strip() != (validator or "")):
            return 200, 0, size
        resolved = spec.resolve(size)
        if resolved is None:
            return 416, 0, 0
        return 206, resolved[0], resolved[1]

    def _synthesized_headers(self, manifest, status: int, start: int, end: int,
                             described: tuple[str | None, str | None] | None = None) -> list[tuple[str, str]]:
        """Our own response head for the manifest's bytes. Content-Type and -Encoding come from the origin's
        HEAD when it answered (`described`): the origin says what it serves now, a manifest only what one
        publisher was once sent (or claims it was)."""
        fields = [("Content-Length", str(end - start)), ("Accept-Ranges", "bytes")]
        if status == 206:
            fields.append(("Content-Range", content_range(start, end, manifest.size)))
        if manifest.validator:
            name = "ETag" if manifest.validator.startswith('"') else "Last-Modified"
            fields.append((name, manifest.validator))
        content_type, content_encoding = described or (manifest.content_type, manifest.content_encoding)
        if content_type:
            fields.append(("Content-Type", content_type))
        if content_encoding:
            fields.append(("Content-Encoding", content_encoding))
        if content_type == _UNVOUCHED_TYPE:
            fields.append(("X-Content-Type-Options", "nosniff"))
        return hdr.add_via(fields, (1, 1))

    # -- merging origin and swarm ------------------------------------------------------------------------------------

    async def _merge(self, found: Found, position: int, end: int, reader: _OriginReader | None,
                     origin_pending: asyncio.Future | None = None) -> None:
        manifest = found.manifest
        block = manifest.block_size
        self.record.manifest_source = found.source
        if reader is not None and self.hinted and self.ranges and found.source == "origin":
            # The origin asked us to swarm and serves ranges: its stream would only send the same prefix to
            # every client of a crowd. The Range source takes blocks nobody has; should the swarm fail, the
            # stream is reopened where delivery got to (`_reopen`), so nothing the origin alone would finish fails.
            _drop(origin_pending)
            origin_pending = None
            reader.close()
            reader = None
            self.reopen = True
        self.record.peers = [f"{p.host}:{p.port}" for p in found.providers]
        # Start at the block holding the last origin byte delivered, to check it against the manifest.
        check_from = max(self.tail_end - len(self.tail), 0)
        if self.tail and self.tail_end == position and position > check_from:
            fetch_start = (position - 1) // block * block
        else:
            fetch_start = position // block * block
        check = bytes(self.tail[max(fetch_start - check_from, 0):]) if self.tail_end == position else b""
        check_at = position - len(check)
        self.tail.clear()
        range_source = self.engine.origin_source(str(self.url), manifest)
        report: dict = {}
        chunks = self.engine.fetch(found, origin=range_source, start=fetch_start, end=end, report=report)
        swarm_position = fetch_start
        swarm_next: asyncio.Future | None = asyncio.ensure_future(anext(chunks))
        origin_next: asyncio.Future | None = origin_pending or (
            asyncio.ensure_future(reader.read()) if reader else None)
        swarm_done = False
        last: tuple[bytes, int | None] | None = None  # the piece that completes the response
        try:
            while position < end:
                waiting = {f for f in (swarm_next, origin_next) if f is not None}
                if not waiting:
                    self._cut(f"origin_cut: neither the origin nor the swarm can supply bytes {position}.. "
                              f"({self.record.swarm_error or 'both failed'})")
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if origin_next in done:
                    finished, origin_next = origin_next, None
                    try:
                        offset, chunk = finished.result()
                    except OriginGone as exc:
                        log.info("%s: origin stream gone during the swarm download: %s", self.url, exc)
                        reader = None
                    else:
                        if chunk:
                            if self.spool is not None and offset == self.spool.received:
                                self.spool.feed(chunk)
                            if offset > position:  # a stream that starts past us (another range): unusable
                                log.info("%s: the origin's answer starts at %d, past %d; dropping it",
                                         self.url, offset, position)
                                reader.close()
                                reader = None
                            elif offset + len(chunk) > position:
                                piece = chunk[position - offset:end - offset]
                                if position + len(piece) >= end:
                                    last = (piece, position)  # sent after the cleanup, see below
                                else:
                                    await self._deliver_origin(piece, offset=position)
                                position += len(piece)
                            if reader is not None:
                                origin_next = asyncio.ensure_future(reader.read())
                        else:
                            reader = None
                if swarm_next in done:
                    finished, swarm_next = swarm_next, None
                    swarm_failed = False
                    try:
                        chunk = finished.result()
                    except StopAsyncIteration:
                        chunk = b""
                    except Exception as exc:  # FetchFailed, or anything else the engine hit
                        log.info("%s: swarm download failed: %s", self.url, exc)
                        self.record.swarm_error = f"swarm_failed: {exc}"
                        chunk = b""
                        swarm_failed = True
                    if chunk:
                        if check:
                            lo = check_at - swarm_position
                            if bytes(chunk[lo:lo + len(check)]) != check:
                                log.warning("%s: the manifest from %s does not match the origin's bytes; "
                                            "dropping the swarm", self.url, found.source)
                                self.engine.counters.manifests_rejected += 1
                                self.record.swarm_error = \
                                    "manifest_mismatch: peers' content differs from the origin's"
                                chunk = b""
                                swarm_position = -1  # never "done": nothing of it is kept or shared
                                await self._stop_producers(None, None, chunks, None)  # stop fetching at once
                                swarm_failed = True
                            check = b""
                    if swarm_failed and reader is None and self.reopen:
                        self.reopen = False
                        reader = self._reopen(position, end, manifest)
                        origin_next = asyncio.ensure_future(reader.read())
                    if chunk:
                        if swarm_position + len(chunk) > position:
                            piece = chunk[position - swarm_position:] if swarm_position < position else chunk
                            self.delivered_from_swarm += len(piece)
                            if position + len(piece) >= end:
                                last = (piece, None)
                            else:
                                await self._write(piece)
                            position += len(piece)
                        swarm_position += len(chunk)
                        if swarm_position < end:
                            swarm_next = asyncio.ensure_future(anext(chunks))
            swarm_done = swarm_position >= end
            # Clean up before the last byte goes out: a client holding the whole body may hang up at once, and
            # its request record must be complete by then.
            await self._stop_producers(swarm_next, origin_next, chunks, reader)
            swarm_next = origin_next = reader = None
            self._account(report)
            self._hand_over(manifest, fetch_start, swarm_done)
            if last is not None:
                piece, origin_offset = last
                if origin_offset is None:
                    await self._write(piece)
                else:
                    await self._deliver_origin(piece, offset=origin_offset)
            await self._end(self.response)
        finally:
            await self._stop_producers(swarm_next, origin_next, chunks, reader)
            self._account(report)
            self._hand_over(manifest, fetch_start, swarm_done)

    def _hand_over(self, manifest, fetch_start: int, swarm_done: bool) -> None:
        """After the merge, once: store/share what is complete, stop sharing what is not."""
        if self.handed_over:
            return
        self.handed_over = True
        if swarm_done or (self.spool is not None and self.spool.complete):
            spool, self.spool = self.spool, None  # handed over now: the download closes its own on return
            self.owner.spawn(self._after_swarm(manifest, fetch_start, swarm_done, spool))
        else:
            self.engine.abandon(manifest.root)


    @staticmethod
    async def _stop_producers(swarm_next, origin_next, chunks, reader) -> None:
        pending = [f for f in (swarm_next, origin_next) if f is not None]
        for future in pending:
            future.cancel()
        # Wait for the cancellations: a generator still running in a task cannot be closed.
        await asyncio.gather(*pending, return_exceptions=True)
        with contextlib.suppress(Exception):
            await chunks.aclose()  # stops the fetch, which fills its report
        if reader is not None:
            reader.close()

    def _account(self, report: dict) -> None:
        """Split what the block engine delivered into origin (Range requests) and peer bytes, once."""
        if self.accounted:
            return
        self.accounted = True
        self.owner.stats.swarm_fetch(report)
        from_range = min(report.get("bytes_origin", 0), self.delivered_from_swarm)
        from_peers = self.delivered_from_swarm - from_range
        self.record.bytes_origin += from_range
        self.record.bytes_peers += from_peers
        self.engine.counters.bytes_origin += from_range
        self.engine.counters.bytes_peers += from_peers

    async def _after_swarm(self, manifest, fetch_start: int, swarm_done: bool, spool: Spool | None) -> None:
        try:
            if spool is not None and spool.complete and self.publishable:
                await self._ingest(spool)
            elif spool is not None and swarm_done and manifest.size == spool.size:
                if await self.engine.complete_prefix(manifest, spool, fetch_start):
                    self.engine.completed_from_peers(manifest)
            elif swarm_done and fetch_start == 0:
                self.engine.completed_from_peers(manifest)
        finally:
            if spool is not None:
                spool.close()
            self.engine.fetch_over(manifest.root)

    # -- delivery ----------------------------------------------------------------------------------------------------

    async def _deliver_origin(self, chunk: bytes, *, offset: int | None = None) -> None:
        await self._write(chunk)
        self.delivered_from_origin += len(chunk)
        self.record.bytes_origin += len(chunk)
        self.engine.counters.bytes_origin += len(chunk)
        if self.spool is not None and offset is None:
            self.spool.feed(chunk)
        self.tail += chunk
        if len(self.tail) > TAIL_LIMIT:
            del self.tail[:len(self.tail) - TAIL_LIMIT]
        self.tail_end = (offset if offset is not None else self.tail_end) + len(chunk)

    async def _write(self, data: bytes) -> None:
        assert self.response is not None
        try:
            await self.response.write(data)
        except (ConnectionError, RuntimeError) as exc:
            raise ClientGone(f"client closed the connection: {exc}") from None

    async def _end(self, response: web.StreamResponse) -> None:
        try:
            await response.write_eof()
        except (ConnectionError, RuntimeError) as exc:
            raise ClientGone(f"client closed the connection: {exc}") from None

    def _cut(self, error: str):
        """Cut the client off: ending normally would hand it a short body that looks complete."""
        self.record.error = error
        if self.request.transport is not None:
            self.request.transport.close()
        raise ClientGone(error)

    def _origin_complete(self) -> None:
        spool, self.spool = self.spool, None
        if spool is not None and spool.complete and self.publishable:
            self.owner.spawn(self._ingest_and_close(spool))
        elif spool is not None:
            spool.close()

    async def _ingest_and_close(self, spool: Spool) -> None:
        try:
            await self._ingest(spool)
        finally:
            spool.close()

    async def _ingest(self, spool: Spool) -> None:
        response = self.response
        headers = response.headers if response is not None else {}
        await self.engine.ingest(spool, url=str(self.url), validator=self.validator,
                                 content_type=headers.get("Content-Type"),
                                 content_encoding=headers.get("Content-Encoding"), publish=self.publishable)

    def _count_transition(self, cause: str) -> None:
        self.record.transition = cause
        counts = self.engine.counters.transitions
        counts[cause] = counts.get(cause, 0) + 1
        self.owner.stats.transition(cause)
