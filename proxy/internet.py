"""The node's one BitTorrent session, and the Internet mode on it (docs/ARCHITECTURE.md, "The Internet mode").

One libtorrent session per node (`bittorrent.session.BtSession`), owned here, serves two users: the bridge
(`--bt-listen`: seeding and `swarmproxy get magnet:`, `proxy.bridge`) and the Internet mode, which joins the
BitTorrent Mainline DHT to find peers beyond the LAN and asks the router to map the peer port.

The Internet mode is on by default, as BitTorrent clients are, and off with `--private-network`, with
`--peer-listen off` (nothing to share or find), and wherever `SWARMPROXY_PRIVATE_NETWORK` is set (the test suite,
the lab and `swarmproxy demo`: `bittorrent.settings`; it is also `--private-network`'s variable).
`--mainline-bootstrap HOST:PORT` joins a Mainline DHT of one's own through the nodes named instead of the public
routers (private deployments, labs, tests), even with `--private-network`: the DHT runs, but nothing is asked of a
router unless `--map-ports` says so (a lab behind NATs of its own: `bench/internet_netns.py`), and under the guard
only nodes named by address are kept (a name would be a DNS query) and nothing is asked of a router. `plan`
decides; it is pure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import addresses
from swarm.core.reachability import State
from swarm.errors import PeerError, TransportError
from swarm.net import wire

from .config import Config, HostPort
from .errors import ListenError

if TYPE_CHECKING:
    from bittorrent.mainline import MainlineDirectory
    from bittorrent.mainline_claims import MainlineClaims
    from bittorrent.session import BtSession
    from swarm.discovery.own_claims import OwnClaims
    from swarm.net.transport import Connection
    from swarm.service.node import SwarmNode
    from swarm.service.reach import Reach

    from .engine import SwarmEngine

__all__ = ["Internet", "InternetPlan", "plan"]

log = logging.getLogger("swarmproxy")

# Where a session without --bt-listen listens (on the peer listener's host, any free port): its DHT needs a UDP
# socket, and libtorrent opens TCP on the same port beside it (a BitTorrent peer connecting there finds no torrent
# and is closed, under the same admission).
ANY_ADDRESS = HostPort("0.0.0.0", 0)
# The Mainline DHT's node id and routing table, in the data dir (not under bittorrent/, a scratch directory for
# `swarmproxy get`'s downloads, emptied on first use).
STATE_FILE = ("mainline", "dht.state")
SAVE_EVERY = 15 * 60.0  # seconds between two saves of the table while running
PROBES = 3  # peers asked for a connect-back in one round, each in another network
PROBE_FLOOR = 1.0  # seconds between two rounds at least
PROBE_IDLE = 60.0  # seconds to the next look when the core has nothing due, or no peer took the last round
RENDEZVOUS = 2  # coordinators a node strangers may not reach keeps a rendezvous with, each in another network
RENDEZVOUS_LOOK = 5.0  # seconds between two looks at them: one that ended (a coordinator's idle timeout) is renewed
# Seconds between two KEEPALIVEs on a rendezvous: a NAT forgets a UDP flow that fell silent (30 s for one that saw
# packets one way only, RFC 4787 REQ-5's 2 min at least for one that saw both), and introductions come that way.
RENDEZVOUS_KEEPALIVE = 20.0


@dataclass(frozen=True)
class InternetPlan:
    """What the node's session does: `dht_nodes` None is the DHT off (`why_off` says why)."""

    dht_nodes: tuple[str, ...] | None
    public: bool  # on the public Mainline network, through its well-known routers
    port_mapping: bool
    why_off: str | None = None

    @property
    def on(self) -> bool:
        return self.dht_nodes is not None


