"""The documented secure redis setup of the cluster mode, made in a test's directory: TLS with a CA of its own, no
default user, and one ACL user that may run only the commands the cluster runs, on its own keys and channel.

docs/cluster.md shows the same ACL line (`CLUSTER_ACL`) and the same server flags; the end-to-end tests and the
lab run through this, so the setup users copy is the one that is tested.
"""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
import secrets

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cluster.records import NAMESPACE

USER = "swarmproxy"
# Everything the agents, pushes and `status`/`cancel` run, and nothing else: on the cluster's keys and wake-up
# channel only. EVAL runs the slot scripts (GET, PEXPIRE, DEL inside) and the `primary` marker's (GET, SET); EVALSHA
# the read of what changed (`cluster.coord._CHANGED`: GET inside), EVAL the same once a server has not seen it yet;
# INFO gives the server's run id and uptime.
COMMANDS = ("get", "set", "mget", "exists", "del", "pexpire", "sadd", "srem", "smembers", "publish", "subscribe",
            "unsubscribe", "eval", "evalsha", "info", "ping")
CLUSTER_ACL = (f"user {USER} on >{{password}} resetkeys resetchannels ~{NAMESPACE}:* &{NAMESPACE}:* -@all "
               + " ".join(f"+{command}" for command in COMMANDS))


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_tls(directory: pathlib.Path, host: str) -> dict[str, pathlib.Path]:
    """A CA and a server certificate for `host` (an IP literal): ca.pem, server.pem, server.key."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("swarmproxy test redis CA")).issuer_name(_name(
        "swarmproxy test redis CA")).public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(host)).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {"ca": directory / "ca.pem", "cert": directory / "server.pem", "key": directory / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    paths["key"].chmod(0o600)
    return paths


def tls_only(tls: dict[str, pathlib.Path], port: int) -> list[tuple[str, str]]:
    """redis-server's directives for TLS only on `port` (`port 0`: no plaintext port) with `make_tls`'s files,
    clients not asked for a certificate: a server's flags (`flags`), or the lines of a sentinel.conf."""
    return [("port", "0"), ("tls-port", str(port)), ("tls-cert-file", str(tls["cert"])),
            ("tls-key-file", str(tls["key"])), ("tls-ca-cert-file", str(tls["ca"])), ("tls-auth-clients", "no")]


def flags(directives: list[tuple[str, str]]) -> list[str]:
    return [arg for name, value in directives for arg in (f"--{name}", value)]


def tls_client(tls: dict[str, pathlib.Path]) -> dict:
    """redis-py's keyword arguments for a server with `make_tls`'s certificate."""
    return {"ssl": True, "ssl_ca_certs": str(tls["ca"])}


class SecureSetup:
    """The files and flags of the secure setup for a redis-server on `host:port` in `directory`."""

    def __init__(self, directory: pathlib.Path, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.password = secrets.token_urlsafe(24)
        self.tls = make_tls(directory / "tls", host)
        self.aclfile = directory / "users.acl"
        # No default user: a client without credentials can do nothing but AUTH.
        self.aclfile.write_text("user default off\n" + CLUSTER_ACL.format(password=self.password) + "\n")

    def server_args(self) -> list[str]:
        return [*flags(tls_only(self.tls, self.port)), "--aclfile", str(self.aclfile)]

    @property
    def url(self) -> str:
        return (f"rediss://{USER}:{self.password}@{self.host}:{self.port}/0?ssl_ca_certs={self.tls['ca']}")

    def client_kwargs(self) -> dict:
        return {**tls_client(self.tls), "username": USER, "password": self.password}
