"""The simulator's models of what is not ours: the links, the origin, the DHT. Each is a small, table-tested piece.

- `Links`: per-host links with a one-way delay and FIFO up- and downlink caps, per message, stored and forwarded
  as the lab's emulation does (`bench.lab.netem.LinkModel`: a chunk leaves its sender's uplink when that is free,
  travels one delay, then takes the receiver's downlink for its length; the emulation caps each host at 1.25 MB/s
  each way with 25 ms one-way between any two hosts). Before, a message streamed through both links at once (the
  slower setting the pace), one serialisation less per hop than the lab's: 13 ms a 16 KiB block at 1.25 MB/s,
  and the simulated plugin crowd's median came out 17 % under the lab's (`lab.cross_check`).
- `Origin`: `proxy.demo.slow_origin.SlowOrigin`, reproduced: one token bucket (rate, burst max(16 KiB, rate/10))
  taken one 16 KiB chunk at a time under a FIFO lock, so every response in progress gets a chunk in turn; the
  head goes out at once; at most `max_connections` responses at a time, the rest wait in line; a client that
  left frees its slot when its FIN arrives, one delay later (`handler_cancellation` cancels its handler, whether
  it waits for a slot, for the lock or for its chunk's tokens: those go back to the bucket), and costs nothing
  more; single Ranges (206). A request reaches it one connect round trip and one delay after it was sent; a HEAD
  waits for a free slot as a GET does (SlowOrigin's semaphore holds both) and is answered at once. With `busy_at`
  (the origin runs `server_plugin`), a head carries `Swarm-Hint: swarm` when that many GETs are in flight
  (`Publisher.busy`), and such a response to a GET that said it leaves at the hint (`Swarm-Accept: hint`) holds
  its body for `body_hold` s (`Publisher.hold`): its turn for the bucket comes only after that, and never if its
  client's FIN came first (the plugin looks every 20 ms: not modelled); with `peers` (the plugin's real
  `PeerPool`, on the virtual clock) that head lists the clients hinted before it (`Swarm-Peers`), and the client is
  listed in turn by its address and peer port.
- `Dht`: a latency model per operation, not a routing simulation. A lookup takes a lognormal time (median and p99
  per DHT) and sees the records visible when it ends; a claim, vouch, withdrawal or provider announcement becomes
  visible one announce latency (uniform in a range per DHT) after it is made, and expires after its TTL
  (`swarm.discovery.IN_PROGRESS_TTL` for in-progress claims). A lookup slower than the engine's 5 s timeout fails.
  Parameters: ours (`OURS`: the lab's lookups at 25 ms one way took 0.16 s at the median, bench/results/lab
  flashcrowd-20-*; claims "reach the DHT 0.3-0.6 s later", `proxy.download.parking`), and Mainline (`MAINLINE`:
  published lookups 0.1-0.2 s at the median when tuned, seconds at the tail; an announcement became findable
  14-20 s after it was made on our test DHT, docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
import random
from collections import deque
from collections.abc import Callable

from server_plugin.peer_pool import PeerPool
from swarm.discovery import IN_PROGRESS_TTL
from swarm.discovery.seam import Provider
from swarm.trust import Vouch

from .events import Clock

CHUNK = 16 * 1024  # SlowOrigin's write size: the unit of its fair share
Z99 = 2.3263  # the standard normal's 99th percentile: a lognormal's p99 is median * exp(sigma * Z99)
LOOKUP_TIMEOUT = 5.0  # proxy.engine.SwarmEngine.find's timeout


@dataclasses.dataclass(frozen=True)
class NetParams:
    delay: float = 0.025  # one way, between any two hosts
    up: float = 1_250_000.0  # bytes/s per host
    down: float = 1_250_000.0


class Links:
    """Every host's uplink and downlink, FIFO, and the delay between hosts (see the module docstring)."""

    def __init__(self, params: NetParams) -> None:
        self.params = params
        self.unlimited: set[str] = set()  # hosts whose links are not the bottleneck (the origin: its own bucket)
        self._up_free: dict[str, float] = {}
        self._down_free: dict[str, float] = {}
        self.carried = 0

    def send(self, src: str, dst: str, nbytes: int, now: float) -> float:
        """When the last byte of an `nbytes` message sent by `src` at `now` has reached `dst`."""
        first = left = now
        if src not in self.unlimited:
            first = max(now, self._up_free.get(src, 0.0))
            left = first + nbytes / self.params.up
            self._up_free[src] = left
        return self.land(dst, nbytes, first, left)

    def land(self, dst: str, nbytes: int, first: float, left: float) -> float:  # noqa: ARG002 - see below
        """When the last byte of a message has reached `dst`, its last byte having left its sender at `left`: one
        delay later, then `dst`'s downlink (free once the messages before it landed) takes it all. (`first`, when
        its first byte left, would matter to a model that streams a message through both links at once.)"""
        self.carried += nbytes
        arrival = left + self.params.delay
        if dst not in self.unlimited:
            arrival = max(arrival, self._down_free.get(dst, 0.0)) + nbytes / self.params.down
            self._down_free[dst] = arrival
        return arrival


