"""When a download may tell strangers about its URL: the privacy rule for DHT lookups and announcements. Pure.

A lookup tells the DHT nodes near a URL's key that this address wants it, and a dictionary of popular URLs turns
keys back into URLs; an announcement or a vouch tells them this address has it. Ordinary fast browsing must tell
them nothing, so a download looks its URL up, claims it, announces or vouches for it only when swarming can pay:

* its origin was **slow** (`T`: no first byte within T; `R`: under R for W; a slow start at the early point; under
  R to its last byte, for a download that ended before W but lasted past T; the origin breaking off; or no
  response head within `silence` of the request: a narrower signal than the request itself, which made every GET
  a lookup);
* the origin **asked** for it (the server plugin's hint);
* its **host was slow recently** (the adaptive history of `proxy.download.adaptive`: a recent switch, or a rate or first
  byte beyond the flags);
* the file is **large** (`large` bytes or more, `--discover-size`): where a swarm pays whatever the origin's speed.

Never otherwise. Each allowance has a name (`DiscoveryRule.allows`); what a node told the DHT is counted by the
swarm service (`swarm.service.shares.ShareCounters`: lookups, announced, published, claims).
"""

from __future__ import annotations

import dataclasses

DEFAULT_LARGE = 16 * 1024 * 1024  # bytes: a large download (an ISO, an installer) is worth a lookup anyway
# The head's silence that counts as slow, as a fraction of T: half of Pack's T (0.75 s) is well past a fast
# origin's first byte on most paths, and the adaptive T of a far origin stretches it with its own latency.
SILENCE_OF_T = 0.5

SLOW, HINT, HOST_SLOW, LARGE = "slow", "hint", "host-slow", "large"


@dataclasses.dataclass(frozen=True)
class DiscoveryRule:
    large: int = DEFAULT_LARGE

    def allows(self, *, slow: bool, hinted: bool, host_slow: bool, size: int | None) -> str | None:
        """The name of what allows a download to look up or announce its URL, or None: it may not."""
        if hinted:
            return HINT
        if slow:
            return SLOW
        if host_slow:
            return HOST_SLOW
        if size is not None and size >= self.large:
            return LARGE
        return None

    @staticmethod
    def silence(first_byte_timeout: float) -> float:
        """Seconds without a response head after which the origin counts as slow (T times `SILENCE_OF_T`)."""
        return first_byte_timeout * SILENCE_OF_T


@dataclasses.dataclass
class Discretion:
    """One download's side of the rule (owned by `proxy.download.core`): what it has seen of its origin so far, and
    when its head's silence starts counting as slow."""

    rule: DiscoveryRule
    host_slow: bool = False
    before_head: bool = True  # the name alone says the origin may be shared: it may be looked up before its head
    slow: bool = False  # the origin was slow at some point
    silent_at: float | None = None  # no head by then: the origin counts as slow

    def start(self, now: float, first_byte_timeout: float, *, discovery: bool) -> bool:
        """The GET left at `now`: True to look its claims up at once (its host was slow recently); else the head's
        silence is armed. Nothing before the head without discovery, or for a name that may be a private origin."""
        if not discovery or not self.before_head:
            return False
        if self.host_slow:
            return True
        self.silent_at = now + self.rule.silence(first_byte_timeout)
        return False

    def silence_over(self, now: float) -> bool:
        """Whether the head's silence ended at `now` (once): the origin is slow, its claims may be looked up."""
        if self.silent_at is None or now < self.silent_at:
            return False
        self.silent_at, self.slow = None, True
        return True

    def allows(self, *, hinted: bool, size: int | None) -> bool:
        """May the download look up, claim, announce or vouch for its URL now?"""
        return self.rule.allows(slow=self.slow, hinted=hinted, host_slow=self.host_slow, size=size) is not None
