"""A competing background TCP flow across a shaped link of `bench.cluster_netns`'s topology: a plain sender in one
host namespace, a receiver in another that reports, as bytes arrive, how many have arrived by when. The cluster
labs put one beside a push to see what reserve it keeps (`bench.lab.cluster_links`), and `tcp_goodput` runs one
alone to see what a single bulk flow carries across the link.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any, Protocol

# A receiver that prints "monotonic-time bytes-so-far" as bytes arrive (CLOCK_MONOTONIC is one clock for every
# network namespace), and a sender that sends as fast as TCP lets it: the competing background flow.
RECEIVER = """
import socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); n = 0; mark = 0.0; buf = bytearray(1 << 16)
while True:
    k = c.recv_into(buf)
    if not k:
        break
    n += k; now = time.monotonic()
    if now - mark >= 0.05:
        print(f"{now:.4f} {n}", flush=True); mark = now
"""
SENDER = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); data = bytes(1 << 16)
while True:
    c.sendall(data)
"""


class Namespaces(Protocol):
    """What a flow needs of a topology (`bench.cluster_netns.Topology`): its hosts by name, each with an
    `address`, and a way to run a command in one's namespace."""

    hosts: dict[str, Any]

    def spawn(self, host: Any, argv: list[str], **popen: Any) -> subprocess.Popen: ...


class BackgroundFlow:
    """A plain TCP sender (in the core) to a receiver in a rack, across that rack's downlink; `received_at(t)`
    says how many bytes had arrived by monotonic time t. `sender` and `receiver` name other hosts (the DC link's
    `dcbg` to `corebg`), `rack` is then ignored."""

    def __init__(self, topology: Namespaces, rack: int, sender: str = "bgsend", receiver_name: str | None = None
                 ) -> None:
        receiver = topology.hosts[receiver_name or f"r{rack}bg"]
        self.receiver = topology.spawn(receiver, [sys.executable, "-c", RECEIVER, receiver.address],
                                       stdout=subprocess.PIPE, text=True)
        assert self.receiver.stdout is not None
        port = int(self.receiver.stdout.readline())
        self.samples: list[tuple[float, int]] = [(time.monotonic(), 0)]
        threading.Thread(target=self._read, daemon=True).start()
        self.sender = topology.spawn(topology.hosts[sender],
                                     [sys.executable, "-c", SENDER, receiver.address, str(port)],
                                     stderr=subprocess.DEVNULL)

    def _read(self) -> None:
        assert self.receiver.stdout is not None
        for line in self.receiver.stdout:
            at, total = line.split()
            self.samples.append((float(at), int(total)))

    def received_at(self, at: float) -> int:
        return max((n for t, n in list(self.samples) if t <= at), default=0)