class Uplink:
    """A provider's uplink as its peer connections share it (`swarm.core.serve`): the requests queued, served one
    block at a time at the host's rate, in the order they came; a CANCEL that arrives before its block started
    removes it (`serve` drops it from the queue). Each entry is [bytes, to whom, deliver(), alive]."""

    def __init__(self, clock: Clock, links: Links, host: str) -> None:
        self.clock, self.links, self.host = clock, links, host
        self.queue: deque[list] = deque()  # entries: [bytes, to whom, deliver(), alive]
        self.busy = False
        self.sent = 0

    def next(self) -> None:
        """Send the next live request, if any (the uplink is free now)."""
        while self.queue and not self.queue[0][3]:
            self.queue.popleft()
        if not self.queue:
            self.busy = False
            return
        self.busy = True
        nbytes, dst, deliver, _ = self.queue.popleft()
        now = self.clock.now
        left = now + nbytes / self.links.params.up
        self.sent += nbytes
        self.clock.at(self.links.land(dst, nbytes, now, left), deliver)
        self.clock.at(left, self.next)


class OriginConn:
    """One response in progress, as the origin and its client see it."""

    __slots__ = ("client", "start", "end", "position", "closed_at", "on_head", "on_data", "hinted", "head_only",
                 "accepts", "state", "peer", "listed")

    def __init__(self, client: str, start: int, end: int, on_head: Callable[[int, int, int], None],
                 on_data: Callable[[bytes], None], head_only: bool = False, accepts: bool = False,
                 peer: tuple[str, int] | None = None) -> None:
        self.client, self.start, self.end, self.position = client, start, end, start
        self.closed_at = math.inf  # when the origin learns the client left
        self.on_head, self.on_data = on_head, on_data  # called at the client: (status, start, end), then the bytes
        self.hinted = False  # its head asked the client to swarm (`Origin.busy_at`)
        self.head_only = head_only  # a HEAD: its answer has no body
        self.accepts = accepts  # its GET says it leaves at the hint (`Swarm-Accept: hint`)
        self.peer = peer  # ... and (its address, its peer port) it serves what it fetches at (`peer=PORT`)
        self.listed: list[tuple[str, int]] = []  # the peers its hinted head lists (`Swarm-Peers`)
        self.state = _ON_THE_WAY


# Where a request is at the origin: sent, in line for a slot, holding one (its body held for a while, or going out),
# done with (served, or its client left).
_ON_THE_WAY, _IN_LINE, _HELD, _SERVED, _DONE = range(5)