def plan(cfg: Config, environ: Mapping[str, str]) -> InternetPlan:
    from bittorrent.settings import PRIVATE_NETWORK_ENV, bootstrap_routers, may_map_ports

    if cfg.peer_listen is None:
        return InternetPlan(None, False, False, "--peer-listen off: nothing to share or find")
    if cfg.mainline_bootstrap:  # a DHT of one's own is not the public network: --private-network allows it
        guarded = PRIVATE_NETWORK_ENV in environ
        # Under the guard, non-public addresses only: a name would be a DNS query, and a name or a public address
        # could be a public router.
        nodes = tuple(f"[{n.host}]:{n.port}" if ":" in n.host else f"{n.host}:{n.port}" for n in cfg.mainline_bootstrap
                      if not guarded or (addresses.parse(n.host) is not None and not addresses.is_public(n.host)))
        if not nodes:
            return InternetPlan(None, False, False, f"{PRIVATE_NETWORK_ENV} is set and --mainline-bootstrap names "
                                "no node by a non-public address")
        return InternetPlan(nodes, False, cfg.map_ports and not guarded)
    if cfg.private_network:
        return InternetPlan(None, False, False, "--private-network")
    if not (routers := bootstrap_routers(True, environ)):
        return InternetPlan(None, False, False, f"{PRIVATE_NETWORK_ENV} is set (the test suite, the lab or the demo)")
    return InternetPlan(routers, True, may_map_ports(True, environ))


def probe_candidates(answered: list[tuple[str, int]], count: int = PROBES,
                     held: Collection[tuple[str, int]] = ()) -> list[tuple[str, int]]:
    """Up to `count` of the nodes that answered lately, newest first, one per network, none in the network of one
    `held` already: a connect-back counts against us only with failures from two networks
    (`swarm.core.reachability`), and a rendezvous in another network survives the first's trouble."""
    chosen: list[tuple[str, int]] = []
    networks = {addresses.network_prefix(peer[0]) for peer in held}
    for peer in reversed(answered):
        network = addresses.network_prefix(peer[0])
        if network not in networks and len(chosen) < count:
            networks.add(network)
            chosen.append(peer)
    return chosen


