"""A lower bound on the makespan of a push (Babenhauserheide 2008, §3.0.2), as a pure function.

One seeder holds a file of F bytes; N receivers want it. Whatever the algorithm, the push cannot end before

* `F / C_s`: the seeder has to upload every byte at least once (its upload C_s);
* `F / min D_i`: the slowest receiver has to download every byte (download D_i);
* `N·F / (C_s + Σ U_i)`: N copies have to be uploaded by someone, the seeder and the receivers together (uploads
  U_i) — Babenhauserheide's "effective distribution phase" at the network's total rate;
* `bytes_l / cap_l` for every link l of the topology that some bytes must cross: a rack uplink, for instance,
  carries at least one copy of the file into a rack that has none (F bytes), whatever else it carries;

plus the start-up pipeline: a receiver can pass a block on only once it holds it, so the first blocks take at
least `log2(N) · block / rate` to fan out to everybody (his "Anfangsphase", with the per-host rate; nothing when
host rates are unlimited). The bound is the largest of the four terms plus that pipeline time.

Assumptions: fluid flow (no protocol or header overhead, no slow start), rates constant for the whole push,
every link's capacity usable in full (pass the capacity left after a reserve if the push may only use that), and
the pipeline term counted once, on top (it overlaps the other phases only in part, so the sum is still a bound
to within one block time; Babenhauserheide adds the phases the same way). A rate of None is unlimited.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Link", "makespan_bound"]


@dataclass(frozen=True)
class Link:
    name: str
    bytes: float  # the least that must cross it
    capacity: float  # bytes/s


def makespan_bound(size: float, receivers: int, *, seeder_upload: float | None = None,
                   downloads: Sequence[float | None] = (), uploads: Sequence[float | None] = (),
                   links: Sequence[Link] = (), block_size: float = 0) -> dict:
    """The bound in seconds, which term sets it (`limit`) and every term (seconds; None when unlimited)."""
    if size < 0 or receivers < 0:
        raise ValueError("size and receivers must be >= 0")
    terms: dict[str, float | None] = {}
    terms["seeder upload"] = None if seeder_upload is None else size / seeder_upload
    finite_downloads = [d for d in downloads if d is not None]
    terms["slowest download"] = size / min(finite_downloads) if finite_downloads else None
    total_upload = None if seeder_upload is None or len(uploads) < receivers or any(u is None for u in uploads) \
        else seeder_upload + sum(u for u in uploads if u is not None)
    terms["total upload"] = None if total_upload is None else receivers * size / total_upload
    for link in links:
        terms[link.name] = link.bytes / link.capacity
    host_rates = [r for r in (seeder_upload, *uploads, *downloads) if r is not None]
    pipeline = 0.0
    if host_rates and receivers > 1 and block_size:
        pipeline = math.log2(receivers) * block_size / min(host_rates)
    finite = {name: t for name, t in terms.items() if t is not None}
    limit = max(finite, key=finite.__getitem__) if finite else "none"
    seconds = (finite[limit] if finite else 0.0) + pipeline
    return {"seconds": round(seconds, 4), "limit": limit, "pipeline_s": round(pipeline, 4),
            "terms": {name: None if t is None else round(t, 4) for name, t in terms.items()}}
