"""Block-engine throughput against libtorrent, side by side in one run on this machine.

    python bench/transport.py [--size-mb 200] [--rounds 2] [--seeds 4]

Each case moves one file of --size-mb MiB on loopback from seed process(es) to one leecher process and
reports MB/s (wall time of the leecher, from start to last byte verified on disk) and CPU seconds per GB
summed over every process involved:

* swarmproxy over TCP and over QUIC: `swarmproxy swarm seed` / `swarmproxy swarm get` (real processes);
* libtorrent 2.x over TCP (uTP, DHT, LSD, UPnP, NAT-PMP off), one session per process, the leecher told the
  seeds' addresses directly;
* the same with --seeds seed processes (4 by default) and one leecher;
* the QUIC baseline: a bare aioquic single-stream transfer of the same size between two processes
  (`bench/transport_probe.py --only bare-quic`, same aioquic settings as ours: 1200-byte datagrams; its clock
  starts once the connection is up, so it is, if anything, flattered).

Rounds alternate between the systems so drift hits all alike; the median round is reported.
Issue 3 targets: our TCP >= 1.0 x libtorrent; our QUIC >= 0.8 x the bare aioquic transfer.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import pathlib
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

LT_WORKER = r'''
import json, sys, time, libtorrent as lt
role, torrent, directory = sys.argv[1], sys.argv[2], sys.argv[3]
listen_port, peers = int(sys.argv[4]), json.loads(sys.argv[5])
settings = {
    "listen_interfaces": f"127.0.0.1:{listen_port}", "enable_dht": False, "enable_lsd": False,
    "enable_upnp": False, "enable_natpmp": False, "enable_outgoing_utp": False, "enable_incoming_utp": False,
    "alert_mask": 0, "allow_multiple_connections_per_ip": True, "out_enc_policy": 2, "in_enc_policy": 2,
}
session = lt.session(settings)
params = lt.add_torrent_params()
params.ti = lt.torrent_info(torrent)
params.save_path = directory
if role == "seed":
    params.flags |= lt.torrent_flags.seed_mode
handle = session.add_torrent(params)
if role == "seed":
    print(json.dumps({"port": session.listen_port()}), flush=True)
    sys.stdin.read()  # until the bench closes our stdin
else:
    started = time.monotonic()
    for host, port in peers:
        handle.connect_peer((host, port))
    while not handle.status().is_seeding:
        time.sleep(0.01)
    print(json.dumps({"seconds": time.monotonic() - started}), flush=True)
'''


def cpu_seconds(pid: int) -> float:
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_cpu() -> float:
    """CPU seconds of every child process reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def make_file(path: pathlib.Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as handle:
        left = size
        while left > 0:
            handle.write(block[: min(left, len(block))])
            left -= len(block)


def swarmproxy_case(work: pathlib.Path, source: pathlib.Path, size: int, seeds: int, transport: str) -> dict:
    procs, addresses, root = [], [], None
    try:
        for index in range(seeds):
            ready = work / f"seed{index}.json"
            ready.unlink(missing_ok=True)  # a previous case's file would hand us a dead address
            proc = subprocess.Popen([sys.executable, "-m", "proxy.cli", "swarm", "seed", str(source), "--transport",
                                     transport, "--data-dir", str(work / f"seed{index}"), "--ready-file", str(ready)],
                                    cwd=ROOT, stderr=subprocess.DEVNULL)
            procs.append(proc)
            while not ready.exists():
                if proc.poll() is not None:
                    raise SystemExit(f"seed {index} exited {proc.returncode}")
                time.sleep(0.02)
            info = json.loads(ready.read_text())
            addresses.append(info["peer"])
            root = info["root"]
        cpu_before = sum(cpu_seconds(p.pid) for p in procs)
        out = work / "out.bin"
        argv = [sys.executable, "-m", "proxy.cli", "swarm", "get", root, "-o", str(out), "--transport", transport,
                "--data-dir", str(work / "leech")]
        for address in addresses:
            argv += ["--peer", address]
        leecher_before = child_cpu()
        started = time.monotonic()
        leecher = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE)
        _, err = leecher.communicate()
        seconds = time.monotonic() - started
        if leecher.returncode != 0:
            raise SystemExit(f"swarm get failed: {err.decode()}")
        cpu = child_cpu() - leecher_before + sum(cpu_seconds(p.pid) for p in procs) - cpu_before
        if out.stat().st_size != size:
            raise SystemExit("size mismatch")
        return {"seconds": seconds, "cpu": cpu}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()
        shutil.rmtree(work / "leech", ignore_errors=True)
        for index in range(seeds):
            shutil.rmtree(work / f"seed{index}", ignore_errors=True)
        (work / "out.bin").unlink(missing_ok=True)


