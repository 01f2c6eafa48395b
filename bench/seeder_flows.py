"""The pusher's flows to the root members over one push in Tekel's topology: where the time above the bound goes.

    .venv/bin/python -m bench.seeder_flows [--size 32Mi] [--mtu N] [--congestion cubic] [--interval 0.5]
                                           [--reconcile S] [--out FILE]

One push of `swarmproxy lab cluster-tekel` (every stage on, the documented secure setup), with the pusher's TCP
connections read every --interval seconds by `ss -tin` inside its namespace: the payload bytes each receiver has
acknowledged (`bytes_acked`), summed per receiving host. The seeder hands each root member (the DC representants) a
fixed share (`cluster.division.EntryPlan`), so the pusher's uplink is full only while every share is still being
sent: this prints, per interval, the pusher's payload rate to each of them and in all, when its first 64 KiB and its
first MB were acknowledged (the overlay's formation and the pusher's first plan), when each share was complete, and
how long the pusher sent below 90 % of the best interval's rate before its last byte; and each rack downlink's and
uplink's use of its rate over time (its interface's bytes, headers included), with how long each ran below 90 %
before the pusher's last byte and after it, until the last host finished. Needs what the
lab needs (root, `ip`, `tc`, network namespaces) and `ss` (iproute2). Writes the samples and the push's figures as
JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from bench.cluster_harness import LAB_RECONCILE
from bench.cluster_netns import MiB, netns_missing, write_payload
from bench.lab.cluster_runs import PushSetup, push_once
from bench.lab.cluster_tekel import LINK, SEEDER_RACK, tekel_bound, topology_for
from swarm.content.manifest import choose_block_size
from swarm.content.sizes import parse_size

BUSY = 0.9  # of the best interval's rate: below it the pusher's uplink counts as not full
TABLE_STEP = 2.0  # s per row of the printed tables
FIRST = (64 << 10, 1_000_000)  # bytes: the pusher's first ones acknowledged, when (the push's start)
_ACKED = re.compile(r"\bbytes_acked:(\d+)")


def parse_ss(text: str) -> dict[str, int]:
    """`ss -tin state established`'s output: each connection (local>peer) and the payload bytes its peer acked.
    A connection's line starts at column 0 (Recv-Q, Send-Q, local, peer); its details follow, indented."""
    acked: dict[str, int] = {}
    connection = None
    for line in text.splitlines()[1:]:  # (the header)
        if line and not line[0].isspace():
            fields = line.split()
            connection = f"{fields[2]}>{fields[3]}" if len(fields) >= 4 else None
        elif connection is not None and (found := _ACKED.search(line)):
            acked[connection] = int(found.group(1))
    return acked


def per_host(samples: Sequence[tuple[float, Mapping[str, int]]], names: Mapping[str, str]) -> dict[str, list]:
    """[(time, {connection: acked})] -> {host name: [(time, bytes acked by it so far)]}: a connection counts with
    the most it ever had acked (it leaves `ss` when it closes); peers not in `names` (redis) are left out."""
    best: dict[str, int] = {}
    out: dict[str, list] = {name: [] for name in sorted(set(names.values()))}
    for when, connections in samples:
        for connection, acked in connections.items():
            best[connection] = max(best.get(connection, 0), acked)
        totals = dict.fromkeys(out, 0)
        for connection, acked in best.items():
            name = names.get(connection.split(">")[1].rsplit(":", 1)[0])
            if name is not None:
                totals[name] += acked
        for name, total in totals.items():
            out[name].append((when, total))
    return {name: series for name, series in out.items() if series and series[-1][1] > 0}


def share_ends(flows: Mapping[str, Sequence[tuple[float, int]]]) -> dict[str, float]:
    """When each host's flow last grew: its share was complete then (to within an interval)."""
    ends = {}
    for name, series in flows.items():
        last = series[-1][1]
        ends[name] = next(when for when, total in series if total == last)
    return ends


def reached(flows: Mapping[str, Sequence[tuple[float, int]]], amount: int) -> float | None:
    """The first sample at which the hosts together had acknowledged `amount` bytes (None: never). The hosts'
    series are sampled together (`per_host`), as `rates` takes them."""
    for samples in zip(*flows.values()):
        if sum(total for _, total in samples) >= amount:
            return samples[0][0]
    return None


