"""`MainlineClaims`: a claim store (`swarm.discovery.seam.ClaimStore`) on the BitTorrent Mainline DHT, for the
Internet mode (docs/ARCHITECTURE.md, "The Internet mode").

A Mainline entry is a bare address and port: it cannot hold a claim. So a claim stays with its publisher:

* `put_manifest` keeps it in this node's own table (`swarm.discovery.own_claims.OwnClaims`, which the peer port
  answers query sessions from: `swarm.net.wire` CLAIMS_REQUEST) and announces our peer port under
  `claim_key(key)`, a key only our nodes derive from the claim's key (itself a hash: the DHT never sees a URL);
  re-put before it expires and re-announced every `REANNOUNCE`, until withdrawn;
* `get_manifests` looks `claim_key(key)` up and asks each address found, directly, for the claims its node makes
  itself (`SwarmNode.ask_claims`). What comes back is first-hand: its publisher's address is the one we connected
  to, named by that address (`address_id`: a stranger cannot take another's name, so the composite's merge of one
  claim per publisher cannot be used to hide an honest claim), and counted by network like every claim
  (`swarm.trust.quorum`). A stale entry costs one failed connection. The address it answered on is a provider
  of the root it vouches for (`Vouch.serves_at`): the engine need not wait for the root's own announcement, which
  lands seconds later on a DHT with nodes behind NATs (the flash-crowd lab saw 14-20 s).
* each node asked also passes on the other claimers that asked it (`swarm.core.claimers`), and we tell it our
  own port when we claim under the key too: those are asked at once, within the same bounds, so one findable
  claimer introduces the rest of a crowd whose own announcements are not findable yet (20-26 s on the lab's test
  DHT). Only the addresses travel, never a claim: each is asked directly, and what it answers is first-hand;
* an address that cannot be connected to may be a node behind a NAT that keeps a rendezvous with a node of ours
  (`proxy.internet`): `punch` asks up to `COORDINATORS` of the nodes that answered lately, those of this lookup
  first, to introduce us (`swarm.service.punch`), and on success the address is asked again, by QUIC.

Bounds: at most `MAX_ASKED` addresses asked per lookup, found or passed on (one per host, `PER_NETWORK` per
network: a liar's list costs no more asks than the DHT's crowded key would), at once, each
within `ASK_TIMEOUT` twice; a lookup listens for addresses until it is over, `CLAIMS_WAIT` at most and `GRACE`
after the first batch; the whole call returns what answered within `CLAIMS_BUDGET`: a download is not held up by a
DHT, or strangers, that answer slowly or not at all.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import addresses
from swarm.discovery.own_claims import OwnClaims
from swarm.discovery.seam import MAX_TTL_S, ManifestClaim, Vouch
from swarm.errors import PeerError, TransportError

from .errors import BridgeError
from .mainline import REANNOUNCE, MainlineDirectory, address_id

__all__ = ["Ask", "Punch", "MainlineClaims", "claim_key"]

log = logging.getLogger("swarmproxy.bittorrent")

CLAIM_KEY_PREFIX = b"swarmproxy-key-v1"  # (docs/ARCHITECTURE.md: our peer port goes on keys only we derive)
DEFAULT_TTL = 6 * 3600  # seconds a claim lives when the caller says nothing (our DHT's manifest records' life)
MAX_ASKED = 16  # addresses asked per lookup: a key crowded by a stranger's announcements costs no more
PER_NETWORK = 2  # of them, at most this many in one network (one per host)
ANSWERED_KEPT = 32  # nodes that answered a query, kept as candidates for connect-backs
ASK_TIMEOUT = 1.0  # seconds for one address's connection and handshake, and as many for its answer
COORDINATORS = 2  # nodes asked to introduce us to an address that cannot be connected to
# Addresses one lookup asks introductions for: a key crowded with addresses that answer nothing (a stranger's
# announcements) must not spend our requests at every coordinator (3 a minute each: `swarm.core.punch`).
PUNCHES_PER_LOOKUP = 2
PUNCH_TIMEOUT = 1.5  # seconds for those introductions and the punch, in all
CLAIMS_WAIT = 2.0  # seconds a lookup waits for addresses at most (it ends sooner once the DHT says it is over)
GRACE = 0.5  # seconds it listens for more after the first batch
# Seconds one get_manifests takes at most, lookup and asks: within the block engine's wait for claims (5 s),
# so that what the other backends answered is not lost waiting for this one.
CLAIMS_BUDGET = 3.5

# Ask one address for its claims under a key, saying our (port, transports) if we claim there too: its claims,
# (claim, published_at, expires_at) by our wall clock, and the other claimers it passes on (`SwarmNode.ask_claims`,
# a `swarm.service.claims_query.ClaimsAnswer`), raising on a failed connection or a bad answer.
Claimed = list[tuple[ManifestClaim, float, float]]
Ask = Callable[[tuple[str, int], bytes, tuple[int, int] | None], Awaitable[tuple[Claimed, list[tuple[str, int]]]]]
# Ask these coordinators, in turn, to introduce us to the node at this address; whether one did and the punch was
# made (`SwarmService.punch`).
Punch = Callable[[list[tuple[str, int]], tuple[str, int]], Awaitable[bool]]


@dataclass
class _Lookup:
    answered: list[tuple[str, int]]  # the nodes that answered this lookup, the first coordinators to ask
    punches_left: int


class _Admitted:
    """The addresses one lookup asks: at most `MAX_ASKED`, one per host and `PER_NETWORK` per network, never
    ourselves (as the DHT, or a node passing us on, returns us to ourselves)."""

    def __init__(self, own_host: str | None, own_port: int | None) -> None:
        self.ourselves = (own_host, own_port)
        self.hosts: set[str] = set()
        self.networks: collections.Counter[str] = collections.Counter()

    @property
    def count(self) -> int:
        return len(self.hosts)

    def admit(self, address: tuple[str, int]) -> bool:
        host = address[0]
        network = addresses.network_prefix(host)
        if (address == self.ourselves or host in self.hosts or self.networks[network] >= PER_NETWORK
                or len(self.hosts) >= MAX_ASKED):
            return False
        self.hosts.add(host)
        self.networks[network] += 1
        return True


def claim_key(key: bytes) -> bytes:
    """The Mainline key our peer port is announced under when this node vouches under claim key `key`."""
    return hashlib.sha1(CLAIM_KEY_PREFIX + key).digest()


class MainlineClaims:
    """Claims kept by their publishers, found through the Mainline DHT. `ask` and `peer_port` are given once the
    block engine listens (the claims are answered on its peer port)."""

    name = "mainline-claims"
    errors: tuple[type[Exception], ...] = (BridgeError,)

    def __init__(self, directory: MainlineDirectory, own: OwnClaims, *, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.session = directory.session
        self.own = own
        self.clock = clock  # claims are dated by the wall clock, as every store dates them
        self.ask: Ask | None = None
        self.punch: Punch | None = None  # (None: nobody is punched to; the engine's, where it listens by QUIC)
        self.peer_port: int | None = None
        self.transports = 0  # the `wire.Transport` flags we are asked by, told to those we ask when we claim too
        self._keeping: dict[bytes, asyncio.Task] = {}
        self._closed = False  # after close, a claim starts nothing (the session is going)
        # Nodes of ours that answered a query lately, newest last: whom to ask for a connect-back (`proxy.internet`).
        self.answered_by: collections.deque[tuple[str, int]] = collections.deque(maxlen=ANSWERED_KEPT)
        self.lookups = self.asked = self.answered = self.punched = self.introduced = 0

    @property
    def node_id(self) -> bytes:
        return self.directory.node_id

    async def put_manifest(self, repr_key: bytes, claim: ManifestClaim, *, ttl: int | None = None) -> None:
        if self._closed:
            raise BridgeError("the Mainline DHT is shutting down")
        if self.peer_port is None:
            raise BridgeError("the peer port is not listening yet: nobody could ask for the claim")
        life = min(ttl if ttl is not None else DEFAULT_TTL, MAX_TTL_S)
        self.own.put(repr_key, claim, now=self.clock(), ttl=life)
        self._stop(repr_key)
        self._keeping[repr_key] = asyncio.ensure_future(self._keep(repr_key, claim, life, self.peer_port))

    async def withdraw_manifest(self, repr_key: bytes) -> None:
        self._stop(repr_key)
        self.own.withdraw(repr_key)  # asked from now on, we say nothing; the DHT's entry expires on its own

    async def get_manifests(self, repr_key: bytes) -> list[Vouch]:
        """The claims of the addresses found under the key, as many as answered within `CLAIMS_BUDGET`: a slow
        or silent stranger costs its own answer, never the others' (nor the other backends': the composite waits
        for every one)."""
        ask = self.ask
        if ask is None:
            raise BridgeError("the peer port is not listening yet: no query can be made")
        loop = asyncio.get_running_loop()
        budget_ends = loop.time() + CLAIMS_BUDGET
        self.lookups += 1
        admitted = _Admitted(self.directory.own_host(), self.peer_port)
        addresses = await self._addresses(claim_key(repr_key), admitted)
        lookup = _Lookup([], PUNCHES_PER_LOOKUP)
        port = self.peer_port
        claiming = (port, self.transports) if port and self.transports and self.own.get(repr_key, self.clock()) \
            else None
        found = {asyncio.ensure_future(self._ask(ask, address, repr_key, lookup, claiming)) for address in addresses}
        asking, vouches = set(found), []
        try:
            while asking and (left := budget_ends - loop.time()) > 0:
                done, asking = await asyncio.wait(asking, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.exception() is not None:  # (a bug of ours: one ask only)
                        log.warning("Mainline: a claims ask failed: %r", task.exception())
                        continue
                    claims, others = task.result()
                    vouches += claims
                    if task in found:  # one hop: who the found ones pass on, not who those pass on
                        introduced = [address for address in others if admitted.admit(address)]
                        self.introduced += len(introduced)
                        asking |= {asyncio.ensure_future(self._ask(ask, address, repr_key, lookup, claiming))
                                   for address in introduced}
        finally:  # over the budget, or the caller gave up: no ask outlives the call
            for late in asking:
                late.cancel()
        self.asked += admitted.count
        vouches.sort(key=lambda vouch: vouch.published_at, reverse=True)  # newest first, as the seam says
        return vouches

    def status(self) -> dict[str, object]:
        return {"claims_kept": len(self.own), "lookups": self.lookups, "asked": self.asked,
                "answered": self.answered, "punched": self.punched, "introduced": self.introduced}

    def close(self) -> None:
        self._closed = True
        for key in list(self._keeping):
            self._stop(key)

    async def _addresses(self, dht_key: bytes, admitted: _Admitted) -> list[tuple[str, int]]:
        """What a lookup of `dht_key` finds, until it is over (at most `CLAIMS_WAIT`, `GRACE` after the first
        batch), as far as `admitted` takes them: up to `MAX_ASKED` addresses, one per host and `PER_NETWORK` per
        network (a /24, a /48), so that one party announcing many ports or many addresses of one network cannot
        crowd the others out; the lookup's asks of passed-on addresses count in the same bounds."""
        heard = self.session.dht_lookup(dht_key)
        found: list[tuple[str, int]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLAIMS_WAIT
        try:
            while admitted.count < MAX_ASKED:
                try:
                    async with asyncio.timeout_at(deadline):
                        batch = await heard.get()
                except TimeoutError:
                    break
                if batch is None:  # the lookup is over
                    break
                log.debug("Mainline: %s found %s", dht_key.hex()[:12], batch)
                found += [address for address in batch if admitted.admit(address)]
                if found:
                    deadline = min(deadline, loop.time() + GRACE)
        finally:
            self.session.dht_lookup_over(dht_key, heard)
        return found

    async def _ask(self, ask: Ask, address: tuple[str, int], repr_key: bytes, lookup: _Lookup,
                   claiming: tuple[int, int] | None = None) -> tuple[list[Vouch], list[tuple[str, int]]]:
        """The first-hand vouches of the node at `address`, and the other claimers it passed on."""
        host, port = address
        direct = asyncio.ensure_future(asyncio.wait_for(ask(address, repr_key, claiming), ASK_TIMEOUT * 2))
        # No answer within ASK_TIMEOUT (a NAT that drops a stranger's SYN says nothing), or a refusal: ask for a punch
        # meanwhile, not after the ask's whole time (what the lookup's budget leaves may still cut the second ask).
        punching = asyncio.ensure_future(self._punch_after(direct, address, lookup))
        reachable = True  # (whether a stranger could connect there: a coordinator, a prober)
        try:
            claims, others = await direct
        except (TransportError, TimeoutError, OSError) as exc:  # no way there: perhaps a NAT a punch opens
            log.debug("Mainline: %s:%d could not be asked: %s", host, port, str(exc) or type(exc).__name__)
            if not await punching:
                return [], []
            reachable = False
            try:
                async with asyncio.timeout(ASK_TIMEOUT * 2):
                    claims, others = await ask(address, repr_key, claiming)
            except (PeerError, TransportError, TimeoutError, OSError) as again:
                log.debug("Mainline: %s:%d gave no claims after a punch: %s", host, port,
                          str(again) or type(again).__name__)
                return [], []
        except PeerError as exc:  # a stranger's failure: only its answer
            log.debug("Mainline: %s:%d gave no claims: %s", host, port, exc)
            return [], []
        finally:
            punching.cancel()  # (done by now where it was needed)
        self.answered += 1
        if reachable:  # one reached only through a punch is nobody's coordinator, nor can it judge our port
            lookup.answered.append(address)
            if address in self.answered_by:
                self.answered_by.remove(address)
            self.answered_by.append(address)
        return ([Vouch.seen(claim, address_id(host, port), host, frozenset(), published_at, serves_at=address)
                 for claim, published_at, _expires in claims], others)

    async def _punch_after(self, direct: asyncio.Future, address: tuple[str, int], lookup: _Lookup) -> bool:
        await asyncio.wait([direct], timeout=ASK_TIMEOUT)
        if direct.done() and (direct.cancelled() or not isinstance(direct.exception(),
                                                                     (TransportError, TimeoutError, OSError))):
            return False  # it answered, or failed in a way no punch mends
        return await self._punch(address, lookup)

    async def _punch(self, address: tuple[str, int], lookup: _Lookup) -> bool:
        """Whether a node that answered lately (of this lookup first) introduced us to `address` and we punched."""
        punch = self.punch
        coordinators = [peer for peer in dict.fromkeys([*lookup.answered, *reversed(self.answered_by)])
                        if peer[0] != address[0]][:COORDINATORS]
        if punch is None or not coordinators or lookup.punches_left <= 0:
            return False
        lookup.punches_left -= 1
        try:
            async with asyncio.timeout(PUNCH_TIMEOUT):
                made = await punch(coordinators, address)
        except TimeoutError:
            made = False
        self.punched += made
        return made

    async def _keep(self, repr_key: bytes, claim: ManifestClaim, ttl: int, port: int) -> None:
        """Announce our peer port under the claim's Mainline key every `REANNOUNCE`, and put the claim again
        before it expires, until withdrawn."""
        dht_key = claim_key(repr_key)
        loop = asyncio.get_running_loop()
        announce_at = loop.time()
        while True:
            if loop.time() >= announce_at:
                if self.directory.may_announce():  # (not an address peers in two networks could not reach)
                    log.debug("Mainline: announcing port %d under %s", port, dht_key.hex()[:12])
                    with contextlib.suppress(RuntimeError):  # the session stopped: this task is cancelled anyway
                        self.session.dht_announce(dht_key, port)
                else:
                    log.debug("Mainline: not announcing under %s: unreachable", dht_key.hex()[:12])
                announce_at = loop.time() + REANNOUNCE
            await asyncio.sleep(min(REANNOUNCE, ttl / 2))
            self.own.put(repr_key, claim, now=self.clock(), ttl=ttl)

    def _stop(self, repr_key: bytes) -> None:
        task = self._keeping.pop(repr_key, None)
        if task is not None:
            task.cancel()
