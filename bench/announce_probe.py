"""How long after a `dht_announce` can other nodes find it, on the test internet (`bench/internet_netns.py`)?

    .venv/bin/python -m bench.announce_probe [--homes N] [--publics N] [--read-only] [--announcer-behind-nat]

Builds a test internet of 3 stock DHT nodes, N public machines and N homes behind port-restricted NATs, starts a
plain libtorrent session on each machine (the DHT only, joined through the stock nodes), lets their tables fill
for 5 s, has one of them announce a key and every other one look it up every second until it finds it (40 s at
most), and prints how long each took. `--read-only` makes the sessions behind NATs read-only DHT nodes (BEP 43),
as `bittorrent.settings.dht_read_only` does for ours; `--announcer-behind-nat` announces from a home.

Measured (2026-11-29, 3 public machines and 3 homes): an announcement from a public machine was found after
15-16 s while the NATed sessions answered no query but were in the tables; after 1 s with them read-only; an
announcement from a read-only NATed session, after 0-1 s. A probe: it sleeps to let tables fill, and is not a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench.internet_netns import Topology

# One session, as its own process in a machine's namespace: ADDRESS BOOTSTRAP(,..) ROLE READ_ONLY. It prints
# {"ready": nodes} once its table has 3 nodes (20 s at most), waits for a line, then announces (ROLE "announce")
# or looks the key up every second until found (ROLE "get"), and prints {"found_after": s | null}.
SESSION = r'''
import hashlib, json, sys, time, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # (session.status(): the table size, simply)
import libtorrent as lt
address, bootstrap, role, read_only = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4] == "1"
session = lt.session({"enable_dht": False, "dht_bootstrap_nodes": "", "enable_lsd": False, "enable_upnp": False,
                      "enable_natpmp": False, "listen_interfaces": f"{address}:0", "dht_read_only": read_only,
                      "alert_mask": int(lt.alert_category.dht_operation | lt.alert_category.dht)})
while not session.listen_port():
    session.wait_for_alert(100)
session.apply_settings({"enable_dht": True})
for node in bootstrap:
    host, _, port = node.rpartition(":")
    session.add_dht_node((host, int(port)))
key = lt.sha1_hash(hashlib.sha1(b"announce probe").digest())
started = time.monotonic()
while session.status().dht_nodes < 3 and time.monotonic() - started < 20:
    time.sleep(0.1)
print(json.dumps({"ready": session.status().dht_nodes}), flush=True)
sys.stdin.readline()
started = time.monotonic()
if role == "announce":
    session.dht_announce(key, 4000, 0)
    print(json.dumps({"announced": True}), flush=True)
    sys.stdin.readline()
else:
    found = None
    while found is None and time.monotonic() - started < 40:
        session.dht_get_peers(key)
        again = time.monotonic() + 1.0
        while found is None and time.monotonic() < again:
            session.wait_for_alert(100)
            for alert in session.pop_alerts():
                if isinstance(alert, lt.dht_get_peers_reply_alert) and alert.num_peers():
                    found = round(time.monotonic() - started, 2)
    print(json.dumps({"found_after": found}), flush=True)
'''
SETTLE = 5.0  # s for the tables to fill before the announcement


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.announce_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--homes", type=int, default=3, help="sessions behind port-restricted NATs (default 3)")
    parser.add_argument("--publics", type=int, default=3, help="sessions on public machines (default 3)")
    parser.add_argument("--read-only", action="store_true", help="the sessions behind NATs are read-only (BEP 43)")
    parser.add_argument("--announcer-behind-nat", action="store_true", help="announce from the first home")
    args = parser.parse_args(argv)
    with Topology(dht_nodes=3, publics=max(1, args.publics), homes=("port-restricted",) * args.homes) as internet:
        internet.assert_isolated()
        bootstrap = ",".join(internet.bootstrap())
        machines = [*internet.public, *internet.hosts]
        announcer = internet.hosts[0] if args.announcer_behind_nat and internet.hosts else internet.public[0]

        def start(machine, role: str) -> subprocess.Popen:
            read_only = "1" if args.read_only and machine.home is not None else "0"
            return internet.spawn(machine, [sys.executable, "-c", SESSION, machine.address, bootstrap, role,
                                            read_only], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        sessions = {machine.name: start(machine, "announce" if machine is announcer else "get")
                    for machine in machines}
        for process in sessions.values():
            assert process.stdout is not None
            process.stdout.readline()
        time.sleep(SETTLE)  # (a probe: the tables fill on their own time)
        for process in sessions.values():
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        results = {}
        for name, process in sessions.items():
            assert process.stdout is not None
            results[name] = json.loads(process.stdout.readline())
        announcing = sessions[announcer.name]
        assert announcing.stdin is not None
        announcing.stdin.write("\n")
        announcing.stdin.flush()
    print(json.dumps({"announcer": announcer.name, "read_only_behind_nat": args.read_only, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
