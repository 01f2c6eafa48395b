"""Signed intent: only the cluster's owner can push, replace or cancel a transfer (sans-I/O).

redis is a shared board, not an authority: anyone who can write to it could post a transfer (a seederless one of
top priority wedged every later push), re-post an old one, or cancel one. So the owner signs what it wants done
with a key of its own (`swarmproxy cluster keygen`), and every agent starts with the public keys it trusts and
checks each transfer and each cancel before it fetches, replaces or drops anything.

An intent names the transfer (its id, the file name, the content root and size, its priority and which hosts),
an action (`push` or `cancel`), a sequence number per file name and an expiry. The signature covers all of it,
behind a domain tag, in one canonical encoding (sorted JSON), so that no field can be changed or reinterpreted.
`Ledger` is what an agent remembers of the intents it accepted, per name: the highest sequence and the transfer
it stood for. It refuses:

* an intent signed by a key it does not trust, or whose signature does not verify;
* an expired one (a signed push lives as long as the transfer may; a re-post after that is refused outright);
* a **rollback**: a push of a name with a lower sequence than one already accepted (an older version);
* a **replay**: a push with the sequence of one accepted for another transfer, or one that a cancel ended (the
  pusher rewrites its own record every period: the same intent again is no replay, it is the same push);
* a cancel of a transfer other than the one its name's sequence stands for, or older than it.

Ed25519 (RFC 8032, `cryptography`), as the DHT's node identities.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import pathlib
from dataclasses import asdict, dataclass, fields

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from cluster.errors import BadRecord, ConfigError

__all__ = ["CANCEL", "PUSH", "Intent", "Ledger", "SignedIntent", "SigningKey", "public_key"]

PUSH, CANCEL = "push", "cancel"
INTENT_TAG = b"swarmproxy-cluster-intent-v1\n"  # domain separation: this signature means nothing elsewhere
PUBLIC_PREFIX = "swarmproxy-cluster-ed25519:"  # how a public key is written: on a command line, in a file
KEY_FILE_MAGIC = b"swarmproxy-cluster-ed25519-v1\n"  # the private key file: this line, then the 32-byte seed
SEED_BYTES = PUBLIC_BYTES = 32
SIGNATURE_BYTES = 64
MAX_INTENT_TEXT = 4096  # bytes: an intent is a few hundred; anything larger is not ours


@dataclass(frozen=True)
class Intent:
    action: str  # PUSH or CANCEL
    tid: str
    name: str
    root: str  # the content root, hex
    size: int
    priority: int
    hosts: str
    seq: int  # per file name: a later push of the name has a higher one
    expires: float  # Unix seconds

    def canonical(self) -> bytes:
        return INTENT_TAG + json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class SignedIntent:
    intent: Intent
    key: str  # the signer's public key, as `public_key` reads it
    signature: str  # base64

    def dump(self) -> str:
        return json.dumps({"intent": asdict(self.intent), "key": self.key, "signature": self.signature},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def load(cls, text: str | bytes | None) -> SignedIntent:
        """Parse what `dump` wrote; BadRecord for anything else (missing, too long, wrong fields or types)."""
        if not text:
            raise BadRecord("no signed intent")
        if len(text) > MAX_INTENT_TEXT:
            raise BadRecord("signed intent: too long")
        try:
            value = json.loads(text)
            intent = value["intent"]
            wanted = {f.name: f.type for f in fields(Intent)}
            if not isinstance(intent, dict) or set(intent) != set(wanted):
                raise BadRecord("signed intent: wrong fields")
            kinds: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "float": (int, float)}
            for name, kind in wanted.items():
                if not isinstance(intent[name], kinds[str(kind)]) or isinstance(intent[name], bool):
                    raise BadRecord(f"signed intent: {name} is not a {kind}")
            key, signature = value["key"], value["signature"]
            if not isinstance(key, str) or not isinstance(signature, str):
                raise BadRecord("signed intent: key and signature must be text")
            return cls(Intent(**{**intent, "expires": float(intent["expires"])}), key, signature)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise BadRecord(f"signed intent: {exc}") from None

    def verify(self, trusted: frozenset[str]) -> str | None:
        """None when a trusted key signed exactly this intent, else why not."""
        if self.key not in trusted:
            return "signed by a key this agent does not trust"
        try:
            signature = base64.b64decode(self.signature, validate=True)
            Ed25519PublicKey.from_public_bytes(public_key(self.key)).verify(signature, self.intent.canonical())
        except (binascii.Error, ValueError, ConfigError, InvalidSignature):
            return "its signature does not verify"
        return None


def public_key(text: str) -> bytes:
    """The raw 32 bytes of a public key written as `swarmproxy-cluster-ed25519:BASE64`; ConfigError if it is not."""
    body = text.strip()
    if not body.startswith(PUBLIC_PREFIX):
        raise ConfigError(f"a cluster key is written {PUBLIC_PREFIX}BASE64 (`swarmproxy cluster keygen` prints it)")
    try:
        raw = base64.b64decode(body[len(PUBLIC_PREFIX):], validate=True)
    except binascii.Error:
        raise ConfigError(f"cluster key {body!r} is not base64") from None
    if len(raw) != PUBLIC_BYTES:
        raise ConfigError(f"cluster key {body!r} is not an Ed25519 public key ({len(raw)} bytes)")
    return raw


class SigningKey:
    """An Ed25519 private key: the owner's (`generate`, kept in a file readable by its owner only), or an agent's
    (inside its identity, `cluster.identity`)."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public = PUBLIC_PREFIX + base64.b64encode(raw).decode("ascii")

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        if len(seed) != SEED_BYTES:
            raise ConfigError(f"an Ed25519 seed is {SEED_BYTES} bytes, not {len(seed)}")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def seed(self) -> bytes:
        return self._private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                           serialization.NoEncryption())

    @classmethod
    def load(cls, path: os.PathLike | str) -> SigningKey:
        try:
            data = pathlib.Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the cluster key {path}: {exc.strerror or exc}") from None
        if len(data) != len(KEY_FILE_MAGIC) + SEED_BYTES or not data.startswith(KEY_FILE_MAGIC):
            raise ConfigError(f"{path} is not a cluster key made by `swarmproxy cluster keygen`")
        return cls(Ed25519PrivateKey.from_private_bytes(data[len(KEY_FILE_MAGIC):]))

    def save(self, path: os.PathLike | str) -> None:
        """Write the key to `path` (mode 0600), never over an existing file."""
        seed = self.seed()
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise ConfigError(f"{path} exists: a cluster key is never overwritten (agents trust it)") from None
        except OSError as exc:
            raise ConfigError(f"cannot write the cluster key {path}: {exc.strerror or exc}") from None
        with os.fdopen(descriptor, "wb") as file:
            file.write(KEY_FILE_MAGIC + seed)

    def sign(self, intent: Intent) -> SignedIntent:
        return SignedIntent(intent, self.public, base64.b64encode(self.sign_bytes(intent.canonical())).decode("ascii"))

    def sign_bytes(self, data: bytes) -> bytes:
        """The raw signature of `data`: callers put a domain tag of their own in front (`cluster.identity`)."""
        return self._private.sign(data)


