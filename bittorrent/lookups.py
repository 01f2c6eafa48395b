"""`Lookups`: the Mainline DHT lookups under way (BEP 5 `get_peers`), who listens to each, and when each is over.

libtorrent posts an alert for each node's answer that carries addresses, and nothing when a lookup ends or finds
nobody. What it does say, when asked (`post_dht_stats`), is which traversals are under way, though not for which
key. So a lookup is over once a stats answer asked after it started shows no `get_peers` traversal at all: its
listeners get `None` after the batches. With several lookups at once each ends with the last of them, so callers
keep their own cap on the wait (`bittorrent.mainline.LOOKUP_SECONDS`, `bittorrent.mainline_claims.CLAIMS_WAIT`).
The stats answers come in the order asked (libtorrent's network thread runs both in turn), which `posted` and
`answered` count.
"""

from __future__ import annotations

import asyncio

__all__ = ["Heard", "Lookups"]

# What a listener reads: a batch of addresses per answer, then None when the lookup is over.
Heard = asyncio.Queue[list[tuple[str, int]] | None]


class Lookups:
    def __init__(self) -> None:
        self._by_key: dict[bytes, list[Heard]] = {}
        self._ending: dict[Heard, int] = {}  # a listener -> the stats requests asked before its lookup started
        self.posted = self.answered = 0  # stats requests asked, and answered

    def start(self, key: bytes) -> Heard:
        """A listener for a lookup of `key`, started now (before the request goes to libtorrent)."""
        heard: Heard = asyncio.Queue()
        self._by_key.setdefault(key, []).append(heard)
        self._ending[heard] = self.posted
        return heard

    def stats_asked(self) -> None:
        self.posted += 1

    def on_peers(self, key: bytes, peers: list[tuple[str, int]]) -> None:
        for heard in self._by_key.get(key, []):
            heard.put_nowait(peers)

    def on_stats(self, traversing: bool) -> None:
        """A stats answer: whether any `get_peers` traversal is under way. Without one, every lookup started
        before this answer was asked is over."""
        self.answered += 1
        if traversing:
            return
        for heard, asked_before in list(self._ending.items()):
            if self.answered > asked_before:
                heard.put_nowait(None)
                del self._ending[heard]

    def over(self, key: bytes, heard: Heard) -> None:
        """The listener stopped listening."""
        self._ending.pop(heard, None)
        listening = self._by_key.get(key, [])
        if heard in listening:
            listening.remove(heard)
        if not listening:
            self._by_key.pop(key, None)

    @property
    def waiting(self) -> bool:
        """Some lookup is not known to be over yet: keep asking for stats."""
        return bool(self._ending)

    def __len__(self) -> int:
        return len(self._by_key)

    def clear(self) -> None:
        for heard in self._ending:
            heard.put_nowait(None)
        self._by_key.clear()
        self._ending.clear()
