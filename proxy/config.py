"""Settings of `swarmproxy run`, merged from defaults < TOML file < SWARMPROXY_* environment < flags.

Every option has one entry in OPTIONS; the CLI, the config file, the environment and the README's
configuration reference are all derived from (or checked against) that table, so they cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import re
import ssl
import tomllib
from collections.abc import Callable, Mapping
from typing import Any

import addresses
from swarm.cli import default_data_dir
from swarm.content import sizes
from swarm.content.manifest import MAX_BLOCK_SIZE, MIN_BLOCK_SIZE
from swarm.core.punch import PUNCH_TTL
from swarm.errors import BadSize
from swarm.service.swarm_service import FETCH_PEERS, LINGER
from swarm.trust import TrustPolicy, parse_trust

from .download.discovery_rule import DEFAULT_LARGE
from .download.transition import DEFAULT_EARLY_LOOKUP, DEFAULT_FIRST_BYTE_TIMEOUT, DEFAULT_MIN_RATE, DEFAULT_RATE_WINDOW
from .errors import ConfigError

# Two independent networks: one party with one address (and any number of keys) is never believed on its own.
DEFAULT_TRUST = parse_trust("quorum:2")

DEFAULT_PORT = 8080


@dataclasses.dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_host_port(text: str, *, default_host: str = "127.0.0.1") -> HostPort:
    """'HOST:PORT', ':PORT', 'PORT' or '[v6]:PORT' -> HostPort. Port 0 means 'pick a free one'."""
    text = str(text).strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or default_host
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"{text!r} is not HOST:PORT (the port must be a number)") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"{text!r}: port {number} is outside 0..65535")
    return HostPort(host, number)


def parse_connect_ports(text: str | list) -> frozenset[int] | None:
    """'443,8443' -> {443, 8443}; '*' -> None, meaning every port is allowed."""
    items = text if isinstance(text, list) else str(text).split(",")
    ports: set[int] = set()
    for item in items:
        item = str(item).strip()
        if item == "*":
            return None
        if not item:
            continue
        if not item.isdigit() or not 0 < int(item) <= 65535:
            raise ConfigError(f"connect-ports: {item!r} is not a port number (use e.g. 443,8443 or *)")
        ports.add(int(item))
    return frozenset(ports)


def running_proxy(flag: str | None, environ: Mapping[str, str] = os.environ) -> HostPort:
    """Where a running proxy listens, for the commands that ask it (`status`, `get`, `torrent`): their --proxy,
    else SWARMPROXY_LISTEN, else `run`'s default."""
    return parse_host_port(flag or environ.get("SWARMPROXY_LISTEN") or f"127.0.0.1:{DEFAULT_PORT}")


def parse_dht_listen(text: str) -> HostPort | None:
    """'HOST:PORT' for the DHT's UDP socket, or 'off' for no DHT at all."""
    if str(text).strip().lower() in ("off", "none", "no"):
        return None
    return parse_host_port(text, default_host="0.0.0.0")


def parse_bootstrap(text: str | list) -> tuple[HostPort, ...]:
    """'host:port,host:port' (or a TOML list, or repeated flags) -> bootstrap nodes."""
    items = text if isinstance(text, (list, tuple)) else str(text).split(",")
    nodes = []
    for item in items:
        for part in str(item).split(","):
            if part.strip():
                node = parse_host_port(part.strip(), default_host="")
                if not node.host or node.port == 0:
                    raise ConfigError(f"bootstrap node {part.strip()!r} needs a host and a port")
                nodes.append(node)
    return tuple(nodes)


def parse_peer_listen(text: str) -> HostPort | None:
    """'HOST:PORT' for the block engine's listener, or 'off' for a plain proxy that never swarms."""
    if str(text).strip().lower() in ("off", "none", "no"):
        return None
    return parse_host_port(text, default_host="0.0.0.0")


def parse_bt_listen(text: str) -> HostPort | None:
    """'HOST:PORT' for the BitTorrent bridge's TCP listener, or 'off' (the default) for none."""
    return parse_peer_listen(text)


TRANSPORTS = ("tcp", "quic", "both")


