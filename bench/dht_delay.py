"""The emulated network of bench/dht.py: every datagram of every node one one-way delay late, root-free.

Each node's datagram transport is wrapped; `sendto` does not send but arms ``loop.call_at(now + delay,
real_sendto)``, so requests and replies alike reach the kernel one delay late. The emulation shares the event
loop with the nodes, so it records how late each delayed send really went (`DelayEmulator.lateness`).
"""

from __future__ import annotations

import asyncio
from array import array


class DelayEmulator:
    """Shared switch and statistics for all wrapped transports of one run."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.active = False
        self.lateness = array("d")  # actual - due, seconds, for each delayed datagram while recording
        self.recording = False
        self.delayed = 0
        self.direct = 0


class DelayedTransport:
    """Wraps a node's datagram transport: every `sendto` reaches the kernel `delay_s` later (loop.call_at)."""

    def __init__(self, inner, emulator: DelayEmulator, loop: asyncio.AbstractEventLoop) -> None:
        self._inner = inner
        self._emulator = emulator
        self._loop = loop

    def sendto(self, data, addr=None) -> None:
        emulator = self._emulator
        if addr is not None and not addr[0].startswith("127."):
            raise OSError(f"bench: refusing to send outside loopback: {addr}")
        if not emulator.active or emulator.delay_s <= 0:
            emulator.direct += 1
            self._inner.sendto(data, addr)
            return
        emulator.delayed += 1
        due = self._loop.time() + emulator.delay_s
        self._loop.call_at(due, self._deliver, data, addr, due)

    def _deliver(self, data, addr, due: float) -> None:
        if self._emulator.recording:
            self._emulator.lateness.append(self._loop.time() - due)
        if not self._inner.is_closing():
            self._inner.sendto(data, addr)

    # Everything else the protocol / node may use goes to the real transport.
    def get_extra_info(self, name, default=None):
        return self._inner.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def close(self) -> None:
        self._inner.close()

    def abort(self) -> None:
        self._inner.abort()
