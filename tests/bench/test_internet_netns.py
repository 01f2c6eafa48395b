"""The test internet in network namespaces (`bench/internet_netns.py`): stock Mainline DHT nodes on a public
segment, homes behind each kind of NAT (iptables; miniupnpd as a real IGD), and `swarmproxy run` nodes inside them.

One topology serves the module (built in about a second): 3 stock DHT nodes, 2 public machines, two homes of each
NAT kind. Nothing here can reach beyond the machine: `Topology.build` checks every namespace's routes
(`assert_isolated`, asserted again below) before anything runs inside."""

from __future__ import annotations

import subprocess
import time

import pytest

from bench.internet_netns import NAT_KINDS, Topology, netns_missing
from bench.internet_plan import PUBLIC
from bench.nat_matrix import APDM, DIRECT, EIM, IMPOSSIBLE, KINDS, MAPPED, PUNCHED, TARGET_PORT, predict, run_matrix

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(netns_missing() is not None, reason=str(netns_missing()))]

JOIN_TIMEOUT = 30.0  # s for a node to have a DHT node in its routing table, or the router to map its port


@pytest.fixture(scope="module")
def internet():
    with Topology(dht_nodes=3, publics=2, homes=tuple(kind for kind in NAT_KINDS for _ in range(2))) as topology:
        yield topology


