"""The NAT connectivity matrix of the test internet (`bench/internet_netns.py`): for every ordered pair of kinds
(public, and each home NAT), the outcome RFC 4787's behaviours predict for a QUIC session from a node on a machine
of one kind (the dialler) to a node on a machine of the other (the target), beside the outcome observed with real
QUIC nodes (`tests/bench/punch_node.py`, role `matrix`) and hole punching through a coordinator on a public
machine (`swarm.service.punch`).

**How a target is known** (what a stranger would be told, e.g. by the DHT): a public machine by its address and
the port its node listens on; a host behind a home NAT by its router's WAN address and that listening port (what
it would announce: Linux's NAT keeps the source port where it can, RFC 4787 section 4.2.1's port preservation);
a host behind miniupnpd by the UDP port mapping it asked for over NAT-PMP (RFC 6886), as a node run with
`--map-ports` does: the upnp target here HAS asked for a mapping, which makes it the `mapped` case (one that had
not would be a port-restricted host: same mapping and filtering).

**Outcomes**, each observed as the first of these that makes a session with the target's node (its node id
checked): `direct` or `mapped`, a direct dial of the address the target is known at from a socket of the
dialler's own (`direct` to a public machine, `mapped` through a NAT's mapping); `punched`, after a failed direct
dial, a punch through the coordinator, the requester naming the target by that same address; `impossible`, when
neither did.

**Predictions** (RFC 4787: mapping behaviour, section 4.1; filtering behaviour, section 5). No NAT here filters
what leaves a home, and the target's answers to a dial come from the endpoint the dial went to, which every
filtering admits (section 5): the dialler's NAT never stops a session it opened, only its mapping can matter.

* target public: `direct`.
* target's filtering endpoint-independent (full-cone, section 5), or a mapping it asked for (upnp): `mapped`;
  anyone's packets to the endpoint the target is known at are let in.
* target's filtering address-and-port-dependent (port-restricted, symmetric; section 5): a direct dial is
  dropped, so a punch is needed: the target sends a datagram towards the dialler's endpoint as the coordinator saw
  it, which opens its filter for that endpoint only, and the dialler dials from the socket it asked from.
  - target's mapping endpoint-dependent (symmetric, "address and port-dependent", section 4.1): `impossible`. The
    coordinator sees the target's rendezvous come from another external port than the one it listens on (and
    would announce), so no session comes from the address a stranger names (UNKNOWN_PEER); and a target named by
    the port the coordinator saw would still punch from yet another mapping, not the one the dial goes to.
  - target's mapping endpoint-independent (port-restricted) and the dialler public, or behind an
    endpoint-independent mapping (full-cone, port-restricted, upnp): `punched`. The dial leaves from the mapping
    the coordinator saw, to which the target punched (a public or full-cone dialler: the target's punch goes out
    and the dial comes in; its own punch is not needed).
  - the same target, the dialler behind an endpoint-dependent mapping (symmetric): `impossible`. Its NAT gives
    the dial towards the target another external port than its session to the coordinator had (section 4.1), so
    the dial comes from an endpoint the target never sent to, and is filtered (section 5).

Where impossible, what would connect is noted (`note`): connection reversal (the target dials a dialler that can
be reached) or a relay (TURN) or port prediction, none of them built.

**The punch datagrams' TTL**: one leaving a home passes its own router and dies in the internet (TTL 2), one
leaving a public machine dies at its first hop (TTL 1). A punch that reaches the far side's router before that
side's own punch left makes its conntrack give that side's punch another external port, and the dial that follows
is dropped (`tests/bench/test_punch_netns.py`); a public machine (no NAT to open) is a router nearer than a home,
and with TTL 2 its punches reached the target's router first: in 3 runs of 5, punches from the public machines to
port-restricted hosts failed, the target's punch towards the requester's port mapped to another one (conntrack).

**The NATs' behaviours** are observed too, with TCP and plain sockets (`bench.netns_agent`): from a host's
listening port to two ports of the first public machine (the observers) and one of the second, and each answers
the address and port it saw (the same external port for all three: endpoint-independent mapping; for the first
two only: address-dependent; else address-and-port-dependent); then the port the first observer saw is connected
to from the second observer and from another port of the first (its filtering). Linux's NAT treats UDP as TCP
here; the QUIC outcomes are the check that it does.
"""

from __future__ import annotations

import json
import pathlib
import select
import subprocess
import sys
from typing import TYPE_CHECKING, NamedTuple

from bench.internet_netns import NAT_KINDS

if TYPE_CHECKING:
    from bench.internet_netns import Machine, Topology

