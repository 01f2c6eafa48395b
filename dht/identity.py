"""Node identity: one Ed25519 key per node (kept in the data dir by `dht.key_file`); the node id is derived
from its public key. Pure: no file is touched here.

Node id = the first 20 bytes (160 bits, Kademlia's id space) of SHA-256 over the 32-byte raw public key.
SHA-256 truncated rather than SHA-1 because SHA-1 is broken for collisions; 160 bits keeps the id space of the
`kademlia` routing table we reuse. Deriving the id from the key means a record's publisher and the node id it
claims cannot be chosen independently: whoever signs a provider record *is* that node id.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dht.errors import IdentityError

NODE_ID_BYTES = 20
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
SEED_BYTES = 32


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
        if len(seed) != SEED_BYTES:
            raise IdentityError(f"an Ed25519 seed is {SEED_BYTES} bytes, got {len(seed)}")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def seed(self) -> bytes:
        """The private seed, for the key file (`dht.key_file`) alone."""
        return self._private_key.private_bytes_raw()

    def sign(self, message: bytes) -> bytes:
        return self._private_key.sign(message)

    def __repr__(self) -> str:
        return f"NodeIdentity(node_id={self.node_id.hex()})"
