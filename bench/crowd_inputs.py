"""What a flash crowd is made of, for the lab's real crowd (`bench.lab.crowd_nodes`) and its simulation
(`bench.crowd_sim`) alike: the same seed gives both the same arrivals and the same file bytes."""

from __future__ import annotations

import hashlib
import random


def poisson_arrivals(rate: float, count: int, rng: random.Random) -> list[float]:
    """`count` arrival times of a Poisson process of `rate` per second, from `rng`."""
    at, times = 0.0, []
    for _ in range(count):
        at += rng.expovariate(rate)
        times.append(at)
    return times


def content(name: str, size: int) -> bytes:
    """The bytes of the lab's file `name`: its SHA-256 repeated to `size`."""
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]
