"""The lab and the benchmarks. Nothing they start joins the public network: `PRIVATE_NETWORK_ENV` holds for every
bench run as `python -m bench.…` (set here, as runpy imports this package before the module it runs) and for
`swarmproxy lab` (set by `bench.lab.cli.main`), and for every process those start (`bittorrent.settings`).

Importing the package does not set it: `swarmproxy run` loads the lab's entry point to describe it in its
`--help`, and a variable set then would have kept every installed node off the public network."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from bittorrent.settings import PRIVATE_NETWORK_ENV


def run_as_a_bench(argv: Sequence[str]) -> bool:
    """Whether this interpreter's command line (`sys.orig_argv`) runs a module of this package: `python -m bench.…`
    (a `-m bench…` among a script's own arguments also counts: the error is on the private side)."""
    args = list(argv)
    if "-m" in args[1:]:
        index = args.index("-m", 1)
        return index + 1 < len(args) and args[index + 1].split(".")[0] == "bench"
    return any(arg == "-mbench" or arg.startswith("-mbench.") for arg in args[1:])


def stay_private() -> None:
    """Keep this process, and every process it starts, off the public network."""
    os.environ[PRIVATE_NETWORK_ENV] = "1"


if run_as_a_bench(getattr(sys, "orig_argv", ())):
    stay_private()
