"""`PortMaps`: what the router said of the ports the session asked it to map (UPnP-IGD, NAT-PMP). Pure.

With port mapping on (the Internet mode, `bittorrent.settings.may_map_ports`), libtorrent maps its own listener
by itself and our peer port when asked (`BtSession.map_port`), over both protocols, and reports each mapping by
an index: `portmap_alert` (mapped, with the external port) or `portmap_error_alert` (refused, or no router that
speaks either protocol). This keeps the latest word per index and transport, for `/_swarm/status` and the log:
which ports are reachable from outside through the router, and which are not and why.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mapping", "PortMaps"]


@dataclass
class Mapping:
    """One port asked of the router, over one protocol, and its outcome by each mapping transport."""

    port: int | None  # the local port; None for the session's own listener (libtorrent maps it unasked)
    protocol: str  # "tcp" or "udp"
    external: dict[str, int]  # mapping transport ("upnp", "natpmp") -> the router's external port
    errors: dict[str, str]  # mapping transport -> why it did not map


class PortMaps:
    def __init__(self) -> None:
        self._maps: dict[int, Mapping] = {}  # libtorrent's mapping index -> what it maps
        self.external_address: str | None = None  # the address the router or peers say we have, once said

    def asked(self, index: int, protocol: str, port: int) -> None:
        """libtorrent took `port` to map over `protocol` under `index` (`add_port_mapping`'s answer)."""
        self._maps[index] = Mapping(port, protocol, {}, {})

    def mapped(self, index: int, transport: str, protocol: str, external_port: int) -> Mapping:
        mapping = self._maps.setdefault(index, Mapping(None, protocol, {}, {}))
        mapping.external[transport] = external_port
        mapping.errors.pop(transport, None)
        return mapping

    def failed(self, index: int, transport: str, why: str) -> Mapping:
        mapping = self._maps.setdefault(index, Mapping(None, "", {}, {}))
        mapping.errors[transport] = why
        mapping.external.pop(transport, None)
        return mapping

    def external_port(self, port: int, protocol: str) -> int | None:
        """The router's port that reaches our `port` over `protocol`, if one transport mapped it."""
        for mapping in self._maps.values():
            if mapping.port == port and mapping.protocol == protocol and mapping.external:
                return min(mapping.external.values())
        return None

    def listener_mapped(self, protocol: str) -> bool:
        """Whether a transport mapped the session's own listener (the DHT's port, for "udp") over `protocol`."""
        return any(m.port is None and m.protocol == protocol and m.external for m in self._maps.values())

    def status(self) -> list[dict[str, object]]:
        return [{"port": m.port, "protocol": m.protocol or None, "mapped": dict(m.external), "errors": dict(m.errors)}
                for m in self._maps.values()]
