"""The lookups scenario of `bench.internet_lab` (`python -m bench.internet_lab --scenario lookups`): provider
lookups over stock Mainline nodes (libtorrent `get_peers`) beside our own DHT (`dht.node.DhtNode`) on the same
namespaces of the test internet, before and after 20 % of the DHT nodes leave; and the DHT agents it starts
inside, one process each:

    python -m bench.internet_lookups mainline|own ADDRESS [BOOTSTRAP_HOST:PORT ...]

(one JSON request a line on standard input, one JSON answer a line on standard output).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from bench.dht_meters import percentile

# -- a DHT agent, as its own process in a namespace ------------------------------------------

MAINLINE_AGENT_PORT = 6882
OWN_DHT_PORT = 7000


def _answer(value: dict) -> None:
    print(json.dumps(value), flush=True)


def mainline_agent(address: str, bootstrap: list[str]) -> int:
    """`... mainline ADDRESS BOOT...`: a stock libtorrent session (the DHT only) on ADDRESS, told of the stock nodes;
    each line of standard input is {"op": "announce", "key": HEX, "port": N}, {"op": "lookup", "key": HEX,
    "timeout": S} (answers the time to the first answer naming a provider and to the lookup's end: libtorrent
    posts `dht_get_peers_reply_alert` per answer, and a lookup is over once `dht_stats_alert` shows no `get_peers`
    traversal) or {"op": "nodes"}."""
    import libtorrent as lt

    from bench.stock_dht_node import SETTINGS, _peer

    session = lt.session({**SETTINGS, "listen_interfaces": f"{address}:{MAINLINE_AGENT_PORT}",
                          "alert_mask": int(lt.alert_category.status | lt.alert_category.dht
                                             | lt.alert_category.dht_operation | lt.alert_category.stats)})
    while not session.listen_port():
        session.wait_for_alert(100)
    for peer in bootstrap:
        session.add_dht_node(_peer(peer))
    nodes = 0
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "announce":
            session.dht_announce(lt.sha1_hash(bytes.fromhex(request["key"])), int(request["port"]), 0)
            _answer({"ok": True})
        elif op == "nodes":
            session.post_dht_stats()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                session.wait_for_alert(200)
                stats = [a for a in session.pop_alerts() if isinstance(a, lt.dht_stats_alert)]
                if stats:
                    nodes = sum(b["num_nodes"] for b in stats[-1].routing_table)
                    break
            _answer({"nodes": nodes})
        elif op == "lookup":
            key = bytes.fromhex(request["key"])
            session.pop_alerts()
            started = time.monotonic()
            session.dht_get_peers(lt.sha1_hash(key))
            first = end = None
            found: set = set()
            asked = 0.0
            while time.monotonic() - started < float(request["timeout"]):
                if time.monotonic() - asked > 0.05:
                    session.post_dht_stats()
                    asked = time.monotonic()
                session.wait_for_alert(20)
                for alert in session.pop_alerts():
                    if isinstance(alert, lt.dht_get_peers_reply_alert) and alert.num_peers() > 0:
                        if first is None:
                            first = time.monotonic() - started
                        found.update(str(p) for p in alert.peers())
                    elif isinstance(alert, lt.dht_stats_alert) and \
                            not any(r["type"] == "get_peers" for r in alert.active_requests) and \
                            time.monotonic() - started > 0.01:
                        end = time.monotonic() - started
                if end is not None:
                    break
            _answer({"first_s": first, "end_s": end, "providers": len(found)})
    return 0


def own_agent(address: str, bootstrap: list[str]) -> int:
    """`... own ADDRESS BOOT...`: our own DHT's node (`dht.node.DhtNode`, its default settings but LAN discovery;
    `bench.dht_lookups.BenchNode` traces each lookup's hops) on ADDRESS:OWN_DHT_PORT, the same ops."""
    from bench.dht_lookups import BenchNode, one_lookup
    from dht.config import DhtConfig
    from dht.identity import NodeIdentity

    async def run() -> None:
        node = BenchNode(NodeIdentity.generate(), DhtConfig(lan_discovery=False))
        await node.start(address, OWN_DHT_PORT)
        contacts = [_host_port(b) for b in bootstrap]
        if contacts:
            await node.bootstrap(contacts)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            request = json.loads(line)
            op = request["op"]
            if op == "announce":
                stored = await node.announce(bytes.fromhex(request["key"]), address, int(request["port"]))
                _answer({"ok": True, "stored": stored})
            elif op == "nodes":
                if contacts and len(node.routing) < 2:
                    await node.bootstrap(contacts)
                _answer({"nodes": len(node.routing)})
            elif op == "lookup":
                result = await one_lookup(node, bytes.fromhex(request["key"]), int(request["port"]),
                                          float(request["timeout"]))
                _answer({"first_s": result.first_s, "end_s": result.done_s, "hops_to_first": result.hops_to_first,
                         "hops_max": result.hops_max, "rpcs": result.rpcs, "error": result.error})
        await node.stop(save=False)

    asyncio.run(run())
    return 0


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


