"""Hostile DHT parts for attack tests: what a modified node run by an attacker would do."""

from __future__ import annotations

from dht.storage import RecordStore


class LyingStore(RecordStore):
    """A storing node run by the attacker: it swears it saw every record arrive from the host the record names."""

    def get_observed(self, kind, key, now):
        return [(record, getattr(record, "host", None)) for record, _ in super().get_observed(kind, key, now)]