class Origin:
    """SlowOrigin, reproduced on the virtual clock (see the module docstring)."""

    def __init__(self, clock: Clock, links: Links, host: str, data: bytes, *, rate: float = 256_000.0,
                 max_connections: int = 256, busy_at: int | None = None, body_hold: float = 0.0,
                 peers: PeerPool | None = None) -> None:
        self.clock, self.links, self.host, self.data = clock, links, host, data
        self.rate, self.burst = rate, max(CHUNK, rate / 10)
        self.tokens, self.stamp = self.burst, 0.0
        self.max_connections = max_connections
        self.busy_at = busy_at  # with server_plugin: GETs in flight from which heads carry `Swarm-Hint: swarm`
        self.body_hold = body_hold  # with server_plugin: how long a hinted body waits for a client leaving at the hint
        self.held = self.left_in_hold = 0  # `Publisher.held`, `Publisher.left_in_hold`
        self.peers = peers  # with server_plugin: the clients hinted before, listed to the next (`Publisher.peers`)
        self.active = 0
        self.waiting: deque[OriginConn] = deque()  # behind the connection cap (and those that left it, skipped)
        self.in_line = 0  # the GETs in `waiting` still there (a HEAD is not counted by the plugin)
        self.turns: deque[OriginConn] = deque()  # the bucket's lock: responses waiting for their next chunk
        self.busy = False  # a chunk holds the lock (sleeping for its tokens)
        self.holder: OriginConn | None = None  # ... for this response, until `hold_until`
        self.hold_until = 0.0
        self.hold = 0  # the current hold's number: a cancelled hold's write is void
        self.hold_amount = 0  # the bytes its tokens were taken for
        self.bytes_sent = 0
        self.requests = 0
        links.unlimited.add(host)

    def get(self, client: str, now: float, on_head: Callable[[int, int, int], None],
            on_data: Callable[[bytes], None], start: int = 0, end: int | None = None, *,
            head_only: bool = False, accepts: bool = False, peer: tuple[str, int] | None = None) -> OriginConn:
        """A GET (a Range when `start` or `end` is given; a HEAD when `head_only`; one that leaves at the hint when
        `accepts`, naming the `peer` (address, port) it serves at) sent by `client` at `now` on a new connection."""
        conn = OriginConn(client, start, len(self.data) if end is None else end, on_head, on_data, head_only, accepts,
                          peer)
        self.requests += 1
        delay = self.links.params.delay
        self.clock.at(now + 3 * delay, self._accept, conn)  # SYN, SYN-ACK, then the request
        return conn

    def close(self, conn: OriginConn, now: float) -> None:
        """The client closes the connection at `now`; the origin hears of it one delay later and cancels the
        response's handler (`handler_cancellation`): one in line for a slot or for the lock leaves it, freeing its
        slot; one sleeping for its chunk's tokens under the lock lets go of it, its chunk unsent and its tokens
        given back."""
        if conn.closed_at <= now + self.links.params.delay:
            return
        conn.closed_at = now + self.links.params.delay
        if self.holder is conn and conn.closed_at < self.hold_until:
            self.hold += 1  # the pending write is void
            self.clock.at(conn.closed_at, self._cancelled, self.hold)
        else:
            self.clock.at(conn.closed_at, self._left, conn)

    def _left(self, conn: OriginConn) -> None:
        """The FIN of `conn`'s client arrived and it does not hold the lock."""
        if conn.state == _IN_LINE:
            conn.state = _DONE  # skipped when its slot comes
            self.in_line -= not conn.head_only
        elif conn.state == _HELD:
            self.left_in_hold += 1  # its body never sent
            self._finish(conn)
        elif conn.state == _SERVED and self.holder is not conn:  # (the holder is let go by `_cancelled`)
            self._finish(conn)  # and skipped at its turn
            self._pump()

    def _accept(self, conn: OriginConn) -> None:
        if conn.closed_at <= self.clock.now:  # it left before its request arrived
            conn.state = _DONE
        elif self.active >= self.max_connections:
            conn.state = _IN_LINE
            self.in_line += not conn.head_only
            self.waiting.append(conn)
        else:
            self._serve(conn)

    def _serve(self, conn: OriginConn) -> None:
        now = self.clock.now
        if conn.head_only:  # SlowOrigin answers a HEAD under the same connection cap, and at once: no body to send
            status = 206 if (conn.start, conn.end) != (0, len(self.data)) else 200
            self.clock.at(now + self.links.params.delay, conn.on_head, status, conn.start, conn.end)
            conn.state = _DONE
            return
        self.active += 1
        conn.state = _SERVED
        # The plugin counts a GET in flight from its middleware on, so those waiting for a slot too (SlowOrigin's
        # semaphore is inside the handler), this one included, until its handler ends or is cancelled.
        conn.hinted = self.busy_at is not None and self.active + self.in_line >= self.busy_at
        if conn.hinted and conn.accepts and self.peers is not None:  # `Publisher.headers`, one file: one root
            host, port = conn.peer if conn.peer is not None else (None, None)
            conn.listed = self.peers.exchange(b"", host, port, now)
        status = 206 if (conn.start, conn.end) != (0, len(self.data)) else 200
        self.clock.at(now + self.links.params.delay, conn.on_head, status, conn.start, conn.end)
        if conn.hinted and conn.accepts and self.body_hold > 0:
            conn.state = _HELD
            self.held += 1
            self.clock.at(now + self.body_hold, self._held, conn)
            return
        self.turns.append(conn)
        self._pump()

    def _held(self, conn: OriginConn) -> None:
        """`conn`'s hold is over: its body goes, if its client is still there (else `_left` freed its slot)."""
        if conn.state == _HELD:
            conn.state = _SERVED
            self.turns.append(conn)
            self._pump()

    def _finish(self, conn: OriginConn) -> None:
        """`conn` frees its slot (served, or its client left): the next in line still there takes it."""
        conn.state = _DONE
        self.active -= 1
        while self.waiting and self.active < self.max_connections:
            waiting = self.waiting.popleft()
            if waiting.state == _IN_LINE:
                self.in_line -= not waiting.head_only
                self._serve(waiting)

    def _pump(self) -> None:
        while not self.busy and self.turns:
            conn = self.turns.popleft()
            if conn.state == _DONE:  # its client left: its handler was cancelled, its slot freed
                continue
            now = self.clock.now
            amount = min(CHUNK, conn.end - conn.position)
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            self.tokens -= amount
            self.busy = True
            wait = -self.tokens / self.rate if self.tokens < 0 else 0.0
            self.hold += 1
            self.holder, self.hold_until, self.hold_amount = conn, now + wait, amount
            if conn.closed_at < self.hold_until:  # its FIN is on the way: the handler is cancelled mid-sleep
                self.clock.at(conn.closed_at, self._cancelled, self.hold)
            else:
                self.clock.at(now + wait, self._written, conn, amount, self.hold)

    def _cancelled(self, hold: int) -> None:
        if hold != self.hold or not self.busy or self.holder is None:
            return
        conn, self.busy, self.holder = self.holder, False, None
        self.tokens += self.hold_amount  # never sent: back to the bucket (`SlowOrigin`'s `_Bucket.take`)
        self._finish(conn)
        self._pump()

    def _written(self, conn: OriginConn, amount: int, hold: int) -> None:
        if hold != self.hold:
            return
        now = self.clock.now
        self.busy, self.holder = False, None
        piece = self.data[conn.position:conn.position + amount]
        self.bytes_sent += amount
        conn.position += amount
        self.clock.at(self.links.send(self.host, conn.client, amount, now), conn.on_data, piece)
        if conn.position < conn.end:
            self.turns.append(conn)
        else:
            self._finish(conn)
        self._pump()