def _until(check, what: str, node=None, timeout: float = JOIN_TIMEOUT):
    """Ask until `check()` gives something true (a real process cannot push the answer to us); that value."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if node is not None and node.process.poll() is not None:
            raise AssertionError(f"the node exited while waiting for {what}: {node.log()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f": {node.log()[-3000:]}" if node else ""))
        time.sleep(0.2)  # the period of a poll of another process's state
    return value


def _home_host(internet, kind: str):
    return next(host for host in internet.hosts if host.kind == kind)


def test_no_namespace_has_a_route_off_the_machine(internet):
    internet.assert_isolated()  # raises otherwise; build() ran it before anything started inside
    for ns in (internet.net, *(m.ns for m in (*internet.dht, *internet.public)),
               *(home.router for home in internet.built_homes)):
        routes = _routes(ns)
        assert "default" not in routes and f"{PUBLIC} via" in routes or ns == internet.net, (ns, routes)
        lookup = subprocess.run(["ip", "-n", ns, "route", "get", "1.1.1.1"], capture_output=True, text=True)
        assert lookup.returncode != 0 and "unreachable" in lookup.stderr, (ns, lookup.stdout)
    for host in internet.hosts:  # a host's default route leads to its router, which has none
        assert host.home is not None and f"default via {host.home.gateway}" in _routes(host.ns)


def _routes(ns: str) -> str:
    return subprocess.run(["ip", "-n", ns, "-4", "route"], capture_output=True, text=True, check=True,
                          timeout=10).stdout


# RFC 4787's predictions (bench/nat_matrix.py's docstring gives the reasons): a QUIC session from a node of the row's
# kind to one of the column's, in the order of KINDS (public, full-cone, port-restricted, symmetric, upnp).
EXPECTED = {
    "public": (DIRECT, MAPPED, PUNCHED, IMPOSSIBLE, MAPPED),
    "full-cone": (DIRECT, MAPPED, PUNCHED, IMPOSSIBLE, MAPPED),
    "port-restricted": (DIRECT, MAPPED, PUNCHED, IMPOSSIBLE, MAPPED),
    "symmetric": (DIRECT, MAPPED, IMPOSSIBLE, IMPOSSIBLE, MAPPED),
    "upnp": (DIRECT, MAPPED, PUNCHED, IMPOSSIBLE, MAPPED),
}


def test_every_pair_of_nat_kinds_connects_as_rfc_4787_predicts(internet):
    """Every ordered pair of machines (two of each kind) tries a direct QUIC dial, then a punch through a coordinator
    on a public machine: each connects exactly as predicted, and fails where predicted for the predicted reason."""
    result = run_matrix(internet)
    cells = result["cells"]
    assert {(a, b) for a in cells for b in cells[a]} == {(a, b) for a in KINDS for b in KINDS}
    for a in KINDS:
        for b, expected in zip(KINDS, EXPECTED[a], strict=True):
            cell = cells[a][b]
            assert cell["predicted"] == predict(a, b) == expected, (a, b, cell["predicted"])
            assert len(cell["observed"]) == (2 if a == b else 4)  # two machines of each kind
            assert set(cell["observed"].values()) == {expected}, (a, b, cell)
            for pair, tried in cell["tried"].items():
                if expected in (DIRECT, MAPPED):  # connected by a direct dial, to the target's own node
                    assert tried["direct"]["ok"] and tried["punch"] is None, (pair, tried)
                elif expected == PUNCHED:  # a direct dial was dropped, and the punch connected
                    assert not tried["direct"]["ok"] and tried["punch"]["ok"], (pair, tried)
                elif b == "symmetric":  # no session from the address it is known at
                    assert "UNKNOWN_PEER" in tried["punch"]["error"], (pair, tried)
                else:  # introduced, but the dial left from another mapping than the one the target punched to
                    assert tried["punch"]["error"].startswith("ConnectFailed"), (pair, tried)
    assert result["unexpected"] == [], result["unexpected"]
    # The NATs behave as built: --random-fully's mapping depends on the destination's address and port,
    # MASQUERADE's on neither; only the full cone lets a stranger in at the port a host was seen at.
    for kind, nat in result["nats"].items():
        for seen in nat["observed"].values():
            assert seen["mapping"] == (APDM if kind == "symmetric" else EIM), (kind, seen)
            assert seen["filtering"] == nat["built_as"]["filtering"], (kind, seen)
    for host in internet.hosts:  # known at the router's address, at the port the node listens on, or that mapped
        assert host.home is not None
        known = result["machines"][host.name]["known_as"]
        assert known.rpartition(":")[0] == host.home.wan, (host.name, known)
        assert host.kind == "upnp" or known == f"{host.home.wan}:{TARGET_PORT}", (host.name, known)


def test_a_node_behind_each_nat_joins_the_mainline_dht(internet, tmp_path):
    nodes = [internet.start_node(_home_host(internet, kind), tmp_path / kind)
             for kind in ("full-cone", "port-restricted", "symmetric")]
    try:
        for node in nodes:
            _until(lambda node=node: (node.admin("/_swarm/discovery")["mainline"].get("nodes") or 0) > 0,
                   f"the node behind the {node.machine.kind} NAT to have Mainline DHT nodes", node)
            network = node.admin("/_swarm/status")["network"]
            assert network["mainline"] is True and network["public"] is False, network
            assert network["nat"]["port_mapping"] is False, network  # nothing asked of the router: no --map-ports
    finally:
        for node in nodes:
            node.stop()


def test_a_node_behind_miniupnpd_gets_its_peer_port_mapped_and_reached(internet, tmp_path):
    host = _home_host(internet, "upnp")
    assert host.home is not None
    node = internet.start_node(host, tmp_path / "node", "--map-ports")
    try:
        _mapped_and_reached(internet, node)
    finally:
        node.stop()


def _mapped_and_reached(internet, node) -> None:
    host = node.machine

    def mapped() -> dict | None:
        nat = node.admin("/_swarm/status")["network"]["nat"]
        ours = {m["protocol"]: m for m in nat["mappings"] if m["port"] == node.peer_port and m["mapped"]}
        return nat if {"tcp", "udp"} <= set(ours) else None

    nat = _until(mapped, "the router to map the peer port over TCP and UDP", node)
    assert nat["port_mapping"] is True and nat["external_address"] == host.home.wan, nat
    tcp = next(m for m in nat["mappings"] if m["port"] == node.peer_port and m["protocol"] == "tcp")
    assert set(tcp["mapped"]) <= {"upnp", "natpmp"}, tcp
    external = min(tcp["mapped"].values())
    stranger = internet.agent(internet.public[0])
    reached = stranger.call("connect", host=host.home.wan, port=external, timeout=5, read=False)
    assert reached["ok"], reached  # through miniupnpd's DNAT to the node's peer listener
    # The control: a port the router did not map is refused (it is the NAT that lets the stranger in).
    unmapped = stranger.call("connect", host=host.home.wan, port=external + 1 if external < 65535 else 1024,
                             timeout=5, read=False)
    assert not unmapped["ok"], unmapped
    assert node.admin("/_swarm/discovery")["mainline"]["on"] is True
