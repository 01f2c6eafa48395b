"""For the lab only: switch off the features Tekel measured one after another (`swarmproxy lab cluster-tekel`).

Tekel's thesis (chapter 5) adds, one at a time: throttle groups only (an unorganised swarm whose uploads go
through a group per level), + the overlay with representants, + work division, + work stealing. The agent and
the pusher read `$SWARMPROXY_CLUSTER_LAB_STAGE` once, at import, to run as one of those stages:

| value | who talks to whom | what a served peer is shown | START / nearest first, stall stealing |
|---|---|---|---|
| `throttle` | everyone with everyone (every provider announced) | every block | off |
| `overlay` | the overlay's groups (representants carry bytes across levels) | every block | off |
| `division` | the overlay's groups | its share of the entry plan | off |
| `stealing` (unset: the default) | the overlay's groups | its share, everything once stalled | on |

Throttle groups are on in every stage (they limit only with capacities given). Unset, the product runs as
always; nothing but the lab sets it. An unknown value is an error, not a silent default.
"""

from __future__ import annotations

import os

from cluster.errors import ConfigError

__all__ = ["LAB_STAGE_ENV", "STAGES", "Stage", "stage"]

LAB_STAGE_ENV = "SWARMPROXY_CLUSTER_LAB_STAGE"
STAGES = ("throttle", "overlay", "division", "stealing")  # in Tekel's order; the last is the product


class Stage:
    def __init__(self, name: str) -> None:
        if name not in STAGES:
            raise ConfigError(f"${LAB_STAGE_ENV}={name!r}: expected one of {', '.join(STAGES)}")
        self.name = name
        rank = STAGES.index(name)
        self.overlay = rank >= STAGES.index("overlay")  # talk within the overlay's groups only
        self.division = rank >= STAGES.index("division")  # show a served peer its share of the entry plan
        self.stealing = rank >= STAGES.index("stealing")  # START, nearest first, a stalled member shown all


def stage() -> Stage:
    return Stage(os.environ.get(LAB_STAGE_ENV) or STAGES[-1])