__all__ = ["KINDS", "BEHAVIOUR", "Behaviour", "DIRECT", "MAPPED", "PUNCHED", "IMPOSSIBLE", "OUTCOMES", "EIM", "ADM",
           "APDM", "EIF", "ADF", "APDF", "predict", "why", "note", "run_matrix", "format_matrix"]

KINDS = ("public", *NAT_KINDS)
DIRECT, MAPPED, PUNCHED, IMPOSSIBLE = "direct", "mapped", "punched", "impossible"
OUTCOMES = (DIRECT, MAPPED, PUNCHED, IMPOSSIBLE)
# RFC 4787's behaviours: mapping (section 4.1) and filtering (section 5).
EIM, ADM, APDM = "endpoint-independent", "address-dependent", "address-and-port-dependent"
EIF, ADF, APDF = EIM, ADM, APDM


class Behaviour(NamedTuple):
    mapping: str  # "-": no NAT
    filtering: str
    port_mapping: bool  # the host asked its router for a mapping of its port (UPnP-IGD, NAT-PMP)


# Each kind's, as the router is built to behave.
BEHAVIOUR: dict[str, Behaviour] = {
    "public": Behaviour("-", "-", False),
    "full-cone": Behaviour(EIM, EIF, False),
    "port-restricted": Behaviour(EIM, APDF, False),
    "symmetric": Behaviour(APDM, APDF, False),
    "upnp": Behaviour(EIM, APDF, True),
}
CONNECT_TIMEOUT = 2.0  # s: a TCP SYN the NAT drops (none here does; they refuse) would take this long to tell
# The QUIC nodes' ports, in every machine's namespace (each has its own ports): the coordinator's (on the first
# public machine), each machine's target (its rendezvous and listener), its requester's.
COORDINATOR_PORT, TARGET_PORT, REQUESTER_PORT = 7100, 7101, 7102
NODE_TIMEOUT = 30.0  # s for a node to say it is up, and for a machine's dials and punches all together
TTL = {"public": 1, "home": 2}  # the punch datagrams' (module docstring)


def predict(dialler: str, target: str) -> str:
    """The outcome RFC 4787's behaviours predict for a session from a `dialler` machine's node to a `target`
    machine's, known at the address a stranger would be told (module docstring)."""
    if target == "public":
        return DIRECT
    t = BEHAVIOUR[target]
    if t.filtering == EIF or t.port_mapping:
        return MAPPED
    if t.mapping != EIM:
        return IMPOSSIBLE
    return PUNCHED if BEHAVIOUR[dialler].mapping in ("-", EIM) else IMPOSSIBLE


def why(dialler: str, target: str) -> str:
    """The prediction's reason, briefly, with RFC 4787's section."""
    t, d = BEHAVIOUR[target], BEHAVIOUR[dialler]
    if target == "public":
        return "no NAT before the target"
    if t.port_mapping:
        return "the target asked its router to map its port (NAT-PMP), which lets anyone in"
    if t.filtering == EIF:
        return "endpoint-independent filtering (s. 5) lets anyone in at the target's mapping"
    if t.mapping != EIM:
        return ("the target's mapping depends on the destination (s. 4.1): its rendezvous comes from another port "
                "than the one it is known at, so the coordinator has no session from there")
    if d.mapping in ("-", EIM):
        return ("address-and-port-dependent filtering (s. 5) drops a direct dial; the target's punch opens it for "
                "the endpoint the coordinator saw, which the dial leaves from (" +
                ("no NAT" if d.mapping == "-" else "endpoint-independent mapping, s. 4.1") + ")")
    return ("the dialler's mapping depends on the destination (s. 4.1): its dial leaves from another port than the "
            "one the target punched towards, and is filtered (s. 5)")


def note(dialler: str, target: str) -> str:
    """What would connect an impossible pair (empty for the others)."""
    if predict(dialler, target) != IMPOSSIBLE:
        return ""
    if predict(target, dialler) in (DIRECT, MAPPED):
        return f"connection reversal (not built): the {target} host could dial the {dialler} one"
    return "a relay (TURN), or port prediction (not built)"


# -- the NATs' behaviours, observed with TCP -------------------------------------------------------------------------

def _endpoint(answer: dict) -> str | None:
    """The `ADDRESS:PORT` an observer saw, from its answer `NAME ADDRESS:PORT`."""
    return answer["answer"].split()[1] if answer.get("ok") else None


