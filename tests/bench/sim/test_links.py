"""The link model's max-min fair shares: table-driven vectors, a rack-uplink bottleneck, capacity never exceeded."""

import math

import numpy as np
import pytest

from bench.sim.links import Network, max_min

INF = math.inf

# (capacities of links 1.., routes as tuples of link numbers, expected rates); link 0 is "none" (inf)
VECTORS = [
    ("one flow takes the whole link", [10.0], [(1,)], [10.0]),
    ("two flows share a link evenly", [10.0], [(1,), (1,)], [5.0, 5.0]),
    ("a flow held elsewhere leaves the rest to the other", [10.0, 2.0], [(1,), (1, 2)], [8.0, 2.0]),
    ("the classic line: a long flow across two links", [10.0, 10.0], [(1, 2), (1,), (2,)], [5.0, 5.0, 5.0]),
    ("unequal links: the tighter one sets the long flow", [6.0, 12.0], [(1, 2), (1,), (2,)], [3.0, 3.0, 9.0]),
    ("an unlimited route gets inf", [10.0], [(0,), (1,)], [INF, 10.0]),
    ("three flows, one bottleneck of three", [9.0, 100.0], [(1, 2), (1,), (1,)], [3.0, 3.0, 3.0]),
]


@pytest.mark.parametrize("name,caps,routes,expected", VECTORS, ids=[v[0] for v in VECTORS])
def test_max_min_vectors(name, caps, routes, expected):
    capacity = np.array([INF, *caps])
    width = max(len(r) for r in routes)
    padded = np.array([r + (0,) * (width - len(r)) for r in routes])
    rates = max_min(padded, capacity, slack=0.0)
    assert list(rates) == pytest.approx(expected)


def _network(host: float, rack: float, racks: int, per_rack: int):
    net = Network()
    up = [net.link(f"up {h}", host) for h in range(racks * per_rack)]
    down = [net.link(f"down {h}", host) for h in range(racks * per_rack)]
    rack_up = [net.link(f"rack up {r}", rack) for r in range(racks)]
    rack_down = [net.link(f"rack down {r}", rack) for r in range(racks)]

    def route(a: int, b: int) -> list[int]:
        ra, rb = a // per_rack, b // per_rack
        return [up[a], down[b]] + ([] if ra == rb else [rack_up[ra], rack_down[rb]])

    return net, route, rack_up


def test_a_rack_uplink_is_the_bottleneck():
    """Four hosts of rack 0 each send to a host of rack 1 over a 4 MB/s uplink, hosts at 10 MB/s: 1 MB/s each,
    while a flow inside rack 1 still gets its host's full rate."""
    net, route, _ = _network(10e6, 4e6, racks=2, per_rack=4)
    flows = [net.flow(route(a, 4 + a)) for a in range(4)]
    inside = net.flow(route(5, 6))
    net.ready()
    net.active[[*flows, inside]] = True
    which, rates = net.rates()
    got = dict(zip(which.tolist(), rates.tolist(), strict=True))
    assert [got[f] for f in flows] == pytest.approx([1e6] * 4)
    assert got[inside] == pytest.approx(9e6)  # host 6's downlink also takes 1 MB/s from host 2 in rack 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_link_is_over_its_capacity_and_every_flow_is_held_somewhere(seed):
    """Conservation: on random routes the rates never exceed a link, and every flow has a saturated link on its
    route (else it could grow: not max-min), to within the slack."""
    rng = np.random.default_rng(seed)
    net, route, _ = _network(10.0, 25.0, racks=4, per_rack=5)
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, 20, size=(120, 2)) if a != b}
    flows = [net.flow(route(a, b)) for a, b in sorted(pairs)]
    net.ready()
    net.active[flows] = True
    which, rates = net.rates()
    load = np.zeros(len(net.capacity))
    for flow, rate in zip(which, rates, strict=True):
        for link in net.routes[flow]:
            load[link] += rate
    capacity = np.array(net.capacity)
    assert (load <= capacity * (1 + 1e-9)).all()
    saturated = load >= capacity * (1 - 0.03)
    assert all(any(saturated[link] for link in net.routes[flow]) for flow in which)


def test_carried_bytes_add_up_per_link():
    net, route, rack_up = _network(10.0, 25.0, racks=2, per_rack=2)
    flow = net.flow(route(0, 2))
    net.carry(flow, 100)
    net.carry(flow, 50)
    assert net.carried[rack_up[0]] == 150
    assert net.carried[rack_up[1]] == 0
