"""Each peer connection's transfer rates, for the status page (`GET /_swarm/peers`). A sans-I/O core: the shell
hands it the live connections' byte counters and `now`; it keeps a few samples per connection and answers with
bytes per second over the last `window` seconds.

A rate needs two samples: a connection seen for the first time has none (None, shown as "–"), rather than a
rate made up from its total over an unknown time. Samples are kept only for connections still live, at most
`MAX_SAMPLES` each, so the memory follows the node's connection limit, whoever polls and however often.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping

WINDOW_S = 5.0
MAX_SAMPLES = 16


@dataclasses.dataclass(frozen=True)
class Sample:
    at: float
    sent: int
    received: int


@dataclasses.dataclass(frozen=True)
class Rates:
    up: float | None  # bytes per second we sent it
    down: float | None  # bytes per second it sent us


class PeerRates:
    def __init__(self, window: float = WINDOW_S) -> None:
        self.window = window
        self._samples: dict[object, collections.deque[Sample]] = {}

    def update(self, counters: Mapping[object, tuple[int, int]], now: float) -> dict[object, Rates]:
        """`counters`: per live connection (any hashable key that names it while it lives), its total bytes
        (sent, received). Returns each one's rates; forgets the connections not given."""
        for gone in set(self._samples) - set(counters):
            del self._samples[gone]
        rates: dict[object, Rates] = {}
        for key, (sent, received) in counters.items():
            samples = self._samples.setdefault(key, collections.deque(maxlen=MAX_SAMPLES))
            if samples and (samples[-1].sent > sent or samples[-1].received > received):
                samples.clear()  # counters went back: another connection under the same key
            if not samples or now > samples[-1].at:
                samples.append(Sample(now, sent, received))
            # The oldest sample still within the window, or the newest one before it (the window's baseline).
            while len(samples) > 2 and samples[1].at <= now - self.window:
                samples.popleft()
            base, last = samples[0], samples[-1]
            elapsed = last.at - base.at
            if elapsed <= 0:
                rates[key] = Rates(None, None)
            else:
                rates[key] = Rates((last.sent - base.sent) / elapsed, (last.received - base.received) / elapsed)
        return rates


def totals(rates: Iterable[Rates]) -> Rates:
    """The sum of known rates (None when none is known yet)."""
    known = [r for r in rates if r.up is not None and r.down is not None]
    if not known:
        return Rates(None, None)
    return Rates(sum(r.up or 0.0 for r in known), sum(r.down or 0.0 for r in known))