class Ledger:
    """What an agent accepted, per file name: {name: [seq, tid, cancelled]}; `state()` is what it saves."""

    def __init__(self, state: dict | None = None) -> None:
        self._names: dict[str, list] = {}
        for name, entry in (state or {}).items():
            if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int) \
                    and isinstance(entry[1], str) and isinstance(entry[2], bool):
                self._names[str(name)] = list(entry)

    def state(self) -> dict:
        return {name: list(entry) for name, entry in self._names.items()}

    def judge(self, signed: SignedIntent, trusted: frozenset[str], now: float) -> str | None:
        """None when the agent may act on `signed` now, else why it must not."""
        if (problem := signed.verify(trusted)) is not None:
            return problem
        intent = signed.intent
        if intent.action not in (PUSH, CANCEL):
            return f"unknown action {intent.action!r}"
        if now > intent.expires:
            return "it expired"
        seq, tid, cancelled = self._names.get(intent.name, (None, None, False))
        if intent.action == PUSH:
            if seq is None or intent.seq > seq:
                return None
            if intent.seq < seq:
                return f"rollback: a later push of {intent.name!r} was accepted (sequence {seq})"
            if intent.tid != tid or cancelled:
                return f"replay: sequence {seq} of {intent.name!r} stood for another push, or was cancelled"
            return None  # the accepted push itself, rewritten by its pusher
        if seq is not None and (intent.seq < seq or (intent.seq == seq and intent.tid != tid)):
            return f"a cancel of an older push of {intent.name!r}"
        return None

    def accept(self, signed: SignedIntent) -> None:
        """Note an intent `judge` allowed."""
        intent = signed.intent
        self._names[intent.name] = [intent.seq, intent.tid, intent.action == CANCEL]
