"""`AlertWatcher`: the thread that reads the embedded session's alerts and enforces its admission on the spot.

libtorrent gets no Python callback from us (no alert notify): one called from libtorrent's threads needs the GIL,
which the session's destructor holds while it joins those threads, and the two deadlocked at shutdown. This thread
waits in `wait_for_alert` instead (the bindings let the GIL go there) and is joined before the session is
destroyed.

Connections are judged here, not on the event loop: a flood of them from another process had 32 accepted before
the first was counted when this thread judged them, and 143 of 300 (a stock client then waited 61.6 s) when the
event loop did while busy. So the thread feeds accepted, handshaken and ended connections to the admission
(`bittorrent.admission`), gives libtorrent its blocks as the IP filter at once, and lifts expired ones. Every other
alert (listening, removals, file errors) goes to the loop, and the thread waits until the loop has read them:
an alert popped is only valid until the next pop.

The IP filter also holds the rule that keeps the session off the intranet: every non-public network
(`addresses.non_public_networks`) is blocked, but for the `reachable` ones (`--share-private-origins`' addresses).
libtorrent dials where strangers say in ways no setting turns off: a BEP 55 holepunch `connect` from any peer of
any torrent made it dial 127.0.0.1 (`tests/bittorrent/test_watcher.py`); the filter applies to every connection,
in and out.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import libtorrent as lt

import addresses

from .admission import Admission, Block

__all__ = ["AlertWatcher"]

log = logging.getLogger("swarmproxy.bittorrent")

BANS_KEPT = 64  # banned addresses the status shows
WAIT_FOR_ALERT_MS = 250  # the longest wait: how long a stop waits for the thread, and blocks outlive their time


class AlertWatcher:
    def __init__(self, session: Any, loop: asyncio.AbstractEventLoop, on_alerts: Callable[[list[Any]], None],
                 admission: Admission, *, reachable: Iterable[str] = ()) -> None:
        self.session, self.loop, self.on_alerts, self.admission = session, loop, on_alerts, admission
        # (first, last, access) rules every filter starts with: the non-public networks blocked, then the reachable
        # ones let through again (libtorrent's add_rule sets a range's access over what was there)
        self._base = [(str(net[0]), str(net[-1]), 1) for net in addresses.non_public_networks()] + \
            [(str(net[0]), str(net[-1]), 0) for net in map(ipaddress.ip_network, reachable)]
        self._lock = threading.Lock()  # the admission: this thread changes it, the loop reads its status
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="swarmproxy-bittorrent-alerts", daemon=True)
        self.banned: collections.deque[str] = collections.deque(maxlen=BANS_KEPT)  # the latest banned addresses
        self.bans = 0

    def start(self) -> None:
        self._filter()  # before any connection: the session starts off the intranet
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread (blocks for up to `WAIT_FOR_ALERT_MS`: call it off the loop); drop the session,
        which a hand-over still queued on the loop would otherwise keep alive."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self.session = None

    def status(self) -> dict[str, object]:
        with self._lock:
            return {"admission": self.admission.status(), "bans": self.bans, "banned": list(self.banned)}

    def _run(self) -> None:
        read = threading.Event()
        while not self._stopping.is_set():
            self._expire()
            if self.session.wait_for_alert(WAIT_FOR_ALERT_MS) is None or self._stopping.is_set():
                continue
            rest = [alert for alert in self.session.pop_alerts() if not self._admit(alert)]
            if not rest:
                continue
            read.clear()
            try:
                self.loop.call_soon_threadsafe(self._hand_over, rest, read)
            except RuntimeError:  # the loop is closed: nobody reads any more
                return
            while not read.wait(WAIT_FOR_ALERT_MS / 1000):  # popping again would free the alerts handed over
                if self._stopping.is_set():
                    return

    def _hand_over(self, alerts: list[Any], read: threading.Event) -> None:
        try:
            if self.session is not None:  # (stopped: the alerts may be freed)
                self.on_alerts(alerts)
        finally:
            read.set()

    def _admit(self, alert: Any) -> bool:
        """Handle a connection's alert here; whether it was one."""
        try:
            if isinstance(alert, lt.incoming_connection_alert):
                host, port = alert.endpoint
                with self._lock:
                    block = self.admission.arrived((host, port), host, time.monotonic())
                if block is not None:
                    log.warning("BitTorrent: refusing %s for %.0f s: %s", block.source,
                                block.until - time.monotonic(), block.reason)
                    self._filter()
            elif isinstance(alert, lt.peer_connect_alert):  # an incoming one handshook (ours dialled: unknown)
                with self._lock:
                    self.admission.handshaken(tuple(alert.endpoint))
            elif isinstance(alert, lt.peer_disconnected_alert):
                with self._lock:
                    self.admission.left(tuple(alert.endpoint))
            elif isinstance(alert, lt.alerts_dropped_alert):  # some ends went unseen: counts would only grow
                log.warning("BitTorrent: libtorrent dropped alerts; connection counts start over")
                with self._lock:
                    self.admission.reset()
            elif isinstance(alert, lt.peer_ban_alert):  # it sent blocks that failed a piece's hash (smart ban)
                log.info("BitTorrent: %s", alert.message())
                with self._lock:
                    self.bans += 1
                    self.banned.append(str(alert.endpoint[0]))
            elif isinstance(alert, lt.peer_alert):  # a stranger's doing (a bad handshake, a reset): no error of
                log.debug("BitTorrent: %s", alert.message())  # ours, and a warning each would flood the log
            else:
                return False
        except Exception:  # one bad alert must not stop the reading of all later ones
            log.exception("BitTorrent: cannot handle %s", type(alert).__name__)
        return True

    def _expire(self) -> None:
        with self._lock:
            lifted = self.admission.expire(time.monotonic())
        if lifted:
            self._filter()

    def _filter(self) -> None:
        """Give libtorrent the admission's blocks as its IP filter: it refuses their new connections at accept and
        drops their handshaken peers."""
        rules = lt.ip_filter()
        with self._lock:
            blocks: list[Block] = self.admission.blocks()
        for first, last, access in self._base + [(block.first, block.last, 1) for block in blocks]:
            rules.add_rule(first, last, access)  # 1: blocked (libtorrent's ip_filter.blocked), 0: allowed
        session = self.session
        if session is not None:
            session.set_ip_filter(rules)
