"""Whether strangers can reach this node's peer port, per transport (sans-I/O): what the node announces, and why.

Most nodes on the public network are behind a home NAT. A node announces its peer port on the Mainline DHT only
where that helps (docs/ARCHITECTURE.md, "The Internet mode"): a port nobody can connect to costs every peer that
finds it a failed connection, and a node that cannot serve still downloads. So each transport's state is learnt
from what happened, each event with its `now`:

* `connect_back(transport, port, peer, outcome, now)`: what a connect-back a peer made for us came to
  (`swarm.net.wire`, "Connect-backs"): the proof arrived (`PROVED`), or the peer said it was refused or timed out,
  or it said it connected and no proof came (`NO_PROOF`: something else answers at our address), or it did not try
  or did not answer (`NOT_ATTEMPTED`, `NO_ANSWER`: nothing learnt, but a probe was made);
* `inbound(transport, port, source, now)`: a stranger connected to the peer port on its own (not a connect-back);
* `mapped(external_port, now)` / `not_mapped(why, now)`: what the router said when asked to map the port (the
  shell's words, e.g. "UPnP: no IGD found"), for one transport or all.

And it answers, for the status page and the announcer:

* `state(transport, now)`: `REACHABLE` when a proof or a stranger's connection reached the port within
  `evidence_for` (45 min: a probe round's 30 min and half as much again, so that one round that finds no peer to ask
  does not forget what the last one learnt); `UNREACHABLE` when, within that time and since the last thing that
  reached us, connect-backs failed from peers in at least `FAILURE_NETWORKS` (2) networks; else `UNKNOWN`;
* `announce(now)`: whether to announce the peer port: unless every transport listened on is `UNREACHABLE` (one
  port number serves both; a peer reaches us by whichever works, and unknown is given the benefit of the doubt);
* `why(now)`: a sentence per transport, with what the router said;
* `next_probe(now)`: when to ask for connect-backs again (`FIRST_PROBE` s after listening, `MAPPING_SETTLE` s after
  the router's answer changed, every `REPROBE` s once every transport is known, backing off from `UNKNOWN_RETRY` s,
  doubling each round, while one is not).

**What a stranger cannot choose.** Anyone can say "refused": a failure counts only with failures from another
network (`addresses.network_prefix`: a public /24 or /48), so one peer, or any number of peers in one network, cannot
make a node stop announcing; failures from peers on a loopback, private or special address count for nothing
(they say nothing of the Internet). A connection proves reachability only for the transport and port it arrived
on, and only from a public address: a LAN peer reaches us whatever the router does. The port is the one listened
on (`listening`): evidence about another port (a probe of a port given by hand) is recorded nowhere. Loopback and
private addresses count as any other only with `allow_private` (tests and LAN labs), each address its own network
as `addresses.network_prefix` has it.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

import addresses
from swarm.net import wire

__all__ = ["Reachability", "State", "Outcome", "EVIDENCE_FOR", "FAILURE_NETWORKS", "FIRST_PROBE", "REPROBE",
           "UNKNOWN_RETRY", "MAPPING_SETTLE", "PROBE_ROUND"]

EVIDENCE_FOR = 45 * 60.0  # how long a proof, a stranger's connection or a failure counts (module docstring)
FAILURE_NETWORKS = 2  # networks whose peers must have failed to connect back before we say "unreachable"
FIRST_PROBE = 10.0  # after the listener opens: time to find peers to ask on the DHT
MAPPING_SETTLE = 5.0  # after the router's answer changed: the mapping is in place by then
REPROBE = 30 * 60.0  # between probe rounds once every transport is known
UNKNOWN_RETRY = 60.0  # the first wait after a round that left a transport unknown; doubles each round, to REPROBE
PROBE_ROUND = 30.0  # outcomes this close to a round's first are that round's (a round asks several peers)
MAX_FAILURES = 32  # failures remembered per transport: more add no network that the newest would not


class State(enum.StrEnum):
    REACHABLE = "reachable"
    UNREACHABLE = "unreachable"
    UNKNOWN = "unknown"


class Outcome(enum.StrEnum):
    """What one connect-back came to, for the requester."""

    PROVED = "proved"  # its proof arrived on our listener
    REFUSED = "refused"  # the peer said so (`wire.ReachStatus.REFUSED`)
    TIMED_OUT = "timed out"
    NO_PROOF = "no proof"  # the peer said it connected, and no proof arrived: not us at that port
    NOT_ATTEMPTED = "not attempted"  # the peer did not try (its limits)
    NO_ANSWER = "no answer"  # no connection, no REACH_RESULT: an old node, or none there


_FAILURES = {Outcome.REFUSED: "refused by", Outcome.TIMED_OUT: "timed out for", Outcome.NO_PROOF: "no proof from"}


@dataclass(frozen=True)
class _Reached:
    at: float
    network: str
    back: bool  # a connect-back's proof; else a stranger's connection


@dataclass(frozen=True)
class _Failure:
    at: float
    network: str
    outcome: Outcome


@dataclass(frozen=True)
class _Mapping:
    external_port: int | None  # None: not mapped
    why: str


class _Port:
    """What is known of one transport's listening port."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reached: _Reached | None = None
        self.failures: deque[_Failure] = deque(maxlen=MAX_FAILURES)


