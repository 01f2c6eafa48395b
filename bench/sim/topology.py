"""What a simulated cluster looks like: racks of hosts in one datacenter, the link rates, and its lower bound.

The link model of issue 40 (scenario 4): a byte from host A to host B crosses A's own uplink, then, when B is in
another rack, A's rack uplink, the DC core and B's rack downlink, then B's own downlink; each is a queue with a
rate (`bench.sim.links`). Inside a rack the top-of-rack switch is not a limit. The seeder hangs off the core, as
the pusher does in `bench.cluster_netns`, or sits in a rack (`seeder_rack`), as in Tekel's figure 8 (`swarmproxy
lab cluster-tekel`): its bytes to other racks then cross that rack's uplink too. Rates are bytes/s; None is not a
limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.cluster_bound import Link, makespan_bound
from cluster.throttle import RESERVE
from swarm.content.manifest import choose_block_size

__all__ = ["Setup", "bound"]


@dataclass(frozen=True)
class Setup:
    size: int  # bytes of the pushed file
    racks: int
    per_rack: int
    host_up: float | None = None
    host_down: float | None = None
    rack_up: float | None = None  # every rack's uplink (rack -> core) ...
    rack_down: float | None = None  # ... and downlink (core -> rack)
    core: float | None = None  # the DC core, all racks' traffic between them
    seeder_up: float | None = None  # the pusher's own uplink
    block_size: int | None = None  # None: the product's choice for this size (`choose_block_size`)
    # per rack index: (uplink, downlink) instead of the above (bench.cluster_netns shapes rack 1 only)
    rack_links: dict[int, tuple[float | None, float | None]] = field(default_factory=dict)
    # The throttle (`cluster.throttle`): the host capacity each agent is started with (--host-capacity), None for
    # none (the product's default: no limit) and the reserve it keeps (--reserve).
    throttle_host: float | None = None
    reserve: float = RESERVE
    # s from the push until the pusher's plan is drawn and the first request goes out: its first 64 KiB were
    # acknowledged 0.51-0.57 s into a push in Tekel's topology at 10 Mbit/s (52 ms of it the bytes) at either period,
    # since the pusher draws its plan from a settled view (e10d54d; 1.50 s before at the 2 s period the simulator's
    # reconciles use, 0.74-0.90 s at the lab's 0.5 s): bench.seeder_flows, docs/cluster.md. 0.3 s until then.
    formation: float = 0.45
    seed: int = 1
    # Racks of these sizes, in order, instead of `racks` of `per_rack` (Tekel's figure 8: 5, 4, 7, 1); `racks` is
    # then len(rack_sizes) and `per_rack` their largest.
    rack_sizes: tuple[int, ...] = ()
    # The rack the pusher's host sits in (index), which the pusher says as `push --dc --rack` does (when
    # `cluster.push.site_to_say` lets it); None: off the DC core, in no rack.
    seeder_rack: int | None = None
    # Bytes a link carries per byte of payload (TCP/IP and Ethernet headers): every link above carries payload at
    # its rate / wire. 1: headers left out, as the bound counts (the scale points, --crosscheck); a shaped link of
    # the namespace labs at MTU 1500: `swarm.core.throttle.WIRE_OVERHEAD` (one bulk flow measured 0.955 of the rate
    # as payload there, `bench.cluster_netns --calibrate`).
    wire: float = 1.0

    def __post_init__(self) -> None:
        if self.rack_sizes and (len(self.rack_sizes) != self.racks or max(self.rack_sizes) != self.per_rack):
            raise ValueError("with rack_sizes, racks must be their number and per_rack the largest")
        if self.wire < 1:
            raise ValueError("wire bytes per payload byte cannot be below 1")
        if self.seeder_rack is not None and not 0 <= self.seeder_rack < self.racks:
            raise ValueError(f"seeder_rack {self.seeder_rack} is not one of the {self.racks} racks")

    @property
    def sizes(self) -> tuple[int, ...]:
        """Hosts per rack, in rack order."""
        return self.rack_sizes or (self.per_rack,) * self.racks

    @property
    def agents(self) -> int:
        return sum(self.sizes)

    def members(self, rack: int) -> range:
        """The agents (indexes) of `rack`: racks are numbered in order, their agents one after the other."""
        start = sum(self.sizes[:rack])
        return range(start, start + self.sizes[rack])

    @property
    def block(self) -> int:
        return self.block_size or choose_block_size(self.size)

    def rack_rates(self, rack: int) -> tuple[float | None, float | None]:
        return self.rack_links.get(rack, (self.rack_up, self.rack_down))

    def describe(self) -> dict:
        return {"agents": self.agents, "racks": self.racks, "per_rack": self.per_rack, "size": self.size,
                "block_size": self.block, "host_up": self.host_up, "host_down": self.host_down,
                "rack_up": self.rack_up, "rack_down": self.rack_down, "core": self.core,
                "seeder_up": self.seeder_up, "rack_links": {str(k): v for k, v in self.rack_links.items()},
                "throttle_host_capacity": self.throttle_host, "reserve": self.reserve,
                "formation_s": self.formation, "seed": self.seed, "rack_sizes": list(self.sizes),
                "seeder_rack": self.seeder_rack, "wire": self.wire}


def bound(setup: Setup) -> dict:
    """Babenhauserheide's bound (`bench.cluster_bound`) for this topology: the seeder's and hosts' own links,
    every rack downlink but the seeder's rack's (one copy must enter each rack the seeder is not in), the seeder's
    rack's uplink (its copy must leave), the core (one copy per rack without the seeder crosses it), plus the
    start-up pipeline of log2(N) blocks at the slowest host rate."""
    n = setup.agents
    links = []
    for rack in range(setup.racks):
        up, down = setup.rack_rates(rack)
        if rack == setup.seeder_rack:
            if up is not None:
                links.append(Link(f"rack {rack} uplink", setup.size, up))
        elif down is not None:
            links.append(Link(f"rack {rack} downlink", setup.size, down))
    if setup.core is not None:
        entered = setup.racks - (setup.seeder_rack is not None)
        links.append(Link("DC core", entered * setup.size, setup.core))
    return makespan_bound(setup.size, n, seeder_upload=setup.seeder_up,
                          downloads=[setup.host_down] * n if setup.host_down is not None else (),
                          uploads=[setup.host_up] * n, links=links, block_size=setup.block)
