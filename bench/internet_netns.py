"""The test internet: a "public" network of stock Mainline DHT nodes and home routers doing NAT, in network namespaces
this machine makes and deletes (docs/ARCHITECTURE.md, "The Internet mode"; the address plan: `bench.internet_plan`).

    .venv/bin/python -m bench.internet_netns [--homes KIND,KIND,...] [--dht-nodes N] [--publics N] [--rate RATE]
        [--json]

builds it, prints the NAT connectivity matrix (`bench.nat_matrix`) and tears it down; `tests/bench/
test_internet_netns.py` runs the matrix and `swarmproxy run` nodes behind the NATs.

```
                       internet namespace "net": bridge br0, the gateway (.1) of every public /24, forwarding
 DHT namespace d1..dN ── eth0 ───┤
 public machine p1..pN ── eth0 ──┤
                                 ├── r1 ═(tbf)═ wan ─ home router r1: NAT ─ bridge lan ── eth0 ─ host h1
                                 └── rK ═(tbf)═ wan ─ home router rK: NAT ─ bridge lan ── eth0 ─ host hK
```

Addresses (`bench.internet_plan`, public segment 55.55.0.0/16): DHT node i at .2 of `segment(10 + i)`, public machine
j of `segment(50 + j)`, home router k's WAN of `segment(100 + k)`, each routing the public /16 through its segment's
.1 in the internet namespace; home k's LAN is 192.168.k.0/24 (router .1, host .10, the host's default route via its
router). `--rate` shapes each WAN link with `tc tbf`, both ways. `Topology(impair=...)` (`bench.impair`) makes an
impaired home's WAN link two TUN devices (`wan` in the router, `rK` in the internet namespace, a point-to-point /24
with the same addresses, not on the bridge) joined by a userspace relay that adds delay and loss (the kernel has no
netem); `relay_counters(k)` says what it moved and dropped. Every name carries a random tag; `close()` ends every
process and deletes every namespace and file, however the run ends.

No packet can leave the machine: nothing is attached to the root namespace (a relay runs in the internet namespace
and opens only its two TUN devices, no socket); the internet namespace, the routers,
the DHT nodes and the public machines have routes to the public /16 and their own segments only, no default route;
a host's default route leads to its router, which has none. `assert_isolated` checks every namespace's routes
before anything runs inside; IPv6 is off in every namespace; nothing inside resolves a name (the DHT nodes are
named by address), and a DNS query would find no route beyond the namespaces either. Processes inside run without
`SWARMPROXY_PRIVATE_NETWORK` (the namespace keeps them in instead; `--map-ports` is refused under it); the test and
everything outside keep it.

The homes' NATs (RFC 4787's behaviours; `bench.nat_matrix` observes what each does, and the test asserts it):

- `port-restricted`: iptables MASQUERADE. Linux keeps the source port where it can and reuses it whatever the
  destination: endpoint-independent mapping (observed with one host per home; nothing promises it when two hosts'
  ports collide), address-and-port-dependent filtering (conntrack lets in only the replies of what the host opened).
- `symmetric`: MASQUERADE --random-fully: every new connection gets a random external port (1-65535 seen), so the
  mapping is address-and-port-dependent (observed), and so is the filtering.
- `full-cone`: MASQUERADE plus a DNAT of every TCP and UDP port of the WAN address to the home's one host (a "DMZ
  host"): endpoint-independent mapping and filtering for that host, as near to a full cone as stock iptables gets
  (mainline Linux has no full-cone target); unlike a real one it is open before the host sent anything, and it
  serves one host per home.
- `upnp`: Debian's miniupnpd 2.3 (its nftables build) as a real IGD, UPnP and NAT-PMP on the LAN bridge,
  `secure_mode` (a host maps only its own address), unprivileged ports only; it adds its mappings to its own chains
  in the nft table `inet filter` (`UPNP_RULES`: what /etc/miniupnpd/nft_init.sh makes, plus a forward policy that
  drops what is neither a reply, from the LAN, nor mapped, and masquerade as `port-restricted`).

The other routers' firewall lets in from the WAN only replies and what their NAT maps. A stranger's SYN to a port the
NAT does not map reaches the router itself, which refuses it (RST): the matrix's impossible cells say "refused".

Needs root, `ip`, `iptables`, `nft` (nftables) and `miniupnpd` (`scripts/test.sh` installs them): `netns_missing()`
says which is lacking.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import os
import pathlib
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from bench.impair import Impairment, tun_device
from bench.internet_plan import HOME, PUBLIC, segment
from bench.netns import READ_TIMEOUT, tear_down
from bench.netns import run as _run
from bench.netns import tool as _tool
from swarm.content.sizes import parse_rate

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAT_KINDS = ("full-cone", "port-restricted", "symmetric", "upnp")
DHT_PORT = 6881
START_TIMEOUT = 30.0  # s for a process started inside to say it is ready
BURST = 64 * 1024  # tbf bucket, bytes (bench.cluster_netns: at least one GSO super-packet)
TOOLS = {"ip": "iproute2", "tc": "iproute2", "iptables": "iptables", "nft": "nftables", "miniupnpd": "miniupnpd",
         "sysctl": "procps"}  # each tool and the Debian package that has it
UPNP_READY = "Listening for NAT-PMP"  # what miniupnpd logs once it serves




def _in(ns: str, *argv: str, stdin: str | None = None) -> str:
    return _run("ip", "netns", "exec", ns, _tool(argv[0]) or argv[0], *argv[1:], stdin=stdin)


@functools.cache
def netns_missing() -> str | None:
    """Why the test internet cannot be built here, or None (probed once: it makes a namespace)."""
    if os.geteuid() != 0:
        return "network namespaces, iptables and miniupnpd need root"
    for tool, package in TOOLS.items():
        if _tool(tool) is None:
            return f"`{tool}` is not installed (apt-get install {package}; scripts/test.sh installs it)"
    probe = f"spiprobe{secrets.token_hex(3)}"
    try:
        _run("ip", "netns", "add", probe)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"network namespaces are not permitted here: {exc}"
    try:
        _run("ip", "-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
        _run("ip", "-n", probe, "link", "add", "probebr", "type", "bridge")
        _in(probe, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "probe0", "-j", "MASQUERADE",
            "--random-fully")
        _in(probe, "nft", "-f", "-", stdin="table inet probe {\n chain p {\n type nat hook postrouting priority 100;\n"
                                           " oifname \"probe0\" masquerade\n }\n}\n")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"veth, bridges or NAT (iptables, nft) are not available in a namespace: {exc}"
    finally:
        subprocess.run([_tool("ip") or "ip", "netns", "del", probe], capture_output=True, timeout=READ_TIMEOUT)
    return None


def inside_environment() -> dict[str, str]:
    """The environment of a process started inside: without SWARMPROXY_PRIVATE_NETWORK (and any other
    SWARMPROXY_ variable): the namespace is what keeps it off the internet."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SWARMPROXY_")}