def rates(flows: Mapping[str, Sequence[tuple[float, int]]], every: int = 1) -> list[tuple[float, dict[str, float]]]:
    """Payload bytes/s to each host over each `every` samples: [(start of the interval, {host: rate})]. The hosts'
    series are sampled together (`per_host`): taken as one series of {host: bytes so far}, as `link_use` reads."""
    names = sorted(flows)
    samples = [(at[0][0], {n: total for n, (_, total) in zip(names, at, strict=True)})
               for at in zip(*(flows[n] for n in names))]
    return [(start, row) for start, _, row in link_use(samples, 1.0, every)]


def below_full(rows: Iterable[tuple[float, Mapping[str, float]]], until: float) -> float:
    """Seconds before `until` in which the pusher sent below `BUSY` of its best interval's rate."""
    rows = list(rows)
    if len(rows) < 2:
        return 0.0
    best = max(sum(r.values()) for _, r in rows)
    slow = 0.0
    for (start, row), (end, _) in zip(rows, rows[1:]):
        if start < until and sum(row.values()) < BUSY * best:
            slow += min(end, until) - start
    return slow


def link_use(samples: Sequence[tuple[float, Mapping[str, int]]], rate: float, every: int = 1
             ) -> list[tuple[float, float, dict[str, float]]]:
    """[(time, {link: bytes sent so far})] -> [(start, end of the interval, {link: its use, bytes over `rate`})]
    over each `every` samples."""
    rows = []
    for k in range(0, len(samples) - every, every):
        (start, before), (end, after) = samples[k], samples[k + every]
        rows.append((start, end, {name: (after[name] - before[name]) / (end - start) / rate for name in sorted(after)}))
    return rows


def idle_before(rows: Iterable[tuple[float, float, Mapping[str, float]]], until: float) -> dict[str, float]:
    """Per link, the seconds before `until` in which it carried below `BUSY` of its rate."""
    idle: dict[str, float] = {}
    for start, end, row in rows:
        for name, use in row.items():
            idle[name] = idle.get(name, 0.0) + (min(end, until) - start if start < until and use < BUSY else 0.0)
    return idle


class Sampler:
    """`ss -tin` in the pusher's namespace every `interval` seconds, on a thread, until `stop()`; and, if given,
    `links()` (bytes each rack link sent so far) at the same instants."""

    def __init__(self, prefix: Sequence[str], interval: float,
                 links: Callable[[], dict[str, int]] | None = None) -> None:
        self.prefix, self.interval, self.links = list(prefix), interval, links
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.link_samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, _run=None) -> None:  # (`push_once`'s on_started hook)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            text = subprocess.run([*self.prefix, "ss", "-tin", "state", "established"], capture_output=True,
                                  text=True, check=False).stdout
            now = time.time()
            self.samples.append((now, parse_ss(text)))
            if self.links is not None:
                self.link_samples.append((now, self.links()))
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def measure(size: int, mtu: int | None, congestion: str | None, interval: float, reconcile: float,
            directory: pathlib.Path) -> dict:
    topology = topology_for(LINK, LINK, SEEDER_RACK, congestion, mtu)
    try:
        topology.build()
        payload = directory / "payload.bin"
        write_payload(payload, size)
        racks = range(1, topology.racks + 1)
        sampler = Sampler(topology.hosts["seeder"].prefix, interval,
                          lambda: {**{f"down r{r}": topology.downlink_bytes(r) for r in racks},
                                   **{f"up r{r}": topology.uplink_bytes(r) for r in racks}})
        try:
            result = push_once(topology, PushSetup(reconcile=reconcile), payload, directory / "run",
                               on_started=sampler.start)
        finally:
            sampler.stop()
        names = {host.address: name for name, host in topology.hosts.items() if name in result["finish_s"]}
    finally:
        topology.close()
    t0 = result["published_wall"]
    flows = {name: [(round(when - t0, 3), total) for when, total in series]
             for name, series in per_host(sampler.samples, names).items()}
    links = {way: [(round(when - t0, 3), {name.split()[1]: n for name, n in sent.items() if name.startswith(way)})
                   for when, sent in sampler.link_samples] for way in ("down", "up")}
    return {"size": size, "mtu": mtu or 1500, "interval_s": interval, "reconcile_s": reconcile, "result": result,
            "flows": flows, "rack_downlinks": links["down"], "rack_uplinks": links["up"], "link_rate": LINK,
            "bound": tekel_bound(size, LINK, choose_block_size(size))}


