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

The lab's worker processes share one network: `SharedLinks` keeps every host's "link free at" times in a
shared memory file, so a host's uplink is one queue whichever process receives what it sends. All
processes read the same clock (asyncio's loop time is CLOCK_MONOTONIC, system-wide).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import mmap
import multiprocessing
import pathlib
import shutil
import subprocess
import uuid
from collections.abc import Callable
from typing import Any

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
        self._up_free: dict[str, float] | _SharedTimes = {}
        self._down_free: dict[str, float] | _SharedTimes = {}
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


# Shared slots cover 127.0.0.0 to 127.3.255.255: the lab's origins (127.0.0.x), direct clients (127.1.x.y),
# swarmproxy nodes (127.2.x.y) and libtorrent clients (127.3.x.y). 2**18 hosts, 8 bytes each, per direction.
SHARED_NETWORKS = 4
LOCK_WAIT = 1.0  # s; the lock is held for microseconds, so a longer wait means its holder died
_SLOTS = SHARED_NETWORKS << 16


def _slot(host: str) -> int | None:
    parts = host.split(".")
    if len(parts) != 4 or parts[0] != "127":
        return None
    try:
        a, b, c = int(parts[1]), int(parts[2]), int(parts[3])
    except ValueError:
        return None
    if not (0 <= a < SHARED_NETWORKS and 0 <= b < 256 and 0 <= c < 256):
        return None
    return a << 16 | b << 8 | c


class _SharedTimes:
    """A host -> time mapping (the part of dict LinkModel uses) kept in shared memory where the host has a
    slot, in this process otherwise. 0.0 stands for "never used", which every caller takes a max() with."""

    def __init__(self, times: memoryview) -> None:
        self.times = times
        self.local: dict[str, float] = {}
        self.slots: dict[str, int | None] = {}

    def _index(self, host: str) -> int | None:
        if host not in self.slots:
            self.slots[host] = _slot(host)
        return self.slots[host]

    def get(self, host: str, default: float) -> float:
        index = self._index(host)
        if index is None:
            return self.local.get(host, default)
        value = self.times[index]
        return value if value else default

    def __setitem__(self, host: str, value: float) -> None:
        index = self._index(host)
        if index is None:
            self.local[host] = value
        else:
            self.times[index] = value


@dataclasses.dataclass
class SharedLinks:
    """What a worker process needs to join the network: pass it as a `multiprocessing.Process` argument
    (the lock cannot travel any other way)."""
    path: str
    lock: Any
    delay: float
    up_rate: float | None
    down_rate: float | None
    limits: dict[str, tuple[float | None, float | None]]

    @classmethod
    def create(cls, directory: pathlib.Path, model: LinkModel) -> SharedLinks:
        path = pathlib.Path(directory) / "links.shm"
        with open(path, "wb") as file:
            file.truncate(2 * _SLOTS * 8)  # sparse: only the pages of hosts in use are ever touched
        lock = multiprocessing.get_context("spawn").Lock()
        return cls(str(path), lock, model.delay, model.up_rate, model.down_rate, dict(model.rates))

    def attach(self) -> SharedLinkModel:
        return SharedLinkModel(self)


class SharedLinkModel(LinkModel):
    """A `LinkModel` whose link queues are shared by every process attached to the same `SharedLinks`."""

    def __init__(self, shared: SharedLinks) -> None:
        super().__init__(shared.delay, shared.up_rate, shared.down_rate)
        self.rates.update(shared.limits)
        self._file = open(shared.path, "r+b")
        self._map = mmap.mmap(self._file.fileno(), 2 * _SLOTS * 8)
        self._times = memoryview(self._map).cast("d")
        self._shared = _SharedTimes(self._times[:_SLOTS]), _SharedTimes(self._times[_SLOTS:])
        self._up_free, self._down_free = self._shared
        self._lock: Any = shared.lock  # None once found held by a dead process

    def deliver_at(self, src: str, dst: str, nbytes: int, now: float) -> float:
        if src == dst:
            return now
        # A read-modify-write of two hosts' queues, which other processes update too. A worker terminated inside
        # it (a failed or interrupted run) never releases the lock: go on without it rather than hang.
        locked = self._lock is not None and self._lock.acquire(timeout=LOCK_WAIT)
        if not locked:
            self._lock = None  # its holder died: waiting a second per chunk from now on would stall the loop
        try:
            return super().deliver_at(src, dst, nbytes, now)
        finally:
            if locked:
                self._lock.release()

    def close(self) -> None:
        for part in self._shared:  # every view of the map, before the map itself
            part.times.release()
        self._times.release()
        self._map.close()
        self._file.close()


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
