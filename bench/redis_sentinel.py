"""A Sentinel-managed redis on one machine, for tests and the lab: a primary, a replica and three sentinels
(`redis-server CONF --sentinel`), every one on a free loopback port in a scratch directory, with ACL users as in
production (docs/cluster.md, "With Sentinel"): no default user, the cluster's user (`bench.secure_redis`), one for
replication, one for the sentinels to manage the data nodes, and the sentinels behind a password of their own.
With `tls=True`, as the secure setup: every node and every sentinel speaks TLS only (`port 0`, `tls-port`), with
`tls-replication yes` (a replica's link to its primary, and a sentinel's to the data nodes and to the other
sentinels, are TLS too), and one certificate of one test CA (`make_tls`: every process is on the same address).

`Cluster(directory, group)` runs agents and pushes on it as on a `RedisServer`: `url` is the Sentinel URL, and
`client()` reaches whichever node is the primary now. Nothing sleeps to synchronise: readiness is a log line, a
failover is polled (`wait_until`) until the sentinels name the new primary.
"""

from __future__ import annotations

import pathlib
import secrets
import subprocess

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.cluster_harness import REDIS_BINARY, RedisServer, follow_log, free_port, wait_until
from bench.secure_redis import CLUSTER_ACL, USER, make_tls, tls_client, tls_only

SERVICE = "coord"
DOWN_AFTER_MS = 1000  # a primary silent this long is subjectively down: the failover starts within about a second
QUORUM = 2  # of 3 sentinels must agree that it is down
ADMIN = "admin"  # the test's own user on the data nodes (the cluster's user may touch only its keys)
MONITOR = b"+monitor master"  # a sentinel prints this once it watches the primary: ready


