"""Was the machine, rather than the system under test, the limit? (Wang & Kangasharju's warning, seed 003.)

Many emulated hosts share one event loop. When that loop is busy nearly all the time, or runs its timers late,
every emulated delay and rate is stretched and the measured download times describe the laptop, not the
protocol. `Sampler` watches four things through a run:

- the event loop thread's own CPU share (`time.thread_time`): above `BUSY_LIMIT` the loop had no slack;
- timer lateness ("lag"): how late a timer due every `interval` seconds fires; its p99 above the emulated
  one-way delay means delays were not honoured;
- the whole machine's CPU (from /proc/stat), reported for context;
- the aggregate bandwidth of the emulated network (bytes/s through the process's link model, `carried`), per
  second, reported for context: what the run asked of the machine, next to what the machine had left.

`verdict()` turns them into `valid` plus the reasons, which every report prints prominently. With worker
processes each process samples its own loop and `combine()` keeps the worst: one saturated process stretches
the delays of every host it holds. Each process counts the bytes its own hosts receive, so `combine()` adds
their bandwidths up.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

BUSY_LIMIT = 0.90


def _machine_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs, or None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of `values`; None when empty. Infinite values are welcome
    (the report's clients that never finished): a percentile on or past one is infinite, never NaN."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    if position == low or ordered[high] == ordered[low]:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class Sampler:
    def __init__(self, interval: float = 0.1, carried: Callable[[], int] | None = None) -> None:
        """`carried`: the bytes the emulated network delivered so far in this process (`LinkModel.bytes_carried`)."""
        self.interval = interval
        self.carried = carried
        self.lags: list[float] = []
        self.loop_busy: list[float] = []  # per-second samples of the loop thread's CPU share
        self.machine_busy: list[float] = []
        self.network: list[float] = []  # per-second samples of the bytes/s `carried` grew by
        self.process_cpu = 0.0
        self._task: asyncio.Task | None = None
        self._started = 0.0

    def samples(self) -> dict:
        """What `from_samples` needs to judge this run in another process."""
        return {"interval": self.interval, "lags": self.lags, "loop_busy": self.loop_busy,
                "machine_busy": self.machine_busy, "network": self.network, "process_cpu": self.process_cpu}

    @classmethod
    def from_samples(cls, samples: dict) -> Sampler:
        sampler = cls(samples["interval"])
        sampler.lags, sampler.loop_busy = list(samples["lags"]), list(samples["loop_busy"])
        sampler.machine_busy, sampler.process_cpu = list(samples["machine_busy"]), samples["process_cpu"]
        sampler.network = list(samples.get("network", []))
        return sampler

    def start(self) -> None:
        self._started = time.process_time()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop sampling; again: nothing."""
        if self._task is None:
            return
        task, self._task = self._task, None
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        self.process_cpu = time.process_time() - self._started

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wall, thread, machine = loop.time(), time.thread_time(), _machine_ticks()
        carried = self.carried() if self.carried is not None else 0
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)  # the sampling tick itself; its lateness is the measurement
            now = loop.time()
            self.lags.append(max(0.0, now - due))
            if now - wall >= 1.0:
                cpu, ticks = time.thread_time(), _machine_ticks()
                self.loop_busy.append((cpu - thread) / (now - wall))
                if ticks is not None and machine is not None and ticks[1] > machine[1]:
                    self.machine_busy.append((ticks[0] - machine[0]) / (ticks[1] - machine[1]))
                if self.carried is not None:
                    total = self.carried()
                    self.network.append((total - carried) / (now - wall))
                    carried = total
                wall, thread, machine = now, cpu, ticks

    def verdict(self, delay: float) -> dict:
        busy = sum(self.loop_busy) / len(self.loop_busy) if self.loop_busy else 0.0
        lag_p99 = percentile(self.lags, 99) or 0.0
        lag_limit = max(0.010, delay)
        reasons = []
        if busy >= BUSY_LIMIT:
            reasons.append(f"the event loop was busy {busy:.0%} of the time (limit {BUSY_LIMIT:.0%})")
        if lag_p99 > lag_limit:
            reasons.append(f"timers fired {lag_p99 * 1000:.0f} ms late at p99 (limit {lag_limit * 1000:.0f} ms)")
        return {
            "valid": not reasons,
            "cpu_bound_reasons": reasons,
            "loop_busy_mean": round(busy, 3),
            "loop_busy_max": round(max(self.loop_busy, default=0.0), 3),
            "lag_p50_ms": round((percentile(self.lags, 50) or 0.0) * 1000, 2),
            "lag_p99_ms": round(lag_p99 * 1000, 2),
            "lag_max_ms": round(max(self.lags, default=0.0) * 1000, 2),
            "machine_busy_mean": round(sum(self.machine_busy) / len(self.machine_busy), 3)
            if self.machine_busy else None,
            "machine_cpus": os.cpu_count(),
            "network_bytes_per_s_mean": round(sum(self.network) / len(self.network)) if self.network else None,
            "network_bytes_per_s_max": round(max(self.network)) if self.network else None,
            "network_bytes_per_s": [round(x) for x in self.network],  # the per-second series
            "process_cpu_s": round(self.process_cpu, 2),
        }


def combine(verdicts: dict[str, dict]) -> dict:
    """One verdict for a run spread over several event loops (name -> `Sampler.verdict()`: worker processes,
    the libtorrent half): valid only if every loop was, with the worst figures and every reason named by its
    loop; `loops` keeps each one's."""
    if len(verdicts) == 1:
        return next(iter(verdicts.values()))
    parts = list(verdicts.values())
    worst = {key: max(v[key] for v in parts)
             for key in ("loop_busy_mean", "loop_busy_max", "lag_p50_ms", "lag_p99_ms", "lag_max_ms")}
    machine = [v["machine_busy_mean"] for v in parts if v["machine_busy_mean"] is not None]
    # The crowd's processes run at once and each counts what its own hosts receive: their bandwidths add up.
    # (largefile's libtorrent half runs afterwards; its figure stays in `loops`.)
    network = [v.get("network_bytes_per_s_mean") for name, v in verdicts.items()
               if name == "main" or name.startswith("worker")]
    return {
        "valid": all(v["valid"] for v in parts),
        "cpu_bound_reasons": [f"{name}: {reason}" for name, v in verdicts.items() for reason in v["cpu_bound_reasons"]],
        **worst,
        "machine_busy_mean": max(machine) if machine else None,
        "machine_cpus": parts[0]["machine_cpus"],
        "network_bytes_per_s_mean": sum(network) if network and None not in network else None,
        "process_cpu_s": round(sum(v["process_cpu_s"] for v in parts), 2),
        "loops": verdicts,
    }
