"""A flow-level link model: queues (links) of fixed capacity, flows across several of them, max-min fair shares.

Each link is a queue with a capacity in bytes/s (`math.inf`: not a limit). A flow (here: one connection sending
one block at a time) crosses a fixed set of links, its route. `Network.rates()` gives every active flow its
max-min fair share (progressive filling): no flow could get more without taking it from a flow that has no more.
That is what TCP flows sharing the same bottlenecks converge to, leaving out slow start, round trips and headers
(fluid flow, as Babenhauserheide's bound assumes).

The filling is done in rounds, in numpy, on every active flow at once: a link whose fair share (capacity left /
flows still growing) is no larger than the share any of its flows gets elsewhere is a bottleneck *now*; its flows
are frozen at that share in the same round. Every round freezes at least the link with the smallest share, so it
ends, and links that bottleneck unrelated flows are settled together: a few rounds rather than one per link.
`SLACK` trades a little exactness for far fewer rounds (below).

No clock here: the simulator (`bench.sim.engine`) says when the set of active flows changed and asks again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np  # matplotlib's own dependency: the lab extra brings it

__all__ = ["Network", "max_min"]

# Links whose fair share is within this fraction of the least share their flows get elsewhere are settled in the
# same round (each of their flows at its own least share, so no link is ever over its capacity). Exact filling
# (0) took 128 rounds, 0.35 s, for 80,000 flows over 2,600 hosts; 0.02 takes about 25 rounds, 0.04 s, and the
# rates it gives summed to within 0.04 % of the exact ones (at most 1.2 % apart for one flow) in that case.
SLACK = 0.02


def max_min(routes: np.ndarray, capacity: np.ndarray, slack: float = SLACK) -> np.ndarray:
    """Max-min fair rates (to within `slack`, above) of flows whose links are the rows of `routes` (link indexes;
    a row may repeat the "none" link, whose capacity is inf) over links of `capacity`. A flow every link of which
    is inf gets inf."""
    flows, width = routes.shape
    rates = np.zeros(flows)
    if not flows:
        return rates
    left = capacity.astype(float).copy()
    todo = np.arange(flows)
    links = len(capacity)
    while len(todo):
        route = routes[todo]
        flat = route.ravel()
        count = np.bincount(flat, minlength=links)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(count > 0, left / np.maximum(count, 1), np.inf)
        share = np.maximum(share, 0.0)
        flow_share = share[route].min(axis=1)
        if not np.isfinite(flow_share).any():  # nothing limits the rest
            rates[todo] = np.inf
            break
        # the smallest share each link's flows get anywhere: a link at or below it is a bottleneck now
        least = np.full(links, np.inf)
        np.minimum.at(least, flat, np.repeat(flow_share, width))
        ready = np.isfinite(share) & (share <= least * (1 + slack + 1e-9))
        frozen = ready[route].any(axis=1)
        if not frozen.any():  # cannot happen (the smallest share is always ready); never loop for ever
            frozen = flow_share <= flow_share.min() * (1 + 1e-9)
        done = todo[frozen]
        got = flow_share[frozen]
        rates[done] = got
        finite = np.isfinite(got)
        used = np.bincount(route[frozen][finite].ravel(), weights=np.repeat(got[finite], width), minlength=links)
        left = left - used
        todo = todo[~frozen]
    return rates


class Network:
    """Links and flows, with their routes fixed when added; flows are switched on and off as they carry data."""

    NONE = 0  # the "no link" link: its capacity is inf (pads a short route)

    def __init__(self) -> None:
        self.capacity: list[float] = [math.inf]
        self.names: list[str] = ["none"]
        self.routes: list[tuple[int, ...]] = []
        self.width = 1
        self._routes: np.ndarray | None = None
        self._capacity: np.ndarray | None = None
        self.active = np.zeros(0, dtype=bool)
        self.carried: list[float] = [0.0]  # bytes each link carried (`carry`)

    def link(self, name: str, capacity: float | None) -> int:
        """A new link; `capacity` None is not a limit."""
        self.capacity.append(math.inf if capacity is None else float(capacity))
        self.names.append(name)
        self.carried.append(0.0)
        self._capacity = None
        return len(self.capacity) - 1

    def set_capacity(self, link: int, capacity: float | None) -> None:
        self.capacity[link] = math.inf if capacity is None else float(capacity)
        self._capacity = None

    def flow(self, route: Sequence[int]) -> int:
        """A new flow across `route` (link indexes), off until `active[flow]` is set (after `ready()`)."""
        route = tuple(link for link in route if link != self.NONE) or (self.NONE,)
        self.routes.append(route)
        self.width = max(self.width, len(route))
        self._routes = None
        return len(self.routes) - 1

    def ready(self) -> None:
        """Size `active` for the flows added since the last call (switch flows on only after it)."""
        grow = len(self.routes) - len(self.active)
        if grow > 0:
            self.active = np.concatenate([self.active, np.zeros(grow, dtype=bool)])

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._routes is None:
            padded = [route + (self.NONE,) * (self.width - len(route)) for route in self.routes]
            self._routes = np.array(padded, dtype=np.int64).reshape(len(self.routes), self.width)
        if self._capacity is None:
            self._capacity = np.array(self.capacity)
        return self._routes, self._capacity

    def rates(self) -> tuple[np.ndarray, np.ndarray]:
        """(the active flows' indexes, their max-min fair rates)."""
        routes, capacity = self._arrays()
        which = np.flatnonzero(self.active)
        return which, max_min(routes[which], capacity)

    def carry(self, flow: int, amount: float) -> None:
        """Count `amount` bytes on every link of `flow` (for the per-link totals of a report)."""
        for link in self.routes[flow]:
            self.carried[link] += amount