def libtorrent_case(work: pathlib.Path, source: pathlib.Path, size: int, seeds: int) -> dict:
    import libtorrent as lt

    torrent = work / "file.torrent"
    if not torrent.exists():
        creator = lt.create_torrent(lt.list_files(str(source)), 1 << 20)
        lt.set_piece_hashes(creator, str(source.parent))
        torrent.write_bytes(lt.bencode(creator.generate()))
    procs, peers = [], []
    try:
        for _index in range(seeds):
            proc = subprocess.Popen([sys.executable, "-c", LT_WORKER, "seed", str(torrent), str(source.parent), "0",
                                     "[]"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            procs.append(proc)
            peers.append(["127.0.0.1", json.loads(proc.stdout.readline())["port"]])
        cpu_before = sum(cpu_seconds(p.pid) for p in procs)
        leech_dir = work / "lt-leech"
        leech_dir.mkdir(exist_ok=True)
        leecher_before = child_cpu()
        started = time.monotonic()
        leecher = subprocess.Popen([sys.executable, "-c", LT_WORKER, "leech", str(torrent), str(leech_dir), "0",
                                    json.dumps(peers)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = leecher.communicate()
        seconds = time.monotonic() - started
        if leecher.returncode != 0:
            raise SystemExit(f"libtorrent leecher failed: {err.decode()[-500:]}")
        cpu = child_cpu() - leecher_before + sum(cpu_seconds(p.pid) for p in procs) - cpu_before
        return {"seconds": seconds, "cpu": cpu}
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait()
        shutil.rmtree(work / "lt-leech", ignore_errors=True)


def bare_aioquic_case(size_mb: int) -> dict:
    """aioquic alone, one stream, no framing (the QUIC ceiling on this machine), via transport_probe.py."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "transport_probe.py"), "--only", "bare-quic",
                           "--size-mb", str(size_mb)], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"bare aioquic probe failed: {done.stderr[-500:]}")
    result = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    seconds = (size_mb << 20) / 1e6 / result["MB/s"]
    gb = (size_mb << 20) / 1e9
    return {"seconds": seconds, "cpu": (result["sender CPU s/GB"] + result["receiver CPU s/GB"]) * gb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=200, help="file size in MiB (default 200)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per case; median reported (default 2)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds in the many-seeds case (default 4)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # run as a script: bench/ itself is sys.path[0], not the tree holding it
    from bench import extra

    failed = extra.missing(("libtorrent",))  # the baseline; say so before the first case, not after an hour
    if failed:
        raise SystemExit(extra.message(failed, who="bench/transport.py"))
    size = args.size_mb << 20
    work = pathlib.Path(tempfile.mkdtemp(prefix="swarmproxy-transport-"))
    source = work / "src" / "file.bin"
    source.parent.mkdir()
    make_file(source, size)
    cases = {
        "swarmproxy_tcp_1x1": lambda: swarmproxy_case(work, source, size, 1, "tcp"),
        "libtorrent_tcp_1x1": lambda: libtorrent_case(work, source, size, 1),
        "swarmproxy_quic_1x1": lambda: swarmproxy_case(work, source, size, 1, "quic"),
        "bare_aioquic_1x1": lambda: bare_aioquic_case(args.size_mb),
        f"swarmproxy_tcp_{args.seeds}x1": lambda: swarmproxy_case(work, source, size, args.seeds, "tcp"),
        f"libtorrent_tcp_{args.seeds}x1": lambda: libtorrent_case(work, source, size, args.seeds),
    }
    rounds: dict[str, list[dict]] = {name: [] for name in cases}
    try:
        for _ in range(args.rounds):
            for name, case in cases.items():
                print(f"{name} ...", file=sys.stderr)
                rounds[name].append(case())
        report: dict[str, object] = {
            "command": "python " + " ".join(sys.argv),
            "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
                       f"Python {platform.python_version()}",
            "size_mib": args.size_mb,
        }
        for name, results in rounds.items():
            seconds = statistics.median(r["seconds"] for r in results)
            cpu = statistics.median(r["cpu"] for r in results)  # leecher + seeds during the transfer
            report[name] = {
                "mb_per_s": round(size / 1e6 / seconds, 1),
                "rounds_mb_per_s": [round(size / 1e6 / r["seconds"], 1) for r in results],
                "cpu_s_per_gb_all_processes": round(cpu / (size / 1e9), 2),
            }
        report["ratios"] = {
            "tcp_vs_libtorrent_1x1": round(report["swarmproxy_tcp_1x1"]["mb_per_s"]
                                           / report["libtorrent_tcp_1x1"]["mb_per_s"], 2),
            f"tcp_vs_libtorrent_{args.seeds}x1": round(report[f"swarmproxy_tcp_{args.seeds}x1"]["mb_per_s"]
                                                      / report[f"libtorrent_tcp_{args.seeds}x1"]["mb_per_s"], 2),
            "quic_vs_bare_aioquic": round(report["swarmproxy_quic_1x1"]["mb_per_s"]
                                          / report["bare_aioquic_1x1"]["mb_per_s"], 2),
        }
        text = json.dumps(report, indent=2)
        print(text)
        if args.json:
            args.json.write_text(text + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