def _transport(text: str) -> str:
    value = str(text).strip().lower()
    if value not in TRANSPORTS:
        raise ConfigError(f"{text!r} is not one of tcp, quic, both")  # the caller names the option
    return value


def _trust(text: str) -> TrustPolicy:
    try:
        return parse_trust(str(text))  # the policy's own parser is the one source of truth
    except ValueError as exc:
        # The caller names the option (--trust, SWARMPROXY_TRUST or the file's key): say it once.
        raise ConfigError(str(exc).removeprefix("trust ")) from None


def _as_config_error(parse: Callable[[Any], Any], text: Any) -> Any:
    """`parse(text)` with `swarm.content.sizes`' grammar (the one every size and rate flag shares), a BadSize
    becoming the ConfigError the caller prefixes with the option's name."""
    try:
        return parse(text)
    except BadSize as exc:
        raise ConfigError(str(exc)) from None


def _size(text: str | int) -> int:
    return _as_config_error(sizes.parse_size, text)


def _byte_count(text: str | int) -> int:
    return int(_number(_size(text), float, zero_ok=False, shown=text))


def _rate(text: str | float) -> float:
    return _as_config_error(sizes.parse_rate, text)


def _block_size(text: str | int) -> int | None:
    return _as_config_error(sizes.parse_block_size, text)


_MIN_BLOCK, _MAX_BLOCK = sizes.format_size(MIN_BLOCK_SIZE), sizes.format_size(MAX_BLOCK_SIZE)  # 16Ki, 4Mi


def _non_negative_float(text: str | float) -> float:
    return _number(text, float, zero_ok=True)


def is_loopback_host(host: str) -> bool:
    return host == "localhost" or addresses.is_loopback(host)


