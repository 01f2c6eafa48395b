"""Node identity: one Ed25519 key per node, kept in the data dir; the node id is derived from its public key.

Node id = the first 20 bytes (160 bits, Kademlia's id space) of SHA-256 over the 32-byte raw public key.
SHA-256 truncated rather than SHA-1 because SHA-1 is broken for collisions; 160 bits keeps the id space of the
`kademlia` routing table we reuse. Deriving the id from the key means a record's publisher and the node id it
claims cannot be chosen independently: whoever signs a provider record *is* that node id.

Key file format (``dht_ed25519.key``): the ASCII magic line ``swarmproxy-ed25519-v1\\n`` followed by the 32-byte
raw private seed — 54 bytes exactly. Created with mode 0600 (and tightened to 0600 if found looser). Anything
else (wrong length, wrong magic) is a corrupt file and raises `IdentityError` rather than silently minting a
new identity, which would orphan every record published under the old one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from functools import lru_cache
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dht.errors import IdentityError

log = logging.getLogger(__name__)

NODE_ID_BYTES = 20
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
KEY_FILE_NAME = "dht_ed25519.key"
_KEY_FILE_MAGIC = b"swarmproxy-ed25519-v1\n"
_SEED_BYTES = 32


def node_id_for(public_key: bytes) -> bytes:
    """The 160-bit node id of a raw Ed25519 public key: SHA-256(public_key)[:20]."""
    if len(public_key) != PUBLIC_KEY_BYTES:
        raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_BYTES} bytes, got {len(public_key)}")
    return hashlib.sha256(public_key).digest()[:NODE_ID_BYTES]


@lru_cache(maxsize=4096)
def _public_key_object(public_key: bytes) -> Ed25519PublicKey:
    # Parsing a point costs about as much as half a verification; the same publishers recur constantly.
    return Ed25519PublicKey.from_public_bytes(public_key)


def verify_signature(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """True if `signature` is a valid Ed25519 signature of `message` by `public_key`. Never raises."""
    if len(public_key) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        _public_key_object(bytes(public_key)).verify(bytes(signature), bytes(message))
    except (InvalidSignature, ValueError):
        return False
    return True


class NodeIdentity:
    """An Ed25519 key pair and the node id derived from it."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._private_key = private_key
        self.public_key: bytes = private_key.public_key().public_bytes_raw()
        self.node_id: bytes = node_id_for(self.public_key)

    @classmethod
    def generate(cls) -> NodeIdentity:
        """A fresh, unsaved identity (tests, ephemeral nodes)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> NodeIdentity:
        if len(seed) != _SEED_BYTES:
            raise IdentityError(f"an Ed25519 seed is {_SEED_BYTES} bytes, got {len(seed)}")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def load_or_create(cls, data_dir: str | os.PathLike[str]) -> NodeIdentity:
        """Load the key from `data_dir`, creating the directory and a new key (mode 0600) if absent."""
        directory = Path(data_dir)
        path = directory / KEY_FILE_NAME
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise IdentityError(f"cannot create data dir {directory}: {exc}") from exc
        if path.exists():
            return cls._load(path)
        identity = cls.generate()
        identity._save(path)
        return identity

    @classmethod
    def _load(cls, path: Path) -> NodeIdentity:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                log.warning("DHT key file %s had mode %o; tightening to 0600", path, mode)
                os.chmod(path, 0o600)
            content = path.read_bytes()
        except OSError as exc:
            raise IdentityError(f"cannot read DHT key file {path}: {exc}") from exc
        if len(content) != len(_KEY_FILE_MAGIC) + _SEED_BYTES or not content.startswith(_KEY_FILE_MAGIC):
            raise IdentityError(
                f"DHT key file {path} is corrupt (expected {len(_KEY_FILE_MAGIC) + _SEED_BYTES} bytes starting "
                f"with {_KEY_FILE_MAGIC!r}); move it away to create a new identity"
            )
        return cls.from_seed(content[len(_KEY_FILE_MAGIC) :])

    def _save(self, path: Path) -> None:
        seed = self._private_key.private_bytes_raw()
        tmp = path.with_name(path.name + ".tmp")
        try:
            # O_EXCL + 0600 at creation: the secret is never readable by others, not even for an instant.
            if tmp.exists():
                tmp.unlink()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(_KEY_FILE_MAGIC + seed)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            raise IdentityError(f"cannot write DHT key file {path}: {exc}") from exc

    def sign(self, message: bytes) -> bytes:
        return self._private_key.sign(message)

    def __repr__(self) -> str:
        return f"NodeIdentity(node_id={self.node_id.hex()})"
