"""The node's key file, ``dht_ed25519.key`` in its data dir: the identity (`dht.identity`) kept across restarts.

Format: the ASCII magic line ``swarmproxy-ed25519-v1\\n`` followed by the 32-byte raw private seed — 54 bytes
exactly. Created with mode 0600 (and tightened to 0600 if found looser). Anything else (wrong length, wrong magic)
is a corrupt file and raises `IdentityError` rather than silently minting a new identity, which would orphan every
record published under the old one.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from dht.errors import IdentityError
from dht.identity import SEED_BYTES, NodeIdentity

log = logging.getLogger(__name__)

KEY_FILE_NAME = "dht_ed25519.key"
_KEY_FILE_MAGIC = b"swarmproxy-ed25519-v1\n"


def load_or_create(data_dir: str | os.PathLike[str]) -> NodeIdentity:
    """Load the key from `data_dir`, creating the directory and a new key (mode 0600) if absent."""
    directory = Path(data_dir)
    path = directory / KEY_FILE_NAME
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise IdentityError(f"cannot create data dir {directory}: {exc}") from exc
    if path.exists():
        return _load(path)
    identity = NodeIdentity.generate()
    _save(identity, path)
    return identity


def _load(path: Path) -> NodeIdentity:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("DHT key file %s had mode %o; tightening to 0600", path, mode)
            os.chmod(path, 0o600)
        content = path.read_bytes()
    except OSError as exc:
        raise IdentityError(f"cannot read DHT key file {path}: {exc}") from exc
    if len(content) != len(_KEY_FILE_MAGIC) + SEED_BYTES or not content.startswith(_KEY_FILE_MAGIC):
        raise IdentityError(
            f"DHT key file {path} is corrupt (expected {len(_KEY_FILE_MAGIC) + SEED_BYTES} bytes starting "
            f"with {_KEY_FILE_MAGIC!r}); move it away to create a new identity"
        )
    return NodeIdentity.from_seed(content[len(_KEY_FILE_MAGIC) :])


def _save(identity: NodeIdentity, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        # O_EXCL + 0600 at creation: the secret is never readable by others, not even for an instant.
        if tmp.exists():
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(_KEY_FILE_MAGIC + identity.seed())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise IdentityError(f"cannot write DHT key file {path}: {exc}") from exc
