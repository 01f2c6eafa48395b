"""The lab's emulated network: a one-way delay between hosts and per-host upload/download caps.

The preferred emulation is the kernel's (network namespaces with `tc netem`/`tbf`), but it needs root *and*
the `sch_netem` qdisc; `kernel_netem_available()` probes for both. Where either is missing — including this
project's CI machines, whose kernel has no sch_netem — the delay and the caps are injected at the transport:
`EmulatedLoop` wraps every protocol the event loop creates (TCP streams, UDP datagrams) so that what a host
receives is handed over only when the model says it would have arrived. Every report says which was used.

The model (`LinkModel`, sans-I/O) is a pipeline per direction: a chunk of n bytes from host A to host B
leaves A's uplink n/up_A seconds after A's uplink is free, travels `delay` seconds, and then occupies B's
downlink for n/down_B seconds. Queues are FIFO per host (not fair-shared between flows, like a simple
shaper). Traffic between two endpoints of the same host (a client and its own proxy) is not delayed.

Flow control is real: a stream whose undelivered bytes exceed `MAX_QUEUED` stops reading its socket, so
the sender's kernel buffer fills and the sender's writes back up, as behind a slow link.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import shutil
import subprocess
import uuid
from typing import Any, Callable

MAX_QUEUED = 256 * 1024  # undelivered bytes per stream before we stop reading its socket


class LinkModel:
    """When bytes sent now from `src` reach `dst` (hosts are IP address strings)."""

    def __init__(self, delay: float = 0.025, up_rate: float | None = None, down_rate: float | None = None) -> None:
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay}")
        self.delay = delay
        self.up_rate = up_rate or None  # bytes/s; None or 0 = unlimited
        self.down_rate = down_rate or None
        self.rates: dict[str, tuple[float | None, float | None]] = {}  # per-host overrides (up, down)
        self._up_free: dict[str, float] = {}
        self._down_free: dict[str, float] = {}
        self.bytes_carried = 0

    def limit(self, host: str, up: float | None, down: float | None) -> None:
        """Give `host` its own caps (e.g. the origin's link, which SlowOrigin throttles itself)."""
        self.rates[host] = (up, down)

    def deliver_at(self, src: str, dst: str, nbytes: int, now: float) -> float:
        if src == dst:
            return now
        self.bytes_carried += nbytes
        up = self.rates[src][0] if src in self.rates else self.up_rate
        down = self.rates[dst][1] if dst in self.rates else self.down_rate
        sent = now
        if up:
            sent = max(now, self._up_free.get(src, now)) + nbytes / up
            self._up_free[src] = sent
        arrived = sent + self.delay
        if down:
            arrived = max(arrived, self._down_free.get(dst, arrived)) + nbytes / down
            self._down_free[dst] = arrived
        return arrived


def kernel_netem_available() -> tuple[bool, str]:
    """(usable, why): root, `tc`, `ip netns` and the netem qdisc, tried on a throwaway namespace."""
    import os

    if os.geteuid() != 0:
        return False, "not running as root"
    if not (shutil.which("tc") and shutil.which("ip")):
        return False, "tc/ip (iproute2) not installed"
    name = f"swarmlab-probe-{uuid.uuid4().hex[:8]}"
    try:
        made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=10)
        if made.returncode != 0:
            return False, f"cannot create a network namespace: {made.stderr.strip()}"
        probe = subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                                "delay", "1ms"], capture_output=True, text=True, timeout=10)
        if probe.returncode != 0:
            return False, f"the kernel has no netem qdisc (sch_netem): {probe.stderr.strip()}"
        return True, "netem available"
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"probing netem failed: {exc}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def _host(address: Any) -> str | None:
    return address[0] if isinstance(address, tuple) and address else None


