"""Hole punching (sans-I/O): whom a coordinator introduces, and which introductions a node acts on.

Two nodes behind NATs that map nothing (endpoint-independent mapping, address-and-port-dependent filtering: RFC
4787's "port-restricted") can still meet over QUIC if a third node both are connected to tells each the other's
address as it sees it, and both then send towards each other from their listening socket at once: each side's
outgoing packet opens its own NAT's filter for the other's (`swarm.net.wire`, "Hole punching"; the transport dials
from its listener's socket, `swarm.net.quic`, "One socket"). Behind a NAT whose mapping depends on the destination
("symmetric") the address the coordinator saw is not the one the other side's packets would need, and punching
fails, as RFC 4787 predicts: nothing here pretends otherwise.

What a coordinator does for a PUNCH_REQUEST is judged by `PunchCoordinator.decide`, before anything is sent:

* **only between two live query sessions to it**: the requester's, on which the request came, and the one that
  comes from the address asked for (the shell looks it up; None if there is none, or it is the requester's own:
  UNKNOWN_PEER). Sessions are known by their remote address, which the transport's handshake proved, not by a node
  id a HANDSHAKE states: a stranger who states a victim's id cannot take the victim's introductions, and one who
  asks for an address is introduced only to the node that holds that address. The addresses sent are those two
  connections' remote addresses: never one a requester names and nobody holds, so nobody can make a coordinator
  point a peer at a third party;
* **public addresses only** (unless built for a lab, `allow_private`), as connect-backs (`swarm.core.reach`);
* **a few a minute per requester** (`PER_SOURCE` per `WINDOW`, by `addresses.source`: an address, a public IPv6
  address's /64), every request counted before the lookup, so that asking whether an address has a session here
  costs as much as being introduced; `PER_WINDOW` introductions in all, and four times as many requests. Over
  them: NOT_ATTEMPTED. One admitted request is one PUNCH_PEER to each side, each as large as the request (the two
  must be of one address family).

An introduced node acts on a PUNCH_PEER only from a coordinator it opened a session to, at most `PER_SOURCE` a
`WINDOW` per requester and `ACTED_PER_COORDINATOR` per coordinator (`PunchLimiter`s), towards a public address
(unless `allow_private`): so a coordinator cannot make it send more than a few small datagrams a minute, one per
introduction, and one requester cannot use up what the others' introductions may make it send.
"""

from __future__ import annotations

import addresses
from swarm.net.wire import PunchStatus

from .source_window import SourceWindow, refusal

__all__ = ["PunchLimiter", "PunchCoordinator", "PunchedPaths", "ACTED_PER_COORDINATOR", "PER_SOURCE", "WINDOW",
           "PER_WINDOW", "PUNCH_DELAY", "PUNCH_TTL", "PUNCHED_FOR", "MAX_PUNCHED"]

PER_SOURCE = 3  # introductions per requester (or acted on per coordinator) per WINDOW
WINDOW = 60.0
PER_WINDOW = 64  # ... and in all
# Introductions an introduced node acts on per coordinator a WINDOW; each requester's, PER_SOURCE of them: so one
# requester cannot use up what a coordinator's introductions of everyone else may make us send.
ACTED_PER_COORDINATOR = 20
REQUESTS_PER_INTRODUCTION = 4  # requests a coordinator reads a WINDOW, whatever they come to: PER_WINDOW times this
# Seconds the requester waits between its punch datagram and its QUIC dial, so that the peer's datagram (sent when its
# introduction arrived, a little before the requester's answer) has left the peer's NAT before our Initial reaches it.
PUNCH_DELAY = 0.2
# The punch datagram's IP TTL: enough hops to pass this side's NAT (a home router, a carrier's NAT), too few to reach
# the other side's. One that reaches the other NAT before that side sent anything can make a Linux NAT give that side
# another port (conntrack sees a clash): the punch would then fail.
PUNCH_TTL = 4
# Seconds a punched path is taken to stay open after the punch: a NAT keeps a UDP flow that saw packets both ways
# for 120 s or more (Linux's nf_conntrack_udp_timeout_stream; RFC 4787 REQ-5 asks for 2 min at least), and the
# claims asked through it were such packets. Past that, a dial tries the way a stranger would, and punches again.
PUNCHED_FOR = 90.0
MAX_PUNCHED = 256  # paths remembered: the oldest goes first


