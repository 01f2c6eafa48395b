"""`swarmproxy lab cluster-shared` and `swarmproxy lab cluster-late`: issue 40's scenarios 2 and 3, in network
namespaces with `tc tbf` (`bench.cluster_netns`), real agents and a real redis (the production setup: TLS, an ACL
user; every push signed).

cluster-shared: a push shares its links with plain TCP flows. Two racks of 3 agents; rack 1's uplink shaped at
--rack-link (4 MB/s) each way, the pusher behind a DC link of its own into the core at --dc-link (2 MB/s). One
background TCP flow runs from the core into rack 1, across its downlink, another from beside the pusher into the
core, across the DC link, both from before the push to its end. The operator gives each sender its share of
the links it crosses as its capacity (as tests/cluster/test_netns.py does): the pusher the whole DC link and half
of rack 1's downlink (--upload-rate: the smaller, less the reserve), rack 2's agents a quarter of it each for
their DC level (--dc-capacity; the throttle takes the reserve off). Measured on each link, over the sampling
intervals (0.2 s) in which the push sent at least a quarter of the link's rate and the link was full (90 % of its
rate): the background flow's share of the link against the reserve it is entitled to (`cluster.throttle.RESERVE`,
20 %). Goal: at least 90 % of the reserve. Intervals where the link had room do not count: there the push was not
what held the flow back (a CPU-starved receiver once took 0.08 of the link beside a push at 0.51).

cluster-late: Tekel's topology of `swarmproxy lab cluster-tekel` (racks of 5, 4 + the seeder, 7 and 1 hosts, every
link 10 Mbit/s), every feature on; the agents of one rack (--late-rack, 3: the biggest) start --late-by s (5)
after the push is published (Kraken's issue 244: a late rack must not starve). Goal: the late rack's last agent
finishes within 1.25 x the others' makespan, counted from when its agents were started.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from bench.background_flow import BackgroundFlow
from bench.cluster_netns import MiB, Topology, write_payload
from bench.lab.cluster_runs import PushSetup, push_once
from bench.lab.cluster_tekel import LINK, execute, topology_for
from bench.link_meters import SAMPLE_EVERY, LinkSampler
from cluster.throttle import RESERVE
from swarm.content.sizes import parse_rate, parse_size

RESERVE_GOAL = 0.9  # of the reserve, kept by the background flow where the link was full
LATE_GOAL = 1.25  # the late rack's time from its start / the others' from the push
FULL = 0.9  # of a link's rate: an interval that carried this much had no room left
PUSH_FLOOR = 0.25  # of a link's rate: an interval in which the push sent less is not the push's


def build_parser(scenario: str) -> argparse.ArgumentParser:
    description = __doc__.split("\n\n")[1 if scenario == "cluster-shared" else 2]
    parser = argparse.ArgumentParser(prog=f"swarmproxy lab {scenario}", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=pathlib.Path, metavar="DIR", help=f"output directory (lab-{scenario})")
    parser.add_argument("--quick", action="store_true", help="4 MiB, one run: a smoke run of about a minute")
    parser.add_argument("--runs", type=int, default=3, metavar="N", help="pushes, one after the other (3)")
    parser.add_argument("--no-secure", dest="secure", action="store_false",
                        help="plain redis instead of the production setup (TLS, ACL user)")
    parser.add_argument("--keep", type=pathlib.Path, metavar="DIR", help="keep the agents' and redis's logs here")
    parser.add_argument("--redraw", action="store_true",
                        help="write --out's summary.txt and figure.png again from its report.json (no run)")
    if scenario == "cluster-shared":
        parser.add_argument("--size", default="16Mi", metavar="BYTES", help="file size (16Mi)")
        parser.add_argument("--rack-link", default="4M", metavar="RATE", help="rack 1's uplink, bytes/s each way (4M)")
        parser.add_argument("--dc-link", default="2M", metavar="RATE", help="the pusher's DC link, bytes/s (2M)")
    else:
        parser.add_argument("--size", default="32Mi", metavar="BYTES", help="file size (32Mi)")
        parser.add_argument("--late-rack", type=int, default=3, metavar="R", help="the rack that comes late (3)")
        parser.add_argument("--late-by", type=float, default=5.0, metavar="S",
                            help="seconds after the push's publication (5; --quick: 2, the push being short)")
    return parser


def reserve_kept(link: list[tuple[float, int]], flow: BackgroundFlow, rate: float, start: float, end: float) -> dict:
    """On one link, between monotonic `start` and `end`: the intervals where the push sent >= PUSH_FLOOR of the
    rate (its bytes: the link's less the background flow's), and of those the ones where the link was full; the
    background flow's share of the link in each set, and in the full ones against the reserve."""
    busy, full = [], []
    for (t0, n0), (t1, n1) in zip(link, link[1:]):
        if t0 < start or t1 > end or t1 <= t0:
            continue
        background = flow.received_at(t1) - flow.received_at(t0)
        if (n1 - n0 - background) / (t1 - t0) >= PUSH_FLOOR * rate:
            busy.append((t1 - t0, n1 - n0, background))
            if n1 - n0 >= FULL * rate * (t1 - t0):
                full.append((t1 - t0, n1 - n0, background))

    def share(intervals: list, part) -> float | None:
        seconds = sum(s for s, _, _ in intervals)
        return round(sum(part(n, b) for _, n, b in intervals) / (rate * seconds), 4) if seconds else None

    flow_full = share(full, lambda n, b: b)
    return {"busy_s": round(sum(s for s, _, _ in busy), 2), "full_s": round(sum(s for s, _, _ in full), 2),
            "background_share_busy": share(busy, lambda n, b: b), "push_share_busy": share(busy, lambda n, b: n - b),
            "background_share_full": flow_full, "push_share_full": share(full, lambda n, b: n - b),
            "reserve": RESERVE, "kept_of_reserve": None if flow_full is None else round(flow_full / RESERVE, 4),
            "met": None if flow_full is None else flow_full >= RESERVE_GOAL * RESERVE}