@dataclasses.dataclass(frozen=True)
class DhtParams:
    name: str
    lookup_median: float  # s
    lookup_p99: float
    announce_min: float  # s from a put to its being visible to lookups
    announce_max: float
    claim_ttl: float = float(IN_PROGRESS_TTL)
    record_ttl: float = 1800.0  # vouches and provider records (the DHT's provider TTL)

    @property
    def sigma(self) -> float:
        return math.log(self.lookup_p99 / self.lookup_median) / Z99


OURS = DhtParams("ours", lookup_median=0.16, lookup_p99=0.5, announce_min=0.3, announce_max=0.6)
MAINLINE = DhtParams("mainline", lookup_median=0.2, lookup_p99=4.0, announce_min=14.0, announce_max=20.0)
DHTS = {p.name: p for p in (OURS, MAINLINE)}


class Dht:
    """One URL's key: its claims and vouches by publisher, its root's providers, each visible after its announce
    latency (see the module docstring)."""

    def __init__(self, params: DhtParams, rng: random.Random, *, max_records: int = 64) -> None:
        self.params, self.rng, self.max_records = params, rng, max_records
        # Puts not visible yet, by the time they will be: (visible at, order, publisher, expires at, record or None)
        self._pending: list[tuple[float, int, bytes, float, Vouch | None]] = []
        # What lookups see now: each publisher's latest visible record, in a list that samples in O(k)
        self._live: list[tuple[float, Vouch]] = []  # (expires at, record)
        self._where: dict[bytes, int] = {}  # publisher -> its index in `_live`
        self._seen_at = -math.inf  # lookups read at non-decreasing times (the virtual clock's)
        self._provider_times: list[float] = []  # visible-at, sorted, beside `_providers` in the same order
        self._providers: list[tuple[float, Provider]] = []  # (expires at, provider)
        self.lookups = self.puts = 0

    def lookup_latency(self) -> float:
        p = self.params
        self.lookups += 1
        return p.lookup_median * math.exp(p.sigma * self.rng.gauss(0.0, 1.0))

    def announce_latency(self) -> float:
        return self.rng.uniform(self.params.announce_min, self.params.announce_max)

    def put(self, publisher: bytes, vouch: Vouch | None, now: float, *, claim: bool = False) -> float:
        """`publisher` claims, vouches or (None) withdraws at `now`; returns when lookups see it. A later put of
        the same publisher replaces its record once visible (a put seen sooner than an earlier one wins: as on a
        storing node, the last to arrive)."""
        self.puts += 1
        visible = now + self.announce_latency()
        ttl = self.params.claim_ttl if claim else self.params.record_ttl
        heapq.heappush(self._pending, (visible, self.puts, publisher, visible + ttl, vouch))
        return visible

    def announce(self, provider: Provider, now: float) -> float:
        visible = now + self.announce_latency()
        index = bisect.bisect(self._provider_times, visible)
        self._provider_times.insert(index, visible)
        self._providers.insert(index, (visible + self.params.record_ttl, provider))
        return visible

    def vouches(self, at: float) -> list[Vouch]:
        """The claims and vouches a lookup ending at `at` returns: each publisher's latest visible record (at most
        `max_records`, a random sample as a storing node's reply is). `at` never goes back."""
        assert at >= self._seen_at, "lookups read in time order"
        self._seen_at = at
        while self._pending and self._pending[0][0] <= at:
            _, _, publisher, expires, vouch = heapq.heappop(self._pending)
            self._drop(publisher)
            if vouch is not None:
                self._where[publisher] = len(self._live)
                self._live.append((expires, vouch))
        live = self._live
        picked = range(len(live)) if len(live) <= self.max_records else \
            self.rng.sample(range(len(live)), self.max_records)
        found: list[Vouch] = []
        expired: list[Vouch] = []
        for i in picked:
            expires, vouch = live[i]
            (found if expires > at else expired).append(vouch)
        for gone in expired:
            self._drop(gone.publisher_id)
        return found

    def _drop(self, publisher: bytes) -> None:
        """Forget `publisher`'s live record (swap with the last: O(1))."""
        index = self._where.pop(publisher, None)
        if index is None:
            return
        last = self._live.pop()
        if index < len(self._live):
            self._live[index] = last
            self._where[last[1].publisher_id] = index

    def providers(self, at: float, want: int) -> list[Provider]:
        """Up to `want` providers visible at `at`, a random sample of them."""
        visible = bisect.bisect(self._provider_times, at)
        live = [i for i in (range(visible) if visible <= 4 * want else
                            self.rng.sample(range(visible), min(visible, 4 * want)))
                if self._providers[i][0] > at]
        return [self._providers[i][1] for i in live[:want]]
