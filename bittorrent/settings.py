"""The embedded libtorrent session's settings: what it may reach, and how much a stranger may take of it. Pure.

Everything that would make the session talk to the world on its own is off, and stays off until a mode turns it
on on purpose (the Internet mode: the BitTorrent DHT, port mapping): BitTorrent's DHT (and so its public bootstrap
routers, whose names are cleared as well), local peer discovery (BEP 14 multicast), UPnP and NAT-PMP. Our torrents
name no tracker, and a seed dials no peer of its own accord (a stranger's peer exchange cannot send it anywhere).
What no setting turns off — a stranger's BEP 55 holepunch `connect` makes libtorrent dial the address it names —
the IP filter stops (`bittorrent.watcher`: no non-public address but those the user lists), and no privileged
port (below 1024) is ever dialled. uTP is off: peers
come over one TCP listener, which `connections_limit` counts whole (libtorrent still binds UDP on the same port
number, and answers nothing there with uTP and the DHT off).

Bounds on a stranger (SECURITY.md, "Listeners a stranger can reach"): at most `MAX_CONNECTIONS` peers at once;
one connection per address and torrent (libtorrent's `allow_multiple_connections_per_ip`, kept off); a bounded
request queue per peer and send buffer per connection; half-open and idle peers time out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import addresses

if TYPE_CHECKING:  # libtorrent's stubs type the pack, so a misspelt setting fails mypy instead of being ignored
    from libtorrent import settings_pack

__all__ = ["MAX_CONNECTIONS", "MAINLINE_ROUTERS", "PRIVATE_NETWORK_ENV", "bootstrap_routers", "may_map_ports",
           "session_settings", "dht_read_only"]

# Peers connected at once, over every torrent: Transmission's and qBittorrent's global default range (200-500),
# kept low because every one can hold a send buffer (`SEND_BUFFER`).
MAX_CONNECTIONS = 200
# Bytes queued to one peer before libtorrent stops reading the disk for it: 512 KiB, two pieces' worth of
# 16 KiB requests in flight many times over, so a peer that never reads holds at most this much.
SEND_BUFFER = 512 * 1024
# Requests one peer may have outstanding: libtorrent's default, a few dozen bytes each (200 peers: ~10 MB at worst);
# 250 cost seeding throughput on loopback (bench/bt_seed.py: 0.82 of a plain libtorrent seed against 0.88-0.99).
MAX_REQUESTS_QUEUED = 2000
HANDSHAKE_TIMEOUT = 10  # seconds a connection may take to say which torrent it wants
PEER_TIMEOUT = 120  # seconds a peer may stay silent (keep-alives come every 2 min)
INACTIVITY_TIMEOUT = 600  # seconds a peer may stay connected with neither side interested in the other


# The BitTorrent Mainline DHT's well-known bootstrap routers (libtorrent's own default list): the public network,
# which only the Internet mode joins, and only where `bootstrap_routers` allows.
MAINLINE_ROUTERS = ("router.bittorrent.com:6881", "router.utorrent.com:6881", "dht.transmissionbt.com:6881",
                    "dht.libtorrent.org:25401")
# Set (to anything) by the test suite, the lab and `swarmproxy demo`: no session of this process, or of any process
# it starts, joins the public network, whatever it is asked (`bootstrap_routers`).
PRIVATE_NETWORK_ENV = "SWARMPROXY_PRIVATE_NETWORK"


def bootstrap_routers(public: bool, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The routers a DHT joining the public Mainline network starts from: none unless `public`, and none ever
    where `PRIVATE_NETWORK_ENV` is set (the one guard between a test, the lab or the demo and the internet)."""
    return MAINLINE_ROUTERS if public and PRIVATE_NETWORK_ENV not in environ else ()


def may_map_ports(public: bool, environ: Mapping[str, str]) -> bool:
    """Whether the session may ask the router for port mappings: UPnP's discovery is a multicast to the whole LAN
    and NAT-PMP a datagram to the gateway, so only the Internet mode, and never where `PRIVATE_NETWORK_ENV` is set
    (whose processes send nothing beyond the machine)."""
    return public and PRIVATE_NETWORK_ENV not in environ


def session_settings(host: str, port: int, *, alert_mask: int, dht_routers: tuple[str, ...] | None = None,
                     port_mapping: bool = False) -> settings_pack:
    """libtorrent's `settings_pack` for our one session, listening on `host:port` (TCP only; port 0: any).
    `dht_routers`: the Mainline DHT on, joined through these `name:port`s (None: the DHT off, as the bridge runs).
    libtorrent keeps a router out of its routing table, so a node by address is told with `add_dht_node`
    instead (`bittorrent.session`). `port_mapping`: UPnP-IGD and NAT-PMP on (`may_map_ports`)."""
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    pack: settings_pack = {
        "listen_interfaces": listen,
        # The port asked for or a clear error, as for every listener of ours: libtorrent would otherwise try the
        # next ten ports, then any (a user's firewall rule or port forward would then point nowhere).
        "max_retry_port_bind": 0, "listen_system_port_fallback": False,
        "enable_dht": dht_routers is not None, "dht_bootstrap_nodes": ",".join(dht_routers or ()),
        "enable_lsd": False, "enable_upnp": port_mapping, "enable_natpmp": port_mapping,
        "enable_outgoing_utp": False, "enable_incoming_utp": False,
        # A seed dials no peer: a stranger's peer exchange (ut_pex) naming 127.0.0.1 or a LAN address made the
        # session connect there (tests/bittorrent/test_pex.py). It only answers those who connect to it.
        "seeding_outgoing_connections": False,
        "no_connect_privileged_ports": True,
        # A download asks for pieces one range at a time (`bittorrent.download`): between two asks it wants none, and
        # libtorrent, finished, closed its seeds as redundant, then waited its 60 s reconnect time for the next ask.
        "close_redundant_connections": False,
        "connections_limit": MAX_CONNECTIONS,
        "allow_multiple_connections_per_ip": False,
        "send_buffer_watermark": SEND_BUFFER,
        "max_allowed_in_request_queue": MAX_REQUESTS_QUEUED,
        "handshake_timeout": HANDSHAKE_TIMEOUT,
        "peer_timeout": PEER_TIMEOUT,
        "inactivity_timeout": INACTIVITY_TIMEOUT,
        "user_agent": "swarmproxy",
        "alert_mask": alert_mask,
    }
    return pack


def dht_read_only(host: str, dht_nodes: Iterable[str], *, mapped: bool, external_is_ours: bool) -> bool:
    """Whether our DHT node is to be read-only (BEP 43: it queries, announces and looks up, but answers no query and
    says so, so that others keep it out of their routing tables): when it sits behind a NAT that maps nothing, on a
    DHT of public nodes. Such a node answers only those it queried a moment before; others that took it into their
    tables wait out their request's timeout every time it is among the closest to a key, and libtorrent sends an
    announcement only when its search is over: on the test internet, two NATed nodes delayed every announcement
    by 15-16 s, 1 s when read-only (SECURITY.md, "Internet mode"; `bench/announce_probe.py`).

    Not read-only: listening on a public address (`host`), a router that mapped the DHT's UDP port (`mapped`), an
    external address that is one of this machine's own (`external_is_ours`: no NAT between), or a DHT of one's own
    whose nodes are all on non-public addresses (a LAN: nobody there is behind our NAT). A name counts as public."""
    if mapped or external_is_ours or addresses.is_public(host):
        return False
    for node in dht_nodes:
        literal = node.rpartition(":")[0].strip("[]")
        if addresses.parse(literal) is None or addresses.is_public(literal):
            return True
    return False
