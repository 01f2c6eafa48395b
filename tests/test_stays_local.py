"""The tests themselves stay on this machine (issue 35 §8): what the suite runs sends nothing to a real network.

Two witnesses:

- in this process, an audit hook (`sys.addaudithook`) sees every connect, sendto, sendmsg, bind and name lookup
  the socket module makes while the suite's configurations run — the `proxy` fixture's proxy, two proxies with
  DHT and block engine as tests/proxy starts them, a DHT swarm as tests/dht starts one, and LAN discovery as
  tests/dht/test_lan.py runs it — and stops (and records) any whose destination is not loopback, and any lookup
  of a name that is not local, before it happens. It runs on asyncio's own loop: uvloop, the loop of tests/proxy
  and of `swarmproxy run`, calls libuv directly and raises no audit event;
- as root, a fresh network namespace with lo plus a veth interface that has an address and the default route:
  `swarmproxy run` with the suite's flags (tests/proxy/conftest.py start_proxy_process) fetches through it, two
  LAN peers find each other as in test_lan.py, and the interface's transmit counter must not move. A node on the
  users' default (LAN discovery on 0.0.0.0) then moves it, so the counter is seen to count.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import replace

import aiohttp
import pytest

from bittorrent.settings import PRIVATE_NETWORK_ENV
from dht.discovery import DhtDiscovery
from dht.identity import NodeIdentity
from dht.node import DhtNode
from proxy.server import ProxyServer
from tests.dht.conftest import TEST_CONFIG, start_swarm, stop_swarm
from tests.proxy.conftest import PROXY_FIXTURE_FLAGS, Origin, body_sha256, proxy_config, start_proxy_process

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIZE = 300_000


# ------------------------------------------------------------------------------------------------ the audit hook


class LeftTheMachine(OSError):
    """Raised by the audit hook in place of a packet (or a lookup) that would leave: callers see a network error."""


class Watch:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (event, destination)
        self.stopped: list[tuple[str, str]] = []


_watch: Watch | None = None
_hooked = False
_SOCKET_EVENTS = {"socket.connect", "socket.sendto", "socket.sendmsg", "socket.bind"}
_LOOKUP_EVENTS = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"}


def _is_loopback(host: object) -> bool:
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _local_lookup(host: object) -> bool:
    """A lookup that asks no DNS server: no name, an address literal, or "localhost" (/etc/hosts, RFC 6761)."""
    if isinstance(host, tuple):  # getnameinfo's sockaddr: a reverse lookup of that address
        return _is_loopback(host[0])
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if host in (None, "", "localhost"):
        return True
    try:
        ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return False
    return True  # a literal is parsed, not looked up; where it leads is checked at connect/sendto/bind


def _local_destination(event: str, sock: socket.socket, address: object) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if _is_loopback(host):
        return True
    try:
        ip = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return False  # a name, resolved inside the call where no getaddrinfo event shows it
    if ip.is_multicast and ip.version == 4:
        if event == "socket.bind":
            return True  # bound to a group: a receive filter; the membership's interface is checked by the sends
        interface = sock.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, 4)
        return _is_loopback(socket.inet_ntoa(interface))  # a LAN beacon, local only if sent out of lo
    return False  # 0.0.0.0 / :: included: a socket bound there listens on every interface


def _audit(event: str, args: tuple) -> None:
    watch = _watch
    if watch is None or not event.startswith("socket."):
        return
    if event in _LOOKUP_EVENTS:
        destination, local = args[0], _local_lookup(args[0])
    elif event in _SOCKET_EVENTS:
        sock, destination = args
        if destination is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return  # sendmsg on a connected socket (its connect was checked), or a Unix socket
        local = _local_destination(event, sock, destination)
    else:
        return
    watch.seen.append((event, repr(destination)))
    if not local:
        watch.stopped.append((event, repr(destination)))
        raise LeftTheMachine(f"{event} {destination!r}: off this machine (tests/test_stays_local.py)")


@contextlib.contextmanager
def watching():
    """Audit (and stop) this process's socket calls for the block. An audit hook cannot be removed: it is installed
    once and does nothing while no block is watching."""
    global _watch, _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    _watch = Watch()
    try:
        yield _watch
    finally:
        _watch = None


def assert_stdlib_loop() -> None:
    # uvloop (tests/proxy's loop, and `swarmproxy run`'s) makes its calls in libuv, not through the socket module: no
    # audit event would fire and the watch would pass blind. Outside tests/proxy the suite runs asyncio's own loop.
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.startswith("asyncio."), f"{type(loop)}: the audit hook cannot see this loop"


# ------------------------------------------------------------------------------------------------ in this process


async def test_the_watch_stops_what_would_leave():
    """The witness works: each kind of call to another network is stopped before anything is sent."""
    assert_stdlib_loop()
    with watching() as watch:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            with pytest.raises(LeftTheMachine):
                probe.sendto(b"x", ("192.0.2.1", 9))
            with pytest.raises(LeftTheMachine):
                probe.bind(("0.0.0.0", 0))
            probe.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("0.0.0.0"))
            with pytest.raises(LeftTheMachine):
                probe.sendto(b"x", ("239.192.152.144", 9))  # multicast out of the default interface
        with pytest.raises(LeftTheMachine):
            socket.getaddrinfo("no-such-host.invalid", 80)
        # ...and through the event loop's transports, which is how the product sends
        transport, protocol = await asyncio.get_running_loop().create_datagram_endpoint(
            _Errors, local_addr=("127.0.0.1", 0))
        transport.sendto(b"x", ("192.0.2.1", 9))
        transport.close()
        assert isinstance(protocol.error, LeftTheMachine)
        with pytest.raises(LeftTheMachine):
            await asyncio.get_running_loop().getaddrinfo("swarmproxy.example", 80)
    assert [event for event, _ in watch.stopped] == ["socket.sendto", "socket.bind", "socket.sendto",
                                                      "socket.getaddrinfo", "socket.sendto", "socket.getaddrinfo"]


class _Errors(asyncio.DatagramProtocol):
    error: Exception | None = None

    def error_received(self, exc: Exception) -> None:
        self.error = exc


class _LanNode(DhtNode):
    """Sets `found` once anybody is in its routing table (as tests/dht/lan_peer.py's node does)."""

    def on_message_from(self, message, address):
        super().on_message_from(message, address)
        if len(self.routing):
            self.found.set()


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _fetch(proxy_url: str, url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url, proxy=proxy_url) as response:
        assert response.status == 200
        return hashlib.sha256(await response.read()).hexdigest()


async def _tunnel(proxy_address: str, origin_port: int) -> bytes:
    host, port = proxy_address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        target = f"127.0.0.1:{origin_port}"
        writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write(f"GET /bytes/10 HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode())
        return await reader.read()
    finally:
        writer.close()


async def test_the_suites_nodes_send_nothing_off_this_machine(tmp_path):
    assert_stdlib_loop()
    origin = await Origin().start()
    servers: list[ProxyServer] = []
    nodes: list[DhtNode] = []
    try:
        with watching() as watch:
            try:
                await _the_suites_nodes(tmp_path, origin, servers, nodes)
            except Exception as exc:
                # A stopped call fails the run further on (a timeout, a failed fetch): say which call it was.
                raise AssertionError(f"{exc!r}; stopped on their way off this machine: {watch.stopped}") from exc
    finally:
        await stop_swarm(nodes)
        for server in reversed(servers):
            await server.stop()
        await origin.stop()
    assert watch.stopped == [], f"stopped on their way off this machine: {watch.stopped}"
    # The hook was not blind: it saw the traffic it judged, LAN beacons included.
    events = {event for event, _ in watch.seen}
    assert {"socket.connect", "socket.sendto", "socket.bind"} <= events, events
    assert any(event == "socket.sendto" and "239.192.152.144" in where for event, where in watch.seen)


async def _the_suites_nodes(tmp_path: pathlib.Path, origin: Origin, servers: list, nodes: list) -> None:
    # The `proxy` fixture's proxy: a relayed GET and a CONNECT tunnel.
    server = ProxyServer(proxy_config(tmp_path / "fixture", **PROXY_FIXTURE_FLAGS))
    servers.append(server)
    await server.start()
    assert await _fetch("http://" + server.addresses["proxy"], f"{origin.url}/bytes/{SIZE}") == body_sha256(SIZE)
    assert (await _tunnel(server.addresses["proxy"], origin.port)).startswith(b"HTTP/1.1 200")
    # Two proxies with DHT and block engine as tests/proxy/test_dht_admin.py starts them, one joined through the
    # other, and a fetch through it.
    first = ProxyServer(proxy_config(tmp_path / "a", dht_listen="127.0.0.1:0", peer_listen="127.0.0.1:0"))
    servers.append(first)
    await first.start()
    second = ProxyServer(proxy_config(tmp_path / "b", dht_listen="127.0.0.1:0", peer_listen="127.0.0.1:0",
                                      bootstrap=[first.addresses["dht"]]))
    servers.append(second)
    await second.start()
    await second._bootstrap_task
    assert second.dht.stats()["routing_table_size"] >= 1
    assert await _fetch("http://" + second.addresses["proxy"], f"{origin.url}/bytes/{SIZE}") == body_sha256(SIZE)
    # A DHT swarm as tests/dht starts one: an announcement and a lookup.
    swarm = await start_swarm(4)
    nodes.extend(swarm)
    root = os.urandom(32)
    await DhtDiscovery(swarm[0]).announce(root, ("127.0.0.1", 7000))
    assert [p async for p in DhtDiscovery(swarm[3]).find_providers(root)]
    # LAN discovery as tests/dht/test_lan.py runs it: two nodes find each other with no bootstrap node.
    lan_config = replace(TEST_CONFIG, lan_discovery=True, lan_port=free_udp_port(), lan_interval_s=0.2)
    pair = [_LanNode(NodeIdentity.generate(), lan_config) for _ in range(2)]
    for node in pair:
        node.found = asyncio.Event()
        nodes.append(node)
        await node.start("127.0.0.1", 0, maintenance=False)
        assert node.lan is not None  # (its interface is what the hook judges, beacon by beacon)
    await asyncio.wait_for(asyncio.gather(*(node.found.wait() for node in pair)), 20)


# ------------------------------------------------------------------------------------------------ in a namespace

VETH, VETH_PEER = "sl0", "sl1"


def _netns_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: it makes a network namespace with an interface that has a default route"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    probe = subprocess.run(["unshare", "--net", "ip", "link", "add", VETH, "type", "veth", "peer", "name", VETH_PEER],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot make a network namespace with a veth pair: {probe.stderr.strip()}"
    return None


@pytest.mark.e2e
def test_a_suite_style_proxy_sends_nothing_out_of_its_namespaces_interface():
    if (why := _netns_missing()) is not None:
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items()
           if k == PRIVATE_NETWORK_ENV or (not k.startswith("SWARMPROXY_") and "proxy" not in k.lower())}
    done = subprocess.run(["unshare", "--net", sys.executable, "-m", "tests.test_stays_local"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["fetched"] == [body_sha256(SIZE)] * 2
    assert result["lan_peers_found_each_other"]
    assert result["lo_tx"] > 0  # it all ran, over loopback
    assert result["suite_tx"] == 0, f"left through {VETH}: {result['frames']}"
    assert result["default_lan_tx"] > 0, "a node beaconing on the default interface went unseen: the counter is blind"


def _tx_packets(interface: str) -> int:
    # /proc/net/dev is this process's namespace (sysfs would still show the host's interfaces).
    for line in pathlib.Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == interface:
            return int(counters.split()[9])
    raise AssertionError(f"no interface {interface}")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _make_network() -> socket.socket:
    """lo, and a veth with an address and the default route: what leaves by a route goes out of VETH. Returns a raw
    socket on its peer, which receives every frame VETH sends (a capture without tcpdump, for the failure message).
    A veth pair, not a dummy interface: this kernel has no dummy driver; the peer stays in this namespace, so even a
    frame the test is wrong about never reaches a real network."""
    _ip("link", "set", "lo", "up")
    _ip("link", "add", VETH, "type", "veth", "peer", "name", VETH_PEER)
    for interface in (VETH, VETH_PEER):
        # IPv6 off on the pair (not on lo): its router solicitations and MLD reports would move the counter on
        # their own. The product's DHT and LAN discovery are IPv4; ::1 stays, and the audit hook checks IPv6.
        with contextlib.suppress(FileNotFoundError):
            pathlib.Path(f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6").write_text("1")
    _ip("addr", "add", "198.18.0.2/24", "dev", VETH)  # RFC 2544's benchmarking range: nobody's network
    _ip("link", "set", VETH_PEER, "up")
    _ip("link", "set", VETH, "up")
    _ip("route", "add", "default", "via", "198.18.0.1")
    capture = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))  # ETH_P_ALL
    capture.bind((VETH_PEER, 0))
    capture.setblocking(False)
    return capture


def _frames(capture: socket.socket) -> list[str]:
    frames = []
    while True:
        try:
            frame = capture.recv(65535)
        except BlockingIOError:
            return frames
        kind = frame[12:14].hex()
        if kind == "0800":  # IPv4: protocol and destination
            frames.append(f"ipv4 proto {frame[23]} to {socket.inet_ntoa(frame[30:34])}")
        elif kind == "0806":
            frames.append(f"arp who-has {socket.inet_ntoa(frame[38:42])}")
        else:
            frames.append(f"ethertype {kind}")


async def _netns_scenario() -> dict:
    """The suite's configurations inside the namespace, then a node on the users' default as the control."""
    result: dict = {}
    capture = _make_network()
    before = {interface: _tx_packets(interface) for interface in ("lo", VETH)}
    origin = await Origin().start()
    processes = []
    with tempfile.TemporaryDirectory(prefix="stays-local-") as scratch:
        tmp = pathlib.Path(scratch)
        try:
            for name in ("a", "b"):
                (tmp / name).mkdir()
                extra = ["--bootstrap", processes[0].ready["dht"]] if processes else []
                processes.append(await start_proxy_process(tmp / name, "--connect-ports", "*", *extra))
            result["fetched"] = [await _fetch(p.url, f"{origin.url}/bytes/{SIZE}") for p in processes]
            result["lan_peers_found_each_other"] = await _lan_peers()
        finally:
            for proc in processes:
                if proc.process.returncode is None:
                    proc.process.terminate()
                    await proc.process.wait()
            await origin.stop()
    result["lo_tx"] = _tx_packets("lo") - before["lo"]
    result["suite_tx"] = _tx_packets(VETH) - before[VETH]
    result["frames"] = _frames(capture)
    # The control: LAN discovery as users get it (DHT on 0.0.0.0, beacons on the default route's interface).
    control = DhtNode(NodeIdentity.generate(), replace(TEST_CONFIG, lan_discovery=True, lan_interface=None,
                                                       lan_port=free_udp_port()))
    await control.start("0.0.0.0", 0, maintenance=False)
    assert control.lan is not None
    control.lan.send_beacon()  # sent by the time it returns: veth transmits synchronously
    await control.stop(save=False)
    result["default_lan_tx"] = _tx_packets(VETH) - before[VETH] - result["suite_tx"]
    capture.close()
    return result


async def _lan_peers() -> bool:
    """tests/dht/test_lan.py's two processes: their beacons and pings, in this namespace."""
    group_port = free_udp_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-m", "tests.dht.lan_peer", str(group_port),
                                                  cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE)
             for _ in range(2)]
    try:
        outputs = [await asyncio.wait_for(proc.communicate(), 30) for proc in procs]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    lines = [[json.loads(line) for line in out.decode().splitlines()] for out, _ in outputs]
    ids = [peer[0]["node_id"] for peer in lines]
    return all(p.returncode == 0 for p in procs) and ids[1] in lines[0][-1]["found"] and ids[0] in lines[1][-1]["found"]


if __name__ == "__main__":  # run by the namespace test, inside `unshare --net`
    print(json.dumps(asyncio.run(_netns_scenario())), flush=True)


def test_no_process_the_suite_or_the_lab_starts_loses_the_guard():
    """A helper that clears the SWARMPROXY_ variables for a process it starts keeps SWARMPROXY_PRIVATE_NETWORK:
    without it, a `swarmproxy run` joins the public Mainline DHT and asks the router for ports. The one exception
    is the test internet's processes, started inside namespaces with no route off the machine (asserted there)."""
    exceptions = {ROOT / "bench" / "internet_netns.py"}
    offenders = []
    for path in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        if path in exceptions:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if 'startswith("SWARMPROXY_")' in line and "PRIVATE_NETWORK_ENV" not in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}")
    assert offenders == []