class _DelayedStream(asyncio.Protocol):
    """Stands between a stream transport and the real protocol; hands data over when the model says."""

    def __init__(self, inner: asyncio.BaseProtocol, model: LinkModel, loop: asyncio.AbstractEventLoop) -> None:
        self.inner, self.model, self.loop = inner, model, loop
        self.transport: asyncio.Transport | None = None
        self.local = self.remote = ""
        self.queue: collections.deque[tuple[float, str, Any]] = collections.deque()
        self.queued = 0
        self.timer: asyncio.TimerHandle | None = None
        self.paused = False
        self.buffered = isinstance(inner, asyncio.BufferedProtocol)

    # -- from the transport --------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.local = _host(transport.get_extra_info("sockname")) or ""
        self.remote = _host(transport.get_extra_info("peername")) or ""
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        now = self.loop.time()
        at = self.model.deliver_at(self.remote, self.local, len(data), now)
        if at <= now and not self.queue:
            self._hand(data)
            return
        self._push(at, "data", data)
        self.queued += len(data)
        if self.queued > MAX_QUEUED and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        if not self.queue:
            return bool(self.inner.eof_received())  # type: ignore[attr-defined]
        self._push(self.loop.time(), "eof", None)
        return True  # keep the transport open until the delayed EOF is handed over

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.queue:
            self.inner.connection_lost(exc)
            return
        self._push(self.loop.time(), "lost", exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- to the protocol -----------------------------------------------------------------------------------------

    def _push(self, at: float, kind: str, value: Any) -> None:
        if self.queue:
            at = max(at, self.queue[-1][0])  # a stream stays in order
        self.queue.append((at, kind, value))
        if self.timer is None:
            self.timer = self.loop.call_at(self.queue[0][0], self._drain)

    def _drain(self) -> None:
        self.timer = None
        now = self.loop.time()
        while self.queue and self.queue[0][0] <= now:
            _, kind, value = self.queue.popleft()
            if kind == "data":
                self.queued -= len(value)
                self._hand(value)
            elif kind == "eof":
                if not self.inner.eof_received() and self.transport is not None:  # type: ignore[attr-defined]
                    self.transport.close()
            else:
                self.inner.connection_lost(value)
        if self.paused and self.queued <= MAX_QUEUED // 2 and self.transport is not None:
            self.paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()
        if self.queue:
            self.timer = self.loop.call_at(self.queue[0][0], self._drain)

    def _hand(self, data: bytes) -> None:
        if not self.buffered:
            self.inner.data_received(data)  # type: ignore[attr-defined]
            return
        view = memoryview(data)
        while view:
            buffer = memoryview(self.inner.get_buffer(len(view)))  # type: ignore[attr-defined]
            n = min(len(buffer), len(view))
            buffer[:n] = view[:n]
            self.inner.buffer_updated(n)  # type: ignore[attr-defined]
            view = view[n:]


class _DelayedDatagrams(asyncio.DatagramProtocol):
    def __init__(self, inner: asyncio.DatagramProtocol, model: LinkModel, loop: asyncio.AbstractEventLoop) -> None:
        self.inner, self.model, self.loop = inner, model, loop
        self.local = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.local = _host(transport.get_extra_info("sockname")) or ""
        self.inner.connection_made(transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        now = self.loop.time()
        at = self.model.deliver_at(_host(addr) or "", self.local, len(data), now)
        if at <= now:
            self.inner.datagram_received(data, addr)
        else:
            self.loop.call_at(at, self.inner.datagram_received, data, addr)  # UDP may reorder anyway

    def error_received(self, exc: Exception) -> None:
        self.inner.error_received(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)


def _wrapping(factory: Callable, wrapper: type, model: LinkModel, loop: asyncio.AbstractEventLoop) -> Callable:
    @functools.wraps(factory)
    def make() -> Any:
        return wrapper(factory(), model, loop)
    return make


class EmulatedLoop(asyncio.SelectorEventLoop):
    """An event loop whose every stream and datagram endpoint sees the `LinkModel`'s network."""

    def __init__(self, model: LinkModel) -> None:
        super().__init__()
        self.model = model

    async def create_connection(self, protocol_factory, *args, **kwargs):  # type: ignore[override]
        transport, shim = await super().create_connection(
            _wrapping(protocol_factory, _DelayedStream, self.model, self), *args, **kwargs)
        if shim.local != shim.remote and self.model.delay:
            await asyncio.sleep(2 * self.model.delay)  # the handshake: one round trip before the first byte goes
        return transport, shim.inner  # callers keep the protocol they asked for

    async def create_server(self, protocol_factory, *args, **kwargs):  # type: ignore[override]
        return await super().create_server(_wrapping(protocol_factory, _DelayedStream, self.model, self),
                                           *args, **kwargs)

    async def create_datagram_endpoint(self, protocol_factory, *args, **kwargs):  # type: ignore[override]
        transport, shim = await super().create_datagram_endpoint(
            _wrapping(protocol_factory, _DelayedDatagrams, self.model, self), *args, **kwargs)
        return transport, shim.inner

    # The lab's own plumbing (e.g. the SOCKS relay that carries libtorrent's traffic and applies the model
    # itself, knowing both real endpoints) must not be delayed a second time.
    async def raw_create_connection(self, *args, **kwargs):
        return await super().create_connection(*args, **kwargs)

    async def raw_create_server(self, *args, **kwargs):
        return await super().create_server(*args, **kwargs)
