"""`DhtConfig`: every setting of a DHT node, with the defaults a node on the internet uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from dht.lan import DEFAULT_GROUP, DEFAULT_PORT
from dht.storage import StoreLimits


@dataclass(frozen=True)
class DhtConfig:
    k: int = 20  # bucket size and lookup width
    alpha: int = 3  # parallel queries per lookup
    replicas: int = 20  # how many of the closest nodes store each of our records
    rpc_timeout_s: float = 1.0
    lookup_deadline_s: float = 5.0
    provider_ttl_s: int = 1800
    manifest_ttl_s: int = 6 * 3600
    refresh_fraction: float = 0.5
    request_rate: float = 50.0  # requests per second per source, sustained
    request_burst: float = 200.0
    # "ip": limits and store quotas per source IP (right on the internet). "address": per IP:port, for many
    # nodes sharing one IP (loopback tests, or several nodes behind one NAT address on purpose).
    rate_limit_by: str = "ip"
    # At most this many routing-table contacts per IP address (None: no cap; see RoutingTableFacade).
    routing_contacts_per_ip: int | None = 4
    store_limits: StoreLimits = field(default_factory=StoreLimits)
    max_records_per_reply: int = 16
    maintenance_interval_s: float = 30.0
    save_interval_s: float = 300.0
    # LAN discovery (dht.lan) is on by default: nodes on one link find each other with no bootstrap node.
    lan_discovery: bool = True
    lan_group: str = DEFAULT_GROUP
    lan_port: int = DEFAULT_PORT
    # The IPv4 address of the interface beacons use. None: the DHT's own address if bound to one (so a DHT on
    # 127.0.0.1 beacons on lo), else "0.0.0.0", the interface of the default route (a user's LAN). "127.0.0.1"
    # keeps discovery on this machine whatever the DHT binds: the tests and the lab set it (see dht.lan).
    lan_interface: str | None = None
    lan_interval_s: float = 60.0
