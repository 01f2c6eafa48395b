"""Worker processes for the lab's swarmproxy nodes: one Python process cannot run a hundred busy nodes.

With `--workers N` the main process keeps the origins, the direct clients and the clock, and N processes
(spawned, not forked: the parent already runs an event loop) each run a share of the nodes and their users.
Client i lives in worker i mod N, so arrivals spread evenly. All processes join one emulated network
(`netem.SharedLinks`), so a host's link is one queue whichever process sees its traffic.

The conversation over each worker's pipe, in order:

    worker -> main   ("first", dht_address)        worker 0 only: everyone's DHT bootstrap is up
    worker -> main   ("up",)                        all of its nodes are up
    main -> worker   ("go", t0, arrivals, files)    arrival i is at loop time t0 + arrivals[i]
    worker -> main   ("record", record)             one per client, as each finishes
    worker -> main   ("finished",)
    main -> worker   ("close",)                     every worker is finished: nodes serve each other till then
    worker -> main   ("done", samples)              its honesty samples (from "go" to "close", the swarmproxy
                                                    half's span); then it stops its nodes and exits

A worker that fails sends ("error", traceback) instead and exits; the main process raises `WorkerError`.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pathlib
import resource
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from .crowd_nodes import CrowdParams, Files, SwarmNodes, no_full_collections
from .honesty import Sampler
from .netem import EmulatedLoop, SharedLinks

CLOSE_GRACE = 60.0  # seconds a worker gets to stop its nodes before it is terminated


class WorkerError(RuntimeError):
    """A worker process died or failed; the message says which and why."""


class _Worker:
    def __init__(self, number: int, indices: list[int], params: CrowdParams, workdir: pathlib.Path,
                 links: SharedLinks, bootstrap: str | None) -> None:
        context = multiprocessing.get_context("spawn")
        self.number = number
        self.indices = indices
        self.conn, child = context.Pipe()
        self.process = context.Process(target=worker_main, name=f"swarmproxy-lab-worker-{number}", daemon=True,
                                       args=(child, number, indices, params, str(workdir), links, bootstrap))
        try:
            self.process.start()
        except BaseException:
            self.conn.close()
            raise
        finally:
            child.close()

    async def receive(self) -> tuple:
        try:
            message = await asyncio.to_thread(self.conn.recv)
        except (EOFError, OSError):
            await asyncio.to_thread(self.process.join, 5.0)
            raise WorkerError(f"lab worker {self.number} died (exit code {self.process.exitcode})") from None
        if message[0] == "error":
            raise WorkerError(f"lab worker {self.number} failed:\n{message[1]}")
        return message

    async def expect(self, kind: str) -> tuple:
        message = await self.receive()
        if message[0] != kind:
            raise WorkerError(f"lab worker {self.number} said {message[0]!r} where {kind!r} was due")
        return message

    def send(self, *message: Any) -> None:
        try:
            self.conn.send(message)
        except OSError as exc:
            raise WorkerError(f"lab worker {self.number} is gone: {exc}") from None


class WorkerPool:
    """The swarmproxy half in worker processes; the same three steps as `crowd_nodes.SwarmNodes`."""

    def __init__(self, params: CrowdParams, workdir: pathlib.Path, links: SharedLinks,
                 say: Callable[[str], None]) -> None:
        self.params = params
        self.workdir = workdir
        self.links = links
        self.say = say
        self.workers: list[_Worker] = []
        self.verdicts: list[dict] | None = None
        self._finished = False  # every worker's clients are done: the workers listen for "close"
        self._closed = False

    async def start(self, say: Callable[[str], None] | None = None) -> None:
        p = self.params
        shares = [share for k in range(p.workers) if (share := list(range(k, p.clients, p.workers)))]
        # Worker 0 first: its first node is everyone's DHT bootstrap.
        self.workers.append(_Worker(0, shares[0], p, self.workdir, self.links, None))
        _, bootstrap = await self.workers[0].expect("first")
        for k, share in enumerate(shares[1:], start=1):  # one by one: close() must know every one started
            self.workers.append(_Worker(k, share, p, self.workdir, self.links, bootstrap))
        for worker in self.workers:
            await worker.expect("up")
            (say or self.say)(f"  worker {worker.number}: {len(worker.indices)} nodes up")

    async def run_clients(self, t0: float, arrivals: list[float], files: Files,
                          on_record: Callable[[dict], None]) -> None:
        for worker in self.workers:
            worker.send("go", t0, arrivals, files)

        async def collect(worker: _Worker) -> None:
            while (message := await worker.receive())[0] == "record":
                on_record(message[1])
            if message[0] != "finished":
                raise WorkerError(f"lab worker {worker.number} said {message[0]!r} before it finished")
        collectors = [asyncio.ensure_future(collect(worker)) for worker in self.workers]
        try:
            await asyncio.gather(*collectors)
        except BaseException:  # one worker failed: the others' collectors must not outlive the run
            for collector in collectors:
                collector.cancel()
            await asyncio.gather(*collectors, return_exceptions=True)
            raise
        self._finished = True
        # Every swarmproxy client is done: the workers stop sampling now, not when the direct half ends minutes
        # later, whose idle seconds would dilute their timer lag (`_close_workers`).
        await self._close_workers()

    async def _close_workers(self) -> None:
        """Tell every worker to stop (once); keeps each one's honesty verdict when it reports one."""
        if self._closed:
            return
        self._closed = True
        verdicts = []
        for worker in self.workers if self._finished else ():
            try:
                worker.send("close")
                _, samples = await asyncio.wait_for(worker.expect("done"), CLOSE_GRACE)
                verdicts.append(Sampler.from_samples(samples).verdict(self.params.delay))
            except (WorkerError, TimeoutError) as exc:
                self.say(f"  {exc}")
        if verdicts and len(verdicts) == len(self.workers):
            self.verdicts = verdicts

    async def close(self) -> None:
        """Stop every worker (again: nothing). Workers still running clients (the run failed or was
        interrupted) are terminated at once."""
        await self._close_workers()
        for worker in self.workers:
            if self._finished:
                await asyncio.to_thread(worker.process.join, CLOSE_GRACE)
            if worker.process.is_alive():
                worker.process.terminate()
                await asyncio.to_thread(worker.process.join, CLOSE_GRACE)
            worker.conn.close()
        self.workers = []


