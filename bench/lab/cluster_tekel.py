"""`swarmproxy lab cluster-tekel`: Tekel's figure 8 experiment (his thesis, chapter 5) rerun with the cluster mode.

Tekel's topology, in network namespaces (`bench.cluster_netns.Topology`): one datacenter of four racks, of 5 hosts,
4 hosts and the seeder, 7 hosts and 1 host (17 receivers), every link limited to 10 Mbit/s: each host's own link
and each rack's uplink, each way, by `tc tbf`. Tekel pushed 173 MB; here the file is scaled down (--size, 32 MiB:
a run of all stages then takes minutes, not hours), which the report says. redis runs as documented for
production (TLS, one ACL user, no default user: `bench.secure_redis`) and every push is signed.

The stages Tekel measured one after another, each switched on in the agents and the pusher through the lab's
`$SWARMPROXY_CLUSTER_LAB_STAGE` (`cluster/lab_stage.py`): throttle groups only (every agent talks to every agent
and the seeder; no capacities are given, as in bench.cluster_netns, so the groups limit nothing), + the overlay
with representants, + work division (the entry plan), + work stealing (START, nearest first, a stalled member
shown everything: the product as it ships). Each: seeder upload ratio (Tekel: 4.78, 1.47, 1.31, 1.12), copies
that crossed each rack's downlink, makespan, finish-time spread. The last stage runs --runs times (5), the others
once. Beside them, in the same run: libtorrent unorganised on the same hosts (`bench.lab.cluster_bt`: every
session told every other's address, nothing else; DHT, LSD, UPnP, NAT-PMP off) and Babenhauserheide's bound
(`bench.cluster_bound`) for the same N, block size and links.

Goals (issue 40): seeder ratio <= 1.05 and copies per rack downlink <= 1.10 with every stage on; makespan / bound
median <= 1.10 and worst <= 1.15 over the runs; makespan / libtorrent's <= 0.7.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

from bench.cluster_bound import Link, makespan_bound
from bench.cluster_netns import MiB, Topology, mtu_problem, netns_missing, write_payload
from bench.lab.cluster_runs import PushSetup, libtorrent_once, push_once
from cluster.lab_stage import STAGES
from swarm.content.manifest import choose_block_size
from swarm.content.sizes import parse_rate, parse_size

RACK_SIZES = (5, 4, 7, 1)  # Tekel's figure 8: B-5-rsn, B-12-rsn (and the seeder), Esy17c, Esy7b
SEEDER_RACK = 2
LINK = 1_250_000  # bytes/s: 10 Mbit/s, every link, each way
TEKEL_SIZE = 173_000_000
TEKEL_RATIOS = {"throttle": 4.78, "overlay": 1.47, "division": 1.31, "stealing": 1.12}
GOALS = {"seeder_ratio": 1.05, "rack_copies": 1.10, "bound_median": 1.10, "bound_worst": 1.15, "vs_libtorrent": 0.7}
QUICK_SIZE = 4 * MiB


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarmproxy lab cluster-tekel", description=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=pathlib.Path, metavar="DIR", help="output directory (lab-cluster-tekel)")
    parser.add_argument("--quick", action="store_true",
                        help="4 MiB, every stage and libtorrent once: a smoke run of about two minutes")
    parser.add_argument("--size", default="32Mi", metavar="BYTES", help="file size (32Mi; Tekel's was 173 MB)")
    parser.add_argument("--link", default="1.25M", metavar="RATE",
                        help="every link's rate, bytes/s each way (1.25M = 10 Mbit/s, Tekel's)")
    parser.add_argument("--host-link", default=None, metavar="RATE|none",
                        help="every host's own link, bytes/s each way (--link); none: unshaped, only the rack "
                             "uplinks shaped (the bound's host terms then drop out)")
    parser.add_argument("--seeder-rack", type=int, default=SEEDER_RACK, metavar="R",
                        help=f"the seeder's rack ({SEEDER_RACK}, Tekel's); 0: on the core, with a link of its own "
                             "(the 4 hosts of rack 2 stay)")
    parser.add_argument("--runs", type=int, default=5, metavar="N", help="runs of the full product (5)")
    parser.add_argument("--stages", default=",".join(STAGES), metavar="S1,S2,...",
                        help=f"the stages to run, of {', '.join(STAGES)} (all)")
    parser.add_argument("--libtorrent-runs", type=int, default=1, metavar="N", help="libtorrent runs (1)")
    parser.add_argument("--no-secure", dest="secure", action="store_false",
                        help="plain redis instead of the production setup (TLS, ACL user)")
    parser.add_argument("--congestion", default=None, metavar="NAME",
                        help="TCP congestion control in the hosts' namespaces (cubic, Debian's default; bbr; "
                             "default: this machine's, which the report names). With bbr a host whose upload "
                             "fills its shaped link slows its own downloads (see docs/cluster.md)")
    parser.add_argument("--mtu", type=int, default=None,
                        help="every link's MTU (default: 1500, Tekel's Ethernet; a datacenter's jumbo frames: "
                             "9000, as the 3 x 4 runs of bench.cluster_netns): Ethernet, IP and TCP headers take "
                             "4.4 %% of a shaped link at 1500, 0.7 %% at 9000, and the bound counts the whole rate "
                             "as payload")
    parser.add_argument("--keep", type=pathlib.Path, metavar="DIR",
                        help="keep the agents' and redis's logs here (default: a temporary directory)")
    parser.add_argument("--redraw", action="store_true",
                        help="write --out's summary.txt and figure.png again from its report.json (no run)")
    return parser


def topology_for(link: float, host_link: float | None = LINK, seeder_rack: int = SEEDER_RACK,
                 congestion: str | None = None, mtu: int | None = None) -> Topology:
    return Topology(racks=len(RACK_SIZES), per_rack=max(RACK_SIZES), uplink=link,
                    shaped=tuple(range(1, len(RACK_SIZES) + 1)), rack_sizes=RACK_SIZES,
                    seeder_rack=seeder_rack or None, host_rate=host_link, congestion=congestion, mtu=mtu)


def tekel_bound(size: int, link: float, block_size: int, host_link: float | None = LINK,
                seeder_rack: int = SEEDER_RACK) -> dict:
    """Every rack's uplink at `link` each way, every host's at `host_link` (None: unlimited): the seeder must send
    a copy, every receiver take one, every rack without the seeder take one in, the seeder's rack send one out;
    plus the start-up pipeline (log2 N blocks at the host rate; none with unlimited hosts)."""
    receivers = sum(RACK_SIZES)
    links = [Link(f"rack {r} downlink", size, link) for r in range(1, len(RACK_SIZES) + 1) if r != seeder_rack]
    if seeder_rack:
        links.append(Link(f"rack {seeder_rack} uplink", size, link))
    hosts = [host_link] * receivers
    return makespan_bound(size, receivers, seeder_upload=host_link, downloads=hosts, uploads=hosts, links=links,
                          block_size=block_size)


def goals(report: dict) -> dict:
    full = [r for r in report["runs"] if r["stage"] == STAGES[-1]]
    torrents = [r["makespan_s"] for r in report["libtorrent"] if r["makespan_s"]]
    bound = report["bound"]["seconds"]
    out: dict = {}
    if full:
        ratios = [r["makespan_s"] / bound for r in full]
        out["seeder_ratio_max"] = max(r["seeder_ratio"] for r in full)
        out["rack_copies_max"] = max(max(r["rack_copies"].values()) for r in full)
        out["makespan_over_bound"] = [round(x, 4) for x in ratios]
        out["makespan_over_bound_median"] = round(statistics.median(ratios), 4)
        out["makespan_over_bound_worst"] = round(max(ratios), 4)
        out["seeder_ratio_met"] = out["seeder_ratio_max"] <= GOALS["seeder_ratio"]
        out["rack_copies_met"] = out["rack_copies_max"] <= GOALS["rack_copies"]
        out["bound_met"] = (len(full) >= 5 and out["makespan_over_bound_median"] <= GOALS["bound_median"]
                            and out["makespan_over_bound_worst"] <= GOALS["bound_worst"])
        if len(full) < 5:
            out["bound_note"] = f"{len(full)} runs: the goal asks for the median of at least 5"
        if torrents:
            out["makespan_over_libtorrent"] = round(statistics.median(r["makespan_s"] for r in full)
                                                    / statistics.median(torrents), 4)
            out["vs_libtorrent_met"] = out["makespan_over_libtorrent"] <= GOALS["vs_libtorrent"]
    out["all_valid"] = all(r["valid"] for r in report["runs"] + report["libtorrent"])
    return out


def text(report: dict) -> str:
    seeder_rack = report.get("seeder_rack", SEEDER_RACK) or SEEDER_RACK  # on the core: rack 2's uplink all the same
    lines = [f"swarmproxy lab cluster-tekel ({report['command']})", report["what"], "",
             f"bound (Babenhauserheide): {report['bound']['seconds']:.2f} s ({report['bound']['limit']}, pipeline "
             f"{report['bound']['pipeline_s']:.2f} s)",
             f"TCP congestion control in the hosts' namespaces: {report.get('tcp_congestion_control', '-')}", "",
             f"{'system':<30} {'makespan':>9} {'/bound':>7} {'spread':>7} {'seeder':>7} {'Tekel':>6} "
             f"{'copies/rack':>11} {'out of r' + str(seeder_rack):>8} {'own CPU':>7}  valid"]
    for r in report["runs"] + report["libtorrent"]:
        m = r["makespan_s"]
        tekel = TEKEL_RATIOS.get(r.get("stage", ""), None)
        over = f"{m / report['bound']['seconds']:.3f}" if m else "-"
        lines.append(f"{r['system']:<30} {m if m is not None else '-':>9} "
                     f"{over:>7} {r['spread_s'] or '-':>7} "
                     f"{r['seeder_ratio']:>7.3f} {tekel if tekel else '-':>6} "
                     f"{max(r['rack_copies'].values()):>11.3f} "
                     f"{_figure(r.get('rack_uplink_iface_copies', {}).get(f'r{seeder_rack}'), '.3f'):>8} "
                     f"{_figure(r.get('own_cpu_share'), '.0%'):>7}  "
                     + ("VALID" if r["valid"] else "INVALID: " + "; ".join(r["problems"])))
    lines.append("")
    lines += [f"{name}: {value}" for name, value in report["goals"].items()]
    lines.append(f"goals: {GOALS}")
    return "\n".join(lines) + "\n"


def _figure(value: float | None, spec: str) -> str:
    """`value` formatted, or "-" where a report written before the figure was measured lacks it."""
    return "-" if value is None else format(value, spec)


def draw(pyplot, report: dict):
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    systems = list(dict.fromkeys(r["system"] for r in report["runs"] + report["libtorrent"]))
    colours = {s: f"C{k}" for k, s in enumerate(systems)}  # one colour a system, however many runs it had
    seen: set[str] = set()
    for r in report["runs"] + report["libtorrent"]:
        finish = sorted(r["finish_s"].values())
        label = r["system"] if r["system"] not in seen else None
        seen.add(r["system"])
        left.plot(finish, [(k + 1) / r["agents"] for k in range(len(finish))], label=label, alpha=0.8,
                  color=colours[r["system"]])
    left.axvline(report["bound"]["seconds"], color="k", linestyle="--", label="bound")
    left.set_xlabel("finish time from the push (s)")
    left.set_ylabel("fraction of the 17 hosts done")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    ratios = [statistics.median(r["seeder_ratio"] for r in report["runs"] + report["libtorrent"]
                                if r["system"] == s) for s in systems]
    right.bar(range(len(systems)), ratios, color="tab:blue", label="seeder upload ratio (ours)")
    tekel = [(k, TEKEL_RATIOS[stage]) for k, s in enumerate(systems)
             if (stage := s.split("(")[-1].rstrip(")")) in TEKEL_RATIOS]
    right.plot([k for k, _ in tekel], [t for _, t in tekel], "r^", label="Tekel's")
    right.set_xticks(range(len(systems)), [s.replace(" (", "\n(") for s in systems], fontsize=7)
    right.set_ylabel("seeder upload / file size")
    right.legend(fontsize=7)
    right.grid(alpha=0.3, axis="y")
    figure.suptitle(report["what"], fontsize=8)
    return figure


def run(args: argparse.Namespace, directory: pathlib.Path, say) -> dict:
    size = QUICK_SIZE if args.quick and args.size == "32Mi" else parse_size(args.size)
    link = float(parse_rate(args.link))
    host_link = link if args.host_link is None else None if args.host_link == "none" else float(
        parse_rate(args.host_link))
    stages = [s for s in args.stages.split(",") if s]
    if unknown := set(stages) - set(STAGES):
        raise SystemExit(f"swarmproxy lab cluster-tekel: unknown stages {sorted(unknown)}")
    runs = 1 if args.quick else args.runs
    block = choose_block_size(size)
    if not 0 <= args.seeder_rack <= len(RACK_SIZES):
        raise SystemExit(f"swarmproxy lab cluster-tekel: --seeder-rack must be 0..{len(RACK_SIZES)}")
    bound = tekel_bound(size, link, block, host_link, args.seeder_rack)
    topology = topology_for(link, host_link, args.seeder_rack, args.congestion, args.mtu)
    seeder = f"rack {args.seeder_rack}" if args.seeder_rack else "on the core"
    hosts = f"{host_link * 8 / 1e6:g} Mbit/s" if host_link else "unshaped"
    mtu = f", MTU {args.mtu}" if args.mtu else ""
    report: dict = {"scenario": "cluster-tekel", "what": (
        f"Tekel's figure 8: racks of {'/'.join(map(str, RACK_SIZES))} hosts, the seeder {seeder}, "
        f"rack uplinks {link * 8 / 1e6:g} Mbit/s, host links "
        f"{hosts}{mtu}; {size / MiB:g} MiB (Tekel: 173 MB, scaled down "
        f"{TEKEL_SIZE / size:.1f}x)"), "size": size, "block_size": block, "link_bytes_per_s": link,
        "host_link_bytes_per_s": host_link, "seeder_rack": args.seeder_rack, "mtu": args.mtu or 1500,
        "bound": bound, "runs": [],
        "libtorrent": []}
    try:
        topology.build()
        report["tcp_congestion_control"] = topology.congestion_control()
        payload = directory / "payload.bin"
        write_payload(payload, size)
        plan = [(s, 1 if s != STAGES[-1] else runs) for s in stages]
        for stage, count in plan:
            for k in range(1, count + 1):
                say(f"{stage} run {k}/{count}: pushing {size / MiB:g} MiB to {topology.agent_count} agents ...")
                result = push_once(topology, PushSetup(stage=stage, secure=args.secure), payload,
                                   directory / f"{stage}{k}")
                report["runs"].append(result)
                say(f"  -> makespan {result['makespan_s']:.2f} s ({result['makespan_s'] / bound['seconds']:.3f} "
                    f"x bound), seeder {result['seeder_ratio']:.3f}, copies/rack "
                    f"{max(result['rack_copies'].values()):.3f}"
                    + ("" if result["valid"] else ", INVALID: " + "; ".join(result["problems"])))
        for k in range(1, (1 if args.quick else args.libtorrent_runs) + 1):
            say(f"libtorrent run {k}: the same file and hosts, unorganised ...")
            result = libtorrent_once(topology, payload, block, directory / f"libtorrent{k}")
            report["libtorrent"].append(result)
            say(f"  -> makespan {result['makespan_s']} s, seeder {result['seeder_ratio']:.3f}"
                + ("" if result["valid"] else ", INVALID: " + "; ".join(result["problems"])))
    finally:
        topology.close()
    report["goals"] = goals(report)
    report["valid"] = report["goals"]["all_valid"]
    return report


def main(argv: list[str] | None = None, scenario: str = "cluster-tekel") -> int:
    args = build_parser().parse_args(argv)
    if args.runs < 1 or args.libtorrent_runs < 0:
        raise SystemExit("swarmproxy lab cluster-tekel: --runs must be >= 1, --libtorrent-runs >= 0")
    if (problem := mtu_problem(args.mtu)) is not None:
        raise SystemExit(f"swarmproxy lab cluster-tekel: {problem}")
    return execute("cluster-tekel", args, argv, run, text, draw)


def execute(name: str, args: argparse.Namespace, argv: list[str] | None, runner, to_text, drawer) -> int:
    """The netns scenarios' common frame: why not here, a scratch or kept directory, report.json, summary.txt,
    figure.png into --out, the summary printed; exit 2 when the topology cannot be built, 1 when a run was
    INVALID."""
    import json

    from bench.lab.report import machine, write

    if args.redraw:
        out = args.out or pathlib.Path(f"lab-{name}")
        report = json.loads((out / "report.json").read_text())
        for path in write(out, report, to_text(report), drawer):
            print(f"wrote {path}")
        return 0
    if (why := netns_missing()) is not None:
        print(f"swarmproxy lab {name}: {why}", file=sys.stderr)
        return 2
    out = args.out or pathlib.Path(f"lab-{name}")

    def say(line: str) -> None:
        print(line, flush=True)

    began = time.monotonic()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        report = runner(args, args.keep, say)
    else:
        with tempfile.TemporaryDirectory(prefix=f"{name}-") as scratch:
            report = runner(args, pathlib.Path(scratch), say)
    report["command"] = f"swarmproxy lab {name} " + " ".join(argv if argv is not None else sys.argv[1:])
    report["machine"] = machine()
    report["wall_s"] = round(time.monotonic() - began, 1)
    summary = to_text(report)
    paths = write(out, report, summary, drawer)
    say("\n" + summary)
    say("wrote " + ", ".join(str(p) for p in paths))
    return 0 if report["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
