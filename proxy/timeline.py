"""The last hour of the proxy, in buckets, for the status page's plots (`GET /_swarm/timeline`): body bytes by
source (origin, peers, BitTorrent) and transitions by cause. A sans-I/O core: every call takes `now` (seconds
since the epoch, the caller's clock), so the tests step a fake clock.

The ring is bounded by time, not by traffic: at most `span // bucket` buckets, each a fixed set of counters plus
one per transition cause, and the causes are the download core's few (T, R, hint, crowd, died, fetching); a cause
beyond `MAX_CAUSES` is counted as `other`, so a bug elsewhere cannot grow it either.
"""

from __future__ import annotations

import collections
import dataclasses

SOURCES = ("origin", "peers", "bittorrent")
BUCKET_S = 10  # one point every 10 s: 360 in the hour, a plot's width in pixels or less
SPAN_S = 3600
MAX_CAUSES = 16
OTHER = "other"


@dataclasses.dataclass
class Bucket:
    start: int  # seconds since the epoch, a multiple of the bucket's length
    sources: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    transitions: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


class Timeline:
    def __init__(self, bucket_s: int = BUCKET_S, span_s: int = SPAN_S) -> None:
        if bucket_s <= 0 or span_s < bucket_s:
            raise ValueError(f"a timeline needs 0 < bucket ({bucket_s} s) <= span ({span_s} s)")
        self.bucket_s = bucket_s
        self.span_s = span_s
        self.size = span_s // bucket_s
        self._buckets: collections.deque[Bucket] = collections.deque(maxlen=self.size)
        self._causes: set[str] = set()

    def add_bytes(self, source: str, count: int, now: float) -> None:
        """`count` body bytes from `source` (one of SOURCES) reached a client at `now`."""
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}: one of {', '.join(SOURCES)}")
        if count > 0:
            self._bucket(now).sources[source] += count

    def add_transition(self, cause: str, now: float) -> None:
        """A download switched from the origin to the swarm at `now`, for `cause`."""
        if cause not in self._causes:
            if len(self._causes) >= MAX_CAUSES:
                cause = OTHER
            self._causes.add(cause)
        self._bucket(now).transitions[cause] += 1

    def shown(self, now: float) -> dict[str, object]:
        """The hour up to `now` as columns, oldest first, one value per bucket (zeros where nothing happened):
        `start` is the first bucket's start, `bytes` each source's bytes, `transitions` each cause's count."""
        last = self._index(now)
        first = last - self.size + 1
        by_index = {b.start // self.bucket_s: b for b in self._buckets if first <= b.start // self.bucket_s <= last}
        empty = Bucket(0)
        column = [by_index.get(i, empty) for i in range(first, last + 1)]
        causes = sorted({cause for b in column for cause in b.transitions})
        return {
            "bucket_s": self.bucket_s,
            "span_s": self.span_s,
            "start": first * self.bucket_s,
            "now": now,
            "bytes": {source: [b.sources[source] for b in column] for source in SOURCES},
            "transitions": {cause: [b.transitions[cause] for b in column] for cause in causes},
        }

    def _index(self, now: float) -> int:
        return int(now // self.bucket_s)

    def _bucket(self, now: float) -> Bucket:
        start = self._index(now) * self.bucket_s
        if self._buckets and self._buckets[-1].start == start:
            return self._buckets[-1]
        if self._buckets and self._buckets[-1].start > start:
            # The wall clock went back (NTP, a suspended machine): count it in the newest bucket rather than
            # rewrite the past; the plot is of the last hour, and a second's skew does not show.
            return self._buckets[-1]
        bucket = Bucket(start)
        self._buckets.append(bucket)  # the deque's bound drops the oldest
        return bucket