@dataclass
class Machine:
    """One namespace with one address: a DHT node, a public machine, or a host behind a home router."""

    name: str
    ns: str
    address: str
    home: Home | None = None

    @property
    def prefix(self) -> list[str]:
        return [_tool("ip") or "ip", "netns", "exec", self.ns]

    @property
    def kind(self) -> str:
        """"public", or its home's NAT."""
        return self.home.nat if self.home is not None else "public"


@dataclass
class Home:
    index: int
    nat: str
    router: str  # its namespace
    wan: str  # its public address
    gateway: str  # its LAN address, the host's default route
    host: Machine | None = None


class Agent:
    """A `bench.netns_agent` in a machine's namespace; `call(op, **fields)` is one request and its answer."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    def call(self, op: str, wait: float = READ_TIMEOUT, **fields: object) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], wait)
        if not ready:
            raise TimeoutError(f"the agent did not answer {op} within {wait:g} s")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the agent exited ({self.process.poll()}) during {op}")
        return json.loads(line)


@dataclass
class Node:
    """`swarmproxy run` in a machine's namespace, started with a ready file."""

    machine: Machine
    process: subprocess.Popen
    ready: dict[str, str]
    log_path: pathlib.Path
    agent: Agent

    def admin(self, path: str) -> dict:
        """A GET of the admin API (on 127.0.0.1 inside the node's namespace)."""
        answer = self.agent.call("get", url=f"http://{self.ready['proxy']}{path}", wait=15)
        if answer.get("status") != 200:
            raise RuntimeError(f"{path}: {answer}")
        return answer["body"]

    @property
    def peer_port(self) -> int:
        return int(self.ready["peer"].rpartition(":")[2])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """End it (SIGTERM: it saves and closes as on Ctrl-C), killing it if it takes more than 10 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@dataclass
class Topology:
    """The test internet; `build()` makes it, `close()` deletes all of it (and ends what runs inside)."""

    dht_nodes: int = 3
    publics: int = 1
    homes: tuple[str, ...] = ("port-restricted", "upnp")
    rate: float | None = None  # bytes/s of each home's WAN link, each way; None: unshaped
    # Loss and delay on the homes' WAN links (`bench.impair`): one Impairment for every home, or one per home index
    impair: Impairment | Mapping[int, Impairment] | None = None
    tag: str = field(default_factory=lambda: f"spi{secrets.token_hex(3)}")
    namespaces: list[str] = field(default_factory=list)
    machines: dict[str, Machine] = field(default_factory=dict)
    built_homes: list[Home] = field(default_factory=list)
    processes: list[subprocess.Popen] = field(default_factory=list)
    agents: dict[str, Agent] = field(default_factory=dict)
    relays: dict[int, subprocess.Popen] = field(default_factory=dict)  # home index: its `bench.impair` relay
    scratch: pathlib.Path | None = None
    dht_ports: list[int] = field(default_factory=list)

    @property
    def net(self) -> str:
        return f"{self.tag}-net"

    @property
    def dht(self) -> list[Machine]:
        return [self.machines[f"d{i}"] for i in range(1, self.dht_nodes + 1)]

    @property
    def public(self) -> list[Machine]:
        return [self.machines[f"p{j}"] for j in range(1, self.publics + 1)]

    @property
    def hosts(self) -> list[Machine]:
        return [home.host for home in self.built_homes if home.host is not None]

    def bootstrap(self) -> list[str]:
        """The stock DHT nodes' `address:port`s, for `--mainline-bootstrap`."""
        return [f"{m.address}:{port}" for m, port in zip(self.dht, self.dht_ports, strict=True)]

    def build(self) -> Topology:
        unknown = set(self.homes) - set(NAT_KINDS)
        if unknown:
            raise ValueError(f"no such NAT kind {sorted(unknown)}: one of {', '.join(NAT_KINDS)}")
        self.scratch = pathlib.Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
        self._ns(self.net)
        _run("ip", "-n", self.net, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.net, "link", "set", "br0", "up")
        self._sysctl(self.net, "net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0",
                     "net.ipv4.conf.default.send_redirects=0")
        for i in range(1, self.dht_nodes + 1):
            self._public_machine(f"d{i}", 10 + i)
        for j in range(1, self.publics + 1):
            self._public_machine(f"p{j}", 50 + j)
        for k, nat in enumerate(self.homes, start=1):
            self._home(k, nat)
        self.assert_isolated()
        self._start_relays()
        for home in self.built_homes:
            if home.nat == "upnp":
                self._start_miniupnpd(home)
        self._start_dht()
        return self

    # -- the namespaces -----------------------------------------------------------------------------------------

    def _ns(self, name: str) -> str:
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        # IPv6 off before any link exists: no link-local address, no router solicitation, no IPv6 at all.
        self._sysctl(name, "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        _run("ip", "-n", name, "link", "set", "lo", "up")
        return name

    @staticmethod
    def _sysctl(ns: str, *settings: str) -> None:
        _in(ns, "sysctl", "-q", "-w", *settings)

    def _attach(self, ns: str, inside: str, port: str, index: int) -> str:
        """A veth from `ns` (named `inside`) to the internet's bridge (named `port`), on segment `index`: the
        internet namespace is the gateway (.1), `ns` gets .2 and a route to the public network through it."""
        net = segment(index)
        gateway, address = str(net[1]), str(net[2])
        _run("ip", "link", "add", "name", inside, "netns", ns, "type", "veth", "peer", "name", port, "netns", self.net)
        _run("ip", "-n", self.net, "link", "set", "dev", port, "master", "br0")
        _run("ip", "-n", self.net, "link", "set", "dev", port, "up")
        _run("ip", "-n", self.net, "addr", "add", f"{gateway}/24", "dev", "br0")
        _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", inside)
        _run("ip", "-n", ns, "link", "set", inside, "up")
        _run("ip", "-n", ns, "route", "add", str(PUBLIC), "via", gateway)
        return address

    def _tun_attach(self, ns: str, inside: str, port: str, index: int) -> str:
        """As `_attach`, but the link is two TUN devices, `inside` in `ns` and `port` in the internet namespace, each
        the end of a point-to-point /24 (not on the bridge), for `bench.impair`'s relay to join (`_start_relays`)."""
        net = segment(index)
        gateway, address = str(net[1]), str(net[2])
        tun_device(self.net, port)
        tun_device(ns, inside)
        _run("ip", "-n", self.net, "addr", "add", f"{gateway}/24", "dev", port)
        _run("ip", "-n", self.net, "link", "set", port, "up")
        _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", inside)
        _run("ip", "-n", ns, "link", "set", inside, "up")
        _run("ip", "-n", ns, "route", "add", str(PUBLIC), "via", gateway)
        return address

    def impairment(self, k: int) -> Impairment:
        """What home `k`'s WAN link does to its packets (nothing: `Impairment()`)."""
        if isinstance(self.impair, Impairment):
            return self.impair
        return (self.impair or {}).get(k, Impairment())

    def _start_relays(self) -> None:
        """`bench.impair`'s relay for each impaired home, each started in the internet namespace; each says "ready"
        once it holds both ends (its standard input open: closing it, or the kill, ends it)."""
        for home in self.built_homes:
            if impairment := self.impairment(home.index):
                self.relays[home.index] = self.spawn(
                    self.net, [sys.executable, "-m", "bench.impair", "relay", f"r{home.index}", home.router, "wan",
                               "--delay", repr(impairment.delay), "--loss", repr(impairment.loss)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for process in self.relays.values():
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT)
            if not ready or process.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a delay relay did not start ({process.poll()})")

    def relay_counters(self, k: int) -> dict[str, dict[str, int]]:
        """What home `k`'s relay moved and dropped so far, per way (`a_to_b`: from the internet to the router;
        `b_to_a`: from the router out), in packets and bytes; it has one only if its link is impaired."""
        process = self.relays[k]
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("\n")
        process.stdin.flush()
        ready, _, _ = select.select([process.stdout], [], [], READ_TIMEOUT)
        if not ready:
            raise TimeoutError(f"home {k}'s relay did not answer")
        return json.loads(process.stdout.readline())

    def _public_machine(self, name: str, index: int) -> Machine:
        ns = self._ns(f"{self.tag}-{name}")
        machine = Machine(name, ns, self._attach(ns, "eth0", name, index))
        self.machines[name] = machine
        return machine

    def _home(self, k: int, nat: str) -> Home:
        router = self._ns(f"{self.tag}-r{k}")
        impairment = self.impairment(k)
        wan = (self._tun_attach if impairment else self._attach)(router, "wan", f"r{k}", 100 + k)
        if self.rate is not None:
            for ns, dev in ((router, "wan"), (self.net, f"r{k}")):
                _run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{int(self.rate * 8)}bit",
                     "burst", str(BURST), "latency", "50ms")
        lan = ipaddress.ip_network(f"{HOME.network_address + 256 * k}/24")
        home = Home(k, nat, router, wan, str(lan[1]))
        _run("ip", "-n", router, "link", "add", "lan", "type", "bridge")
        _run("ip", "-n", router, "addr", "add", f"{home.gateway}/24", "dev", "lan")
        _run("ip", "-n", router, "link", "set", "lan", "up")
        self._sysctl(router, "net.ipv4.ip_forward=1")
        ns = self._ns(f"{self.tag}-h{k}")
        _run("ip", "link", "add", "name", "eth0", "netns", ns, "type", "veth", "peer", "name", "h", "netns", router)
        _run("ip", "-n", router, "link", "set", "dev", "h", "master", "lan")
        _run("ip", "-n", router, "link", "set", "dev", "h", "up")
        host = Machine(f"h{k}", ns, str(lan[10]), home)
        _run("ip", "-n", ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "route", "add", "default", "via", home.gateway)
        home.host = self.machines[host.name] = host
        self._nat(home)
        self.built_homes.append(home)
        return home

    def _nat(self, home: Home) -> None:
        assert home.host is not None
        ns, host = home.router, home.host.address
        if home.nat == "upnp":  # miniupnpd's nft chains, and the rest of the router in the same table
            _in(ns, "nft", "-f", "-", stdin=UPNP_RULES)
            return
        # A home router's firewall: from the outside, replies and what the NAT maps in, nothing else.
        _in(ns, "iptables", "-A", "FORWARD", "-i", "wan", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED,DNAT",
            "-j", "ACCEPT")
        _in(ns, "iptables", "-A", "FORWARD", "-i", "wan", "-j", "DROP")
        masquerade = ["-j", "MASQUERADE"] + (["--random-fully"] if home.nat == "symmetric" else [])
        _in(ns, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "wan", *masquerade)
        if home.nat == "full-cone":
            for protocol in ("tcp", "udp"):
                _in(ns, "iptables", "-t", "nat", "-A", "PREROUTING", "-i", "wan", "-p", protocol, "-j", "DNAT",
                    "--to-destination", host)

    def assert_isolated(self) -> None:
        """Every namespace routes only within the plan (55.55.0.0/16 and the homes), with no default route but a
        home host's, to its router; no IPv6 route at all. Raises RuntimeError otherwise."""
        gateways = {home.host.ns: home.gateway for home in self.built_homes if home.host is not None}
        for ns in self.namespaces:
            for route in json.loads(_run("ip", "-4", "-j", "-n", ns, "route", "show", "table", "all")):
                if route.get("table") == "local" or route.get("type") in ("local", "broadcast"):
                    continue
                dst = route["dst"]
                if dst == "default":
                    if gateways.get(ns) != route.get("gateway"):
                        raise RuntimeError(f"{ns}: a default route {route}: it could lead off the machine")
                elif not any(ipaddress.ip_network(dst).subnet_of(net) for net in (PUBLIC, HOME)):
                    raise RuntimeError(f"{ns}: a route outside the plan: {route}")
            if (six := json.loads(_run("ip", "-6", "-j", "-n", ns, "route", "show", "table", "all") or "[]")):
                raise RuntimeError(f"{ns}: IPv6 routes {six}")

    # -- what runs inside -----------------------------------------------------------------------------------------

    def spawn(self, machine: Machine | str, argv: list[str], **popen: object) -> subprocess.Popen:
        """Start `argv` in a namespace, without SWARMPROXY_PRIVATE_NETWORK, from the tree's root."""
        ns = machine.ns if isinstance(machine, Machine) else machine
        process = subprocess.Popen([_tool("ip") or "ip", "netns", "exec", ns, *argv], cwd=ROOT,
                                   env=inside_environment(), **popen)
        self.processes.append(process)
        return process

    def _start_dht(self) -> None:
        """A stock libtorrent node in each DHT namespace, each told of the others (all on `DHT_PORT`)."""
        nodes = self.dht
        started = []
        for machine in nodes:
            others = [f"{m.address}:{DHT_PORT}" for m in nodes if m is not machine]
            started.append(self.spawn(machine, [sys.executable, "-m", "bench.stock_dht_node", machine.address,
                                                str(DHT_PORT), *others],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for process in started:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT)
            line = process.stdout.readline() if ready else ""
            if not line.strip().isdigit():
                raise RuntimeError(f"a stock DHT node did not start ({process.poll()})")
            self.dht_ports.append(int(line))

    def _start_miniupnpd(self, home: Home) -> None:
        assert self.scratch is not None and home.host is not None
        directory = self.scratch / f"upnp-r{home.index}"
        directory.mkdir()
        lan = ipaddress.ip_network(f"{home.gateway}/24", strict=False)
        (directory / "miniupnpd.conf").write_text(UPNP_CONF.format(
            uuid=f"{secrets.token_hex(4)}-{secrets.token_hex(2)}-{secrets.token_hex(2)}-{secrets.token_hex(2)}-"
                 f"{secrets.token_hex(6)}", leases=directory / "leases", lan=lan))
        log = directory / "miniupnpd.log"
        with open(log, "wb") as out:
            process = self.spawn(home.router, [_tool("miniupnpd") or "miniupnpd", "-d", "-f",
                                               str(directory / "miniupnpd.conf"), "-P", str(directory / "pid")],
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while UPNP_READY not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"miniupnpd did not start in {home.router}: {log.read_text(errors='replace')}")
            time.sleep(0.05)  # polling its log: it says nothing else when it is ready

    def agent(self, machine: Machine) -> Agent:
        """The machine's `bench.netns_agent` (started on first use)."""
        if machine.name not in self.agents:
            process = self.spawn(machine, [sys.executable, "-m", "bench.netns_agent", machine.name],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.agents[machine.name] = Agent(process)
        return self.agents[machine.name]

    def start_node(self, machine: Machine, directory: pathlib.Path, *args: str) -> Node:
        """`swarmproxy run` in `machine`'s namespace: the proxy and admin API on its 127.0.0.1, our own DHT off, the
        peer port on the machine's address, the Mainline DHT through the stock nodes; `args` add flags."""
        directory.mkdir(parents=True, exist_ok=True)
        ready, log_path = directory / "ready.json", directory / "node.log"
        argv = [sys.executable, "-m", "proxy.cli", "run", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
                "--data-dir", str(directory / "data"), "--dht-listen", "off", "--peer-listen", f"{machine.address}:0",
                "--no-lan-discovery", "--transport", "both", "--mainline-bootstrap", ",".join(self.bootstrap()),
                *args]
        with open(log_path, "wb") as out:
            process = self.spawn(machine, argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"swarmproxy did not start ({process.poll()}): "
                                   f"{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)  # the ready file appears once it listens
        return Node(machine, process, json.loads(ready.read_text()), log_path, self.agent(machine))

    def close(self) -> None:
        tear_down(self.processes, self.namespaces)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Topology:
        try:
            return self.build()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


# miniupnpd's chains (its defaults: one table `inet filter` for filter and NAT), the router's firewall and its
# masquerade around them, as /etc/miniupnpd/nft_init.sh makes them on a real router, plus what a router needs to
# forward at all: replies, and everything from the LAN.
UPNP_RULES = """
table inet filter {
    chain forward {
        type filter hook forward priority 0; policy drop;
        ct state established,related accept
        iifname "lan" oifname "wan" accept
        jump miniupnpd
    }
    chain miniupnpd {
    }
    chain prerouting {
        type nat hook prerouting priority -100; policy accept;
        jump prerouting_miniupnpd
    }
    chain postrouting {
        type nat hook postrouting priority 100; policy accept;
        jump postrouting_miniupnpd
        oifname "wan" masquerade
    }
    chain prerouting_miniupnpd {
    }
    chain postrouting_miniupnpd {
    }
}
"""
# secure_mode: a LAN host may map only its own address; the allow rule: any LAN host, unprivileged ports only.
UPNP_CONF = """ext_ifname=wan
listening_ip=lan
http_port=0
enable_natpmp=yes
enable_upnp=yes
secure_mode=yes
system_uptime=yes
uuid={uuid}
lease_file={leases}
allow 1024-65535 {lan} 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
"""


def main(argv: list[str] | None = None) -> int:
    from bench.nat_matrix import format_matrix, run_matrix

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--homes", default=",".join(kind for kind in NAT_KINDS for _ in range(2)),
                        help="the homes' NATs, comma separated, of " + ", ".join(NAT_KINDS) + " (default: two of "
                             "each, so that every pair of kinds has a cell)")
    parser.add_argument("--dht-nodes", type=int, default=3, help="stock Mainline DHT nodes (default: 3)")
    parser.add_argument("--publics", type=int, default=2,
                        help="machines on the public network, also the observers of the NATs' mappings (default: 2; "
                             "at least 2)")
    parser.add_argument("--rate", type=parse_rate, default=None, help="shape each home's WAN link (bytes/s)")
    parser.add_argument("--json", action="store_true", help="print the matrix as JSON")
    args = parser.parse_args(argv)
    if args.publics < 2:
        parser.error("--publics must be at least 2 (two observers tell the NATs' mapping behaviour)")
    if (why := netns_missing()) is not None:
        print(f"internet_netns: {why}", file=sys.stderr)
        return 2
    homes = tuple(kind.strip() for kind in args.homes.split(",") if kind.strip())
    # Ended by SIGTERM as by Ctrl-C: the topology is deleted on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    started = time.monotonic()
    with Topology(args.dht_nodes, args.publics, homes, args.rate) as topology:
        built = time.monotonic()
        result = run_matrix(topology)
        result["build_s"] = round(built - started, 3)
        result["matrix_s"] = round(time.monotonic() - built, 3)
    print(json.dumps(result, indent=2) if args.json else format_matrix(result))
    return 0 if result["unexpected"] == [] else 1


if __name__ == "__main__":
    sys.exit(main())
