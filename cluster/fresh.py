"""Reading and writing only what changed (sans-I/O): the bytes an agent moves through redis each period.

Every record is a key its owner rewrites each period, and every reader read each one whole each period: at a 0.5 s
period, 17 agents moved 0.41 copies of a 32 MiB push through redis's links while it ran (`bench.cluster_redis_load`
counts it by call). Most of it was records that had not changed since the reader last read them: provider records
never change (sealed at time 0), and a member or agent record that says the same as a period before was re-sealed
only to carry a new time. So:

* **Reads** (`ReadCache`): a reader sends, for each key it already holds a value of, a digest of that value; redis
  (`coord._CHANGED`, one script) answers with the value only where it differs, else with 0. What the reader gets
  back is, byte for byte, what a plain MGET would have returned (the held value stands for the unchanged one),
  and the `Gate` opens it again as before, checking its seal's time against the clock now: nothing a reader
  decides depends on whether a value came over the wire or from its cache. Comparing costs redis a SHA-1 of the
  value, so a key whose value changed at the last read (a member record while a push moves data) is asked for
  whole, by a plain MGET beside the script, until it is read unchanged once.
* **Own writes** (`ReadCache.wrote`): a value a reader wrote itself (its member record, read back with its rack's)
  is held as if read, so the next read asks for it by digest.
* **Writes** (`WriteMemo`): a writer whose record says the same as the one it last wrote, sealed less than
  `RESEAL_AFTER` s ago, only extends the key's TTL, and only if the key still holds exactly what it wrote
  (`coord._EXTEND` compares the digest); if it does not (expired, lost in a redis restart, an older value on a
  replica promoted by a failover, a stranger's write) it writes the record whole in the same reconcile, as it did
  every period before. Records still expire `key_ttl` after their owner's last reconcile, and a sealed record a
  reader holds was sealed at most `RESEAL_AFTER` s plus a period before (believed for `identity.REPORT_MAX_AGE` =
  60 s): hosts' clocks may differ by up to 60 - 15 - the period s.

A digest is 64 bits of SHA-1 (`redis.sha1hex` in the script): a stranger who can write to redis would have to
find a second value with the same digest as one a reader holds to make it keep that (genuine, sealed) value, and
it would be held to its seal's 60 s anyway; a writer can delete keys in any case.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["DIGEST_HEX", "RESEAL_AFTER", "ReadCache", "UNCHANGED", "WriteMemo", "digest"]

DIGEST_HEX = 16  # hex digits of SHA-1 a reader sends per key it holds (the script compares as many)
UNCHANGED = 0  # the script's answer for a key whose value has the digest the reader sent
# Seconds an unchanged sealed record is kept (its TTL extended) before it is sealed anew with the time: a quarter of
# the 60 s a reader believes it (`cluster.identity.REPORT_MAX_AGE`).
RESEAL_AFTER = 15.0
HELD = 1 << 14  # values a reader keeps (an agent reads a few dozen keys; the pusher two per agent)


def digest(value: bytes | str) -> str:
    data = value.encode() if isinstance(value, str) else value
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()[:DIGEST_HEX]


class ReadCache:
    """The values a reader last read, by key, their digests, and whether they changed at that read (least recently
    read dropped past `held`)."""

    def __init__(self, held: int = HELD) -> None:
        self.held = held
        self._values: OrderedDict[str, tuple[str, bytes | str, bool]] = OrderedDict()

    def ask(self, keys: Sequence[str]) -> list[str]:
        """What to send for `keys`: the digest of each value held, '' for a key not held or whose value changed at
        the last read (send it whole: comparing would cost redis a hash for nothing, most likely)."""
        return [held[0] if (held := self._values.get(key)) is not None and not held[2] else "" for key in keys]

    def wrote(self, key: str, value: bytes | str) -> None:
        """This reader just wrote `value` at `key` (its own member record, which it reads back with its rack's):
        the next read asks by digest, and redis answers 0 while the key still holds it, a new value if another
        write came between. What the read returns is what MGET would, as ever; only the ~1 kB it would have
        carried back every period stays off the reader's link."""
        self._values[key] = (digest(value), value, False)
        self._values.move_to_end(key)
        self._trim()

    def settle(self, keys: Sequence[str], replies: Sequence[object]) -> list[bytes | str | None]:
        """The values of `keys` from the script's `replies`: a value read, UNCHANGED (the value held), or None
        (no such key, or not a string), as MGET would have answered. A reply that is neither is taken as no value."""
        values: list[bytes | str | None] = []
        for key, reply in zip(keys, replies, strict=True):
            if isinstance(reply, (bytes, str)):
                held = self._values.get(key)
                self._values[key] = (digest(reply), reply, held is not None and held[1] != reply)
                self._values.move_to_end(key)
                values.append(reply)
            elif reply == UNCHANGED and not isinstance(reply, bool) and key in self._values:
                self._values.move_to_end(key)
                values.append(self._values[key][1])  # (unchanged: its digest is sent next time too)
            else:  # gone (or an answer for a value we no longer hold: read it whole next time)
                self._values.pop(key, None)
                values.append(None)
        self._trim()
        return values

    def _trim(self) -> None:
        """Drop the least recently read past `held`."""
        while len(self._values) > self.held:
            self._values.popitem(last=False)


class WriteMemo:
    """What a writer last wrote under each key: the record (as a comparable value), when it was sealed, and the
    digest of the value written."""

    def __init__(self, reseal_after: float = RESEAL_AFTER) -> None:
        self.reseal_after = reseal_after
        self._written: dict[str, tuple[object, float, str]] = {}

    def unchanged(self, key: str, record: object, now: float, *, timed: bool = True) -> str | None:
        """If `record` is what was last written at `key`, sealed less than `reseal_after` s before `now` (or at
        any time: not `timed`, a value that carries no time), the digest of the value written (extend its TTL if
        the key still holds it); else None (write it whole)."""
        last = self._written.get(key)
        if last is not None and last[0] == record and (not timed or 0.0 <= now - last[1] < self.reseal_after):
            return last[2]
        return None

    def wrote(self, key: str, record: object, now: float, value: bytes | str) -> None:
        self._written[key] = (record, now, digest(value))

    def lost(self, key: str) -> None:
        """The key was gone when its TTL was to be extended: write it whole next."""
        self._written.pop(key, None)
