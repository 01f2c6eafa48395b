"""The NAT connectivity matrix of the test internet (`bench/internet_netns.py`): for every pair of kinds (public, and
each home NAT), what RFC 4787's behaviours predict for a direct TCP connection from a machine of one kind to the
port another machine of the other kind is known by, beside what plain sockets observe.

How a machine is known (what a stranger would be told, e.g. by the DHT): a public machine by its address and
listening port; a host behind a home NAT by the address and port its first two public machines (the observers) saw
its outgoing connection come from, leaving from its listening port (`bench.netns_agent`'s listener answers
`NAME ADDRESS:PORT`), and a host behind miniupnpd by the port mapping NAT-PMP gave it. Connections from that port
to two ports of the first observer and one of the second tell the NAT's mapping (the same external port for all
three: endpoint-independent; for the first two only: address-dependent; else address-and-port-dependent), and
connections to the port the first observer saw, from the second observer and from another port of the first, tell
its filtering.

Predictions (no NAT here filters what leaves a home, so only the target's kind matters for a direct connection):
to a public machine, `direct`; through a full cone (endpoint-independent filtering) or a port mapping, `mapped`;
through address-and-port-dependent filtering (port-restricted, symmetric), a stranger's SYN is refused:
`needs hole punching (not built)`, which the note qualifies (both mappings endpoint-independent: a simultaneous
open would do; a symmetric NAT: port prediction or a relay; a reachable dialler: the target can dial it instead).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from bench.internet_netns import NAT_KINDS

if TYPE_CHECKING:
    from bench.internet_netns import Machine, Topology

__all__ = ["KINDS", "BEHAVIOUR", "DIRECT", "MAPPED", "PUNCH", "EIM", "ADM", "APDM", "EIF", "ADF", "APDF", "predict",
           "note", "run_matrix", "format_matrix"]

KINDS = ("public", *NAT_KINDS)
DIRECT, MAPPED, PUNCH = "direct", "mapped", "needs hole punching (not built)"
# RFC 4787's behaviours: mapping (section 4.1) and filtering (section 5).
EIM, ADM, APDM = "endpoint-independent", "address-dependent", "address-and-port-dependent"
EIF, ADF, APDF = EIM, ADM, APDM
# Each kind's, as the router is built to behave; "-" for none.
BEHAVIOUR: dict[str, tuple[str, str]] = {
    "public": ("-", "-"),
    "full-cone": (EIM, EIF),
    "port-restricted": (EIM, APDF),
    "symmetric": (APDM, APDF),
    "upnp": (EIM, APDF),  # and an explicit mapping, which lets anyone in
}
CONNECT_TIMEOUT = 2.0  # s: a SYN the NAT drops (none here does; they refuse) would take this long to tell


def predict(dialler: str, target: str) -> str:
    """The outcome RFC 4787's behaviours predict for a direct TCP connection from a `dialler` machine to the port
    a `target` machine is known by."""
    if target == "public":
        return DIRECT
    if target == "upnp" or BEHAVIOUR[target][1] == EIF:
        return MAPPED
    return PUNCH


def note(dialler: str, target: str) -> str:
    """What a connection would need where a direct one cannot be (empty where it can)."""
    if predict(dialler, target) != PUNCH:
        return ""
    if predict(target, dialler) != PUNCH:
        return f"connection reversal would do: the {target} host can dial the {dialler} one"
    if {BEHAVIOUR[dialler][0], BEHAVIOUR[target][0]} - {EIM, "-"}:
        return "a symmetric NAT: a simultaneous open needs port prediction, or a relay"
    return "both mappings endpoint-independent: a simultaneous open (hole punching) would do"


def _endpoint(answer: dict) -> str | None:
    """The `ADDRESS:PORT` an observer saw, from its answer `NAME ADDRESS:PORT`."""
    return answer["answer"].split()[1] if answer.get("ok") else None


def _probe(topology: Topology, machine: Machine, port: int, observers: list[Machine],
           ports: dict[str, list[int]]) -> dict:
    """How `machine`, listening on `port`, is known from outside, and its NAT's behaviour as observed."""
    if machine.home is None:
        return {"endpoint": f"{machine.address}:{port}"}
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
    probe["endpoint"] = seen[0]
    if machine.home.nat == "upnp":
        mapping = agent.call("natpmp", gateway=machine.home.gateway, port=port, protocol="tcp", lifetime=600)
        probe["natpmp"] = mapping
        probe["endpoint"] = f"{mapping['external_address']}:{mapping['external_port']}" if mapping.get("ok") else None
    return probe