def run_shared(args: argparse.Namespace, directory: pathlib.Path, say) -> dict:
    size = 4 * MiB if args.quick and args.size == "16Mi" else parse_size(args.size)
    rack_link, dc_link = float(parse_rate(args.rack_link)), float(parse_rate(args.dc_link))
    topology = Topology(racks=2, per_rack=3, uplink=rack_link, shaped=(1,), seeder_link=dc_link)
    upload = int(min(dc_link, rack_link / 2) * (1 - RESERVE))
    setup = PushSetup(secure=args.secure, agent_args={2: ["--dc-capacity", str(int(rack_link // 4))]},
                      push_args=["--upload-rate", str(upload)])
    report: dict = {"scenario": "cluster-shared", "what": (
        f"2 racks x 3 agents, rack 1's uplink {rack_link / 1e6:g} MB/s, the pusher's DC link {dc_link / 1e6:g} "
        f"MB/s, a background TCP flow on each; {size / MiB:g} MiB"), "size": size, "rack_link": rack_link,
        "dc_link": dc_link, "pusher_upload_rate": upload, "runs": []}
    try:
        topology.build()
        payload = directory / "payload.bin"
        write_payload(payload, size)
        for k in range(1, (1 if args.quick else args.runs) + 1):
            say(f"run {k}: background flows on rack 1's downlink and the DC link, pushing {size / MiB:g} MiB ...")
            flows = {"rack": BackgroundFlow(topology, rack=1),
                     "dc": BackgroundFlow(topology, 0, sender="dcbg", receiver_name="corebg")}
            samplers = {"rack": LinkSampler(topology, rack=1),
                        "dc": LinkSampler(topology, 0, read=lambda _: topology.dc_link_bytes())}
            wall_minus_monotonic = time.time() - time.monotonic()
            try:
                result = push_once(topology, setup, payload, directory / f"run{k}")
            finally:
                for sampler in samplers.values():
                    sampler.stop()
                for flow in flows.values():
                    for process in (flow.sender, flow.receiver):
                        process.terminate()
                        process.wait(timeout=10)
            start = result["published_wall"] - wall_minus_monotonic
            end = start + result["makespan_s"] + SAMPLE_EVERY
            result["links"] = {name: reserve_kept(samplers[name].samples, flows[name],
                                                  rack_link if name == "rack" else dc_link, start, end)
                               for name in flows}
            report["runs"].append(result)
            say(f"  -> makespan {result['makespan_s']:.2f} s; " + "; ".join(
                f"{name} link full {link['full_s']} s, background kept {link['kept_of_reserve']} of its reserve"
                for name, link in result["links"].items())
                + ("" if result["valid"] else ", INVALID: " + "; ".join(result["problems"])))
    finally:
        topology.close()
    kept = {name: [r["links"][name]["kept_of_reserve"] for r in report["runs"]] for name in ("rack", "dc")}
    report["goals"] = {f"{name}_kept_of_reserve": values for name, values in kept.items()}
    report["goals"].update({f"{name}_met": all(v is not None and v >= RESERVE_GOAL for v in values)
                            for name, values in kept.items()})
    report["goals"]["goal"] = f"kept_of_reserve >= {RESERVE_GOAL} where the link was full"
    report["valid"] = all(r["valid"] for r in report["runs"])
    return report


def run_late(args: argparse.Namespace, directory: pathlib.Path, say) -> dict:
    size = 4 * MiB if args.quick and args.size == "32Mi" else parse_size(args.size)
    late_by = 2.0 if args.quick and args.late_by == 5.0 else args.late_by
    topology = topology_for(LINK)
    if not 1 <= args.late_rack <= topology.racks:
        raise SystemExit(f"swarmproxy lab cluster-late: --late-rack must be 1..{topology.racks}")
    setup = PushSetup(secure=args.secure, late_rack=args.late_rack, late_by=late_by)
    report: dict = {"scenario": "cluster-late", "what": (
        f"Tekel's figure 8 topology, 10 Mbit/s links; rack {args.late_rack}'s agents start {late_by:g} s after "
        f"the push is published; {size / MiB:g} MiB"), "size": size, "late_rack": args.late_rack,
        "late_by_s": late_by, "runs": []}
    late_prefix = f"r{args.late_rack}h"
    try:
        topology.build()
        payload = directory / "payload.bin"
        write_payload(payload, size)
        for k in range(1, (1 if args.quick else args.runs) + 1):
            say(f"run {k}: pushing {size / MiB:g} MiB, rack {args.late_rack} joining {late_by:g} s late ...")
            result = push_once(topology, setup, payload, directory / f"run{k}")
            others = max(t for n, t in result["finish_s"].items() if not n.startswith(late_prefix))
            late = max(t for n, t in result["finish_s"].items() if n.startswith(late_prefix))
            joined = result["late_rack_joined_s"]
            result["others_makespan_s"] = round(others, 3)
            result["late_rack_time_s"] = round(late - joined, 3)
            result["late_over_others"] = round((late - joined) / others, 4)
            report["runs"].append(result)
            say(f"  -> others {others:.2f} s from the push; rack {args.late_rack} {late - joined:.2f} s from its "
                f"start ({result['late_over_others']:.3f} x)"
                + ("" if result["valid"] else ", INVALID: " + "; ".join(result["problems"])))
    finally:
        topology.close()
    ratios = [r["late_over_others"] for r in report["runs"]]
    report["goals"] = {"late_over_others": ratios, "late_over_others_worst": max(ratios),
                       "met": max(ratios) <= LATE_GOAL, "goal": f"<= {LATE_GOAL}"}
    report["valid"] = all(r["valid"] for r in report["runs"])
    return report


def text(report: dict) -> str:
    lines = [f"{report['command']}", report["what"], ""]
    for k, r in enumerate(report["runs"], 1):
        line = f"run {k}: makespan {r['makespan_s']:.2f} s, seeder {r['seeder_ratio']:.3f}"
        if "links" in r:
            for name, link in r["links"].items():
                line += (f"; {name} link: busy {link['busy_s']} s (background {link['background_share_busy']}, push "
                         f"{link['push_share_busy']}), full {link['full_s']} s (background "
                         f"{link['background_share_full']}: {link['kept_of_reserve']} of its reserve)")
        else:
            line += (f"; others {r['others_makespan_s']} s, late rack {r['late_rack_time_s']} s from its start "
                     f"(joined {r['late_rack_joined_s']} s after the push): {r['late_over_others']} x")
        lines.append(line + ("  VALID" if r["valid"] else "  INVALID: " + "; ".join(r["problems"])))
    lines.append("")
    lines += [f"{name}: {value}" for name, value in report["goals"].items()]
    return "\n".join(lines) + "\n"


def draw(pyplot, report: dict):
    figure, axes = pyplot.subplots(1, 1, figsize=(7, 4.2))
    if report["scenario"] == "cluster-shared":
        names = [f"run {k} {name}" for k in range(1, len(report["runs"]) + 1) for name in ("rack", "dc")]
        kept = [r["links"][name]["kept_of_reserve"] or 0 for r in report["runs"] for name in ("rack", "dc")]
        axes.bar(range(len(names)), kept)
        axes.axhline(RESERVE_GOAL, color="r", linestyle="--", label=f"goal: {RESERVE_GOAL} of the reserve")
        axes.set_xticks(range(len(names)), names, fontsize=7)
        axes.set_ylabel("background flow's share where the link was full / reserve")
    else:
        for k, r in enumerate(report["runs"], 1):
            joined = r["late_rack_joined_s"]
            late = sorted(t for n, t in r["finish_s"].items() if n.startswith(f"r{report['late_rack']}h"))
            rest = sorted(t for n, t in r["finish_s"].items() if not n.startswith(f"r{report['late_rack']}h"))
            axes.plot(rest, [(i + 1) / len(rest) for i in range(len(rest))], color="tab:blue",
                      label="the others, from the push" if k == 1 else None)
            axes.plot([t - joined for t in late], [(i + 1) / len(late) for i in range(len(late))], color="tab:red",
                      label="the late rack, from its start" if k == 1 else None)
        axes.set_xlabel("finish time (s)")
        axes.set_ylabel("fraction done")
    axes.legend(fontsize=7)
    axes.grid(alpha=0.3)
    figure.suptitle(report["what"], fontsize=8)
    return figure


def main(argv: list[str] | None = None, scenario: str = "cluster-shared") -> int:
    args = build_parser(scenario).parse_args(argv)
    if args.runs < 1:
        raise SystemExit(f"swarmproxy lab {scenario}: --runs must be >= 1")
    runner = run_shared if scenario == "cluster-shared" else run_late
    return execute(scenario, args, argv, runner, text, draw)


if __name__ == "__main__":
    sys.exit(main(sys.argv[2:], sys.argv[1]) if len(sys.argv) > 1 else 2)
