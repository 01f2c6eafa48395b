"""What `swarmproxy lab sweep --param` varies, apart from the scenarios so that `swarmproxy lab --help` can
list the parameters without loading the proxy and the emulated network."""

from __future__ import annotations

from collections.abc import Callable

from proxy.errors import ConfigError
from swarm.content.sizes import BadSize, parse_block_size, parse_size
from swarm.trust import parse_trust


def _trust(text: str) -> str:
    return str(parse_trust(text))  # raises ValueError on a policy the proxy would refuse


def _size(text: str) -> str:
    return str(parse_size(text))  # raises ValueError (BadSize) on a size the proxy would refuse


def _block(text: str) -> str:
    parse_block_size(text)  # raises ValueError (BadSize) on a block size the proxy would refuse
    return text


# What `sweep --param` varies: (CrowdParams field, how a value is written, Pack's values).
SWEEPS: dict[str, tuple[str, Callable[[str], object], list[str]]] = {
    "T": ("first_byte_timeout", float, ["0.25", "0.75", "2", "5", "10"]),
    "R": ("min_rate", float, ["5000", "40000", "160000", "320000", "1000000"]),
    "W": ("rate_window", float, ["0.25", "1", "2", "4", "8"]),
    "early": ("early_lookup", float, ["0", "0.25", "0.5", "1"]),  # ours: the crowd rule
    "block": ("block_size", _block, ["16Ki", "32Ki", "64Ki", "128Ki"]),
    "linger": ("linger", float, ["0", "1", "2", "4", "20", "160"]),
    "connections": ("fetch_peers", int, ["1", "2", "4", "16", "50"]),
    # ours: what our default quorum costs against Pack's trust-the-first-publisher
    "trust": ("trust", _trust, ["quorum:2", "any"]),
    # ours: what the privacy rule costs: 16Mi (the default: a 100 KB file is looked up only once its origin is
    # slow) against 0 (every download may look up at once, as before the rule)
    "discover": ("discover_size", _size, ["16Mi", "0"]),
}


def amount(parse, flag: str, text: str):
    """`parse(text)`, `swarm.content.sizes`' `parse_size` (k = 1024) or `parse_rate` (k = 1000), a bad text being
    the lab's ConfigError naming `flag`."""
    try:
        return parse(text)
    except BadSize as exc:
        raise ConfigError(f"{flag}: {exc}") from None
