"""A cluster on one machine, for tests and `bench/cluster_sim.py`: a real `redis-server` on a free port in a
scratch directory, agents and pushers as real processes (`python -m cluster ...`) on 127.0.0.x addresses.

Nothing here sleeps to synchronise: `wait_until` polls a condition (redis state, a process's exit) with a deadline,
and redis is known ready when it prints that it accepts connections.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from bench.secure_redis import SecureSetup, flags, tls_client, tls_only
from cluster.errors import BadRecord
from cluster.identity import Gate, Identity
from cluster.intent import SigningKey
from cluster.records import NAMESPACE, AgentRecord, Keys, MemberRecord, TransferRecord, build

REDIS_BINARY = "redis-server"
READY = b"Ready to accept connections"
POLL = 0.1  # s between two looks at a condition in `wait_until`


def redis_missing() -> str | None:
    """Why the cluster cannot run here, or None."""
    if shutil.which(REDIS_BINARY) is None:
        return "redis-server is not installed (apt-get install redis-server; scripts/test.sh installs it)"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> object:
    """`condition()`'s first truthy value, looked at every POLL s; TimeoutError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(POLL)  # the poll interval of a condition with a deadline


def follow_log(process: subprocess.Popen, path: pathlib.Path, marker: bytes) -> threading.Event:
    """Copy `process`'s output into `path` as it comes (a thread), and set the event returned once a line holds
    `marker` (redis-server's "ready", a sentinel's "+monitor")."""
    ready = threading.Event()

    def watch(stream) -> None:
        with open(path, "ab") as log:
            for line in stream:
                log.write(line)
                log.flush()
                if marker in line:
                    ready.set()

    threading.Thread(target=watch, args=(process.stdout,), daemon=True).start()
    return ready


class RedisServer:
    """`redis-server` without persistence (a restart loses everything, as `SHUTDOWN NOSAVE` would)."""

    def __init__(self, directory: pathlib.Path, port: int | None = None, host: str = "127.0.0.1",
                 secure: bool = False, extra: tuple[str, ...] = (), tls: dict[str, pathlib.Path] | None = None) -> None:
        """`secure`: the documented setup (`bench.secure_redis`): TLS only, an ACL user, no default user. `extra`:
        more flags (a replica's `--replicaof`, an `--aclfile`). `tls`: TLS only, with these files (`make_tls`'s: a
        CA several servers share), without the rest of `secure`."""
        self.directory = directory
        self.extra = extra
        self.host = host  # the address it binds: a network namespace test's redis is on the test's veth
        self.port = port or free_port(host)
        self.process: subprocess.Popen | None = None
        self.log = directory / "redis.log"
        self.secure = SecureSetup(directory, self.host, self.port) if secure else None
        self.tls = self.secure.tls if self.secure else tls

    @property
    def url(self) -> str:
        if self.secure:
            return self.secure.url
        if self.tls:
            return f"rediss://{self.host}:{self.port}/0?ssl_ca_certs={self.tls['ca']}"
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout: float = 15.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        listen = (self.secure.server_args() if self.secure else flags(tls_only(self.tls, self.port)) if self.tls
                  else ["--port", str(self.port)])
        self.process = subprocess.Popen(
            [REDIS_BINARY, *listen,
             "--bind", self.host, "--save", "", "--appendonly", "no", "--dir", str(self.directory),
             "--protected-mode", "no", *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if not follow_log(self.process, self.log, READY).wait(timeout):
            raise TimeoutError(f"redis-server did not start on port {self.port}: see {self.log}")

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, socket_timeout=5,
                           **(self.secure.client_kwargs() if self.secure else tls_client(self.tls) if self.tls else {}))

    def shutdown_nosave(self) -> None:
        with self.client() as client:
            try:
                client.shutdown(nosave=True)
            except redis.exceptions.ConnectionError:
                pass  # the server closes the connection as it goes: that is the answer
        assert self.process is not None
        self.process.wait(timeout=15)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)


@dataclass
class AgentProc:
    name: str
    host: str
    dc: str
    rack: str
    data_dir: pathlib.Path
    args: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None
    prefix: list[str] = field(default_factory=list)  # run it through this (`ip netns exec NS`), else directly

    @property
    def identity(self) -> pathlib.Path:
        return self.data_dir.parent / f"{self.name}.identity"  # beside its data dir, as a host keeps it apart

    @property
    def node(self) -> str | None:
        return Identity.load(self.identity).node if self.identity.exists() else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def python_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "cluster", *args]


LAB_RECONCILE = 0.5  # s: the agents' and pusher's period in the lab (the product's default is 2 s)


