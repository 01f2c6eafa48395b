"""The routing table kept across restarts: `dht_routing.json` in the node's data dir, read once at start and
written at each save. The file's format is `dht.routing`'s (pure); this module is the file."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from dht.routing import decode_contacts, encode_contacts
from dht.wire import Contact

log = logging.getLogger(__name__)

ROUTING_FILE_NAME = "dht_routing.json"


def save_contacts(data_dir: str | os.PathLike[str], self_id: bytes, contacts: list[Contact]) -> None:
    """Replace the file atomically: a crash mid-write leaves the previous table."""
    path = Path(data_dir) / ROUTING_FILE_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(encode_contacts(self_id, contacts))
    os.replace(tmp, path)


def load_contacts(data_dir: str | os.PathLike[str]) -> list[Contact]:
    """The saved contacts; none when there is no file, or one that cannot be read (said in the log)."""
    path = Path(data_dir) / ROUTING_FILE_NAME
    try:
        return decode_contacts(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:  # (json's errors are ValueErrors)
        log.warning("DHT: ignoring unreadable routing table %s: %s", path, exc)
        return []