def summary(report: dict) -> str:
    flows, result = report["flows"], report["result"]
    lines = [f"one push of {report['size'] / MiB:g} MiB, MTU {report['mtu']}: makespan {result['makespan_s']:.2f} s, "
             f"bound {report['bound']['seconds']:.2f} s ({result['makespan_s'] / report['bound']['seconds']:.3f} x)"]
    if not flows:  # `ss` printed nothing we could read (missing, or another output format)
        return "\n".join(lines + ["no connection of the pusher's was seen by `ss -tin`: no flows to show"]) + "\n"
    ends = share_ends(flows)
    every = max(1, round(TABLE_STEP / report["interval_s"]))  # samples per row of the tables
    rows = rates(flows, every)
    last = max(ends.values())
    lines += ["", "pusher's payload rate to each root member, MB/s:",
              "    t  " + " ".join(f"{n:>6}" for n in sorted(flows)) + "   total"]
    for start, row in rows:
        lines.append(f"{start:5.1f}  " + " ".join(f"{row[n] / 1e6:6.3f}" for n in sorted(flows))
                     + f"   {sum(row.values()) / 1e6:5.3f}")
    firsts = [reached(flows, amount) for amount in FIRST]
    lines += ["", f"the pusher's first 64 KiB acknowledged at {_seconds(firsts[0])}, its first MB at "
                  f"{_seconds(firsts[1])} (the agents' period {report.get('reconcile_s', LAB_RECONCILE):g} s)",
              "share complete (s): " + ", ".join(f"{n} {ends[n]:.1f}" for n in sorted(ends, key=ends.get)),
              f"the pusher's last byte acked at {last:.1f} s; hosts finished {min(result['finish_s'].values()):.1f}-"
              f"{result['makespan_s']:.1f} s",
              f"the pusher below {BUSY:.0%} of its best {TABLE_STEP:g} s before its last byte: "
              f"{below_full(rows, last):.1f} s"]
    for key, what in (("rack_downlinks", "downlink"), ("rack_uplinks", "uplink")):
        lines += _link_lines(report.get(key) or [], what, report, last, every)
    return "\n".join(lines) + "\n"


def _link_lines(samples: Sequence[tuple[float, Mapping[str, int]]], what: str, report: dict, last: float,
                every: int) -> list[str]:
    """Each rack's `what` (downlink, uplink) over the push: its use per `every` samples, and its time below `BUSY`
    before the pusher's last byte and after it."""
    if len(samples) <= 2:
        return []
    rate, makespan = report["link_rate"], report["result"]["makespan_s"]
    names = sorted(samples[-1][1])
    lines = ["", f"each rack's {what}, use of its rate (wire bytes, headers included):",
             "    t  " + " ".join(f"{n:>6}" for n in names)]
    lines += [f"{start:5.1f}  " + " ".join(f"{row[n]:6.2f}" for n in names)
              for start, _, row in link_use(samples, rate, every)]
    fine = link_use(samples, rate)
    before, after = idle_before(fine, last), idle_before(fine, makespan)
    return lines + [f"below {BUSY:.0%} of its rate before the pusher's last byte (s): "
                    + ", ".join(f"{n} {before.get(n, 0.0):.1f}" for n in names),
                    "... and from then to the last host's finish (s): "
                    + ", ".join(f"{n} {after.get(n, 0.0) - before.get(n, 0.0):.1f}" for n in names)]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.seeder_flows", description=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="32Mi", help="file size (32Mi, as swarmproxy lab cluster-tekel)")
    parser.add_argument("--mtu", type=int, default=None, help="every link's MTU (default: 1500)")
    parser.add_argument("--congestion", default="cubic", help="TCP congestion control in the hosts (cubic)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples (0.5)")
    parser.add_argument("--reconcile", type=float, default=LAB_RECONCILE, metavar="S",
                        help=f"the agents' and the pusher's period ({LAB_RECONCILE:g}, the lab's; the product's is 2)")
    parser.add_argument("--out", type=pathlib.Path, help="write the samples and figures here (JSON)")
    args = parser.parse_args(argv)
    if args.interval <= 0 or args.reconcile <= 0:
        parser.error("--interval and --reconcile must be above 0")
    if (why := netns_missing()) is not None:
        print(f"bench.seeder_flows: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="seeder-flows-") as scratch:
        report = measure(parse_size(args.size), args.mtu, args.congestion, args.interval, args.reconcile,
                         pathlib.Path(scratch))
    text = summary(report)
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**report, "summary": text}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