def _family(host: str) -> int:
    ip = addresses.parse(addresses.canonical_host(host))
    return 0 if ip is None else ip.version


class PunchLimiter:
    """How many punches one source may cause a `window` (`per_source`), and all sources (`per_window`)."""

    def __init__(self, *, per_source: int = PER_SOURCE, window: float = WINDOW, per_window: int = PER_WINDOW,
                 allow_private: bool = False) -> None:
        self._recent = SourceWindow(per_source=per_source, per_window=per_window, window=window)
        self.per_source, self.window, self.per_window = per_source, window, per_window
        self.allow_private = allow_private

    def refusal(self, address: str | None) -> str | None:
        """Why a punch may not involve `address` (not an IP, special, not public), else None."""
        return refusal(address, allow_private=self.allow_private,
                       purpose="hole punching is for the public network")

    def admit(self, address: str | None, now: float) -> str | None:
        """A punch caused by `address` (a requester; a coordinator): None to go ahead (counted), else why not."""
        total = self._recent.total(now)
        why = self.refusal(address)
        if why is not None:
            return why
        source, _network = addresses.source(address)
        assert source is not None
        if total >= self.per_window:
            return f"{total} punches in the last {self.window:g} s"
        if (count := self._recent.of(source)) >= self.per_source:
            return f"{source} caused {count} in the last {self.window:g} s"
        self._recent.admit(source, now)
        return None


class PunchCoordinator:
    """A coordinator's judgement of one PUNCH_REQUEST (module docstring)."""

    def __init__(self, limiter: PunchLimiter | None = None) -> None:
        self.limiter = limiter or PunchLimiter()
        # Every request counts against its requester (`limiter`), but only introductions made count against all
        # (`per_window`): asking for addresses nobody holds here, from many sources, no longer uses up the
        # introductions honest nodes get (the hole-punch attack review: 22 sources emptied the window).
        self._requests = PunchLimiter(per_source=self.limiter.per_source, window=self.limiter.window,
                                      per_window=self.limiter.per_window * REQUESTS_PER_INTRODUCTION,
                                      allow_private=self.limiter.allow_private)
        self.introduced = 0  # pairs introduced, for the status page

    def decide(self, requester: tuple[str, int], target: tuple[str, int] | None, now: float
               ) -> tuple[PunchStatus, str]:
        """`requester`: the address the request came from; `target`: the remote address of the live query session
        from the address asked for (None: none). PEER (introduce them) or why not; every request a requester may
        make is counted against it, whatever the answer."""
        refusal = self._requests.admit(requester[0], now)
        if refusal is not None:
            return PunchStatus.NOT_ATTEMPTED, refusal
        if target is None:
            return PunchStatus.UNKNOWN_PEER, "no live query session from that address"
        if target == requester:
            return PunchStatus.UNKNOWN_PEER, "that is the requester's own session"
        if (refusal := self.limiter.refusal(target[0])) is not None:
            return PunchStatus.NOT_ATTEMPTED, refusal
        if _family(target[0]) != _family(requester[0]):  # (no punch crosses; and each answer stays request-sized)
            return PunchStatus.NOT_ATTEMPTED, "the two are of different address families"
        if (refusal := self.limiter.admit(requester[0], now)) is not None:
            return PunchStatus.NOT_ATTEMPTED, refusal
        self.introduced += 1
        return PunchStatus.PEER, "introduced"


class PunchedPaths:
    """The addresses this node reached through a punch lately, which only QUIC from the listener's socket reaches
    (a dial by TCP, or from another socket, would be filtered as a stranger's): `add` when a punch was made,
    `fresh` to choose the transport for a dial."""

    def __init__(self, *, lasts: float = PUNCHED_FOR, most: int = MAX_PUNCHED) -> None:
        self.lasts, self.most = lasts, most
        self._until: dict[tuple[str, int], float] = {}

    def add(self, address: tuple[str, int], now: float) -> None:
        key = (addresses.canonical_host(address[0]) or address[0], address[1])
        self._until.pop(key, None)
        self._until[key] = now + self.lasts
        while len(self._until) > self.most:
            del self._until[next(iter(self._until))]

    def fresh(self, address: tuple[str, int], now: float) -> bool:
        until = self._until.get((addresses.canonical_host(address[0]) or address[0], address[1]))
        return until is not None and now < until

    def __len__(self) -> int:
        return len(self._until)