def _dial(topology: Topology, dialler: Machine, targets: list[tuple[Machine, str | None]], out: dict) -> None:
    agent = topology.agent(dialler)
    for target, endpoint in targets:
        if endpoint is None:
            out[dialler.name, target.name] = "no endpoint"
            continue
        host, _, port = endpoint.rpartition(":")
        answer = agent.call("connect", host=host, port=int(port), timeout=CONNECT_TIMEOUT)
        if not answer.get("ok"):
            out[dialler.name, target.name] = answer.get("error", "failed")
        elif answer["answer"].split()[0] == target.name:
            out[dialler.name, target.name] = "connected"
        else:
            out[dialler.name, target.name] = f"reached {answer['answer'].split()[0]}, not {target.name}"


def run_matrix(topology: Topology) -> dict:
    """Probe every machine's NAT, then dial every machine from every other (each dialler on its own thread): the
    matrix by kind, and the cells where the observed outcome is not the predicted one (`unexpected`)."""
    observers = topology.public
    if len(observers) < 2:
        raise ValueError("the matrix needs two public machines (the observers)")
    machines = [*topology.public, *topology.hosts]
    ports = {m.name: [topology.agent(m).call("listen", port=0)["port"]] for m in machines}
    for observer in observers[:2]:  # a second port: tells an address-dependent mapping from a port-dependent one
        ports[observer.name].append(topology.agent(observer).call("listen", port=0)["port"])
    probes = {m.name: _probe(topology, m, ports[m.name][0], observers, ports) for m in machines}
    outcomes: dict[tuple[str, str], str] = {}
    threads = [threading.Thread(target=_dial, args=(topology, a, [(b, probes[b.name]["endpoint"]) for b in machines
                                                                  if b is not a], outcomes), daemon=True)
               for a in machines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cells: dict[str, dict[str, dict]] = {}
    unexpected = []
    for a in machines:
        for b in machines:
            if a is b:
                continue
            cell = cells.setdefault(a.kind, {}).setdefault(b.kind, {
                "predicted": predict(a.kind, b.kind), "note": note(a.kind, b.kind), "observed": {}})
            observed = outcomes[a.name, b.name]
            cell["observed"][f"{a.name}->{b.name}"] = observed
            if (observed == "connected") != (cell["predicted"] != PUNCH):
                unexpected.append({"from": a.name, "to": b.name, "kinds": [a.kind, b.kind],
                                   "predicted": cell["predicted"], "observed": observed})
    nats = {}
    for m in machines:
        if m.home is not None:
            nat = nats.setdefault(m.kind, {"built_as": dict(zip(("mapping", "filtering"), BEHAVIOUR[m.kind],
                                                                  strict=True)), "observed": {}})
            nat["observed"][m.name] = {k: v for k, v in probes[m.name].items() if k != "endpoint"}
    return {"machines": {m.name: {"kind": m.kind, "address": m.address, "listening": ports[m.name][0],
                                  "known_as": probes[m.name]["endpoint"]} for m in machines},
            "nats": nats, "cells": cells, "unexpected": unexpected}


def format_matrix(result: dict) -> str:
    """The matrix as text: one row per dialler's kind, one column per target's kind."""
    kinds = [k for k in KINDS if k in result["cells"]]
    width = 22
    lines = ["direct TCP connection from (row) to the port the other is known by (column): predicted, observed",
             "".ljust(16) + "".join(k.ljust(width) for k in kinds)]
    notes = []
    for a in kinds:
        row = a.ljust(16)
        for b in kinds:
            cell = result["cells"][a].get(b)
            if cell is None:
                row += "(no pair)".ljust(width)
                continue
            seen = set(cell["observed"].values())
            short = "punch" if cell["predicted"] == PUNCH else cell["predicted"]
            row += f"{short}: {'/'.join(sorted(seen))}".ljust(width)
            if cell["note"]:
                notes.append(f"  {a} -> {b}: {cell['predicted']}; {cell['note']}")
        lines.append(row)
    lines += ["", "punch = " + PUNCH + ":", *notes, "", "NATs (RFC 4787), as built and as observed:"]
    for kind, nat in result["nats"].items():
        built = nat["built_as"]
        lines.append(f"  {kind}: built as {built['mapping']} mapping, {built['filtering']} filtering")
        for name, seen in nat["observed"].items():
            lines.append(f"    {name}: {seen}")
    lines.append("")
    lines.append("unexpected: " + (str(result["unexpected"]) if result["unexpected"] else "none"))
    if "build_s" in result:
        lines.append(f"built in {result['build_s']} s, matrix in {result['matrix_s']} s")
    return "\n".join(lines)