class Cluster:
    """Agents and pushes on one redis; read their state as the agents wrote it."""

    def __init__(self, directory: pathlib.Path, redis_server: RedisServer, *, reconcile: float = LAB_RECONCILE,
                 extra_agent_args: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.redis = redis_server
        self.reconcile = reconcile
        self.extra_agent_args = extra_agent_args
        self.agents: dict[str, AgentProc] = {}
        self.keys = Keys(NAMESPACE)
        self.env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parent.parent))
        # The owner's key, as `cluster keygen` makes it: pushes and cancels are signed, agents trust its public half.
        self.owner_key = directory / "owner.key"
        if not self.owner_key.exists():
            directory.mkdir(parents=True, exist_ok=True)
            SigningKey.generate().save(self.owner_key)
        self.owner_public = SigningKey.load(self.owner_key).public
        self.gate = Gate(frozenset({self.owner_public}))  # what redis says, as an agent believes it

    def add_agent(self, name: str, host: str, dc: str, rack: str, start: bool = True,
                  extra: tuple[str, ...] = ()) -> AgentProc:
        data_dir = self.directory / name
        agent = AgentProc(name, host, dc, rack, data_dir)
        if not agent.identity.exists():  # what `cluster admit` writes, once per host
            Identity.issue(SigningKey.load(self.owner_key), name).save(agent.identity)
        agent.args = [
            "agent", "--redis", self.redis.url, "--dc", dc, "--rack", rack, "--listen", f"{host}:0",
            "--data-dir", str(data_dir), "--identity", str(agent.identity), "--reconcile", str(self.reconcile),
            "--trust-key", self.owner_public, *self.extra_agent_args, *extra]
        self.agents[name] = agent
        if start:
            self.start(agent)
        return agent

    def start(self, agent: AgentProc) -> None:
        agent.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(agent.data_dir / "agent.log", "ab")
        agent.process = subprocess.Popen([*agent.prefix, *python_command(*agent.args)], stdout=log, stderr=log,
                                         env=self.env)
        log.close()

    def kill9(self, agent: AgentProc) -> None:
        assert agent.process is not None
        agent.process.send_signal(signal.SIGKILL)
        agent.process.wait(timeout=15)

    def stop_all(self) -> None:
        for agent in self.agents.values():
            if agent.alive():
                agent.process.terminate()
        for agent in self.agents.values():
            if agent.process is not None:
                try:
                    agent.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    agent.process.kill()
                    agent.process.wait()

    def push(self, path: pathlib.Path, *extra: str, host: str = "127.0.0.2",
             prefix: tuple[str, ...] = ()) -> subprocess.Popen:
        return subprocess.Popen(
            [*prefix, *python_command("push", str(path), "--redis", self.redis.url, "--listen", f"{host}:0", "--quiet",
                           "--reconcile", str(self.reconcile), "--data-dir", str(self.directory / "seeder"),
                           "--key", str(self.owner_key), *extra)],
            stdout=subprocess.PIPE, stderr=open(self.directory / "push.log", "ab"), env=self.env)

    # -- what redis says -----------------------------------------------------------------------------------------

    def registered(self) -> dict[str, AgentRecord]:
        with self.redis.client() as client:
            nodes = [n.decode() for n in client.smembers(self.keys.agents)]
            values = client.mget([self.keys.agent(n) for n in nodes]) if nodes else []
        return self._opened("agent", AgentRecord, self.keys.agent, dict(zip(nodes, values)))

    def _opened(self, kind: str, cls, where: Callable[[str], str], values: dict) -> dict:
        """The records an admitted agent sealed (anything else in redis is left out, as agents leave it)."""
        found = {}
        for node, value in values.items():
            try:
                found[node] = build(cls, self.gate.open(kind, where(node), node, value), kind)
            except BadRecord:
                continue
        return found

    def transfers(self) -> dict[str, TransferRecord]:
        with self.redis.client() as client:
            tids = [t.decode() for t in client.smembers(self.keys.transfers)]
            values = client.mget([self.keys.transfer(t) for t in tids]) if tids else []
        return {t: TransferRecord.load(v) for t, v in zip(tids, values) if v is not None}

    def members(self, tid: str) -> dict[str, MemberRecord]:
        with self.redis.client() as client:
            nodes = [n.decode() for n in client.smembers(self.keys.members(tid))]
            values = client.mget([self.keys.member(tid, n) for n in nodes]) if nodes else []
        return self._opened("member", MemberRecord, lambda n: self.keys.member(tid, n), dict(zip(nodes, values)))

    def member_of(self, tid: str, agent: AgentProc) -> MemberRecord | None:
        return self.members(tid).get(agent.node or "")

    def all_finished(self, tid: str, agents=None) -> bool:
        members = self.members(tid)
        return all((m := members.get(a.node or "")) is not None and m.state == "FINISHED"
                   for a in (agents or self.agents.values()))