def worker_main(conn: Connection, number: int, indices: list[int], params: CrowdParams, workdir: str,
                links: SharedLinks, bootstrap: str | None) -> None:
    """A worker process: its share of the nodes, on the shared emulated network."""

    logging.basicConfig(level=logging.WARNING, format=f"worker {number}: %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("swarmproxy").setLevel(logging.ERROR)
    raise_file_limit()
    model = links.attach()
    try:
        with asyncio.Runner(loop_factory=lambda: EmulatedLoop(model)) as runner:
            # a directory of its own: Cluster names node directories by its own count, node0, node1...
            runner.run(_serve(conn, number, indices, params, pathlib.Path(workdir) / f"worker{number}", bootstrap,
                              Sampler(carried=lambda: model.bytes_carried)))
    except BaseException:  # noqa: BLE001 - whatever it was, the main process must hear it, not hang
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            pass
    finally:
        model.close()
        conn.close()


async def _serve(conn: Connection, number: int, indices: list[int], params: CrowdParams, workdir: pathlib.Path,
                 bootstrap: str | None, sampler: Sampler) -> None:
    async def receive(kind: str) -> tuple:
        message = await asyncio.to_thread(conn.recv)
        if message[0] != kind:
            raise WorkerError(f"worker {number}: the main process said {message[0]!r} where {kind!r} was due")
        return message

    nodes = SwarmNodes(params, workdir, indices, bootstrap)
    try:
        await nodes.start(on_first=(lambda address: conn.send(("first", address))) if number == 0 else None)
        conn.send(("up",))
        _, t0, arrivals, files = await receive("go")
        with no_full_collections():
            sampler.start()
            try:
                await nodes.run_clients(t0, arrivals, files, lambda record: conn.send(("record", record)))
                conn.send(("finished",))
                await receive("close")
            finally:
                await sampler.stop()
        conn.send(("done", sampler.samples()))
    finally:
        await nodes.close()


def raise_file_limit() -> None:
    # Each node holds a handful of sockets; a thousand nodes need more than the usual 1,024 descriptors, and
    # 100 libtorrent clients, 50 connections each at most, four descriptors per connection (both sessions'
    # sockets and the relay's two), hold up to ~11,000. Root may raise the hard limit too.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        wanted = max(hard, min(int(pathlib.Path("/proc/sys/fs/nr_open").read_text()), 1 << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
    except (OSError, ValueError):
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