class SentinelProcess:
    def __init__(self, directory: pathlib.Path, port: int) -> None:
        self.directory, self.port = directory, port
        self.process: subprocess.Popen | None = None
        self.log = directory / "sentinel.log"

    def start(self, config: str, timeout: float = 15.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "sentinel.conf"  # a sentinel rewrites its own config file: one each
        conf.write_text(config)
        self.process = subprocess.Popen([REDIS_BINARY, str(conf), "--sentinel"], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT)
        if not follow_log(self.process, self.log, MONITOR).wait(timeout):
            raise TimeoutError(f"redis-server --sentinel did not start on port {self.port}: see {self.log}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)


class SentinelGroup:
    """A primary, a replica, three sentinels; `url` names the primary through the sentinels."""

    def __init__(self, directory: pathlib.Path, host: str = "127.0.0.1", sentinels: int = 3, tls: bool = False) -> None:
        self.directory, self.host = directory, host
        self.tls = make_tls(directory / "tls", host) if tls else None
        self.password = secrets.token_urlsafe(18)  # the cluster user's, as in the secure setup
        self.replication_password = secrets.token_urlsafe(18)
        self.sentinel_user_password = secrets.token_urlsafe(18)  # the sentinels' user on the data nodes
        self.sentinel_password = secrets.token_urlsafe(18)  # what a client gives the sentinels themselves
        self.admin_password = secrets.token_urlsafe(18)
        directory.mkdir(parents=True, exist_ok=True)
        self.aclfile = directory / "users.acl"
        # The Redis manual's Sentinel and replica users ("ACL rules for Sentinel", "Replication"): nothing more.
        self.aclfile.write_text("\n".join([
            "user default off",
            CLUSTER_ACL.format(password=self.password),
            f"user replica on >{self.replication_password} +psync +replconf +ping",
            f"user sentinel on >{self.sentinel_user_password} allchannels +multi +slaveof +replicaof +ping +exec "
            "+subscribe +config|rewrite +role +publish +info +client|setname +client|kill +script|kill",
            f"user {ADMIN} on >{self.admin_password} ~* &* +@all", ""]))
        replication = ("--aclfile", str(self.aclfile), "--masteruser", "replica",
                       "--masterauth", self.replication_password, *(("--tls-replication", "yes") if tls else ()))
        self.primary = RedisServer(directory / "primary", host=host, extra=replication, tls=self.tls)
        self.replica = RedisServer(directory / "replica", host=host, tls=self.tls,
                                   extra=(*replication, "--replicaof", host, str(self.primary.port)))
        self.sentinels = [SentinelProcess(directory / f"sentinel{i}", free_port(host)) for i in range(sentinels)]

    @property
    def url(self) -> str:
        hosts = ",".join(f"{self.host}:{s.port}" for s in self.sentinels)
        url = f"{USER}:{self.password}@{hosts}/{SERVICE}/0?sentinel_password={self.sentinel_password}"
        if self.tls:  # the primary and the sentinels (sentinel_ssl's default: as the primary)
            return f"rediss+sentinel://{url}&ssl_ca_certs={self.tls['ca']}"
        return f"redis+sentinel://{url}"

    def listen_lines(self, port: int) -> list[str]:
        """A sentinel.conf's lines for its port: with TLS, TLS only, and `tls-replication yes` for its links to the
        data nodes and to the other sentinels (it then announces its `tls-port` to them)."""
        if not self.tls:
            return [f"port {port}"]
        return [f"{name} {value}" for name, value in tls_only(self.tls, port)] + ["tls-replication yes"]

    def sentinel_config(self, sentinel: SentinelProcess) -> str:
        return "\n".join([
            *self.listen_lines(sentinel.port), f"bind {self.host}", "protected-mode no", f"dir {sentinel.directory}",
            f"sentinel monitor {SERVICE} {self.host} {self.primary.port} {QUORUM}",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} 10000", f"sentinel parallel-syncs {SERVICE} 1",
            f"sentinel auth-user {SERVICE} sentinel", f"sentinel auth-pass {SERVICE} {self.sentinel_user_password}",
            f"requirepass {self.sentinel_password}",  # clients give it as sentinel_password=...
            f"sentinel sentinel-pass {self.sentinel_password}",  # ... and so do the sentinels to each other
            ""])

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        wait_until(lambda: self.node_info(self.replica, "replication").get("master_link_status") == "up", 30,
                   "the replica in sync")
        for sentinel in self.sentinels:
            sentinel.start(self.sentinel_config(sentinel))

    def ready(self) -> None:
        """Until every sentinel knows the replica and the other sentinels (their hello messages come every 2 s): a
        failover needs both. Apart from `start`, so that agents can start meanwhile."""
        others = len(self.sentinels) - 1
        wait_until(lambda: all(s.get("num-slaves", 0) >= 1 and s.get("num-other-sentinels", 0) >= others
                               for s in self.masters()), 30, "the sentinels know the replica and each other")

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        self.replica.stop()
        self.primary.stop()

    # -- looking at it -----------------------------------------------------------------------------------------

    def node(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(host=server.host, port=server.port, username=ADMIN, password=self.admin_password,
                           socket_timeout=5, retry=Retry(NoBackoff(), 0), **self.tls_kwargs())

    def tls_kwargs(self) -> dict:
        return tls_client(self.tls) if self.tls else {}

    def node_info(self, server: RedisServer, section: str) -> dict:
        try:
            with self.node(server) as client:
                return client.info(section)
        except redis.exceptions.ConnectionError:
            return {}

    def masters(self) -> list[dict]:
        """What each sentinel says of the service (an empty dict for one that does not answer)."""
        found = []
        for sentinel in self.sentinels:
            try:
                with redis.Redis(host=self.host, port=sentinel.port, password=self.sentinel_password,
                                 socket_timeout=5, retry=Retry(NoBackoff(), 0), decode_responses=True,
                                 **self.tls_kwargs()) as client:
                    found.append(client.sentinel_master(SERVICE))
            except redis.exceptions.RedisError:
                found.append({})
        return found

    def primary_port(self) -> int | None:
        """The port the sentinels agree is the primary's, once every one of them says the same."""
        ports = {int(m["port"]) for m in self.masters() if m}
        return ports.pop() if len(ports) == 1 else None

    def current(self) -> RedisServer:
        return self.replica if self.primary_port() == self.replica.port else self.primary

    def client(self) -> redis.Redis:
        """The primary now, as the test's admin (reads any key)."""
        return self.node(self.current())

    def cut_replication(self) -> None:
        """The replica stops receiving writes (the replication user is switched off and its link killed): what is
        written from now on is lost if the primary dies, as a lagging replica loses its last writes."""
        with self.node(self.primary) as client:
            client.execute_command("ACL", "SETUSER", "replica", "off")
            client.client_kill_filter(user="replica")
        wait_until(lambda: self.node_info(self.replica, "replication").get("master_link_status") == "down", 15,
                   "the replica cut off")
