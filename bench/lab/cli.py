"""`swarmproxy lab SCENARIO`: rerun Pack's experiments on this machine, side by side, and draw them.

Scenarios (each writes report.json, summary.txt and figure.png into --out):
  flashcrowd  100 KB file, load 1..20 clients/s: direct vs swarmproxy (Pack figs. 4.1/4.2)
  sweep       vary one of T, R, W, block size, linger, connection limit (figs. 4.3-4.5, 4.8, 4.9, 4.11),
              or ours: early (the crowd rule's delay), trust (quorum:2 against Pack's 'any'), discover (the
              privacy rule's --discover-size: 16Mi, the default, against 0, a lookup at every request)
  page        one 100 KB object, then ten 10 KB objects in parallel (figs. 4.6/4.7)
  largefile   30 MB, 100 clients at 1/s: swarmproxy vs libtorrent with the origin as web seed (table 4.1)
  mixed       Pack's future work: adaptive T/R/W vs the best fixed T/R/W of `sweep` (and the defaults) in one run,
              on far-but-fast, overloaded and flapping origins: median time and needless switches
  crowd-scale the flash crowd simulated at internet scale (100,000 clients at 1,000/s; --clients, --rate, --dht
              ours|mainline|both, --cross-check: 1,000 at 20/s against recorded real runs): the real download,
              fetch and trust cores on a virtual clock (bench/crowd_sim)
  cluster-scale  the cluster overlay mode at 100..2,600 agents, simulated on a virtual clock with the product's
              own cores (issue 40, scenario 4); its own options: `swarmproxy lab cluster-scale --help`
  cluster-tekel  Tekel's figure 8 experiment in network namespaces (tc tbf, 10 Mbit/s links): the cluster mode
              stage by stage, libtorrent unorganised and the bound side by side (issue 40, scenario 1)
  cluster-shared a competing TCP flow on a rack link and on the DC link during a push: the reserve it keeps (2)
  cluster-late   one rack of Tekel's topology joins 5 s late: does it finish in time from its own start (3)
              (these three need root and namespaces; their own options: `swarmproxy lab cluster-tekel --help`)

Every client is a full node (proxy + block engine + DHT) on its own 127.x.y.z address, in this process or
spread over --workers processes that share one emulated network; the origin is throttled like Pack's
(256 KB/s shared, 256 connections). --quick runs a small smoke-size version. A run during which this
machine's CPU, not the system under test, was the limit (in any of its processes) is marked INVALID.

The defaults are sized for a 2-core machine, where about 50 clients arriving in 10 s stay valid in one
process: loads 1,2,5 for 10 s each (page: 1,2,3 for 4 s, as its clients fetch eleven objects each),
sweeps at 5/s for 10 s. Pack's full scale, `--loads 1,5,10,20 --duration 50` (1,000 clients at 20/s), is CPU-bound
in one process and stays valid with --workers 2 on a 2-core machine that is otherwise idle, just (timers
15-22 ms late at p99 against a 25 ms limit; about 7 minutes for the 20/s load, most of it the direct
clients' tail).
largefile keeps Pack's 100 clients: they arrive at 1/s, in one worker process per CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import pathlib
import sys
from typing import TYPE_CHECKING

from proxy.errors import ConfigError
from swarm.content.sizes import parse_rate, parse_size

from .. import extra

if TYPE_CHECKING:
    from .scenarios import Plan

SCENARIOS = ("flashcrowd", "sweep", "page", "largefile", "mixed", "crowd-scale", "cluster-scale", "cluster-tekel",
             "cluster-shared", "cluster-late")
# The cluster scenarios on network namespaces (issue 40, scenarios 1-3): real agents, options of their own.
NETNS_SCENARIOS = {"cluster-tekel": "bench.lab.cluster_tekel", "cluster-shared": "bench.lab.cluster_links",
                   "cluster-late": "bench.lab.cluster_links"}


def main(argv: list[str] | None = None) -> int:
    """rerun the thesis experiments here: direct vs swarmproxy vs libtorrent

    `swarmproxy lab ARGS` calls this with ARGS: proxy/cli.py finds it through the entry point that pyproject.toml
    declares in the group "swarmproxy.commands", and shows this docstring's first line in `swarmproxy --help`.
    The proxy never imports bench by name, so it stands without the lab. Every `swarmproxy` command line loads
    this module for that first line, so it imports little; the scenarios load once the arguments are read.
    """
    from bench import stay_private

    stay_private()  # before anything starts: the lab's nodes, and every process they start, stay off the internet
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["cluster-scale"]:  # a simulation, with options of its own (no emulated network, no nodes)
        failed = extra.missing()
        if failed:
            print(extra.message(failed), file=sys.stderr)
            return 1
        from bench.sim import lab as cluster_scale

        return cluster_scale.main(argv[1:])
    if argv[:1] and argv[0] in NETNS_SCENARIOS:
        failed = extra.missing()
        if failed:
            print(extra.message(failed), file=sys.stderr)
            return 1
        import importlib

        return importlib.import_module(NETNS_SCENARIOS[argv[0]]).main(argv[1:], scenario=argv[0])
    args = build_parser().parse_args(argv)
    failed = extra.missing()  # checked before any run: a figure is drawn last, after minutes of work
    if failed:
        print(extra.message(failed), file=sys.stderr)
        return 1
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130


def build_parser(prog: str = "swarmproxy lab") -> argparse.ArgumentParser:
    from .sweeps import SWEEPS

    lab = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n", 1)[1],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    lab.add_argument("scenario", choices=SCENARIOS, help="which experiment to run")
    lab.add_argument("--out", type=pathlib.Path, metavar="DIR",
                     help="output directory (default: lab-SCENARIO in the current directory)")
    lab.add_argument("--quick", action="store_true", help="a small smoke-size run (seconds, not minutes)")
    lab.add_argument("--loads", metavar="L1,L2,...",
                     help="arrival rates in clients/s (default 1,2,5, page 1,2,3; Pack's 1,5,10,20)")
    lab.add_argument("--duration", type=float, metavar="S",
                     help="seconds of arrivals per load: clients = load x duration (default 10, page 4; Pack's "
                          "50: 1,000 clients at 20/s)")
    lab.add_argument("--clients", type=int, metavar="N",
                     help="clients per run, overriding --duration (mixed: users per arm, 6)")
    lab.add_argument("--size", metavar="BYTES",
                     help="file size; k, M: powers of 1024 (default 100000; largefile 30000000)")
    lab.add_argument("--delay", type=float, default=25.0, metavar="MS", help="one-way delay between hosts (25)")
    lab.add_argument("--node-rate", default="1.25M", metavar="BYTES",
                     help="each host's upload and download cap in bytes/s; k, M: powers of 1000 (default 1.25M = "
                          "10 Mbit/s)")
    lab.add_argument("--origin-rate", default="256k", metavar="BYTES",
                     help="origin bandwidth in total, bytes/s (256k = 256000)")
    lab.add_argument("--origin-connections", type=int, default=256, metavar="N",
                     help="origin's concurrent responses (256)")
    lab.add_argument("--param", choices=sorted(SWEEPS), default="T", help="sweep: the parameter to vary (T)")
    lab.add_argument("--values", metavar="V1,V2,...", help="sweep: its values (default: Pack's)")
    lab.add_argument("--rate", type=float, metavar="PER_S", help="sweep/largefile: arrival rate (5; 1)")
    lab.add_argument("--origin-plugin", action=argparse.BooleanOptionalAction,
                     help="the origin runs server_plugin: it publishes manifests (the trust a .torrent gives "
                          "libtorrent) and asks clients to swarm when busy (default: on for largefile only)")
    lab.add_argument("--origin-busy", type=int, default=2, metavar="N",
                     help="with --origin-plugin: GETs in flight from which the origin asks clients to swarm (2)")
    lab.add_argument("--fetch-peers", type=int, metavar="N",
                     help="peers each swarmproxy download connects to (16)")
    lab.add_argument("--workers", type=int, metavar="N",
                     help="worker processes holding the swarmproxy nodes (and their users), on one shared "
                          "emulated network; 0 runs everything in this process (default: one per CPU for "
                          "largefile, whose 100 nodes trade blocks at once; 0 otherwise)")
    lab.add_argument("--transport", choices=("tcp", "quic", "both"), default="tcp", help="peer transport (tcp)")
    lab.add_argument("--seed", type=int, default=1, help="random seed of the arrivals (1)")
    lab.add_argument("--dht", choices=("ours", "mainline", "both"),
                     help="crowd-scale: the DHT's latency model (ours)")
    lab.add_argument("--cross-check", action="store_true",
                     help="crowd-scale: 1,000 clients at 20/s against the recorded real flashcrowd runs")
    return lab


def _csv(text: str, convert) -> list:
    try:
        return [convert(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise ConfigError(f"cannot read {text!r}: {exc}") from None


def plan(args: argparse.Namespace) -> Plan:
    """The runs a command line asks for (pure: the CI test checks plans without running them)."""
    from .crowd_nodes import CrowdParams
    from .scenarios import Plan
    from .sweeps import SWEEPS, amount

    quick = args.quick
    size = amount(parse_size, "--size", args.size) if args.size else \
        (30_000_000 if args.scenario == "largefile" else 100_000)
    node_rate = amount(parse_rate, "--node-rate", args.node_rate)
    base = CrowdParams(size=size, delay=args.delay / 1000, node_up=node_rate,
                       node_down=node_rate, origin_rate=amount(parse_rate, "--origin-rate", args.origin_rate),
                       origin_connections=args.origin_connections, transport=args.transport, seed=args.seed,
                       origin_plugin=bool(args.origin_plugin if args.origin_plugin is not None
                                          else args.scenario == "largefile"),
                       origin_busy=args.origin_busy,
                       fetch_peers=args.fetch_peers or 16,
                       workers=args.workers if args.workers is not None else
                       (os.cpu_count() or 1) if args.scenario == "largefile" and not quick else 0)
    if args.delay < 0 or args.origin_connections < 1 or args.origin_busy < 1 or \
            (args.clients is not None and args.clients < 1) or \
            (args.fetch_peers is not None and args.fetch_peers < 1) or \
            (args.workers is not None and args.workers < 0):
        raise ConfigError("--delay and --workers must be >= 0, --origin-connections, --origin-busy, --clients and "
                          "--fetch-peers >= 1")
    # a page client fetches eleven objects: here even 20 page clients at 5/s were CPU-bound in one process
    duration = args.duration or (4.0 if quick or args.scenario == "page" else 10.0)

    def clients(load: float) -> int:
        return args.clients or max(2, round(load * duration))

    if args.scenario in ("flashcrowd", "page"):
        default = [5.0] if quick else ([1.0, 2.0, 3.0] if args.scenario == "page" else [1.0, 2.0, 5.0])
        loads = _csv(args.loads, float) if args.loads else default
        if not loads or min(loads) <= 0:
            raise ConfigError("--loads must list rates > 0")
        if args.scenario == "page":
            base.objects = [10_000] * 10
        runs = [(f"{load:g}/s", dataclasses.replace(base, rate=load, clients=clients(load))) for load in loads]
        return Plan(args.scenario, base, runs)
    if args.scenario == "sweep":
        field, convert, pack = SWEEPS[args.param]
        values = _csv(args.values, str) if args.values else (pack[:2] if quick else pack)
        rate = args.rate or 5.0
        base = dataclasses.replace(base, rate=rate, clients=clients(rate), direct=False)
        runs = []
        for value in values:
            try:
                setting = convert(value)
            except ValueError:
                raise ConfigError(f"--values: {value!r} is not a valid {args.param}") from None
            runs.append((f"{args.param}={value}", dataclasses.replace(base, **{field: setting})))
        return Plan("sweep", base, runs, swept=args.param)
    rate = args.rate or 1.0
    count = args.clients or (6 if quick else 100)
    size = size if args.size or not quick else 2_000_000
    base = dataclasses.replace(base, size=size, rate=rate, clients=count, direct=False, linger=0.0,
                               block_size="64Ki")
    return Plan("largefile", base, [(f"{count} clients", base)])


def run(args: argparse.Namespace) -> int:
    from . import report as rep
    from .scenarios import draw, execute, text
    from .workers import WorkerError, raise_file_limit

    if args.scenario == "mixed":  # its own runner: arms side by side, not a list of crowd runs
        from . import mixed

        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
        logging.getLogger("swarmproxy").setLevel(logging.ERROR)
        raise_file_limit()
        return mixed.run(args, lambda line: print(line, flush=True))
    if args.scenario == "crowd-scale":  # simulated: no emulated network, no nodes to start
        from bench.crowd_sim import lab as crowd_scale

        return crowd_scale.run(args, lambda line: print(line, flush=True))
    try:
        the_plan = plan(args)
    except ConfigError as exc:
        print(f"swarmproxy lab: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("swarmproxy").setLevel(logging.ERROR)  # a thousand nodes' notices would drown the progress
    raise_file_limit()
    out = args.out or pathlib.Path(f"lab-{args.scenario}")

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        report = execute(the_plan, say)
    except OSError as exc:
        print(f"swarmproxy lab: cannot set up the emulated network: {exc}", file=sys.stderr)
        return 1
    except WorkerError as exc:
        print(f"swarmproxy lab: {exc}", file=sys.stderr)
        return 1
    problems = rep.check_report(report)
    if problems:
        report["consistency_problems"] = problems
    summary = text(report)
    paths = rep.write(out, report, summary, draw)
    print("\n" + summary)
    print("wrote " + ", ".join(str(p) for p in paths))
    for problem in problems:
        print(f"inconsistent: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
