"""Peer trust: who may keep sending us blocks (sans-I/O, no clock).

Modelled on libtorrent's rules (`torrent::piece_failed`, `torrent::piece_passed`,
`peer_connection::received_invalid_data`):

* every source starts at 0 trust points;
* a block that passes its hash earns each contributor +1, up to a cap (libtorrent 0.x capped at 20; 1.x keeps
  the points in a 4-bit field, so about +7; we default to +8 as the issue asks) and takes it off parole;
* a block that fails its hash costs each contributor −2 (a failure must cost more than a success earns, so a
  peer cannot buy the right to send one bad block in three) and puts it on parole;
* a source is banned once its points reach the threshold (libtorrent: `trust_points <= -7`, i.e. the fourth
  failure in a row from 0), **or at once when the fault is certain**: it was the sole contributor of the failed
  block (libtorrent: `peers.size() == 1`), or it sent a hash layer that does not hash up to the root.

In this engine the hash unit is the block and a block normally has one sender, so a hash failure usually *is*
certain and bans at once; the point scale matters when a block was assembled from sub-block ranges of several
sources (the wire protocol allows offset/length requests) or when `ban_sole_contributor` is turned off.

Timeouts are not hash failures: they are counted separately as *strikes* (consecutive, reset by a good block),
which the request policy uses to snub and eventually drop an unresponsive source without touching its points.

A ban is permanent for the life of this object: banned sources are never picked again. "Parole" is reported for
callers that want to limit a suspect's exposure (the request policy gives it one outstanding request at a time).

Sources are opaque hashables (node ids, `picker.ORIGIN`, ...). Every operation is O(1) per source named.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

__all__ = ["Trust", "TrustConfig", "SourceRecord"]

Source = Hashable


@dataclass(frozen=True)
class TrustConfig:
    """Tunables; the defaults are libtorrent's."""

    failure_penalty: int = 2
    success_reward: int = 1
    max_points: int = 8
    #: banned when points <= this (libtorrent: -7)
    ban_at: int = -7
    #: ban at once when a failed block came from this source alone (libtorrent does)
    ban_sole_contributor: bool = True

    def __post_init__(self) -> None:
        if self.failure_penalty <= 0 or self.success_reward < 0:
            raise ValueError("failure_penalty must be > 0 and success_reward >= 0")
        if self.ban_at >= 0 or self.max_points < 0:
            raise ValueError("ban_at must be negative and max_points >= 0")


@dataclass
class SourceRecord:
    """What we know about one source's behaviour."""

    points: int = 0
    hash_failures: int = 0
    good_blocks: int = 0
    #: consecutive timeouts/rejects since the last good block
    strikes: int = 0
    on_parole: bool = False
    banned: bool = False
    ban_reason: str = ""


class Trust:
    """Trust points, parole, strikes and bans per source."""

    def __init__(self, config: TrustConfig | None = None) -> None:
        self.config = config or TrustConfig()
        self._records: dict[Source, SourceRecord] = {}

    # -- queries -------------------------------------------------------------------------------------------

    def record(self, source: Source) -> SourceRecord:
        """The record of `source` (created on first use)."""
        rec = self._records.get(source)
        if rec is None:
            rec = self._records[source] = SourceRecord()
        return rec

    def points(self, source: Source) -> int:
        return self._records[source].points if source in self._records else 0

    def banned_count(self) -> int:
        """How many sources are banned (for metrics)."""
        return sum(1 for rec in self._records.values() if rec.banned)

    def is_banned(self, source: Source) -> bool:
        rec = self._records.get(source)
        return rec is not None and rec.banned

    def on_parole(self, source: Source) -> bool:
        rec = self._records.get(source)
        return rec is not None and rec.on_parole

    def strikes(self, source: Source) -> int:
        rec = self._records.get(source)
        return 0 if rec is None else rec.strikes

    def banned(self) -> list[Source]:
        return [s for s, rec in self._records.items() if rec.banned]

    # -- events --------------------------------------------------------------------------------------------

    def on_good_block(self, source: Source) -> None:
        """A block from `source` verified: +reward (capped), parole and strikes cleared."""
        rec = self.record(source)
        rec.good_blocks += 1
        rec.points = min(self.config.max_points, rec.points + self.config.success_reward)
        rec.on_parole = False
        rec.strikes = 0

    def on_hash_failure(self, contributors: Iterable[Source]) -> list[Source]:
        """A block assembled from the collection `contributors` failed its hash.

        Takes a collection, never a bare source, because a source id may itself be a tuple (host, port).
        Returns the sources banned by this failure.
        """
        # a set of senders, as libtorrent's `std::set<peer*>`: sending two ranges of one bad block is one fault
        sources = list(dict.fromkeys(contributors))
        certain = self.config.ban_sole_contributor and len(sources) == 1
        newly_banned: list[Source] = []
        for source in sources:
            rec = self.record(source)
            rec.hash_failures += 1
            rec.on_parole = True
            # libtorrent clamps at the threshold so that a banned-then-forgiven peer does not start deep below it
            rec.points = max(self.config.ban_at, rec.points - self.config.failure_penalty)
            if rec.banned:
                continue
            if certain:
                self._ban(rec, "sole contributor of a block that failed its hash")
                newly_banned.append(source)
            elif rec.points <= self.config.ban_at:
                self._ban(rec, "too many blocks that failed their hash")
                newly_banned.append(source)
        return newly_banned

    def on_bad_hash_layer(self, source: Source) -> bool:
        """`source` sent a hash layer that does not hash up to the root: certain fault, ban. True if newly banned."""
        return self.ban(source, "hash layer does not match the root")

    def on_strike(self, source: Source) -> int:
        """A request to `source` timed out or was refused; returns its consecutive strikes."""
        rec = self.record(source)
        rec.strikes += 1
        return rec.strikes

    def ban(self, source: Source, reason: str) -> bool:
        """Ban `source` for a certain fault (protocol violation, bad hash layer...). True if newly banned."""
        rec = self.record(source)
        if rec.banned:
            return False
        self._ban(rec, reason)
        return True

    @staticmethod
    def _ban(rec: SourceRecord, reason: str) -> None:
        rec.banned = True
        rec.ban_reason = reason