def _probe(topology: Topology, machine: Machine, port: int, observers: list[Machine],
           ports: dict[str, list[int]]) -> dict:
    """How `machine`'s NAT, `machine` listening on `port`, maps and filters TCP, as observed."""
    agent = topology.agent(machine)
    first, second = observers[:2]
    # From the listening port to the first observer's two ports, then to the second observer.
    destinations = [(first, ports[first.name][0]), (first, ports[first.name][1]), (second, ports[second.name][0])]
    seen = [_endpoint(agent.call("connect", host=o.address, port=p, timeout=CONNECT_TIMEOUT, bind_port=port))
            for o, p in destinations]
    probe: dict[str, object] = {"seen_by_observers": seen}
    if None not in seen:
        probe["mapping"] = (EIM if seen[0] == seen[1] == seen[2] else ADM if seen[0] == seen[1] else APDM)
        host, _, mapped = str(seen[0]).rpartition(":")
        # Filtering: a stranger (the second observer) at the port the first one saw, then the first one from another
        # port; a host that answers each is named in its answer.
        stranger = topology.agent(second).call("connect", host=host, port=int(mapped), timeout=CONNECT_TIMEOUT)
        other_port = topology.agent(first).call("connect", host=host, port=int(mapped), timeout=CONNECT_TIMEOUT)
        reached = [a.get("ok", False) and a["answer"].split()[0] == machine.name for a in (stranger, other_port)]
        probe["filtering"] = EIF if reached[0] else ADF if reached[1] else APDF
    return probe


def _probe_nats(topology: Topology) -> dict:
    observers = topology.public
    machines = [*topology.public, *topology.hosts]
    ports = {m.name: [topology.agent(m).call("listen", port=0)["port"]] for m in machines}
    for observer in observers[:2]:  # a second port: tells an address-dependent mapping from a port-dependent one
        ports[observer.name].append(topology.agent(observer).call("listen", port=0)["port"])
    nats: dict[str, dict] = {}
    for host in topology.hosts:
        nat = nats.setdefault(host.kind, {"built_as": BEHAVIOUR[host.kind]._asdict(), "observed": {}})
        nat["observed"][host.name] = _probe(topology, host, ports[host.name][0], observers, ports)
    return nats


# -- the QUIC outcomes -------------------------------------------------------------------------------------------

