"""The start-up block: what `swarmproxy run` exposes and shares, logged together once every listener is up.

One block instead of a line per listener as each opened, so that a newcomer reads in one place which ports
answer on which addresses and what leaves the machine (issue 23 §3).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .config import Config


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024:
            return f"{count:g} {unit}"
        count /= 1024
    return f"{count:g} TiB"


def startup_lines(cfg: Config, addresses: dict[str, str], discovery: dict[str, object],
                  public: Sequence[str] = ()) -> list[str]:
    """`discovery`: each discovery backend's status by its name (`swarm.discovery.backend_status`); `public`: what
    the Internet mode says of the public network (`proxy.internet.Internet.consent_lines`)."""
    proxy = addresses["proxy"]
    lines = [f"swarmproxy listening on http://{proxy} (admin API on the same port: http://{proxy}/_swarm/status; "
             f"live status page: http://{proxy}/_swarm/)"]
    dht = discovery.get("dht")
    if isinstance(dht, dict) and "dht" in addresses:
        lan = "off" if cfg.no_lan_discovery else "on (multicast)"
        lines.append(f"  DHT node {str(dht.get('node_id'))[:16]} on udp://{addresses['dht']}; LAN discovery {lan}")
    else:
        lines.append("  DHT off (--dht-listen off); LAN discovery off")
    if others := [name for name in discovery if name != "dht"]:
        lines.append(f"  also discovering through: {', '.join(others)}")
    if "peer" in addresses:
        over = {"tcp": "TCP", "quic": "QUIC (UDP)", "both": "TCP and QUIC (UDP), same port"}[cfg.transport]
        lines.append(f"  peers fetch from {addresses['peer']} over {over}")
        if cfg.no_share:
            lines.append("  completed downloads are not shared with peers (--no-share)")
        elif not cfg.linger:  # --linger 0: no timer, the store's eviction ends the sharing
            lines.append("  completed downloads are shared with peers until the store evicts them (--linger 0)")
        else:
            lines.append(f"  completed downloads are shared with peers for {cfg.linger:g} s (--linger)")
        lines.append(f"  trust {cfg.trust}; switching after T={cfg.first_byte_timeout:g}s, "
                     f"R={cfg.min_rate:g} B/s over W={cfg.rate_window:g}s "
                     f"(or after {cfg.early_lookup:g}s when the swarm has it)")
    else:
        lines.append("  peer port off (--peer-listen off): nothing is shared with peers")
    lines.extend(public)
    if "bittorrent" in addresses and cfg.bt_listen is not None:
        lines.append(f"  BitTorrent clients fetch shared downloads from public origins at "
                     f"tcp://{addresses['bittorrent']} (--bt-listen; no tracker or LSD)")
    elif "bittorrent" in addresses:
        lines.append(f"  BitTorrent session for the DHT on {addresses['bittorrent']} (seeds nothing; --bt-listen does)")
    if cfg.mitm_hosts:
        lines.append(f"  HTTPS to {', '.join(cfg.mitm_hosts)} is decrypted with this install's local CA "
                     f"({cfg.data_dir / 'ca' / 'ca.pem'}; swarmproxy ca export); other CONNECTs stay tunnels")
    if "peer" in addresses:
        lines.append(f"  block store up to {_size(cfg.store_size)} (--store-size); data dir {cfg.data_dir}")
    else:
        lines.append(f"  no block store (peer port off); data dir {cfg.data_dir}")
    return lines


def log_startup(log: logging.Logger, cfg: Config, addresses: dict[str, str], discovery: dict[str, object],
                public: Sequence[str] = ()) -> None:
    # Consecutive calls with no await between them: no other task's line can land inside the block, and
    # each line keeps the log's own prefix (time, level) for grep.
    for line in startup_lines(cfg, addresses, discovery, public):
        log.info("%s", line)
