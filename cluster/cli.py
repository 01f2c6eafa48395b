"""cluster overlay mode: push files to many hosts, topology-aware, coordinated through redis

    swarmproxy cluster keygen -o OWNER.key        (prints the public key agents trust)
    swarmproxy cluster admit --key OWNER.key --name HOST -o HOST.identity   (one per agent host)
    swarmproxy cluster agent --redis URL --rack R --dc D --trust-key KEY --identity HOST.identity
                             [--listen HOST:PORT] [--data-dir DIR]
    swarmproxy cluster push FILE --redis URL --key OWNER.key [--priority N] [--hosts PATTERN]
    swarmproxy cluster status [--json] [--watch] [--trust-key KEY]
    swarmproxy cluster cancel ID --key OWNER.key

Found by `swarmproxy` through the `swarmproxy.commands` entry point (pyproject.toml). Every error is one line on
stderr and an exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import re
import signal
import socket
import sys
import time

from cluster.errors import BadRecord, ClusterError, ConfigError
from cluster.identity import Gate, Identity
from cluster.intent import CANCEL, SignedIntent, SigningKey, public_key
from cluster.patience import GIVE_UP_AFTER
from cluster.records import DISK_RESERVE, NAMESPACE, RECONCILE_EVERY, TRANSFER_TTL, check_name
from cluster.redis_url import first_host
from cluster.throttle import RESERVE, Capacities
from swarm.cli import default_data_dir
from swarm.content.sizes import format_size, parse_size

__all__ = ["main"]

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
REDIS_ENV = "SWARMPROXY_REDIS"
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)(i?)(?:B/s|b/s|bit/s)?\s*$")


def parse_rate(text: str) -> float | None:
    """A rate in bytes/s: 125000000, 125M, 1.5G, 100Mi ("0" or "none": unlimited); "bit/s" or "b/s" reads bits."""
    if text.strip().lower() in ("0", "none", "unlimited"):
        return None
    match = _RATE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate (e.g. 125M, 1G, 100Mi)")
    number, prefix, binary = float(match.group(1)), match.group(2).lower(), match.group(3)
    scale = (1024 if binary else 1000) ** {"": 0, "k": 1, "m": 2, "g": 3}[prefix]
    value = number * scale
    if text.strip().endswith(("b/s", "bit/s")) and not text.strip().endswith("B/s"):
        value /= 8
    return value or None


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def _name(kind: str):
    def parse(text: str) -> str:
        try:
            return check_name(kind, text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def reachable_host(redis_url: str) -> str:
    """The address other hosts reach us at: the one our traffic to redis leaves from (no packet is sent)."""
    target = first_host(redis_url) or "127.0.0.1"  # a Sentinel URL's first sentinel: the same network
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((target, 9))
        return probe.getsockname()[0]
    return "127.0.0.1"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarmproxy cluster",
        description="Push a file from one host to many inside a datacenter. An agent runs on every host "
                    "('cluster agent'); 'cluster push' publishes a file's manifest in redis and seeds it; agents "
                    "fetch verified blocks from each other along the overlay (rack, then datacenter, then the "
                    "root group where the seeder sits: only two representants per rack and five per "
                    "datacenter cross a level). See docs/cluster.md.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--redis", default=os.environ.get(REDIS_ENV, DEFAULT_REDIS), metavar="URL",
                         help=f"the coordination redis: redis://[USER:PASSWORD@]HOST:PORT/0 (rediss:// for TLS, "
                              f"?ssl_ca_certs=FILE), or the primary a Sentinel manages, followed through "
                              f"failovers: redis+sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT,.../SERVICE "
                              f"(rediss+sentinel:// for TLS; ?sentinel_password=... if the sentinels ask for "
                              f"one; docs/cluster.md). Default: ${REDIS_ENV}, which keeps passwords off the "
                              f"command line, or {DEFAULT_REDIS}")
        sub.add_argument("--namespace", default=NAMESPACE, metavar="PREFIX",
                         help=f"prefix of every redis key, to run several clusters on one redis "
                              f"(default: {NAMESPACE})")
        sub.add_argument("-v", "--verbose", action="store_true", help="log more (debug)")

    agent = commands.add_parser(
        "agent", help="run the agent of this host (long-running; one per host)",
        description="Join the overlay for every transfer pushed to this host: fetch its blocks from the "
                    "peers the overlay allows (every block verified against the pushed manifest before it is "
                    "stored), serve them to others, write the finished file to DATA_DIR/files/. Keeps going when "
                    "redis is away (retrying every period) and resumes after a restart from the block store.")
    common(agent)
    agent.add_argument("--rack", required=True, type=_name("rack"), help="this host's rack (letters, digits, .-_)")
    agent.add_argument("--trust-key", dest="trust_keys", action="append", required=True, metavar="KEY",
                       help="a public key (swarmproxy-cluster-ed25519:...) whose signed pushes and cancels this "
                            "agent acts on; repeat for several owners. Anything else in redis is ignored")
    agent.add_argument("--identity", type=pathlib.Path, required=True, metavar="FILE",
                       help="this agent's key and the owner's admission of it (from 'cluster admit'): everything "
                            "it reports is signed with it, and other agents and pushes believe only admitted agents")
    agent.add_argument("--dc", required=True, type=_name("dc"), help="this host's datacenter")
    agent.add_argument("--listen", type=_address, default=None, metavar="HOST:PORT",
                       help="peer port; other hosts connect to HOST (default: the address we reach redis from, "
                            "port 0: any free port)")
    agent.add_argument("--name", default=None,
                       help="this host's name in 'status' and --hosts (default: the name its identity was admitted "
                            "under; another is refused)")
    agent.add_argument("--data-dir", type=pathlib.Path, default=None, metavar="DIR",
                       help="block store, node id and finished files (default: $XDG_DATA_HOME/swarmproxy/cluster)")
    agent.add_argument("--reconcile", type=float, default=RECONCILE_EVERY, metavar="SECONDS",
                       help=f"how often state is rewritten and re-read from redis (default: {RECONCILE_EVERY:g})")
    for level, what in (("rack", "to peers in this rack"), ("dc", "to other racks of this DC"),
                        ("outside", "to other DCs and the seeder"), ("host", "of this host, all levels")):
        agent.add_argument(f"--{level}-capacity", type=parse_rate, default=None, metavar="RATE",
                           help=f"upload capacity {what}, bytes/s (125M, 1G, 800Mbit/s; default: unlimited)")
    agent.add_argument("--topology", type=pathlib.Path, default=None, metavar="FILE",
                       help='capacities from a JSON file: {"rack": "1G", "dc": "500M", "outside": "100M", '
                            '"host": "1G"}; flags override it')
    agent.add_argument("--metrics", type=_address, default=None, metavar="HOST:PORT",
                       help="serve Prometheus metrics there: bytes by level, throttle limits, role, pieces "
                            "(default: none)")
    agent.add_argument("--reserve", type=float, default=RESERVE, metavar="FRACTION",
                       help=f"part of each capacity left for other traffic (default: {RESERVE:g})")
    agent.add_argument("--disk-reserve", type=parse_size, default=DISK_RESERVE, metavar="BYTES",
                       help="disk space of the data dir a transfer may never take: one that would is refused, and "
                            f"the push reports it (k, M, G, T: powers of 1024; default: {format_size(DISK_RESERVE)})")

    push = commands.add_parser(
        "push", help="publish a file and seed it until every agent has it",
        description="Hash FILE, publish its manifest (root and hash layer) in redis as a transfer, and seed it "
                    "until every targeted agent alive has FINISHED (agents that join meanwhile included). "
                    "Prints a JSON summary on stdout: transfer id, seconds, and the seeder's upload ratio.")
    common(push)
    push.add_argument("file", type=pathlib.Path, metavar="FILE")
    push.add_argument("--key", type=pathlib.Path, required=True, metavar="FILE",
                      help="the owner's private key (from 'cluster keygen'): agents act only on signed pushes")
    push.add_argument("--trust-key", dest="trust_keys", action="append", default=[], metavar="KEY",
                      help="another owner's public key whose admitted agents this push believes too (default: only "
                           "agents admitted with --key)")
    push.add_argument("--priority", type=int, default=0, metavar="N",
                      help="higher first: agents fetch one transfer at a time (default: 0)")
    target = push.add_mutually_exclusive_group()
    target.add_argument("--hosts", default="*", metavar="PATTERN",
                        help="agents taking part: a glob on DC/RACK/NAME, e.g. 'dc1/*/*' (default: all)")
    target.add_argument("--all", dest="hosts", action="store_const", const="*", help="every agent (the default)")
    push.add_argument("--listen", type=_address, default=None, metavar="HOST:PORT",
                      help="where agents connect to the seeder (default: the address we reach redis from)")
    push.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                      help="give up (exit 1) if not every agent finished by then (default: wait)")
    push.add_argument("--give-up-after", type=float, default=GIVE_UP_AFTER, metavar="SECONDS",
                      help="stop waiting for an agent whose verified blocks have not grown for this long while it "
                           "was fetching, or that went away (its host died) for this long (time redis was "
                           "unreachable does not count); the push then exits 1 naming it. Keep it above the "
                           "agents' own recovery: work stealing after 10 s, a fetch restarted after 60 s without "
                           f"a block (default: {GIVE_UP_AFTER:g})")
    push.add_argument("--no-wait", dest="wait", action="store_false",
                      help="return once published (only for content agents already hold)")
    push.add_argument("--reconcile", type=float, default=RECONCILE_EVERY, metavar="SECONDS",
                      help=f"how often the transfer is rewritten in redis and progress read (default: "
                           f"{RECONCILE_EVERY:g})")
    push.add_argument("--upload-rate", type=parse_rate, default=None, metavar="RATE",
                      help="the seeder's upload limit, all agents together, bytes/s on the wire (TCP/IP headers "
                           "counted: about 4.6 %% over the payload) (default: unlimited)")
    push.add_argument("--data-dir", type=pathlib.Path, default=None, metavar="DIR",
                      help="where the seeder's block store links FILE (default: a temporary directory; "
                           "use one on FILE's filesystem so the file is linked, not copied)")
    push.add_argument("--dc", type=_name("dc"), default=None,
                      help="the datacenter of the host pushing, with --rack, when it is one of the racks' hosts: "
                           "that rack's uplink then carries the seeder's copy out, so the plan draws no other "
                           "rack's blocks out through it, if the DC's other racks can fill its slots (default: "
                           "the seeder is outside every rack)")
    push.add_argument("--rack", type=_name("rack"), default=None, help="the rack of the host pushing (with --dc)")
    push.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

    status = commands.add_parser("status", help="show transfers: progress per location, representants, ETA",
                                 description="Per transfer and per location (DC/rack): progress, rates, "
                                             "representants, ETA, who is PENDING or FINISHED.")
    common(status)
    status.add_argument("--json", action="store_true", help="print the snapshot as JSON, for scripts")
    status.add_argument("--watch", action="store_true", help="redraw every second until interrupted")
    status.add_argument("--trust-key", dest="trust_keys", action="append", default=[], metavar="KEY",
                        help="show only what agents this owner key admitted reported, signed (repeatable; "
                             "default: every record in redis, unverified)")

    cancel = commands.add_parser("cancel", help="cancel a transfer",
                                 description="Agents stop fetching transfer ID and drop what they fetched of it "
                                             "(finished copies stay in their files/).")
    common(cancel)
    cancel.add_argument("transfer", metavar="ID", help="the transfer id (or a unique prefix), from 'status'")
    cancel.add_argument("--key", type=pathlib.Path, required=True, metavar="FILE",
                        help="the owner's private key: agents act only on signed cancels")

    keygen = commands.add_parser(
        "keygen", help="make the owner's key: pushes and cancels are signed with it, agents trust its public half",
        description="Write a new Ed25519 private key to FILE (mode 0600; never over an existing file) and print "
                    "its public key, which every agent is started with (--trust-key). Keep FILE where only the "
                    "cluster's owner can read it: whoever holds it can push to every agent.")
    keygen.add_argument("-o", "--output", type=pathlib.Path, required=True, metavar="FILE",
                        help="where to write the private key")
    keygen.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)

    admit = commands.add_parser(
        "admit", help="make an agent's identity: its own key, admitted by the owner's",
        description="Write a new agent identity to FILE (mode 0600; never over an existing file): an Ed25519 key "
                    "of its own and the owner's signature admitting it as NAME. Copy FILE to the agent's host "
                    "only and start the agent with --identity FILE. Agents and pushes believe only the reports "
                    "of admitted agents: a host registered in redis without one is ignored.")
    admit.add_argument("--key", type=pathlib.Path, required=True, metavar="FILE", help="the owner's private key")
    admit.add_argument("--name", required=True, type=_name("agent name"),
                       help="the agent's name (in 'status' and --hosts): usually its host name")
    admit.add_argument("-o", "--output", type=pathlib.Path, required=True, metavar="FILE",
                       help="where to write the identity")
    admit.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)
    return parser


def _loop_factory():
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _run(coro_fn) -> int:
    async def guarded() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        return await coro_fn(stop)

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(guarded())


def _capacities(args: argparse.Namespace) -> Capacities:
    values: dict[str, float | None] = {}
    if args.topology is not None:
        try:
            data = json.loads(args.topology.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the topology file {args.topology}: {exc}") from None
        for key in ("rack", "dc", "outside", "host"):
            if key in data:
                try:
                    values[key] = parse_rate(str(data[key]))
                except argparse.ArgumentTypeError as exc:
                    raise ConfigError(f"{args.topology}: {key}: {exc}") from None
    for key in ("rack", "dc", "outside", "host"):
        flag = getattr(args, f"{key}_capacity")
        if flag is not None:
            values[key] = flag
    return Capacities(**values)


async def _agent(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from cluster.agent import Agent, AgentConfig

    host, port = args.listen or (reachable_host(args.redis), 0)
    if not 0 <= args.reserve < 1:
        raise ConfigError("--reserve must be in [0, 1)")
    trusted = _keys(args.trust_keys)
    identity = Identity.load(args.identity)
    if (problem := identity.admission.verify(trusted)) is not None:
        raise ConfigError(f"{args.identity}: {problem}: start the agent with the --trust-key of the owner who "
                          "admitted it")
    if args.name and args.name != identity.admission.name:
        raise ConfigError(f"--name {args.name!r}: {args.identity} was admitted as {identity.admission.name!r}")
    config = AgentConfig(args.redis, args.dc, args.rack, host, port, args.data_dir or default_data_dir() / "cluster",
                         identity.admission.name, args.namespace, args.reconcile, capacities=_capacities(args),
                         reserve=args.reserve, trusted_keys=trusted, disk_reserve=args.disk_reserve,
                         identity=identity)
    agent = Agent(config)
    if args.metrics is not None:
        from cluster.metrics import serve_metrics
        try:
            serve_metrics(agent, *args.metrics)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {args.metrics[0]}:{args.metrics[1]}: "
                              f"{exc.strerror or exc}") from None
    try:
        await agent.run(stop)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return 0


async def _push(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from cluster.overlay import Location
    from cluster.push import PushConfig, push, result_json

    if not args.file.is_file():
        raise ConfigError(f"{args.file}: not a readable file")
    if not 0 < args.give_up_after < float("inf"):
        raise ConfigError(f"--give-up-after {args.give_up_after:g}: give a number of seconds above 0")
    host, port = args.listen or (reachable_host(args.redis), 0)
    if (args.dc is None) != (args.rack is None):
        raise ConfigError("push: --dc and --rack go together (the rack the pushing host sits in)")
    site = Location(args.dc, args.rack) if args.dc is not None and args.rack is not None else None
    config = PushConfig(args.file, args.redis, args.priority, args.hosts, host, port, data_dir=args.data_dir,
                        namespace=args.namespace, wait=args.wait, timeout=args.timeout, quiet=args.quiet,
                        upload_rate=args.upload_rate, reconcile=args.reconcile, key=SigningKey.load(args.key),
                        trusted=_keys(args.trust_keys), give_up_after=args.give_up_after, site=site)
    result = await push(config, stop)
    print(result_json(result), flush=True)
    return 0


async def _status(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from cluster.coord import Coord
    from cluster.status import render, snapshot

    trusted = _keys(args.trust_keys)
    coord = Coord(args.redis, args.namespace, gate=Gate(trusted) if trusted else None)
    try:
        while True:
            snap = await snapshot(coord)
            if args.json:
                print(json.dumps(snap, indent=2, sort_keys=True), flush=True)
            else:
                if args.watch:
                    print("\x1b[H\x1b[2J", end="")
                print(render(snap), flush=True)
                if not trusted:
                    print("(records as redis holds them, unverified: --trust-key OWNER_KEY shows only what "
                          "admitted agents signed)", flush=True)
            if not args.watch:
                return 0
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            if stop.is_set():
                return 0
    finally:
        await coord.close()


async def _cancel(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from cluster.coord import Coord
    from cluster.errors import NoSuchTransfer

    coord = Coord(args.redis, args.namespace)
    try:
        transfers = await coord.transfers()
        matches = [t for t in transfers if t.startswith(args.transfer.lower())]
        if len(matches) != 1:
            raise NoSuchTransfer(f"no transfer {args.transfer!r}" if not matches else
                                 f"{args.transfer!r} names {len(matches)} transfers: {', '.join(matches)}")
        key = SigningKey.load(args.key)
        try:
            pushed = SignedIntent.load(transfers[matches[0]].intent).intent
        except BadRecord:
            raise ClusterError(f"transfer {matches[0]} carries no signed push: agents never took it up") from None
        cancel = dataclasses.replace(pushed, action=CANCEL, expires=time.time() + TRANSFER_TTL)
        await coord.cancel(matches[0], key.sign(cancel).dump())
        print(f"cancelled transfer {matches[0]}", file=sys.stderr)
        return 0
    finally:
        await coord.close()


async def _keygen(args: argparse.Namespace, stop: asyncio.Event) -> int:
    key = SigningKey.generate()
    key.save(args.output)
    print(key.public, flush=True)
    print(f"wrote the private key to {args.output}; start every agent with --trust-key {key.public}",
          file=sys.stderr)
    return 0


async def _admit(args: argparse.Namespace, stop: asyncio.Event) -> int:
    identity = Identity.issue(SigningKey.load(args.key), args.name)
    identity.save(args.output)
    print(identity.key.public, flush=True)
    print(f"wrote {args.name}'s identity to {args.output}: copy it to that host only, and start its agent with "
          f"--identity FILE", file=sys.stderr)
    return 0


def _keys(texts: list[str]) -> frozenset[str]:
    """Public keys from the command line, each checked now (a clear error for one that is not a key)."""
    for text in texts:
        public_key(text)
    return frozenset(text.strip() for text in texts)


HANDLERS = {"agent": _agent, "push": _push, "status": _status, "cancel": _cancel, "keygen": _keygen,
            "admit": _admit}


def main(argv: list[str] | None = None) -> int:
    """cluster overlay mode: agents, push, status, cancel (coordinated through redis)"""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("swarmproxy.swarm").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    handler = HANDLERS[args.command]
    try:
        return _run(lambda stop: handler(args, stop))
    except ClusterError as exc:
        print(f"swarmproxy cluster: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