class DhtAgent:
    def __init__(self, topology, machine, kind: str, bootstrap: list[str]) -> None:
        self.machine, self.kind = machine, kind
        self.process = topology.spawn(machine, [sys.executable, "-m", "bench.internet_lookups", kind,
                                                machine.address, *bootstrap],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, **request: object) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.kind} agent in {self.machine.name} exited ({self.process.poll()})")
        return json.loads(line)


def lookup_phase(agents: list, key: str, port: int, rounds: int, timeout: float) -> list[dict]:
    """Every agent looks `key` up `rounds` times, one after the other; the agents at once."""
    def run(agent) -> list[dict]:
        return [{**agent.call(op="lookup", key=key, port=port, timeout=timeout), "by": agent.machine.name}
                for _ in range(rounds)]

    with ThreadPoolExecutor(len(agents)) as pool:
        return [r for rs in pool.map(run, agents) for r in rs]


def summarise_lookups(results: list[dict]) -> dict:
    firsts = [r["first_s"] for r in results if r.get("first_s") is not None]
    ends = [r["end_s"] for r in results if r.get("end_s") is not None]

    def cut(values, q):
        value = percentile(values, q)
        return None if value is None else round(value * 1000, 1)

    out = {"lookups": len(results), "found": len(firsts), "first_p50_ms": cut(firsts, 50),
           "first_p99_ms": cut(firsts, 99), "end_p50_ms": cut(ends, 50), "end_p99_ms": cut(ends, 99),
           "ended": len(ends)}
    hops = [r["hops_to_first"] for r in results if r.get("hops_to_first") is not None]
    if hops:
        out["hops_to_first_p50"] = percentile(hops, 50)
        out["hops_to_first_max"] = max(hops)
        out["from_own_store"] = sum(1 for h in hops if h == 0)
    return out


