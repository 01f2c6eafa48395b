"""Agent identities and signed reports: only agents the owner admitted are believed (sans-I/O).

Signed intent (`cluster.intent`) stops a stranger with redis write access from pushing or cancelling; this module
stops one from *reporting*. Without it, a ghost agent registered in redis made every push wait for it, and a forged
`FINISHED` record made a push count an agent that held nothing.

* Each agent has a key pair of its own, and an **admission**: the owner's signature over the agent's public key
  and name (`swarmproxy cluster admit` writes both into one identity file, mode 0600, for the host to keep).
  The agent's node id is its public key, so no record can speak for another agent's id.
* Everything an agent writes under its node id (its registration, its member record of each transfer, its
  provider records) is **sealed**: the record, when it was written, and the admission, signed with the agent's key
  over the redis key the record is written to. A record moved to another key, changed, or written by anyone else
  does not open.
* A reader (`Gate`) opens a sealed record only if the admission was signed by an owner key it trusts, names the
  key that signed the record, and the record was written within `REPORT_MAX_AGE` s (a reporter seals it anew at
  least every 15 s: an old report replayed by a stranger goes stale). Anything else is skipped, never trusted.

The pusher seeds with an identity the owner's key issues on the spot (`Identity.issue`): the seeder's records open
like an agent's. Ed25519, as the intents.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import pathlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from cluster.errors import BadRecord, ConfigError
from cluster.intent import SigningKey, public_key

__all__ = ["Admission", "Gate", "Identity", "REPORT_MAX_AGE", "node_of"]

ADMISSION_TAG = b"swarmproxy-cluster-admission-v1\n"
SEAL_TAG = b"swarmproxy-cluster-report-v1\n"
IDENTITY_MAGIC = "swarmproxy-cluster-identity-v1"
# Seconds a sealed report stays believable after it was written. Reporters seal theirs anew whenever it changes and
# at least every `cluster.fresh.RESEAL_AFTER` (15 s), extending its TTL in between; the margin covers clock
# differences between hosts and an agent's slow loop. A stranger replaying a captured report is believed at most
# this long after its writer last sealed it.
REPORT_MAX_AGE = 60.0
MAX_SEALED_TEXT = 64 * 1024  # bytes: a member record is well under 2 KB; anything larger is not ours
ADMISSIONS_REMEMBERED = 4096  # admissions whose verdict a Gate keeps (one per agent): each costs a verify once


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def node_of(key: str) -> str:
    """The node id of the agent whose public key is `key` (as `public_key` reads it): the key's 32 bytes, hex."""
    return public_key(key).hex()


@dataclass(frozen=True)
class Admission:
    """The owner's word that the holder of `key` is the cluster's agent `name`."""

    key: str  # the agent's public key (`swarmproxy-cluster-ed25519:BASE64`)
    name: str
    owner: str  # the owner's public key, which signed it
    signature: str  # base64, over ADMISSION_TAG + canonical {key, name}

    def signed_bytes(self) -> bytes:
        return ADMISSION_TAG + _canonical({"key": self.key, "name": self.name})

    @classmethod
    def of(cls, value: object) -> Admission:
        if not isinstance(value, dict) or set(value) != {"key", "name", "owner", "signature"} \
                or not all(isinstance(v, str) for v in value.values()):
            raise BadRecord("admission: wrong fields")
        return cls(**value)

    def verify(self, trusted: frozenset[str]) -> str | None:
        """None when a trusted owner key signed this admission, else why not."""
        if self.owner not in trusted:
            return "admitted by a key this reader does not trust"
        try:
            signature = base64.b64decode(self.signature, validate=True)
            Ed25519PublicKey.from_public_bytes(public_key(self.owner)).verify(signature, self.signed_bytes())
        except (binascii.Error, ValueError, ConfigError, InvalidSignature):
            return "its admission's signature does not verify"
        return None


