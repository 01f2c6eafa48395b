"""Which connect-backs a node makes for others (sans-I/O): the limits of the REACH_REQUEST answerer.

A node behind a NAT learns whether its peer port is open by asking a peer to connect back to it (`swarm.net.wire`,
"Connect-backs"). Answering costs the answerer outgoing connections, so what strangers can make it dial is bounded
here, before a connection is attempted:

* **only the requester's own address** is ever dialled: the shell passes the address the request came in on, never
  one the request names, so a connect-back cannot be aimed at a third party (reflection). What remains a requester's
  choice is the port, and this core refuses ports below `LOWEST_PORT`: on an address several hosts share (a carrier
  NAT, an office gateway that also forwards its mail server) the well-known ports belong to someone else;
* **not to a private source** unless the node is built for a lab (`allow_private`): a loopback, private or
  link-local source on the public peer port is a port forwarder, a container's gateway or a VPN on this very host or
  its LAN, and a connect-back there would reach services that are not the requester's. Connect-backs are about the
  public network; on a LAN every peer is reachable already. A source that is not an IP literal, or is
  special-purpose (`addresses.Kind.SPECIAL`), is never dialled;
* **`per_source` requests a `window`** from one source (`addresses.source`: an address, a public IPv6 address's
  /64, the subscriber's block, as the serving slots count them). Two a minute: an honest node asks one peer one
  request per probe round (every 30 min, `swarm.core.reachability`), and the second leaves room for a restart or a
  changed port mapping; a requester that asks more is answered NOT_ATTEMPTED and can ask another peer;
* **`per_window` requests a `window` in all**, whoever asks (so many addresses cannot make a node dial without end,
  and what this core remembers stays bounded), and **`max_in_flight` under way** at once.

A request names one or two transports, so one admitted request is at most two connections, each one HANDSHAKE and
one REACH_PROOF long, each given `CONNECT_BACK_TIMEOUT` s to connect. Refused requests are answered NOT_ATTEMPTED
(one small frame on the requester's own connection, smaller than its request) rather than ignored: a requester can
then tell "that peer did not try" from "that peer could not reach me", and ask elsewhere.

`admit(address, port, now)` says None (go ahead: the request is under way until `finished()`) or why not.
"""

from __future__ import annotations

import addresses
from addresses import LOWEST_PORT  # (the one rule for ports a stranger names)

from .source_window import SourceWindow, refusal

__all__ = ["ConnectBackLimiter", "PER_SOURCE", "WINDOW", "PER_WINDOW", "MAX_IN_FLIGHT", "LOWEST_PORT",
           "CONNECT_BACK_TIMEOUT"]

PER_SOURCE = 2  # requests answered per source per WINDOW (module docstring)
WINDOW = 60.0
PER_WINDOW = 64  # ... and in all: far above what honest probing asks (a few per node per 30 min)
MAX_IN_FLIGHT = 8  # requests being carried out at once (each at most one connection per transport)
# Seconds a connect-back is given to connect, and then to be read: a home router answers within one; a NAT that
# drops the SYN (or the Initial) is what a timeout means, and waiting longer tells nothing more.
CONNECT_BACK_TIMEOUT = 5.0


class ConnectBackLimiter:
    def __init__(self, *, per_source: int = PER_SOURCE, window: float = WINDOW, per_window: int = PER_WINDOW,
                 max_in_flight: int = MAX_IN_FLIGHT, allow_private: bool = False) -> None:
        """`allow_private`: dial loopback, private and link-local sources too: for tests and LAN labs only (module
        docstring)."""
        if max_in_flight < 1:
            raise ValueError("limits must be >= 1 and the window > 0")
        self._recent = SourceWindow(per_source=per_source, per_window=per_window, window=window)
        self.per_source, self.window, self.per_window = per_source, window, per_window
        self.max_in_flight = max_in_flight
        self.allow_private = allow_private
        self.in_flight = 0

    def admit(self, address: str | None, port: int, now: float) -> str | None:
        """A REACH_REQUEST for `port` came in on a connection from `address`: None to carry it out (counted under
        way until `finished()`), else why not (answered NOT_ATTEMPTED)."""
        total = self._recent.total(now)
        why = refusal(address, allow_private=self.allow_private,
                      purpose="connect-backs are for the public network")
        if why is not None:
            return why
        source, _network = addresses.source(address)  # (a public IPv6 address: its /64)
        assert source is not None
        if port < LOWEST_PORT:
            return f"port {port} is below {LOWEST_PORT}: another service's, on a shared address"
        if self.in_flight >= self.max_in_flight:
            return f"{self.in_flight} connect-backs under way"
        if total >= self.per_window:
            return f"{total} connect-backs in the last {self.window:g} s"
        if (count := self._recent.of(source)) >= self.per_source:
            return f"{source} asked for {count} in the last {self.window:g} s"
        self._recent.admit(source, now)
        self.in_flight += 1
        return None

    def finished(self) -> None:
        """An admitted request is carried out (whatever became of it)."""
        if self.in_flight <= 0:
            raise RuntimeError("finished() without an admitted request under way")
        self.in_flight -= 1
