"""`swarmproxy lab cluster-scale`: the cluster overlay mode at 100 to 2,600 agents, by simulation (issue 40, 4).

Each scale point is one push simulated by `bench.sim.engine` (the product's fetch, overlay, division and throttle
cores on a virtual clock, over the link model of `bench.sim.links`: host up, rack up, DC core, rack down, host
down). Racks of --per-rack hosts in one datacenter; every host capped at --cap each way; the pusher off the DC
core at --seeder-up. Per point: the makespan and the finish times' p50/p99 (from the push), the per-host rate
(size / finish time), Babenhauserheide's bound (`bench.cluster_bound`), the seeder's upload ratio and the copies
that entered each rack.

Goals checked (issue 40): the median per-host rate at 1,200 and 2,600 agents at least 0.95 x the rate at 100
(Tekel: "almost the same"); at 2,600 agents, p50 <= 1.1 x size / cap and p99 <= 1.5 x p50 (Kraken: 3 GB to 2,600
hosts at 300 MB/s each, p50 10 s, p99 18 s).

Honesty: a point is VALID only if it took at most --budget s of wall time (10 minutes), every agent verified every
block and the bytes the agents verified add up to agents x size. Wall time is read only for that check and for
--give-up: the model runs on its own clock.

--crosscheck simulates instead the topology of `python -m bench.cluster_netns --racks 3 --per-rack 4` (rack 1's
uplink at 2 MB/s each way, everything else unshaped) and prints its makespan beside the bound, for comparison
with the median of real-process runs of that command; --tekel, Tekel's figure 8 as `swarmproxy lab cluster-tekel`
runs it (racks of 5, 4 + the seeder, 7 and 1 hosts, every host's link and every rack's uplink at --link each way,
32 MiB; the pusher says its rack), for comparison with the median of that lab's runs of the product (`--stages
stealing`) with the same --link and --size.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics
import sys
import time

from bench.lab.cluster_tekel import LINK as TEKEL_LINK
from bench.lab.cluster_tekel import RACK_SIZES as TEKEL_RACKS
from bench.lab.cluster_tekel import SEEDER_RACK as TEKEL_SEEDER_RACK
from bench.lab.honesty import percentile
from bench.sim.engine import Result, Simulation
from bench.sim.topology import Setup, bound
from swarm.content.sizes import parse_rate, parse_size
from swarm.core.throttle import WIRE_OVERHEAD

__all__ = ["main"]

BUDGET = 600.0  # s of wall time per scale point (the ten minutes)
RATE_GOAL = 0.95  # per-host rate at 1,200 and 2,600 agents / at 100
P50_GOAL, P99_GOAL = 1.1, 1.5  # p50 / (size / cap), p99 / p50 at 2,600 agents
RACKS_SAID = 5  # racks up to which each rack's finish is printed (all of them are in report.json)
NETNS_RACK_RATE = 2_000_000  # bench.cluster_netns's --uplink default: rack 1's uplink, each way
TEKEL_WHAT = "swarmproxy lab cluster-tekel's topology (Tekel's figure 8), simulated"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarmproxy lab cluster-scale", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=pathlib.Path, metavar="DIR", help="output directory (lab-cluster-scale)")
    parser.add_argument("--quick", action="store_true", help="20 and 40 agents, 300 MB: seconds")
    parser.add_argument("--agents", metavar="N1,N2,...", help="scale points (100,200,600,1200,2600)")
    parser.add_argument("--size", default="3G", metavar="BYTES", help="file size; G, M, k: powers of 1000 (3G)")
    parser.add_argument("--cap", default="300M", metavar="RATE", help="every host's link each way, bytes/s (300M)")
    parser.add_argument("--per-rack", type=int, default=20, metavar="N", help="hosts per rack (20)")
    parser.add_argument("--rack-link", metavar="RATE",
                        help="every rack's uplink and downlink, bytes/s (6 x --cap: 3.3:1 oversubscribed at 20)")
    parser.add_argument("--core", metavar="RATE", help="the DC core, bytes/s (not a limit)")
    parser.add_argument("--seeder-up", metavar="RATE", help="the pusher's uplink, bytes/s (--cap)")
    parser.add_argument("--block-size", metavar="BYTES", help="block size (the product's choice for --size)")
    parser.add_argument("--host-capacity", metavar="RATE",
                        help="start the agents with this host capacity: the throttle (cluster.throttle) then caps "
                             "uploads at it minus --reserve (default: none, as the agent's default)")
    parser.add_argument("--reserve", type=float, default=0.2, help="the throttle's reserve (0.2)")
    parser.add_argument("--budget", type=float, default=BUDGET, metavar="S",
                        help="wall seconds a point may take and stay VALID (600: the issue's ten minutes)")
    parser.add_argument("--give-up", type=float, default=3600.0, metavar="S",
                        help="wall seconds after which a point is stopped unfinished (3600): a point over the "
                             "budget still runs to the end, so that its figures are known, and is marked INVALID")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--crosscheck", action="store_true",
                        help="simulate bench.cluster_netns --racks 3 --per-rack 4 instead (see above)")
    parser.add_argument("--redraw", action="store_true",
                        help="recompute the goals in --out's report.json, and write its summary.txt and figure.png "
                             "again (no push)")
    parser.add_argument("--gaps-only", action="store_true",
                        help="only set each point up and print its entry gaps: rack representants that the fetch's "
                             "peer cap (64) leaves without a server of some of their blocks (seconds, no push)")
    parser.add_argument("--host-rate", default="100M", metavar="RATE",
                        help="--crosscheck: the hosts' unshaped links, bytes/s (100M)")
    parser.add_argument("--tekel", action="store_true",
                        help="simulate swarmproxy lab cluster-tekel's topology instead (see above)")
    parser.add_argument("--link", default=f"{TEKEL_LINK}", metavar="RATE",
                        help=f"--tekel: every link's rate, bytes/s each way ({TEKEL_LINK:,}: 10 Mbit/s)")
    parser.add_argument("--runs", type=int, default=1, metavar="N",
                        help="--tekel, --crosscheck: simulate N pushes, seeds --seed to --seed + N - 1 (each seed "
                             "draws other node ids, so other roles and trees, as real runs do), and give their "
                             "median (1)")
    parser.add_argument("--wire", type=float, default=None, metavar="F",
                        help=f"bytes every link carries per byte of payload (headers): --tekel {WIRE_OVERHEAD:.4f} "
                             "(TCP over Ethernet at the lab's MTU of 1500, 1514 / 1448), else 1 (left out)")
    return parser


def _rate(text: str | None) -> float | None:
    return None if text is None else float(parse_rate(text))


def _size(text: str) -> int:
    """Sizes here in powers of 1000 ("3G" is 3,000,000,000: Kraken's 3 GB at 300 MB/s is 10 s) unless "Mi"."""
    return parse_size(text) if "i" in text else int(float(parse_rate(text)))


def setups(args: argparse.Namespace) -> list[Setup]:
    """The scale points a command line asks for (pure)."""
    if args.wire is not None and args.wire < 1:
        raise SystemExit(f"swarmproxy lab cluster-scale: --wire {args.wire} is below 1 (a link carries each payload "
                         "byte and its headers)")
    seeds = range(args.seed, args.seed + max(1, args.runs))
    block = _size(args.block_size) if args.block_size else None
    if args.tekel:
        size = _size(args.size) if args.size != "3G" else 32 << 20  # swarmproxy lab cluster-tekel's default size
        link = _rate(args.link)
        # the lab's racks are numbered from 1, the simulator's from 0
        return [Setup(size, len(TEKEL_RACKS), max(TEKEL_RACKS), host_up=link, host_down=link, rack_up=link,
                      rack_down=link, seeder_up=link, rack_sizes=TEKEL_RACKS, seeder_rack=TEKEL_SEEDER_RACK - 1,
                      block_size=block, seed=seed, wire=WIRE_OVERHEAD if args.wire is None else args.wire)
                for seed in seeds]
    if args.crosscheck:
        size = _size(args.size) if args.size != "3G" else 32 << 20  # bench.cluster_netns's default size
        host = _rate(args.host_rate)
        return [Setup(size, 3, 4, host_up=host, host_down=host, rack_links={0: (NETNS_RACK_RATE, NETNS_RACK_RATE)},
                      block_size=block, seed=seed, wire=args.wire or 1.0) for seed in seeds]
    cap = _rate(args.cap)
    assert cap is not None
    size = _size("300M") if args.quick and args.size == "3G" else _size(args.size)
    per_rack = 10 if args.quick and args.per_rack == 20 else args.per_rack
    agents = [int(n) for n in args.agents.split(",")] if args.agents else [20, 40] if args.quick else \
        [100, 200, 600, 1200, 2600]
    rack = _rate(args.rack_link) or 6 * cap
    points = []
    for n in agents:
        if n < 2 or n % per_rack:
            raise SystemExit(f"swarmproxy lab cluster-scale: {n} agents is not a whole number of racks of {per_rack}")
        points.append(Setup(size, n // per_rack, per_rack, host_up=cap, host_down=cap, rack_up=rack, rack_down=rack,
                            core=_rate(args.core), seeder_up=_rate(args.seeder_up) or cap,
                            block_size=_size(args.block_size) if args.block_size else None,
                            throttle_host=_rate(args.host_capacity), reserve=args.reserve, seed=args.seed,
                            wire=args.wire or 1.0))
    return points


def summarise(setup: Setup, result: Result, wall: float, budget: float) -> dict:
    finish = result.finish
    done = [t for t in finish if math.isfinite(t)]
    size = setup.size
    complete = len(done) == setup.agents
    the_bound = bound(setup)
    verified_bytes = sum(result.held_bytes)
    p50 = percentile(finish, 50) if complete else None
    rates = sorted(size / t for t in done)
    problems = []
    if wall > budget:
        problems.append(f"took {wall:.0f} s of wall time, over the {budget:.0f} s budget")
    if not complete:
        problems.append(f"{setup.agents - len(done)} agents did not verify every block")
    if verified_bytes != setup.agents * size:
        problems.append(f"bytes verified {verified_bytes:,} != agents x size {setup.agents * size:,}")
    received = sum(sum(r.values()) for r in result.received)
    return {
        "agents": setup.agents, "racks": setup.racks, "setup": result.setup, "num_blocks": result.num_blocks,
        "wall_s": round(wall, 1), "virtual_s": round(result.virtual_end, 3), "complete": complete,
        "makespan_s": round(max(done), 3) if complete else None,
        "p50_s": None if p50 is None else round(p50, 3),
        "p99_s": round(percentile(finish, 99) or 0.0, 3) if complete else None,
        "per_host_rate_median": round(statistics.median(rates)) if complete else None,
        "bound": the_bound,
        "makespan_over_bound": round(max(done) / the_bound["seconds"], 4) if complete and the_bound["seconds"]
        else None,
        "seeder_ratio": round(result.seeder_sent / size, 4),
        "rack_uplink_copies": {"max": round(max(result.rack_in) / size, 4),
                               "mean": round(statistics.mean(result.rack_in) / size, 4)},
        "verified_bytes": verified_bytes, "agents_x_size": setup.agents * size,
        "verified_fraction": round(verified_bytes / (setup.agents * size), 4),
        "stalled_agents": result.stalled, "entry_gaps": result.entry_gaps,
        "received_over_needed": round(received / (setup.agents * size), 4),
        "roles": {role: result.roles.count(role) for role in ("dc", "rack", "member")},
        # Who uploaded: copies of the file each role's agents sent on average (ideally every agent near 1: a host
        # that sends less than it receives leaves its uplink idle while others are saturated).
        "upload_copies_by_role": {role: round(statistics.mean(
            sum(sent.values()) for sent, r in zip(result.sent, result.roles, strict=True) if r == role) / size, 3)
            for role in ("dc", "rack", "member") if role in result.roles},
        "received_by_level": {level: round(sum(r[level] for r in result.received) / (setup.agents * size), 4)
                              for level in ("rack", "dc", "outside")},
        "closes": result.closes, "events": result.events, "rate_recomputes": result.recomputes,
        "finish_s": [round(t, 3) if math.isfinite(t) else None for t in finish],
        # each rack's last agent: a rack that waits on another's uplink shows here
        "rack_finish_s": [round(max(finish[i] for i in setup.members(r)), 3)
                          if all(math.isfinite(finish[i]) for i in setup.members(r)) else None
                          for r in range(setup.racks)],
        "valid": not problems, "problems": problems,
    }


def goals(points: list[dict], cap: float | None) -> dict:
    """The issue's goals, from every point that completed; `*_valid` says whether the points it rests on were
    VALID (within the wall-time budget among others): a figure over budget is still a figure, said so."""
    out: dict = {}
    if cap is None:  # --tekel, --crosscheck: the runs' median, for the real runs' beside it
        done = [p for p in points if p["complete"]]
        if done:
            out["makespan_median_s"] = round(statistics.median(p["makespan_s"] for p in done), 3)
            out["makespan_over_bound_median"] = round(statistics.median(p["makespan_over_bound"] for p in done), 4)
        return out
    by_n = {p["agents"]: p for p in points if p["complete"]}
    base = by_n.get(100, {}).get("per_host_rate_median")
    for n in (1200, 2600):
        rate = by_n.get(n, {}).get("per_host_rate_median")
        out[f"rate_{n}_over_100"] = round(rate / base, 4) if rate and base else None
        out[f"rate_{n}_met"] = None if out[f"rate_{n}_over_100"] is None else out[f"rate_{n}_over_100"] >= RATE_GOAL
        if rate and base:
            out[f"rate_{n}_valid"] = by_n[n]["valid"] and by_n[100]["valid"]
    big = by_n.get(2600)
    if big and cap:
        ideal = big["setup"]["size"] / cap
        out["p50_over_size_cap_2600"] = round(big["p50_s"] / ideal, 4)
        out["p99_over_p50_2600"] = round(big["p99_s"] / big["p50_s"], 4)
        out["kraken_met"] = out["p50_over_size_cap_2600"] <= P50_GOAL and out["p99_over_p50_2600"] <= P99_GOAL
        out["kraken_valid"] = big["valid"]
    return out


def redraw(out: pathlib.Path) -> list[pathlib.Path]:
    """`out`/report.json with its goals recomputed, its summary.txt and figure.png again (a report written by an
    earlier version of this module keeps its points as they were measured)."""
    from bench.lab.report import write

    report = json.loads((out / "report.json").read_text())
    cap = report["points"][0]["setup"]["host_down"] if report["points"] and \
        not report["what"].startswith(("bench.cluster_netns", TEKEL_WHAT)) else None
    report["goals"] = goals(report["points"], cap)
    return write(out, report, text(report), draw)


def text(report: dict) -> str:
    lines = [f"swarmproxy lab cluster-scale ({report['command']})", report["what"], ""]
    lines.append(f"{'agents':>6} {'racks':>5} {'seed':>4} {'wall s':>7} {'makespan':>9} {'p50':>7} {'p99':>7} "
                 f"{'rate MB/s':>9} {'bound':>7} {'/bound':>6} {'seeder':>6} {'rack in':>7}  valid")
    for p in report["points"]:
        def f(v, w=7, d=2):
            return f"{v:>{w}.{d}f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"
        rate = p["per_host_rate_median"] / 1e6 if p["per_host_rate_median"] else None
        lines.append(f"{p['agents']:>6} {p['racks']:>5} {p['setup'].get('seed', 1):>4} {f(p['wall_s'], 7, 0)} "
                     f"{f(p['makespan_s'], 9)} "
                     f"{f(p['p50_s'])} {f(p['p99_s'])} {f(rate, 9, 1)} {f(p['bound']['seconds'])} "
                     f"{f(p['makespan_over_bound'], 6)} {f(p['seeder_ratio'], 6, 3)} "
                     f"{f(p['rack_uplink_copies']['max'], 7, 3)}  "
                     + ("VALID" if p["valid"] else "INVALID: " + "; ".join(p["problems"])))
    missing = report.get("points_planned", [])[len(report["points"]):]  # written in order, after every point
    if missing:
        lines.append(f"not run (yet): {', '.join(map(str, missing))} agents")
    lines.append("")
    for name, value in report["goals"].items():
        lines.append(f"{name}: {value}")
    return "\n".join(lines) + "\n"


def draw(pyplot, report: dict):
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    for p in report["points"]:
        finish = sorted(t for t in p["finish_s"] if t is not None)
        if finish:
            left.plot(finish, [(k + 1) / p["agents"] for k in range(len(finish))], label=f"{p['agents']} agents")
    left.set_xlabel("finish time from the push (s, virtual)")
    left.set_ylabel("fraction of agents done")
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    done = [p for p in report["points"] if p["makespan_s"]]
    xs = [p["agents"] for p in done]
    right.plot(xs, [p["makespan_s"] for p in done], "o-", label="makespan")
    right.plot(xs, [p["p50_s"] for p in done], "s-", label="p50")
    right.plot(xs, [p["bound"]["seconds"] for p in done], "k--", label="bound (Babenhauserheide)")
    right.set_xscale("log")
    right.set_xlabel("agents")
    right.set_ylabel("seconds (virtual)")
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    figure.suptitle(report["what"], fontsize=9)
    return figure


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    points = setups(args)
    out = args.out or pathlib.Path("lab-cluster-scale")

    def say(line: str) -> None:
        print(line, flush=True)

    if args.redraw:
        for path in redraw(out):
            say(f"wrote {path}")
        return 0
    if args.gaps_only:
        for setup in points:
            say(f"{setup.agents} agents ({setup.racks} racks of {setup.per_rack}): "
                f"{json.dumps(Simulation(setup).entry_gaps())}")
        return 0
    results = []
    for setup in points:
        say(f"{setup.agents} agents ({setup.racks} racks of {setup.per_rack}), {setup.size:,} bytes in "
            f"{setup.block:,}-byte blocks, bound {bound(setup)['seconds']:.2f} s")
        began = time.monotonic()  # wall time of the point, for the budget only: the model runs on its own clock
        sim = Simulation(setup, progress=say)

        def out_of_time(began: float = began) -> bool:
            return time.monotonic() - began > args.give_up

        result = sim.run(wall_budget=out_of_time)
        point = summarise(setup, result, time.monotonic() - began, args.budget)
        say(f"  -> makespan {point['makespan_s']} s, p50 {point['p50_s']} s, p99 {point['p99_s']} s, "
            f"{point['wall_s']} s of wall time{'' if point['valid'] else ', INVALID: ' + '; '.join(point['problems'])}")
        if setup.racks <= RACKS_SAID:
            say(f"     racks finish at {', '.join(f'{t} s' for t in point['rack_finish_s'])}")
        results.append(point)
        # Written after every point: a series cut short (the 2,600-agent point can take the better part of an hour
        # here) still leaves the points it finished, with `points_planned` saying what is missing.
        paths = _write(out, argv, args, points, results)
    say("\n" + (out / "summary.txt").read_text())
    say("wrote " + ", ".join(str(p) for p in paths))
    return 0 if all(p["valid"] for p in results) else 1


def _write(out: pathlib.Path, argv: list[str] | None, args: argparse.Namespace, points: list[Setup],
           results: list[dict]) -> list[pathlib.Path]:
    from bench.lab.report import write

    cap = None if args.crosscheck or args.tekel else _rate(args.cap)
    wire = f", {points[0].wire:.4f} bytes on the wire per byte of payload" if points[0].wire != 1 else ""
    what = (f"{TEKEL_WHAT}, every link {points[0].host_up / 1e6:g} MB/s each way, {points[0].size / (1 << 20):g} MiB"
            f"{wire}"
            if args.tekel else "bench.cluster_netns --racks 3 --per-rack 4, simulated" if cap is None else
            f"one DC, racks of {points[0].per_rack}, every host capped at {cap / 1e6:g} MB/s each way, "
            f"{points[0].size / 1e9:g} GB")
    report = {"scenario": "cluster-scale", "command": "swarmproxy lab cluster-scale " + " ".join(
        argv if argv is not None else sys.argv[1:]), "what": what,
        "points_planned": [p.agents for p in points], "points": results,
        "goals": goals(results, cap), "valid": all(p["valid"] for p in results) and len(results) == len(points)}
    return write(out, report, text(report), draw)


if __name__ == "__main__":
    sys.exit(main())