class Identity:
    """An agent's key and the owner's admission of it."""

    def __init__(self, key: SigningKey, admission: Admission) -> None:
        if admission.key != key.public:
            raise ConfigError("the identity's admission is for another key")
        self.key, self.admission = key, admission
        self.node = node_of(key.public)
        self.node_id = bytes.fromhex(self.node)
        self._admission = asdict(admission)

    @classmethod
    def issue(cls, owner: SigningKey, name: str) -> Identity:
        """A new agent key, admitted by `owner` as `name`."""
        key = SigningKey.generate()
        unsigned = Admission(key.public, name, owner.public, "")
        return cls(key, Admission(key.public, name, owner.public, _b64(owner.sign_bytes(unsigned.signed_bytes()))))

    def save(self, path: os.PathLike | str) -> None:
        """Write the identity to `path` (mode 0600), never over an existing file."""
        text = json.dumps({"format": IDENTITY_MAGIC, "seed": _b64(self.key.seed()), "admission": self._admission},
                          sort_keys=True, indent=1) + "\n"
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise ConfigError(f"{path} exists: an identity is never overwritten (its agent's records carry it)") \
                from None
        except OSError as exc:
            raise ConfigError(f"cannot write the identity {path}: {exc.strerror or exc}") from None
        with os.fdopen(descriptor, "w") as file:
            file.write(text)

    @classmethod
    def load(cls, path: os.PathLike | str) -> Identity:
        try:
            value = json.loads(pathlib.Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read the identity {path}: {exc.strerror or exc}") from None
        except ValueError:
            value = None
        try:
            if not isinstance(value, dict) or value.get("format") != IDENTITY_MAGIC:
                raise BadRecord("not an identity")
            key = SigningKey.from_seed(base64.b64decode(value["seed"], validate=True))
            return cls(key, Admission.of(value["admission"]))
        except (BadRecord, KeyError, ValueError, TypeError, binascii.Error):
            raise ConfigError(f"{path} is not an agent identity made by `swarmproxy cluster admit`") from None

    def seal(self, kind: str, where: str, record: dict, now: float | None = None) -> str:
        """`record`, written to the redis key `where`, signed by this agent (at `now`, default the clock)."""
        at = round(time.time() if now is None else now, 3)
        signature = self.key.sign_bytes(_sealed_bytes(kind, where, record, at))
        return json.dumps({"record": record, "at": at, "admission": self._admission, "signature": _b64(signature)},
                          sort_keys=True, separators=(",", ":"))


def _sealed_bytes(kind: str, where: str, record: dict, at: float) -> bytes:
    return SEAL_TAG + _canonical({"kind": kind, "where": where, "record": record, "at": at})


class Gate:
    """Opens sealed records: only those an admitted agent wrote, recently, to the key they were read from."""

    def __init__(self, trusted: frozenset[str], clock: Callable[[], float] = time.time,
                 max_age: float = REPORT_MAX_AGE) -> None:
        self.trusted, self.clock, self.max_age = trusted, clock, max_age
        # (key, name, owner, signature) -> (problem or None, the agent's public key object): each admission is
        # verified once, and its key decoded once (an agent reads the same few dozen agents' records every period).
        self._admissions: OrderedDict[tuple[str, ...], tuple[str | None, Ed25519PublicKey | None]] = OrderedDict()

    def open(self, kind: str, where: str, node: str, text: bytes | str | None, *, fresh: bool = True) -> dict:
        """The record the agent `node` sealed for `where`; BadRecord saying why if it does not open. `fresh`:
        refuse one written more than `max_age` s ago (or that far ahead of this clock)."""
        if text is None:
            raise BadRecord(f"no {kind} record")
        if len(text) > MAX_SEALED_TEXT:
            raise BadRecord(f"{kind} record: too long")
        try:
            value = json.loads(text)
            record, at, signature = value["record"], value["at"], value["signature"]
            admission = Admission.of(value["admission"])
            if not isinstance(record, dict) or not isinstance(at, (int, float)) or isinstance(at, bool) \
                    or not isinstance(signature, str):
                raise BadRecord(f"{kind} record: wrong fields")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
            raise BadRecord(f"{kind} record: not a sealed report (written by an agent without an identity?)") \
                from None
        except BadRecord as exc:
            raise BadRecord(f"{kind} record: {exc}") from None
        problem, signer = self._admitted(admission)
        if problem is not None or signer is None:
            raise BadRecord(f"{kind} record: {problem}")
        if signer.public_bytes_raw().hex() != node:
            raise BadRecord(f"{kind} record: written for another node than its signer")
        try:
            signer.verify(base64.b64decode(signature, validate=True), _sealed_bytes(kind, where, record, at))
        except (binascii.Error, ValueError, InvalidSignature):
            raise BadRecord(f"{kind} record: its signature does not verify") from None
        if fresh and abs(self.clock() - at) > self.max_age:
            raise BadRecord(f"{kind} record: not written within the last {self.max_age:g} s (a replay, or its "
                            f"writer's clock is off by more than that)")
        return record

    def _admitted(self, admission: Admission) -> tuple[str | None, Ed25519PublicKey | None]:
        """(why not, None) unless a trusted owner admitted it; else (None, the agent's public key)."""
        cache_key = (admission.key, admission.name, admission.owner, admission.signature)
        if cache_key in self._admissions:
            self._admissions.move_to_end(cache_key)
            return self._admissions[cache_key]
        problem, signer = admission.verify(self.trusted), None
        if problem is None:
            try:
                signer = Ed25519PublicKey.from_public_bytes(public_key(admission.key))
            except (ValueError, ConfigError):
                problem = "its admission names no Ed25519 key"
        self._admissions[cache_key] = (problem, signer)
        while len(self._admissions) > ADMISSIONS_REMEMBERED:
            self._admissions.popitem(last=False)
        return problem, signer
