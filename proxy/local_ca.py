"""The local CA for `--mitm-hosts`: one per install, name-constrained to the listed domains, short-lived leaves.

A client that trusts this CA (curl --cacert, update-ca-certificates, a browser policy) lets the proxy terminate
its CONNECTs to the listed hosts and swarm what they serve (`proxy.mitm`). What keeps that from being a general
interception key (mitmproxy's CA handling is the model, with less reach):

* the CA is made on first use in the data dir; its key is written with mode 0600 and never leaves the machine;
* it carries a critical NameConstraints extension permitting only the listed domains, so a verifier that
  honours RFC 5280 refuses any other name it would sign, even if the key leaked; changing the list therefore
  needs a new CA (`swarmproxy ca rotate`), which we say rather than do silently behind a trust the user gave;
* leaves live one day (`LEAF_LIFETIME`) and are made again an hour before they expire;
* a leaf is made only for a valid host name (`host_name`: LDH labels, no wildcard, no IP literal) that the list
  covers, checked before any file is touched, and its file is named by the SHA-256 of that name: the name comes
  from a client (TLS SNI, the CONNECT target), and `../`, `/abs/path` or `*.listed` in it once wrote a key
  outside the data dir, overwrote files there (and evicting that leaf deleted them) or minted a wildcard leaf.

`cryptography` builds every certificate (no hand-written ASN.1). Errors are `ConfigError` with one clear line.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import os
import pathlib
import re
import ssl

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .errors import ConfigError

CA_LIFETIME = datetime.timedelta(days=365)
LEAF_LIFETIME = datetime.timedelta(days=1)
LEAF_RENEW_BEFORE = datetime.timedelta(hours=1)
LEAF_FILE = re.compile(r"[0-9a-f]{64}\.pem")  # `leaf_path`: the SHA-256 of the name
BACKDATE = datetime.timedelta(hours=1)  # a client whose clock is a little behind still accepts a fresh leaf
MAX_LEAVES = 256  # leaves kept in memory (and on disk) at once; the least recently made go first
CA_NAME = "swarmproxy local CA (this machine only)"
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")  # RFC 1123 LDH: 1..63, no hyphen at either end
_NUMERIC = re.compile(r"[0-9]+|0x[0-9a-f]*")  # a last label URL parsers read as IPv4 (WHATWG "ends in a number")
MAX_NAME = 253  # RFC 1035: 255 octets on the wire, so 253 characters written without the trailing dot
CN_MAX = 64  # RFC 5280's upper bound for a commonName; a longer name is in the SAN only


class RefusedName(ConfigError):
    """A name the CA will not sign: not a valid host name, or not listed. A `ConfigError`, so that a caller that
    already shows those as one line (never a traceback) shows this too; its message quotes the name with repr(),
    since the name comes from a client and may hold control characters."""


def host_name(name: object) -> str:
    """`name` as the one form the CA signs and files leaves under: lower case, no trailing dot; RefusedName for
    anything that is not a DNS host name of LDH labels (letters, digits, inner hyphens; 1..63 each, 253 in all).

    One trailing dot (the absolute form) is the same name; any other empty label is refused. Only ASCII is
    lowered: str.lower() would turn the Kelvin sign into `k`, so a name a client spelled differently would get
    a leaf for another. IDNs arrive as A-labels (xn--...), which are LDH. An IP literal is refused: the CA's name
    constraints cover DNS names only, and a client checks an IP address against iPAddress entries, never DNS."""
    shown = repr(name)[:120]
    if not isinstance(name, str) or not name:
        raise RefusedName(f"{shown} is not a host name")
    if not name.isascii():
        raise RefusedName(f"{shown} is not a host name: not ASCII (an IDN is signed as its xn-- A-label)")
    host = name.lower()
    if host.endswith("."):
        host = host[:-1]
    if "*" in host:
        raise RefusedName(f"{shown} is a wildcard: leaves are made for one host name each")
    if not host or len(host) > MAX_NAME:
        raise RefusedName(f"{shown} is not a host name (1..{MAX_NAME} characters)")
    odd = next((c for c in host if not (c.isalnum() or c in ".-")), None)  # `/`, space, `_`, controls...
    if odd is not None:
        raise RefusedName(f"{shown} is not a host name: it holds {odd!r}")
    labels = host.split(".")
    bad = next((label for label in labels if not _LABEL.fullmatch(label)), None)
    if bad is not None:
        raise RefusedName(f"{shown} is not a host name: label {bad[:70]!r} is empty, longer than 63 characters "
                          "or starts or ends with a hyphen")
    if _NUMERIC.fullmatch(labels[-1]):
        raise RefusedName(f"{shown} is an IP address, or ends like one; only host names are signed")
    return host


def parse_mitm_hosts(text: str | list | tuple) -> tuple[str, ...]:
    """`*.debian.org,downloads.example.com` -> the patterns, lower case; ConfigError for what cannot be one.
    `*.d` stands for every name under d (any depth); a plain name for itself. IP addresses are refused: the CA's
    name constraints cover DNS names only."""
    items = text if isinstance(text, (list, tuple)) else str(text).split(",")
    patterns: list[str] = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        wildcard = item.startswith("*.")
        name = item[2:] if wildcard else item
        try:
            ipaddress.ip_address(name)
            raise ConfigError(f"{item!r}: an IP address cannot be listed; list host names")
        except ValueError:
            pass
        try:  # the same rule as for the names signed, so that every name a pattern covers can be signed
            name = host_name(name)
        except RefusedName:
            raise ConfigError(f"{item!r} is not a host name or *.domain pattern") from None
        labels = name.split(".")
        item = f"*.{name}" if wildcard else name
        if wildcard and len(labels) < 2:
            raise ConfigError(f"{item!r} would cover a whole top-level domain; list the domains themselves")
        if item not in patterns:
            patterns.append(item)
    return tuple(patterns)


def matches(patterns: tuple[str, ...], host: str) -> bool:
    """Whether `host` is under a pattern, as text only: `../x.listed` is under `*.listed` here. That is what a
    CONNECT target is tested with, so that such a name is refused, not tunnelled; `LocalCA.listed_name` is
    what decides whether a name may be signed."""
    host = host.lower().rstrip(".")
    return any(host == p or (p.startswith("*.") and host.endswith(p[1:])) for p in patterns)


def constrained_domains(patterns: tuple[str, ...]) -> list[str]:
    """The DNS name constraints that permit exactly the patterns' names (a constraint covers its subdomains)."""
    return sorted({p[2:] if p.startswith("*.") else p for p in patterns})


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_private(path: pathlib.Path, data: bytes) -> None:
    """Write `data` readable by its owner only (0600 from the first byte: no window with a wider mode)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


class LocalCA:
    """The CA under `directory` (ca.pem, ca.key, hosts.json, leaves/), made for `patterns`."""

    def __init__(self, directory: os.PathLike | str, patterns: tuple[str, ...], *, new: bool = False) -> None:
        """Load the CA under `directory` (made on first use); `new`: make a new one whatever is there."""
        self.directory = pathlib.Path(directory)
        self.patterns = patterns
        self.cert_path = self.directory / "ca.pem"
        self.key_path = self.directory / "ca.key"
        self.hosts_path = self.directory / "hosts.json"
        self._leaves: dict[str, tuple[ssl.SSLContext, datetime.datetime]] = {}
        self.cert, self.key = self.rotate() if new else self._load_or_create()

    # -- the CA ---------------------------------------------------------------------------------------------------

    def _load_or_create(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        if not self.cert_path.exists():
            return self.rotate()
        try:
            cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
            made_for = tuple(json.loads(self.hosts_path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"the local CA in {self.directory} cannot be read ({exc}); "
                              "`swarmproxy ca rotate` makes a new one") from None
        if constrained_domains(made_for) != constrained_domains(self.patterns):
            raise ConfigError(
                f"the local CA in {self.directory} is constrained to {', '.join(constrained_domains(made_for))}, "
                f"but --mitm-hosts lists {', '.join(self.patterns)}: run `swarmproxy ca rotate` and trust the new "
                "CA (`swarmproxy ca export`) — a CA's name constraints cannot change")
        if cert.not_valid_after_utc < _now() + LEAF_LIFETIME:
            raise ConfigError(f"the local CA in {self.directory} expires on {cert.not_valid_after_utc:%Y-%m-%d}: "
                              "run `swarmproxy ca rotate` and trust the new one")
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ConfigError(f"the local CA key in {self.key_path} is not an EC key; `swarmproxy ca rotate`")
        self._sweep_leaves()
        return cert, key

    def _sweep_leaves(self) -> None:
        """Delete what `leaves/` holds besides leaves named by a hash: earlier trees named them by the client's SNI,
        and those files (each with its private key, signed by this CA) were never read or evicted again."""
        leaves = self.directory / "leaves"
        if not leaves.is_dir():
            return
        for entry in leaves.iterdir():
            if not LEAF_FILE.fullmatch(entry.name):
                entry.unlink(missing_ok=True)  # a link itself, never what it points at

    def rotate(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        """Make a new CA (for the current patterns) and forget every leaf of the old one."""
        if not self.patterns:
            raise ConfigError("no host is listed (--mitm-hosts): a local CA would have nothing to sign")
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
        now = _now()
        permitted = [x509.DNSName(domain) for domain in constrained_domains(self.patterns)]
        cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        _write_private(self.key_path, key.private_bytes(serialization.Encoding.PEM,
                                                        serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.hosts_path.write_text(json.dumps(list(self.patterns)))
        leaves = self.directory / "leaves"
        if leaves.exists():
            for old in leaves.iterdir():
                old.unlink(missing_ok=True)
        self._leaves.clear()
        self.cert, self.key = cert, key
        return cert, key

    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    # -- leaves ---------------------------------------------------------------------------------------------------

    def listed_name(self, host: object) -> str:
        """`host` normalised (`host_name`) if the CA may sign it; RefusedName (saying why) otherwise."""
        name = host_name(host)
        if not matches(self.patterns, name):
            raise RefusedName(f"{name!r} is not listed in --mitm-hosts")
        return name

    def leaf_path(self, host: str) -> pathlib.Path:
        """Where the leaf of the (valid, normalised) `host` is kept: named by a hash, so no client-chosen
        character ever reaches a path. Leaves filed under their names by older versions are never read."""
        return self.directory / "leaves" / f"{hashlib.sha256(host.encode('ascii')).hexdigest()}.pem"

    def context_for(self, host: str) -> ssl.SSLContext:
        """A server context presenting a leaf for `host` (a listed name), made or reused; RefusedName, before
        any file is touched, for a name it must not sign."""
        host = self.listed_name(host)
        cached = self._leaves.pop(host, None)
        if cached is not None and cached[1] - LEAF_RENEW_BEFORE > _now():
            self._leaves[host] = cached  # most recently used last
            return cached[0]
        context, expires = self._make_leaf(host)
        self._leaves[host] = (context, expires)
        while len(self._leaves) > MAX_LEAVES:
            oldest = next(iter(self._leaves))
            del self._leaves[oldest]
            self.leaf_path(oldest).unlink(missing_ok=True)
        return context

    def _make_leaf(self, host: str) -> tuple[ssl.SSLContext, datetime.datetime]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        expires = now + LEAF_LIFETIME
        # Clients match the SAN; the CN is a courtesy for people reading the certificate, and cannot be longer.
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, host)] if len(host) <= CN_MAX else []
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - BACKDATE).not_valid_after(expires)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=not subject)  # RFC 5280
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        leaves = self.directory / "leaves"
        leaves.mkdir(mode=0o700, exist_ok=True)
        path = self.leaf_path(host)
        # ssl loads a chain from files only: the leaf, then our CA, then its key, readable by us alone.
        _write_private(path, cert.public_bytes(serialization.Encoding.PEM) + self.pem().encode()
                       + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(path)
        return context, expires