def _parse_bool(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigError(f"{text!r} is not a boolean (use true or false)")


def _number(text: str | float, convert: Callable[[Any], float], *, zero_ok: bool, shown: object = None) -> float:
    """`text` as a finite number > 0 (or >= 0 with `zero_ok`), else a ConfigError saying which rule failed
    about `shown` (what the user wrote; `text` itself by default)."""
    shown = text if shown is None else shown
    try:
        value = convert(text)
    except (TypeError, ValueError, OverflowError):
        kind = "whole number" if convert is int else "number"
        raise ConfigError(f"{text!r} is not a {kind}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{shown!r} is not a finite number")
    if value < 0 and zero_ok:
        raise ConfigError(f"{shown!r} must not be negative")
    if value <= 0 and not zero_ok:
        raise ConfigError(f"{shown!r} must be greater than 0")
    return value


def _positive_float(text: str | float) -> float:
    return _number(text, float, zero_ok=False)


def _positive_int(text: str | int) -> int:
    return int(_number(text, int, zero_ok=False))


def _ca_file(text: str | os.PathLike) -> pathlib.Path:
    """A PEM file of CA certificates to trust for HTTPS origins, besides the system's: read now, so that a wrong
    path or a file without a certificate is one clear line at start, not a TLS failure on the first download."""
    path = pathlib.Path(text).expanduser()
    try:
        ssl.create_default_context().load_verify_locations(cafile=str(path))
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist") from None
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{path} holds no PEM CA certificate we can load: {exc}") from None
    return path


def _mitm_hosts(text: str | list | tuple) -> tuple[str, ...]:
    from .local_ca import parse_mitm_hosts  # cryptography's import is slow; only a listed host needs it

    return parse_mitm_hosts(text)


_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def parse_local_domains(text: str | list | tuple) -> tuple[str, ...]:
    """'corp.example.com,.lan.example' -> the domains, lower case, without a leading '*.' or '.' or a trailing
    dot; ConfigError for what is not a domain name (an IP address belongs in --share-private-origins)."""
    items = text if isinstance(text, (list, tuple)) else str(text).split(",")
    domains: list[str] = []
    for item in (str(i).strip() for i in items):
        name = item.lower().removeprefix("*.").removeprefix(".").removesuffix(".")
        if not item:
            continue
        if addresses.parse(name) is not None:
            raise ConfigError(f"{item!r} is an IP address: list domain names here (an address a public name may "
                              "resolve to goes in --share-private-origins)")
        if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
            raise ConfigError(f"{item!r} is not a domain name (e.g. corp.example.com)")
        if name not in domains:
            domains.append(name)
    return tuple(domains)


def parse_private_origins(text: str | list | tuple) -> tuple[tuple[str, int | None], ...]:
    """'10.0.0.5,192.168.1.20:8080,[fd00::7]:80' -> ((address, port or None for any port), ...), each address in
    `addresses.canonical_host` form; ConfigError for a name, a public or special-purpose address, a bad port, or
    an IPv6 address outside brackets (is `fd00::1:80` a port or part of the address?)."""
    items = text if isinstance(text, (list, tuple)) else str(text).split(",")
    origins: list[tuple[str, int | None]] = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        if item.startswith("["):
            host, bracket, rest = item[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                raise ConfigError(f"{item!r} is not ADDRESS, ADDRESS:PORT or [IPV6]:PORT")
            port_text: str | None = rest[1:] if rest else None
        elif item.count(":") > 1:
            raise ConfigError(f"{item!r}: write an IPv6 address in brackets, [{item}] or [ADDRESS]:PORT")
        else:
            host, colon, port_text = item.partition(":")
            port_text = port_text if colon else None
        ip = addresses.parse(host)
        if ip is None:
            raise ConfigError(f"{item!r}: {host!r} is not an IP address (list addresses, e.g. 192.168.1.20:8080; "
                              "names under --local-domains may resolve to private addresses)")
        kind = addresses.classify(ip)
        if kind is addresses.Kind.PUBLIC:
            raise ConfigError(f"{item!r} is a public address: content from public origins is shared without being "
                              "listed; list loopback, private or link-local origins")
        if kind is addresses.Kind.SPECIAL:
            raise ConfigError(f"{item!r} is a special-purpose address, no origin's; list loopback, private or "
                              "link-local origins")
        port = None
        if port_text is not None:
            if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
                raise ConfigError(f"{item!r}: {port_text!r} is not a port number (1 to 65535)")
            port = int(port_text)
        origin = (addresses.canonical_host(host) or host, port)
        if origin not in origins:
            origins.append(origin)
    return tuple(origins)


def _log_level(text: str) -> str:
    value = str(text).strip().upper()
    if value not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ConfigError(f"log level {text!r} is not one of debug, info, warning, error")
    return value


@dataclasses.dataclass(frozen=True)
class Option:
    name: str  # the flag without dashes; the TOML key and env var are derived from it
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str | None = None
    flag_only: bool = False  # not settable from the file or environment (e.g. --config itself)
    repeatable: bool = False  # the flag may be given several times (values are collected in a list)

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "SWARMPROXY_" + self.attr.upper()


OPTIONS: tuple[Option, ...] = (
    Option("listen", parse_host_port, HostPort("127.0.0.1", DEFAULT_PORT),
           "address of the proxy; port 0 picks a free port (see --ready-file)", "HOST:PORT"),
    Option("allow-remote", _parse_bool, False,
           "allow --listen on a non-loopback address: anyone who reaches it can use the proxy "
           "(the admin API still answers loopback clients only)", "BOOL"),
    Option("data-dir", pathlib.Path, None,
           "where swarmproxy keeps its state (~/.local/share/swarmproxy when XDG_DATA_HOME is unset)",
           "DIR"),
    Option("config", pathlib.Path, None, "TOML file with any of these options (keys as the flags, "
           "without dashes, '-' or '_')", "FILE", flag_only=True),
    Option("connect-ports", parse_connect_ports, frozenset({443}),
           "ports CONNECT may tunnel to, comma separated; * allows any", "LIST"),
    Option("log-level", _log_level, "INFO", "debug, info, warning or error", "LEVEL"),
    Option("ready-file", pathlib.Path, None,
           "once every listener is up, write a JSON object with the actual addresses here, "
           'e.g. {"proxy": "127.0.0.1:8080"}', "FILE"),
    Option("max-connections", _positive_int, 4096,
           "client connections served at once; one more is answered 503", "N"),
    Option("connect-timeout", _positive_float, 10.0,
           "seconds to connect to an origin before answering 504", "SECONDS"),
    Option("read-timeout", _positive_float, 60.0,
           "seconds an origin may stay silent (before or during a response) before the request fails "
           "(504 before the response started, a cut-off response after)", "SECONDS"),
    # 10 s: a client on this machine or a LAN sends its whole head in one packet, milliseconds after
    # connecting; 10 s leaves room for a slow remote link (--allow-remote) yet frees a slot a slowloris
    # client holds within seconds, not minutes (nginx allows 60 s, Apache's mod_reqtimeout 20-40 s, for
    # servers on the open internet).
    Option("ca-file", _ca_file, None,
           "PEM file of CA certificates to trust for HTTPS origins besides the system's (SSL_CERT_FILE works "
           "too); a certificate failure is an error, never a fallback", "FILE"),
    Option("mitm-hosts", _mitm_hosts, (),
           "hosts whose CONNECTs are terminated with a leaf of this install's local CA so that their HTTPS "
           "downloads swarm, e.g. '*.debian.org,downloads.example.com' (trust the CA: swarmproxy ca export); "
           "every other CONNECT stays a blind tunnel", "LIST"),
    Option("local-domains", parse_local_domains, (),
           "domains whose names may resolve to loopback or private addresses, comma separated (a split-horizon "
           "intranet: corp.example.com covers wiki.corp.example.com); any other public name that resolves to one "
           "is refused (403) as DNS rebinding. localhost, single-label names, .local, .internal, .lan, .home.arpa "
           "and IP addresses always may", "LIST"),
    Option("share-private-origins", parse_private_origins, (),
           "loopback, private or link-local origins whose content may be looked up, announced and served to peers "
           "like a public origin's (and which any name may resolve to), as ADDRESS or ADDRESS:PORT, IPv6 in "
           "brackets, comma separated, e.g. 192.168.1.20:8080,[fd00::7]; content fetched from any other "
           "non-public address is never shared. With --bt-listen, also the only non-public addresses BitTorrent "
           "peers may connect from or be dialled at (never seeded to, though)", "LIST"),
    Option("header-timeout", _positive_float, 10.0,
           "seconds a client has to send a whole request head (request line and header fields), counted from "
           "the connection's accept and, between kept-alive requests, from the head's first byte; a head that "
           "comes late is answered 408 and the connection closed (a response or a tunnel under way is never "
           "timed by this)", "SECONDS"),
    # 60 s: browsers keep idle connections for 2-5 minutes and send their next request on them; closing
    # sooner costs them a new connection (cheap on loopback) and closing at all is what they expect, while
    # an idle socket holding a --max-connections slot for an hour (aiohttp's default) is not.
    Option("idle-timeout", _positive_float, 60.0,
           "seconds a kept-alive client connection may wait between requests (after a response, before the "
           "next request's first byte) before it is closed (a response or a tunnel under way is never idle)",
           "SECONDS"),
    # 10 min: browsers close an idle HTTP/2 or WebSocket connection after a few minutes or keep it alive with
    # pings well inside that (squid's read_timeout for tunnels is 15 min); a tunnel nobody uses must not hold a
    # --max-connections slot for ever.
    Option("tunnel-idle-timeout", _positive_float, 600.0,
           "seconds a CONNECT tunnel or an upgraded connection (WebSocket) may pass no byte either way before "
           "it is closed", "SECONDS"),
    Option("max-header-size", _byte_count, 65536,
           "longest request line or header line accepted, in bytes; longer is answered 431", "BYTES"),
    Option("request-history", _positive_int, 200,
           "how many recent requests /_swarm/requests (and the status page, /_swarm/) keeps", "N"),
    Option("dht-listen", parse_dht_listen, HostPort("0.0.0.0", 0),
           "UDP address of the DHT node that finds peers; meant to be reachable by other peers "
           "(port 0 picks a free one); 'off' runs no DHT", "HOST:PORT"),
    Option("bootstrap", parse_bootstrap, (),
           "a DHT node to join through (repeatable; comma separated in the file or environment)",
           "HOST:PORT", repeatable=True),
    Option("no-lan-discovery", _parse_bool, False,
           "do not look for peers on the local network by multicast (on by default)", "BOOL"),
    Option("peer-listen", parse_peer_listen, HostPort("0.0.0.0", 0),
           "address where other peers fetch blocks from this node (TCP and/or UDP, same port; port 0 picks "
           "one; a specific HOST is also where connections to peers leave from); 'off' makes a plain proxy that "
           "never swarms", "HOST:PORT"),
    Option("bt-listen", parse_bt_listen, None,
           "address where BitTorrent clients fetch what this node shares (TCP; the same UDP port must be free too; "
           "port 0 picks one): every shared "
           "download from a public origin is seeded as a BitTorrent v2 torrent from the block store, no second "
           "copy ('swarmproxy torrent export' prints its magnet); 'off' runs no BitTorrent session", "HOST:PORT"),
    Option("private-network", _parse_bool, False,
           "stay off the public network: no public BitTorrent Mainline DHT, no port mapping asked of the router (the "
           "Internet mode is on by default, as in BitTorrent clients; it needs --peer-listen)", "BOOL"),
    Option("mainline-bootstrap", parse_bootstrap, (),
           "a Mainline DHT node or router to join through instead of the public routers (repeatable; for "
           "private deployments and labs)", "HOST:PORT", repeatable=True),
    Option("map-ports", _parse_bool, False,
           "with --mainline-bootstrap, ask the router to map the peer port too (UPnP-IGD, NAT-PMP), as the public "
           "network's mode does on its own; for labs and private deployments behind NATs", "BOOL"),
    Option("punch-ttl", _positive_int, PUNCH_TTL,
           "the IP TTL of a hole punch's datagram (QUIC, behind NATs): enough hops to pass your own NATs, too few to "
           "reach the other side's, whose NAT could otherwise give that side another port", "HOPS"),
    Option("transport", _transport, "both",
           "peer transports offered and used: tcp (fast on a LAN), quic (one UDP socket, TLS), or both", "NAME"),
    Option("trust", _trust, DEFAULT_TRUST,
           "which manifests from the DHT to believe: quorum:N (N independent publishers that got the file "
           "from the origin agree), origin (only our own), any (the first one; labs and trusted LANs only)",
           "POLICY"),
    Option("first-byte-timeout", _positive_float, DEFAULT_FIRST_BYTE_TIMEOUT,
           "switch to peers when the origin sends no byte at all (headers count) within this many seconds (T)",
           "SECONDS"),
    Option("min-rate", _rate, DEFAULT_MIN_RATE,
           "switch to peers when the origin delivers less than this many bytes/s over --rate-window (R); "
           "0 never switches for rate; suffixes k, M (1000) and Ki, Mi (1024)", "BYTES"),
    Option("rate-window", _positive_float, DEFAULT_RATE_WINDOW,
           "seconds over which --min-rate is measured, from the first byte on (W)", "SECONDS"),
    Option("early-lookup", _non_negative_float, DEFAULT_EARLY_LOOKUP,
           "when the origin is under --min-rate this many seconds after its first byte, look for peers "
           "already, and leave the origin at once if the swarm has a trusted copy; 0 waits for W", "SECONDS"),
    Option("no-adaptive", _parse_bool, False,
           "use --first-byte-timeout, --min-rate and --rate-window as they are for every origin; without it they "
           "are where each origin host starts and the bounds of what its downloads teach (T within [T/4, 4T], R "
           "within [R/4, R], W within [W/8, 4W]; /_swarm/requests shows the values used)", "BOOL"),
    Option("discover-size", _size, DEFAULT_LARGE,
           "files at least this large may be looked up in the DHT and announced even when their origin is fast; "
           "smaller ones only when the origin was slow (T, R, a head silent for half of T), asked for it, or its "
           "host was slow recently: fast browsing tells the DHT nothing; 0 lets every size (k, M, G: powers of "
           "1024)", "BYTES"),
    Option("linger", _non_negative_float, LINGER,
           "seconds to keep serving a file to peers after downloading it; 0 serves until it is evicted",
           "SECONDS"),
    Option("no-share", _parse_bool, False,
           "never serve blocks to others nor announce anything (downloads may still use peers)", "BOOL"),
    Option("store-size", _byte_count, 10 * 1024**3,
           "disk space for shared content under the data dir; least recently used content is evicted "
           "beyond it (k, M, G: powers of 1024)", "BYTES"),
    Option("block-size", _block_size, None,
           "block size of the manifests this node makes of what it got from the origin: auto (by file size, "
           f"{_MIN_BLOCK} up to {_MAX_BLOCK}) or a power of two from {_MIN_BLOCK} to {_MAX_BLOCK} (64k is 64Ki), the "
           "largest a peer sends in one message (auto again where that would exceed 2^24 blocks); a swarm download "
           "uses the block size of the manifest it found", "SIZE"),
    Option("fetch-peers", _positive_int, FETCH_PEERS,
           "at most this many providers are used per swarm download (and no more than its blocks + 2); "
           "when more are found, this many are picked at random, so the load spreads", "N"),
)

_BY_ATTR = {option.attr: option for option in OPTIONS}


@dataclasses.dataclass(frozen=True)
class Config:
    listen: HostPort
    allow_remote: bool
    data_dir: pathlib.Path
    config: pathlib.Path | None
    connect_ports: frozenset[int] | None
    log_level: str
    ready_file: pathlib.Path | None
    max_connections: int
    connect_timeout: float
    read_timeout: float
    ca_file: pathlib.Path | None
    mitm_hosts: tuple[str, ...]
    local_domains: tuple[str, ...]
    share_private_origins: tuple[tuple[str, int | None], ...]
    header_timeout: float
    idle_timeout: float
    tunnel_idle_timeout: float
    max_header_size: int
    request_history: int
    dht_listen: HostPort | None
    bootstrap: tuple[HostPort, ...]
    no_lan_discovery: bool
    peer_listen: HostPort | None
    bt_listen: HostPort | None
    private_network: bool
    mainline_bootstrap: tuple[HostPort, ...]
    map_ports: bool
    punch_ttl: int
    transport: str
    trust: TrustPolicy
    first_byte_timeout: float
    min_rate: float
    rate_window: float
    early_lookup: float
    no_adaptive: bool
    discover_size: int
    linger: float
    no_share: bool
    store_size: int
    block_size: int | None
    fetch_peers: int

    @classmethod
    def load(
        cls,
        flags: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Config:
        """Merge the layers. `flags` holds only what was given on the command line (attr names)."""
        flags = {k: v for k, v in (flags or {}).items() if v is not None}
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {o.attr: o.default for o in OPTIONS}
        sources: dict[str, str] = {}

        config_path = flags.get("config") or environ.get(_BY_ATTR["config"].env)
        if config_path:
            for key, raw in _read_toml(pathlib.Path(config_path)).items():
                values[key] = raw
                sources[key] = f"{config_path}: {_BY_ATTR[key].name}"  # the file's spelling, min-rate
            values["config"] = pathlib.Path(config_path)
        for option in OPTIONS:
            if not option.flag_only and option.env in environ:
                values[option.attr] = environ[option.env]
                sources[option.attr] = option.env
        for attr, raw in flags.items():
            values[attr] = raw
            sources[attr] = "--" + _BY_ATTR[attr].name

        parsed: dict[str, Any] = {}
        for option in OPTIONS:
            raw = values[option.attr]
            if raw is None or raw is option.default:
                parsed[option.attr] = raw
                continue
            try:
                parsed[option.attr] = option.parse(raw)
            except ConfigError as exc:
                raise ConfigError(f"{sources.get(option.attr, option.name)}: {exc}") from None
        if parsed["data_dir"] is None:
            parsed["data_dir"] = default_data_dir()
        config = cls(**parsed)
        config._check()
        return config

    def _check(self) -> None:
        if not is_loopback_host(self.listen.host) and not self.allow_remote:
            raise ConfigError(
                f"--listen {self.listen} is not a loopback address: anyone who can reach it could use "
                "this proxy. Add --allow-remote (or allow-remote = true) if that is what you want."
            )


def _read_toml(path: pathlib.Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    result = {}
    for key, value in data.items():
        attr = key.replace("-", "_")
        if attr not in _BY_ATTR or _BY_ATTR[attr].flag_only:
            known = ", ".join(o.name for o in OPTIONS if not o.flag_only)
            raise ConfigError(f"config file {path}: unknown option {key!r} (known: {known})")
        result[attr] = value
    return result