def scenario_lookups(args, say) -> dict:
    from bench.internet_netns import DHT_PORT, Topology

    announcers, lookers = (2, 3) if args.quick else (3, 6)
    dht_nodes = 8 if args.quick else args.lookup_dht_nodes
    rounds = 3 if args.quick else args.rounds
    report: dict = {"scenario": "lookups", "dht_nodes": dht_nodes, "announcers": announcers, "lookers": lookers,
                    "rounds": rounds, "timeout_s": args.lookup_timeout}
    from bittorrent.mainline import root_key

    root = hashlib.sha256(b"internet lab content").digest()  # our DHT's key; the Mainline key as the product makes it
    keys = {"own": root.hex(), "mainline": root_key(root).hex()}
    with Topology(dht_nodes=dht_nodes, publics=announcers + lookers, homes=()) as topology:
        stock = [f"{m.address}:{DHT_PORT}" for m in topology.dht]
        own_backbone = [DhtAgent(topology, m, "own", [f"{topology.dht[0].address}:{OWN_DHT_PORT}"] if i else [])
                        for i, m in enumerate(topology.dht)]
        for agent in own_backbone[1:]:  # bootstrapped as they started; wait until each answers
            agent.call(op="nodes")
        own_boot = [f"{m.address}:{OWN_DHT_PORT}" for m in topology.dht[:3]]
        # The announcers first; the lookers join once the announcements are stored, so that none holds a replica
        # (in a DHT this small, every node near the key would, and find it in its own store).
        announcing = topology.public[:announcers]
        clients = {"mainline": [DhtAgent(topology, m, "mainline", stock) for m in announcing],
                   "own": [DhtAgent(topology, m, "own", own_boot) for m in announcing]}
        say(f"{dht_nodes} stock nodes and {dht_nodes} of our DHT's nodes; {announcers} announcers of each")
        time.sleep(args.settle)
        for kind, agents in clients.items():
            report[f"{kind}_announcer_routing_nodes"] = [a.call(op="nodes")["nodes"] for a in agents]
            for index, agent in enumerate(agents):
                agent.call(op="announce", key=keys[kind], port=40_000 + index)
        time.sleep(3)  # the announcements travel
        report["phases"] = {}
        for phase in ("all nodes", "20 % of the DHT nodes killed"):
            if phase != "all nodes":
                gone = max(1, round(dht_nodes * 0.2))  # never d1, the stock nodes' and our nodes' first contact
                victims = [1 + (i * (dht_nodes - 1)) // gone for i in range(gone)]
                for index in victims:
                    machine = topology.dht[index]
                    for process in topology.processes:
                        argv = " ".join(map(str, process.args))
                        if "stock_dht_node" in argv and f" {machine.address} " in f"{argv} ":
                            process.kill()
                    own_backbone[index].process.kill()
                report["killed"] = [topology.dht[i].name for i in victims]
                say(f"killed {report['killed']}")
            report["phases"][phase] = {}
            # Fresh lookers for each phase: ours keeps what it found (and may be handed replicas as it joins near
            # the key), so a looker's later lookups would be answered from its own store.
            lookers = {kind: [DhtAgent(topology, m, kind, stock if kind == "mainline" else own_boot)
                              for m in topology.public[announcers:]] for kind in clients}
            time.sleep(args.settle)
            for kind, agents in lookers.items():
                report["phases"][phase][f"{kind}_routing_nodes"] = [a.call(op="nodes")["nodes"] for a in agents]
            for kind, agents in lookers.items():
                results = lookup_phase(agents, keys[kind], 0 if kind == "mainline" else 40_000, rounds,
                                       args.lookup_timeout)
                report["phases"][phase][kind] = summarise_lookups(results)
                report["phases"][phase][kind]["results"] = results
                say(f"{phase}, {kind}: {summarise_lookups(results)}")
            for agents in lookers.values():
                for agent in agents:
                    agent.process.kill()
    return report


def format_lookups(report: dict) -> str:
    lines = [f"lookups: {report['dht_nodes']} stock Mainline nodes beside {report['dht_nodes']} of our DHT's nodes "
             f"(one pair per namespace); {report['announcers']} announce one key, {report['lookers']} look it up "
             f"{report['rounds']} times each (at once); no added delay",
             f"{'phase':<30} {'DHT':<9} {'found':>7} {'first p50':>10} {'first p99':>10} {'end p50':>8} "
             f"{'end p99':>8} {'hops p50/max':>12}"]
    for phase, kinds in report["phases"].items():
        for kind, s in kinds.items():
            if kind.endswith("_routing_nodes"):
                continue
            hops = f"{s['hops_to_first_p50']}/{s['hops_to_first_max']}" if "hops_to_first_p50" in s else "n/a"
            lines.append(f"{phase:<30} {kind:<9} {s['found']:>3}/{s['lookups']:<3} {s['first_p50_ms']!s:>10} "
                         f"{s['first_p99_ms']!s:>10} {s['end_p50_ms']!s:>8} {s['end_p99_ms']!s:>8} {hops:>12}")
    lines.append("times in ms; first: to the first answer naming a provider; end: to the lookup's end (libtorrent: no "
                 "get_peers traversal left, polled every 50 ms; ours: the lookup generator closed)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("mainline", "own"):
        print(__doc__, file=sys.stderr)
        return 2
    kind, address, *boot = argv
    return (mainline_agent if kind == "mainline" else own_agent)(address, boot)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