class Reachability:
    def __init__(self, *, allow_private: bool = False, evidence_for: float = EVIDENCE_FOR) -> None:
        """`allow_private`: count loopback, private and link-local peers and sources as public ones: for tests and
        LAN labs (module docstring)."""
        self.allow_private = allow_private
        self.evidence_for = evidence_for
        self._ports: dict[wire.Transport, _Port] = {}
        self._mappings: dict[wire.Transport | None, _Mapping] = {}  # None: what the router said for every transport
        self._listening_since: float | None = None
        self._mapping_changed: float | None = None
        self._round: float | None = None  # when the last probe round began
        self._unknown_rounds = 0  # rounds since every transport was last known

    # -- events ---------------------------------------------------------------------------------------------------

    def listening(self, transport: wire.Transport, port: int, now: float) -> None:
        """The peer port is open on `transport` (a new port forgets what was learnt of the old one)."""
        known = self._ports.get(transport)
        if known is None or known.port != port:
            self._ports[transport] = _Port(port)
        if self._listening_since is None:
            self._listening_since = now

    def port(self, transport: wire.Transport) -> int | None:
        """The port listened on by `transport`, None when not listening."""
        known = self._ports.get(transport)
        return None if known is None else known.port

    @property
    def transports(self) -> wire.Transport:
        """Every transport listened on."""
        flags = wire.Transport(0)
        for transport in self._ports:
            flags |= transport
        return flags

    def connect_back(self, transport: wire.Transport, port: int, peer: str | None, outcome: Outcome,
                     now: float) -> bool:
        """A connect-back we asked `peer` for, by `transport` to `port`, came to `outcome` (for `PROVED`, `peer` is
        the address the proof came from). True when it counts as evidence (module docstring)."""
        self._probed(now)
        known = self._ports.get(transport)
        network = self._network(peer)
        counted = False
        if known is not None and known.port == port and network is not None:
            if outcome is Outcome.PROVED:
                known.reached = _Reached(now, network, True)
                counted = True
            elif outcome in _FAILURES:  # (NOT_ATTEMPTED, NO_ANSWER: a probe made, nothing learnt)
                known.failures.append(_Failure(now, network, outcome))
                counted = True
        self._settle(now)
        return counted

    def inbound(self, transport: wire.Transport, port: int, source: str | None, now: float) -> bool:
        """A stranger connected from `source` to `port` by `transport`; True when that counts (module docstring)."""
        known = self._ports.get(transport)
        network = self._network(source)
        if known is None or known.port != port or network is None:
            return False
        known.reached = _Reached(now, network, False)
        self._settle(now)
        return True

    def mapped(self, external_port: int, now: float, transport: wire.Transport | None = None) -> None:
        """The router maps `external_port` to the peer port (for `transport`; None: for every one)."""
        self._map(transport, _Mapping(external_port, ""), now)

    def not_mapped(self, why: str, now: float, transport: wire.Transport | None = None) -> None:
        """The router mapped nothing for the peer port, and `why` (the shell's words)."""
        self._map(transport, _Mapping(None, why), now)

    # -- answers -------------------------------------------------------------------------------------------------

    def state(self, transport: wire.Transport, now: float) -> State:
        known = self._ports.get(transport)
        if known is None:
            return State.UNKNOWN
        reached = self._reached(known, now)
        if len({failure.network for failure in self._failing(known, reached, now)}) >= FAILURE_NETWORKS:
            return State.UNREACHABLE
        return State.UNKNOWN if reached is None else State.REACHABLE

    def announce(self, now: float) -> bool:
        """Whether to announce the peer port: unless every transport listened on is unreachable (none: no port)."""
        return any(self.state(transport, now) is not State.UNREACHABLE for transport in self._ports)

    def why(self, now: float) -> str:
        """One sentence per transport for the status page, each with what the router said."""
        if not self._ports:
            return "the peer port is not open"
        return "; ".join(self._sentence(transport, known, now) for transport, known in sorted(self._ports.items()))

    def next_probe(self, now: float) -> float | None:
        """When to ask peers for connect-backs again (None: not listening, nothing to probe)."""
        if self._listening_since is None:
            return None
        if self._mapping_changed is not None and (self._round is None or self._round < self._mapping_changed):
            return self._mapping_changed + MAPPING_SETTLE
        if self._round is None:
            return self._listening_since + FIRST_PROBE
        if not self._unknown_rounds:
            return self._round + REPROBE
        return self._round + min(REPROBE, UNKNOWN_RETRY * (1 << min(self._unknown_rounds - 1, 16)))

    def status(self, now: float) -> dict[str, object]:
        """For the admin API: whether the port is announced and why, when the next probe is due (seconds from
        `now`), and per transport its state, port, how long ago something reached it, and the recent failures."""
        due = self.next_probe(now)
        transports: dict[str, object] = {}
        for transport, known in sorted(self._ports.items()):
            reached = self._reached(known, now)
            failures = [f for f in known.failures if f.at > now - self.evidence_for]
            mapping = self._mapping(transport)
            transports[_name(transport).lower()] = {
                "state": str(self.state(transport, now)),
                "port": known.port,
                "reached_ago": None if reached is None else round(now - reached.at, 1),
                "reached_by": None if reached is None else "connect-back" if reached.back else "inbound",
                "failures": len(failures),
                "failure_networks": len({f.network for f in failures}),
                "mapping": None if mapping is None else _mapping_words(transport, known.port, mapping),
            }
        return {"announce": self.announce(now), "why": self.why(now),
                "next_probe_in": None if due is None else round(max(0.0, due - now), 1), "transports": transports}

    # -- internals -----------------------------------------------------------------------------------------------

    def _network(self, address: str | None) -> str | None:
        """The network `address` counts in, or None when it counts for nothing here (module docstring)."""
        kind = addresses.kind_of(address)
        if kind is addresses.Kind.PUBLIC or self.allow_private and kind not in (None, addresses.Kind.SPECIAL):
            return addresses.network_prefix(address)
        return None

    def _reached(self, known: _Port, now: float) -> _Reached | None:
        reached = known.reached
        return reached if reached is not None and reached.at > now - self.evidence_for else None

    def _failing(self, known: _Port, reached: _Reached | None, now: float) -> list[_Failure]:
        """The failures within `evidence_for` since the last thing that reached the port."""
        since = now - self.evidence_for if reached is None else max(reached.at, now - self.evidence_for)
        return [failure for failure in known.failures if failure.at > since]

    def _probed(self, now: float) -> None:
        if self._round is None or now >= self._round + PROBE_ROUND:
            self._round = now
            self._unknown_rounds += 1

    def _settle(self, now: float) -> None:
        if all(self.state(transport, now) is not State.UNKNOWN for transport in self._ports):
            self._unknown_rounds = 0

    def _map(self, transport: wire.Transport | None, mapping: _Mapping, now: float) -> None:
        if self._mappings.get(transport) != mapping:
            self._mappings[transport] = mapping
            self._mapping_changed = now

    def _mapping(self, transport: wire.Transport) -> _Mapping | None:
        return self._mappings.get(transport, self._mappings.get(None))

    def _sentence(self, transport: wire.Transport, known: _Port, now: float) -> str:
        name, port = _name(transport), known.port
        reached = self._reached(known, now)
        failing = self._failing(known, reached, now)
        networks = {failure.network for failure in failing}
        if len(networks) >= FAILURE_NETWORKS:
            said = f"no peer could connect back to port {port} over {name} ({_failures(failing, len(networks))})"
        elif reached is not None:
            how = (f"a peer in {reached.network} connected back" if reached.back
                   else f"a peer from {reached.network} connected")
            said = f"reachable over {name} at port {port}: {how} {_ago(now - reached.at)} ago"
        else:
            detail = (f"{_failures(failing, len(networks))}: peers in another network must fail too" if failing
                      else "not probed yet" if self._round is None else "no peer could tell")
            said = f"not known yet whether peers can reach port {port} over {name} ({detail})"
        mapping = self._mapping(transport)
        return said if mapping is None else f"{said}; {_mapping_words(transport, port, mapping)}"


def _name(transport: wire.Transport) -> str:
    return transport.name or str(int(transport))


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _failures(failing: list[_Failure], networks: int) -> str:
    """E.g. "refused by 2 peers in 2 networks", "refused by 1 peer, timed out for 1 peer, in 2 networks"."""
    counts = {outcome: sum(1 for f in failing if f.outcome is outcome) for outcome in _FAILURES}
    parts = [f"{_FAILURES[outcome]} {n} peer{'s' if n > 1 else ''}" for outcome, n in counts.items() if n]
    where = f"in {networks} network{'s' if networks > 1 else ''}"
    return f"{parts[0]} {where}" if len(parts) == 1 else f"{', '.join(parts)}, {where}"


def _mapping_words(transport: wire.Transport, port: int, mapping: _Mapping) -> str:
    if mapping.external_port is None:
        return f"the router mapped nothing: {mapping.why}" if mapping.why else "the router mapped nothing"
    if mapping.external_port == port:
        return f"the router maps port {port} ({_name(transport)})"
    return f"the router maps its port {mapping.external_port} to our {port} ({_name(transport)}), not {port} itself"
