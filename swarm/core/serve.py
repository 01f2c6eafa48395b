"""Serving one peer connection (sans-I/O): what to send for what was asked.

The connecting side speaks first with HANDSHAKE(version, node id, content root). We answer only for a
root this node holds and shares — anything else closes the connection before a byte of content moves
(docs/ARCHITECTURE.md: the peer port serves only what this node fetched and chose to share; a peer can never make a
node fetch anything). Then we send our HANDSHAKE and BITFIELD, and HAVE for each block we gain later.

Requests are checked against the manifest, answered REJECT when not held, when too many are queued, or
when the root stopped being shared; an upload token bucket (shared by all connections of a node, clock
injected) paces BLOCK answers. Actions for the shell:

* `Send(message)`           — a control frame;
* `SendBlock(block, offset, length)` — read those bytes from the store (or sendfile them) as a BLOCK, then
  report `on_sent(now)` once the connection has taken it (its send buffer is back under its bound);
* `Close(reason)`           — end this connection;
* `ConnectBack(port, transports, nonce)` — a query session's REACH_REQUEST: connect back to the peer's address (the
  shell's limits first, `swarm.core.reach`) and answer REACH_RESULT on this connection;
* `ProofArrived(proof)`     — this session is a connect-back: match `proof` against the node's own probes;
* `Introduce(address, nonce)` — a query session's PUNCH_REQUEST: introduce the peer to the one whose query session
  comes from `address` (the shell's limits first, `swarm.core.punch`), PUNCH_PEER to both or the refusal to this one.

What a peer is shown can be narrowed by the caller (`Shown`, optional; the proxy shows every peer everything):
`shown(root, peer)` names the blocks of `root` that the peer whose HANDSHAKE gave node id `peer` may see, or None
for all of them. The cluster mode uses it to show a peer across a rack or datacenter only the blocks it is the
entry point of (`cluster.division`). A held block outside it is left out of the BITFIELD, its HAVE held back and
a START about it not sent; a request for it is refused NOT_FOUND, as if we did not hold it. What was shown is never
taken back: a peer that saw a block may keep asking for it. When the caller's answer may have grown (its plan
changed), `on_view_changed()` asks again and sends HAVE for what the peer may see now. `shown` is a pure query; it
is asked when the HANDSHAKE arrives, for each new block and START, and by `on_view_changed`.

**Query sessions.** A HANDSHAKE on `wire.QUERY_ROOT` asks for no content: it opens a session on which the peer
may only ask for this node's own claims under a key (`swarm.net.wire`, "Query sessions"). We answer with our
HANDSHAKE (the same root, no BITFIELD), then each CLAIMS_REQUEST with one CLAIMS: what `claims(key)` gives, the
caller's own claims as wire entries (none by default: every answer is empty). `claims` is asked when the request
arrives and dates the entries by the claims' own clock (the node's wall clock), not by this core's `now`, which
is the connection's timers'. At most `MAX_QUERIES_PER_SESSION` are answered; the next request, or any message but
a CLAIMS_REQUEST (a KEEPALIVE aside), closes the session, and so does a CLAIMS_REQUEST on a content session. A
query session holds a slot like any connection (the shell admits it before this core runs) and never downloads,
so it makes room for a newcomer before any connection that does; with the idle timeout below, what strangers can
ask stays within the slots and their time.

**Connect-backs** (`swarm.net.wire`, "Connect-backs"). A query session may also carry one REACH_REQUEST: it becomes
`ConnectBack`, for the shell to judge and carry out (a second one closes the session: a requester needs one per
probe). A query session whose first message after the HANDSHAKE is a REACH_PROOF is a connect-back to this node:
`ProofArrived` for the shell, and the session is closed, matched or not (`connect_back` says it was one, so that the
shell does not count it as a stranger's connection). A REACH_PROOF anywhere else, and a REACH_REQUEST or REACH_PROOF
on a content session, closes the session; REACH_RESULT is only ever sent to us on a session we opened.

**Other claimers** (`swarm.core.claimers`). After a CLAIMS_REQUEST, a query session may carry one PEX of at
most one entry: the peer's own peer port and transports if it claims under that key too (none: it only asks). It
becomes `ClaimersAsked` for the shell, which keeps the claimer (by the connection's address, never the entry's) and
answers with a PEX of the others it heard of. A PEX before any CLAIMS_REQUEST, a second one for one request, or one
of more entries closes the session. An older node closes at such a PEX (any message but a CLAIMS_REQUEST): to its
asker, a node that knows no others.

**Hole punching** (`swarm.net.wire`, "Hole punching"). A query session may carry up to `MAX_PUNCHES_PER_SESSION`
PUNCH_REQUESTs, each an `Introduce` for the shell (the next closes the session); a PUNCH_REQUEST on a content
session closes it, and so does a PUNCH_PEER anywhere: it is only ever sent to us on a session we opened. A query
session past its HANDSHAKE is one a coordinator may introduce others to (the shell keeps them by remote address): it
counts as activity only by what it asks, so one that asks nothing ends at the idle timeout like any other.

What one peer can make us hold is bounded: at most `max_queued` requests wait (libtorrent's
max_allowed_in_request_queue; more are refused BUSY) and at most `max_in_flight` BLOCKs are being handed to the
connection — a peer that pipelines 200,000 REQUESTs no longer gets 200,000 sends started at once. (The shell
adds the rest: it stops reading a peer whose send buffer is full, so its requests stay in its own socket.)

And how long a peer can hold a connection without using it, from `now` given at construction (deadlines in
`next_deadline()`, enforced by `on_timer(now)`):

* `handshake_timeout` — from the connection's arrival to its HANDSHAKE;
* `idle_timeout` — a peer with nothing queued and nothing being sent that asked for nothing this long
  (libtorrent's peer_timeout);
* `stall_timeout` — a peer whose BLOCKs wait on it (it does not read) and that took none this long. Requests
  waiting on our own upload budget are our doing, and never count against it.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Container, Sequence

from swarm.content.manifest import Manifest
from swarm.core.throttle import TokenBucket, on_the_wire
from swarm.net import wire

__all__ = ["ServeCore", "Shared", "Shown", "Claims", "Send", "SendBlock", "Close", "ConnectBack", "ProofArrived",
           "Introduce", "ClaimersAsked", "ServeAction",
           "MAX_QUEUED_REQUESTS", "MAX_SENDS_IN_FLIGHT", "MAX_QUERIES_PER_SESSION", "MAX_PUNCHES_PER_SESSION",
           "HANDSHAKE_TIMEOUT",
           "IDLE_TIMEOUT", "STALL_TIMEOUT"]

MAX_QUEUED_REQUESTS = 500  # libtorrent's max_allowed_in_request_queue; our fetch keeps 8 outstanding per peer
# Two keep a connection's send buffer fed — one block read while the other drains; more only pile payloads up
# behind a peer that reads slowly or not at all.
MAX_SENDS_IN_FLIGHT = 2
# Claims asked on one query session. An asker needs one per key it looks up at that address (a lookup sends one);
# a few more let it ask about a page's other resources at once. Past that a stranger must connect again, through
# the slot admission that counts connections per address: answers (each at most ~2 KiB) cost a connection per 16.
MAX_QUERIES_PER_SESSION = 16
# PUNCH_REQUESTs on one query session: the coordinator's limiter allows a few a minute per requester anyway.
MAX_PUNCHES_PER_SESSION = 4
HANDSHAKE_TIMEOUT = 10.0
IDLE_TIMEOUT = 120.0  # libtorrent's peer_timeout
# A send completes once the connection's buffer is back under its bound, so a peer reading at least a block
# per minute never trips it (a 4 MiB block: 70 KB/s).
STALL_TIMEOUT = 60.0


#: `shown(root, peer node id)`: the blocks of `root` that peer may be shown and may ask for; None: every block.
Shown = Callable[[bytes, bytes], Container[int] | None]
#: `claims(key)`: this node's own claims under `key`, as a CLAIMS carries them (module docstring, "Query sessions").
Claims = Callable[[bytes], Sequence[wire.ClaimEntry]]


def _no_claims(key: bytes) -> Sequence[wire.ClaimEntry]:
    return ()


@dataclasses.dataclass(frozen=True)
class Shared:
    """What the node offers for one root: its manifest, block layer, and which blocks it holds now."""

    manifest: Manifest
    layer: Sequence[bytes]
    have: wire.Bitfield


@dataclasses.dataclass(frozen=True)
class Send:
    message: wire.Message


@dataclasses.dataclass(frozen=True)
class SendBlock:
    block: int
    offset: int
    length: int


@dataclasses.dataclass(frozen=True)
class Close:
    reason: str


@dataclasses.dataclass(frozen=True)
class ConnectBack:
    """The peer asks to be connected back to at its own address, on `port`, by `transports` (REACH_REQUEST)."""

    port: int
    transports: wire.Transport
    nonce: bytes


@dataclasses.dataclass(frozen=True)
class ProofArrived:
    """A connect-back to this node brought `proof` (REACH_PROOF); the session is closed after it."""

    proof: bytes


@dataclasses.dataclass(frozen=True)
class Introduce:
    """The peer asks to be introduced to the node whose query session comes from `address` (PUNCH_REQUEST)."""

    address: tuple[str, int]
    nonce: bytes


@dataclasses.dataclass(frozen=True)
class ClaimersAsked:
    """The peer asks which others claim under `key`, and says it claims there too on `port` (0: it claims nothing),
    by `transports` (`wire.Transport` flags): a PEX after a CLAIMS_REQUEST for `key` (module docstring)."""

    key: bytes
    port: int
    transports: int


ServeAction = Send | SendBlock | Close | ConnectBack | ProofArrived | Introduce | ClaimersAsked


class ServeCore:
    def __init__(
        self,
        node_id: bytes,
        lookup: Callable[[bytes], Shared | None],
        *,
        upload: TokenBucket | None = None,
        max_queued: int = MAX_QUEUED_REQUESTS,
        max_in_flight: int = MAX_SENDS_IN_FLIGHT,
        now: float = 0.0,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        stall_timeout: float = STALL_TIMEOUT,
        shown: Shown | None = None,
        claims: Claims = _no_claims,
    ) -> None:
        """`lookup(root)` returns what is shared for `root`, or None (not held, or not shared); `now` is when
        the connection arrived; `shown` narrows what the peer sees (module docstring; None: everything);
        `claims(key)` answers a query session (module docstring; by default, nothing)."""
        self.node_id = node_id
        self.lookup = lookup
        self.shown = shown
        self.claims = claims
        self.query = False  # a query session (its HANDSHAKE was on QUERY_ROOT): claims only
        self.queries = 0  # CLAIMS_REQUESTs on it so far
        self._claimers_key: bytes | None = None  # the last CLAIMS_REQUEST's key, until a PEX asks its claimers
        self.reach_asked = False  # its REACH_REQUEST came (one per session)
        self.connect_back = False  # it was a connect-back to us: a REACH_PROOF right after its HANDSHAKE
        self.punches = 0  # PUNCH_REQUESTs on it so far
        self._greeted = False  # a query session nothing has followed the HANDSHAKE of yet
        self.upload = upload or TokenBucket(None)
        self.max_queued = max_queued
        self.max_in_flight = max_in_flight
        self.handshake_timeout = handshake_timeout
        self.idle_timeout = idle_timeout
        self.stall_timeout = stall_timeout
        self.root: bytes | None = None
        self.manifest: Manifest | None = None
        self.peer: bytes | None = None  # the node id its HANDSHAKE gave
        self._held: set[int] = set()
        self._hidden: set[int] = set()  # held, and not shown to this peer (`shown`)
        self._queue: collections.deque[wire.Request] = collections.deque()
        self._wait_until: float | None = None
        self.in_flight = 0  # SendBlocks not yet reported by `on_sent`
        self._arrived = now
        self._last_activity = now  # the HANDSHAKE, the last request, or the last block taken
        self._last_progress = now  # the last block taken, or the moment one started to wait on the peer
        self.bytes_sent = 0

    @property
    def queued(self) -> int:
        """Requests waiting for their turn (not counting those in flight)."""
        return len(self._queue)

    def next_deadline(self) -> float | None:
        """The next moment `on_timer` has something to do: the upload budget, or one of the timeouts."""
        deadlines = [] if self._wait_until is None else [self._wait_until]
        if self.root is None:
            deadlines.append(self._arrived + self.handshake_timeout)
        elif self.in_flight:
            deadlines.append(self._last_progress + self.stall_timeout)
        elif not self._queue:
            deadlines.append(self._last_activity + self.idle_timeout)
        return min(deadlines, default=None)

    def on_message(self, message: object, now: float) -> list[ServeAction]:
        if self.root is None:
            self._last_activity = now
            return self._on_handshake(message)
        if self.query:
            return self._on_query(message, now)
        if isinstance(message, wire.ClaimsRequest):
            return [Close("CLAIMS_REQUEST outside a query session")]
        if isinstance(message, (wire.ReachRequest, wire.ReachProof, wire.PunchRequest)):
            return [Close(f"{type(message).__name__} outside a query session")]
        if isinstance(message, wire.PunchPeer):
            return [Close("PUNCH_PEER on a session we did not open")]
        if isinstance(message, (wire.Request, wire.HashRequest, wire.ManifestRequest)):
            self._last_activity = now
        if isinstance(message, wire.Request):
            return self._on_request(message, now)
        if isinstance(message, wire.Cancel):
            self._queue = collections.deque(
                r for r in self._queue if (r.block, r.offset, r.length) != (message.block, message.offset,
                                                                           message.length))
            return []
        if isinstance(message, wire.HashRequest):
            return self._on_hash_request(message)
        if isinstance(message, wire.ManifestRequest):
            assert self.manifest is not None
            return [Send(wire.ManifestResponse(self.manifest.encode()))]
        if isinstance(message, wire.Handshake):
            return [Close("second HANDSHAKE")]
        return []  # keepalive, BITFIELD/HAVE of a fetching peer, PEX, START: nothing to answer

    def on_timer(self, now: float) -> list[ServeAction]:
        if self.root is None:
            if now >= self._arrived + self.handshake_timeout:
                return [Close(f"no HANDSHAKE within {self.handshake_timeout:g} s")]
        elif self.in_flight:
            if now >= self._last_progress + self.stall_timeout:
                return [Close(f"took no block for {self.stall_timeout:g} s: not reading")]
        elif not self._queue and now >= self._last_activity + self.idle_timeout:
            return [Close(f"asked for nothing for {self.idle_timeout:g} s")]
        return self._drain(now)

    def on_sent(self, now: float) -> list[ServeAction]:
        """The shell handed a SendBlock's BLOCK to the connection (or gave up on it): the next may go."""
        self.in_flight -= 1
        self._last_progress = self._last_activity = now
        return self._drain(now)

    def on_new_block(self, block: int) -> list[ServeAction]:
        """This node verified and stored `block` of our root: tell the peer."""
        if self.manifest is None or block in self._held:  # (no handshake yet, or a query session: no root of ours)
            return []
        self._held.add(block)
        if not self._may_see(block):
            self._hidden.add(block)
            return []
        return [Send(wire.Have(block))]

    def on_origin_fetch(self, block: int) -> list[ServeAction]:
        """This node asked the origin for `block` (a crowd's shared source): tell the peer (START), so that it
        asks the origin for another block and takes this one from us once we announce it."""
        if self.manifest is None or block in self._held or not self._may_see(block):
            return []  # (not shown: a block it may not take from us, nothing to leave to us)
        return [Send(wire.Start(block))]

    def on_view_changed(self) -> list[ServeAction]:
        """What `shown` answers may have grown: HAVE for each held block the peer was not shown and may see now."""
        if self.root is None or not self._hidden:
            return []
        allowed = self._allowed()
        now_shown = sorted(self._hidden if allowed is None else (b for b in self._hidden if b in allowed))
        self._hidden.difference_update(now_shown)
        return [Send(wire.Have(block)) for block in now_shown]

    def on_unshared(self) -> list[ServeAction]:
        """The root was evicted or sharing was turned off: nothing more is served on this connection."""
        return [Close("content no longer shared")]

    # -- internals --------------------------------------------------------------------------------------------

    def _on_handshake(self, message: object) -> list[ServeAction]:
        if not isinstance(message, wire.Handshake):
            return [Close(f"expected HANDSHAKE, got {type(message).__name__}")]
        if message.version != wire.PROTOCOL_VERSION:
            return [Close(f"protocol version {message.version}, we speak {wire.PROTOCOL_VERSION}")]
        if message.root == wire.QUERY_ROOT:
            self.root, self.peer, self.query, self._greeted = message.root, message.node_id, True, True
            return [Send(wire.Handshake(wire.PROTOCOL_VERSION, self.node_id, wire.QUERY_ROOT))]
        shared = self.lookup(message.root)
        if shared is None:
            return [Close(f"content {message.root.hex()[:16]}… is not shared here")]
        self.root, self.manifest, self.peer = message.root, shared.manifest, message.node_id
        have = shared.have
        self._held = set(have.blocks())
        allowed = self._allowed()
        if allowed is not None:
            self._hidden = {b for b in self._held if b not in allowed}
            if self._hidden:
                have = wire.Bitfield.from_blocks(have.count, sorted(self._held - self._hidden))
        return [Send(wire.Handshake(wire.PROTOCOL_VERSION, self.node_id, message.root)), Send(have)]

    def _on_query(self, message: object, now: float) -> list[ServeAction]:
        first, self._greeted = self._greeted, False
        if isinstance(message, wire.KeepAlive):  # harmless, and no use: the idle timeout still runs
            return []
        if isinstance(message, wire.ReachProof):
            if not first:
                return [Close("REACH_PROOF not right after the HANDSHAKE")]
            self.connect_back = True
            return [ProofArrived(message.proof), Close("connect-back taken")]
        if isinstance(message, wire.ReachRequest):
            if self.reach_asked:
                return [Close("a second REACH_REQUEST on one query session")]
            self._last_activity = now
            self.reach_asked = True
            return [ConnectBack(message.port, message.transports, message.nonce)]
        if isinstance(message, wire.PunchRequest):
            self._last_activity = now
            self.punches += 1
            if self.punches > MAX_PUNCHES_PER_SESSION:
                return [Close(f"more than {MAX_PUNCHES_PER_SESSION} PUNCH_REQUESTs on one query session")]
            return [Introduce((str(message.ip), message.port), message.nonce)]
        if isinstance(message, wire.Pex):
            key, self._claimers_key = self._claimers_key, None
            if key is None or len(message.peers) > 1:
                return [Close("a PEX on a query session not right after a CLAIMS_REQUEST, or of more than one peer")]
            self._last_activity = now
            said = message.peers[0] if message.peers else None
            return [ClaimersAsked(key, said.port if said else 0, int(said.transports) if said else 0)]
        if not isinstance(message, wire.ClaimsRequest):
            return [Close(f"{type(message).__name__} on a query session")]
        self._last_activity = now
        self.queries += 1
        if self.queries > MAX_QUERIES_PER_SESSION:
            return [Close(f"more than {MAX_QUERIES_PER_SESSION} CLAIMS_REQUESTs on one query session")]
        # A node holds one claim per key; should a caller give more, the first ones go, within what a CLAIMS carries.
        entries = tuple(self.claims(message.key))[:wire.MAX_CLAIMS_PER_ANSWER]
        self._claimers_key = message.key
        return [Send(wire.ClaimsResponse(message.key, entries))]

    def _allowed(self) -> Container[int] | None:
        if self.shown is None:
            return None
        assert self.root is not None and self.peer is not None
        return self.shown(self.root, self.peer)

    def _may_see(self, block: int) -> bool:
        allowed = self._allowed()
        return allowed is None or block in allowed

    def _on_request(self, request: wire.Request, now: float) -> list[ServeAction]:
        assert self.manifest is not None
        reason = self._refusal(request)
        if reason is not None:
            return [Send(wire.Reject(request.block, request.offset, request.length, reason))]
        self._queue.append(request)
        return self._drain(now)

    def _refusal(self, request: wire.Request) -> wire.RejectReason | None:
        assert self.manifest is not None
        if not 0 <= request.block < self.manifest.num_blocks:
            return wire.RejectReason.INVALID
        _offset, length = self.manifest.block_span(request.block)
        if request.offset + request.length > length:
            return wire.RejectReason.INVALID
        if request.block not in self._held or request.block in self._hidden:
            return wire.RejectReason.NOT_FOUND
        if len(self._queue) >= self.max_queued:
            return wire.RejectReason.BUSY
        return None

    def _drain(self, now: float) -> list[ServeAction]:
        actions: list[ServeAction] = []
        self._wait_until = None
        while self._queue and self.in_flight < self.max_in_flight:
            request = self._queue[0]
            cost = on_the_wire(request.length)  # an upload cap is a link's rate
            if not self.upload.consume(cost, now):
                self._wait_until = now + self.upload.delay_for(cost, now)
                break
            self._queue.popleft()
            self.bytes_sent += request.length
            if not self.in_flight:  # from now on it waits on the peer
                self._last_progress = now
            self.in_flight += 1
            actions.append(SendBlock(request.block, request.offset, request.length))
        return actions

    def _on_hash_request(self, request: wire.HashRequest) -> list[ServeAction]:
        assert self.root is not None
        shared = self.lookup(self.root)
        if shared is None:
            return self.on_unshared()
        layer = shared.layer
        if request.first != 0 or request.count != len(layer) or not layer:
            # Only whole layers are served for now (the fetch side asks for nothing else).
            return [Send(wire.Reject(0, 0, 1, wire.RejectReason.INVALID))]
        return [Send(wire.HashResponse(0, len(layer), tuple(layer), ()))]