class Internet:
    """The session, when anything needs one, and the Mainline directory on its DHT (`start`, `stop`)."""

    def __init__(self, cfg: Config, environ: Mapping[str, str] | None = None) -> None:
        self.cfg = cfg
        # The non-public networks BitTorrent peers may be on: the address literals of --share-private-origins.
        self.reachable = tuple(filter(None, (addresses.canonical_host(host) for host, _ in cfg.share_private_origins)))
        self.plan = plan(cfg, os.environ if environ is None else environ)
        self.session: BtSession | None = None
        self.directory: MainlineDirectory | None = None
        self.claims: MainlineClaims | None = None  # claims kept by their publishers, found on the DHT
        self.own_claims: OwnClaims | None = None  # this node's, which its peer port answers queries from
        self.first_run = False  # no table saved by an earlier run: the consent message is shown in full
        self._saving: asyncio.Future[None] | None = None
        self._probing: asyncio.Future[None] | None = None
        self._meeting: asyncio.Future[None] | None = None
        # Coordinators this node keeps a rendezvous with while strangers may not reach it (`_keep_rendezvous`).
        self.rendezvous: dict[tuple[str, int], Connection] = {}
        self._quic: SwarmNode | None = None
        self._reach: Reach | None = None  # the engine's, once it listens

    @property
    def needed(self) -> bool:
        return self.plan.on or self.cfg.bt_listen is not None

    async def start(self) -> tuple[str, int] | None:
        """Start the session if the bridge or the Internet mode needs one; its listening address."""
        if not self.needed:
            return None
        from bittorrent.errors import ListenFailed
        from bittorrent.mainline import MainlineDirectory
        from bittorrent.mainline_claims import MainlineClaims
        from bittorrent.session import BtSession
        from swarm.discovery.own_claims import OwnClaims

        # Without --bt-listen, on the peer listener's host: a node bound to one address is found at that one.
        peer = self.cfg.peer_listen
        listen = self.cfg.bt_listen or (HostPort(peer.host, 0) if peer is not None else ANY_ADDRESS)
        state = self.cfg.data_dir.joinpath(*STATE_FILE)
        self.first_run = self.plan.on and not state.exists()
        self.session = BtSession(listen.host, listen.port, reachable=self.reachable, dht_nodes=self.plan.dht_nodes,
                                 state_file=state if self.plan.public else None,
                                 port_mapping=self.plan.port_mapping)
        try:
            address = await self.session.start()
        except ListenFailed as exc:
            self.session = None
            raise ListenError(f"{exc} (--bt-listen)" if self.cfg.bt_listen else
                              f"{exc} (the Internet mode's BitTorrent session; --private-network runs none)") from None
        if self.plan.on:
            self.directory = MainlineDirectory(self.session)
            self.own_claims = OwnClaims()
            self.claims = MainlineClaims(self.directory, self.own_claims)
        if self.session.state_file is not None:
            self._saving = asyncio.ensure_future(self._save_every(SAVE_EVERY))
        return address

    async def _save_every(self, seconds: float) -> None:
        """The table is written at stop, and every `seconds` before: a node that is killed rejoins through the
        nodes it knew (and its first-run message is not shown again)."""
        while self.session is not None:
            await asyncio.sleep(seconds)  # (not at once: the table is still empty then, and would replace the saved)
            if self.session is not None and self.session.dht_node_count:
                await self.session.save_state()

    def peer_port(self, port: int, engine: SwarmEngine) -> None:
        """The block engine listens on `port`: claims can be made and asked for (`engine.ask_claims`) from now on;
        the router is asked to map the port (TCP, and UDP for QUIC), and what it says goes to the engine's
        reachability (`swarm.core.reachability`), which peers' connect-backs feed too and which decides whether
        the port is announced at all."""
        reach = engine.service.reach
        loop = asyncio.get_running_loop()
        if self.claims is not None and self.directory is not None:
            self.claims.peer_port, self.claims.ask, self.claims.punch = port, engine.ask_claims, engine.punch
            self.claims.transports = engine.transport_flags
            # (a node behind a NAT with a rendezvous is reached through a punch: its address works for our nodes)
            self.directory.may_announce = lambda: reach.reachability.announce(loop.time()) or bool(self.rendezvous)
            self._probing = asyncio.ensure_future(self._probe(engine, self.claims))
            self._quic = engine.nodes.get("quic")
            if self._quic is not None:
                self._quic.punching.ttl = self.cfg.punch_ttl
                self._meeting = asyncio.ensure_future(self._keep_rendezvous(self._quic, reach, self.claims))
        if self.session is not None and self.plan.port_mapping:
            def heard(protocol: str, external: int | None, why: str | None) -> None:
                transport = wire.Transport.QUIC if protocol == "udp" else wire.Transport.TCP
                if external is not None:
                    reach.reachability.mapped(external, loop.time(), transport)
                else:
                    reach.reachability.not_mapped(why or "refused", loop.time(), transport)
            self.session.on_port_map = heard
            self.session.map_port(port)
        self._reach = reach

    async def _probe(self, engine: SwarmEngine, claims: MainlineClaims) -> None:
        """Ask nodes of ours that answered a claims query lately, in different networks, to connect back to us,
        whenever the reachability core says a probe is due."""
        reachability = engine.service.reach.reachability
        loop = asyncio.get_running_loop()
        while True:
            due = reachability.next_probe(loop.time())
            await asyncio.sleep(max(PROBE_FLOOR, (due if due is not None else loop.time() + PROBE_IDLE) - loop.time()))
            probed = False
            for peer in probe_candidates(list(claims.answered_by)):
                try:
                    outcome = await engine.service.probe_reachability(peer)
                except (PeerError, TransportError, TimeoutError, OSError) as exc:
                    log.debug("reachability: %s:%d did not take a probe: %s", *peer, str(exc) or type(exc).__name__)
                    continue
                probed = True
                log.info("reachability: %s:%d connecting back: %s", *peer,
                         ", ".join(f"{name} {result}" for name, result in outcome.items()))
            if not probed:  # nobody to ask, or nobody took it: the core learnt nothing, so its due time stands
                await asyncio.sleep(PROBE_IDLE)

    async def _keep_rendezvous(self, node: SwarmNode, reach: Reach, claims: MainlineClaims) -> None:
        """While strangers may not reach our QUIC port (not known reachable), keep a rendezvous (`swarm.service.punch`)
        with up to `RENDEZVOUS` nodes of ours that answered lately, in different networks, renewed when one ends:
        a node of ours that cannot connect to us asks one of them to introduce it (`MainlineClaims`), and both
        punch. A coordinator sees the session come from our NAT's mapping of our listening socket: the address we
        are announced at, where the NAT keeps the port (not a symmetric one)."""
        loop = asyncio.get_running_loop()
        kept_alive = loop.time()
        while True:
            held = self.rendezvous
            for peer, connection in list(held.items()):
                if connection.close_reason is not None:
                    del held[peer]
            if reach.reachability.state(wire.Transport.QUIC, loop.time()) is State.REACHABLE:
                for connection in held.values():
                    connection.abort("reachable: no rendezvous needed")
                held.clear()
            else:
                for peer in probe_candidates(list(claims.answered_by), RENDEZVOUS - len(held), held):
                    try:
                        held[peer] = await node.punching.rendezvous(node, peer)
                        log.info("hole punching: a rendezvous with %s:%d", *peer)
                    except (PeerError, TransportError, TimeoutError, OSError) as exc:
                        log.debug("hole punching: no rendezvous with %s:%d: %s", *peer, str(exc) or type(exc).__name__)
                if loop.time() - kept_alive >= RENDEZVOUS_KEEPALIVE:
                    kept_alive = loop.time()
                    for connection in held.values():
                        with contextlib.suppress(TransportError):
                            connection.send_nowait(wire.KeepAlive())
            await asyncio.sleep(RENDEZVOUS_LOOK)

    def consent_lines(self) -> list[str]:
        """What the start-up block says of the public network: which networks, what strangers see, how to stay
        off; in full on the first run."""
        if not self.plan.on:
            return [f"  public network: off ({self.plan.why_off})"]
        if not self.plan.public:
            router = ("the router is asked to map the peer port (--map-ports)" if self.plan.port_mapping
                      else "nothing asked of the router")
            return [f"  Mainline DHT of your own through {', '.join(self.plan.dht_nodes or ())} "
                    f"(--mainline-bootstrap); {router}"]
        lines = ["  public network: on the BitTorrent Mainline DHT (the Internet mode; --private-network stays off "
                 "it); the router is asked to map the peer port (UPnP, NAT-PMP)"]
        if self.first_run:
            lines += ["  first run: this node now joins the public BitTorrent DHT through its well-known routers "
                      f"({', '.join(self.plan.dht_nodes or ())}). Strangers on it can see this node's address, and",
                      "  that it shares contents under keys derived from hashes (never a URL); downloads that are "
                      "private, credentialed or from private networks are never announced (SECURITY.md)."]
        return lines

    def status(self) -> dict[str, object]:
        session = self.session
        reach = self._reach
        shown: dict[str, object] = {"mainline": self.plan.on, "public": self.plan.public,
                                    "why_off": self.plan.why_off}
        if session is not None:
            if self.plan.on:
                shown["dht_nodes"] = session.dht_status().get("nodes")  # (as libtorrent counted last time asked)
            shown["nat"] = session.nat_status()
        if reach is not None and self.plan.on:
            shown["reachability"] = reach.status()
        if self._quic is not None and self.claims is not None:
            punching = self._quic.punching
            shown["hole_punching"] = {"rendezvous": [f"{host}:{port}" for host, port in self.rendezvous],
                                      "punched_to": self.claims.punched, "introduced": punching.coordinator.introduced,
                                      "introductions_acted_on": punching.punched}
        return shown

    async def stop(self) -> None:
        for task in (self._saving, self._probing, self._meeting):
            if task is not None:
                task.cancel()
        if self.claims is not None:
            self.claims.close()
        if self.directory is not None:
            self.directory.close()
        if self.session is not None:
            await self.session.stop()  # saves the DHT's table first