def _line(process: subprocess.Popen, what: str, log: pathlib.Path, wait: float = NODE_TIMEOUT) -> dict:
    """The next line `process` prints (it prints one, then waits to be told more: nothing is left in the buffer)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], wait)
    line = process.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"{what}: no answer within {wait:g} s ({process.poll()}): "
                           f"{log.read_text(errors='replace')[-3000:]}")
    return json.loads(line)


def _known_at(topology: Topology, machine: Machine) -> str:
    """The address a stranger would be told for `machine`'s node (module docstring); for a host behind miniupnpd,
    the UDP mapping it asks for here."""
    if machine.home is None:
        return f"{machine.address}:{TARGET_PORT}"
    if machine.home.nat != "upnp":
        return f"{machine.home.wan}:{TARGET_PORT}"
    mapping = topology.agent(machine).call("natpmp", gateway=machine.home.gateway, port=TARGET_PORT, protocol="udp",
                                           lifetime=600)
    if not mapping.get("ok"):
        raise RuntimeError(f"{machine.name}: no NAT-PMP mapping of UDP {TARGET_PORT}: {mapping}")
    return f"{mapping['external_address']}:{mapping['external_port']}"


def _outcome(target: Machine, node_id: str, tried: dict) -> str:
    """What a machine's try at `target` came to (`punch_node`'s answer `tried`)."""
    for attempt, outcome in (("direct", DIRECT if target.home is None else MAPPED), ("punch", PUNCHED)):
        answer = tried.get(attempt)
        if answer and answer["ok"]:
            return outcome if answer["peer"] == node_id else f"reached node {answer['peer'][:8]}, not {target.name}"
    return IMPOSSIBLE


def _observe(topology: Topology) -> tuple[dict, dict[str, str], dict[str, str], dict[tuple[str, str], dict]]:
    """Every machine's node tries every other's (QUIC, all at once, in their own processes), the NATs' behaviours
    observed (TCP) while the nodes start: (the NATs, how each machine is known, each node's id, each ordered pair's
    answer)."""
    machines = [*topology.public, *topology.hosts]
    started: list[subprocess.Popen] = []
    assert topology.scratch is not None
    logs = {}

    def node(machine: Machine, role: str, *args: object) -> subprocess.Popen:
        logs[machine.name, role] = log = topology.scratch / f"punch_node-{role}-{machine.name}.log"  # its stderr
        with open(log, "wb") as errors:
            process = topology.spawn(machine, [sys.executable, "-m", "tests.bench.punch_node", role,
                                               *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=errors, text=True)
        started.append(process)
        return process

    try:
        coordinator = node(topology.public[0], "coordinator", COORDINATOR_PORT)
        _line(coordinator, "the coordinator", logs[topology.public[0].name, "coordinator"])
        at = f"{topology.public[0].address}:{COORDINATOR_PORT}"
        nodes = {m.name: node(m, "matrix", TARGET_PORT, REQUESTER_PORT, at, TTL["public" if m.home is None else
                                                                                "home"]) for m in machines}
        nats = _probe_nats(topology)  # (other ports; the agents', not the nodes')
        known = {m.name: _known_at(topology, m) for m in machines}
        ids = {name: _line(process, f"{name}'s node", logs[name, "matrix"])["node_id"]
               for name, process in nodes.items()}
        for a in machines:  # every node is up (its rendezvous made): all dial at once
            process = nodes[a.name]
            assert process.stdin is not None
            process.stdin.write(json.dumps([[b.name, known[b.name]] for b in machines if b is not a]) + "\n")
            process.stdin.flush()
        answers = {(a.name, b): tried for a in machines
                   for b, tried in _line(nodes[a.name], f"{a.name}'s dials", logs[a.name, "matrix"])["tried"].items()}
        return nats, known, ids, answers
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait()


def run_matrix(topology: Topology) -> dict:
    """Observe every NAT's behaviour (TCP) and make every machine's node try every other's (QUIC): the matrix by
    kind, and the pairs where the observed outcome is not the predicted one (`unexpected`)."""
    if len(topology.public) < 2:
        raise ValueError("the matrix needs two public machines (the observers)")
    machines = [*topology.public, *topology.hosts]
    nats, known, ids, answers = _observe(topology)
    cells: dict[str, dict[str, dict]] = {}
    unexpected = []
    for a in machines:
        for b in machines:
            if a is b:
                continue
            cell = cells.setdefault(a.kind, {}).setdefault(b.kind, {
                "predicted": predict(a.kind, b.kind), "why": why(a.kind, b.kind), "note": note(a.kind, b.kind),
                "observed": {}, "tried": {}})
            observed = _outcome(b, ids[b.name], answers[a.name, b.name])
            cell["observed"][f"{a.name}->{b.name}"] = observed
            cell["tried"][f"{a.name}->{b.name}"] = answers[a.name, b.name]
            if observed != cell["predicted"]:
                unexpected.append({"from": a.name, "to": b.name, "kinds": [a.kind, b.kind],
                                   "predicted": cell["predicted"], "observed": observed,
                                   "tried": answers[a.name, b.name]})
    return {"machines": {m.name: {"kind": m.kind, "address": m.address, "known_as": known[m.name],
                                  "node_id": ids[m.name]} for m in machines},
            "nats": nats, "cells": cells, "unexpected": unexpected}


def format_matrix(result: dict) -> str:
    """The matrix as text: one row per dialler's kind, one column per target's kind."""
    kinds = [k for k in KINDS if k in result["cells"]]
    width = 24
    lines = ["a QUIC session from a node of (row) to one of (column), known at the address a stranger would be told:",
             "predicted / observed (every pair of machines of those kinds)",
             "".ljust(16) + "".join(k.ljust(width) for k in kinds)]
    notes = []
    for a in kinds:
        row = a.ljust(16)
        for b in kinds:
            cell = result["cells"][a].get(b)
            if cell is None:
                row += "(no pair)".ljust(width)
                continue
            row += f"{cell['predicted']} / {'/'.join(sorted(set(cell['observed'].values())))}".ljust(width)
            if cell["predicted"] in (PUNCHED, IMPOSSIBLE):
                notes.append(f"  {a} -> {b}: {cell['predicted']}: {cell['why']}" +
                             (f"; {cell['note']}" if cell["note"] else ""))
        lines.append(row)
    lines += ["", "direct, mapped: a direct dial; punched: through a coordinator on a public machine (RFC 4787 "
              "sections):", *notes, "", "NATs (RFC 4787), as built and as observed (TCP):"]
    for kind, nat in result["nats"].items():
        built = nat["built_as"]
        lines.append(f"  {kind}: built as {built['mapping']} mapping, {built['filtering']} filtering" +
                     (", a port mapping asked" if built["port_mapping"] else ""))
        for name, seen in nat["observed"].items():
            lines.append(f"    {name}: {seen}")
    lines.append("  known at: " + ", ".join(f"{name} {m['known_as']}" for name, m in result["machines"].items()))
    lines.append("")
    lines.append("unexpected: " + (json.dumps(result["unexpected"]) if result["unexpected"] else "none"))
    if "build_s" in result:
        lines.append(f"built in {result['build_s']} s, matrix in {result['matrix_s']} s")
    return "\n".join(lines)
