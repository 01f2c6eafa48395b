"""Request policy on a fake clock: caps, timeouts, retries, the origin, trust — and a discrete-event simulation
of misbehaving sources showing that none of them can stall the fetch while another source has the block."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.core.picker import ORIGIN, BlockState, Picker
from swarm.core.policy import Action, Cancel, Discard, Drop, PolicyConfig, Request, RequestPolicy
from swarm.core.trust import Trust, TrustConfig

CONFIG = PolicyConfig(
    peer_max_outstanding=2,
    origin_max_outstanding=1,
    request_timeout=5.0,
    origin_request_timeout=8.0,
    retry_backoff=10.0,
    max_strikes=3,
)


def make(blocks: int, config: PolicyConfig = CONFIG, trust: Trust | None = None, **picker_kwargs) -> RequestPolicy:
    return RequestPolicy(Picker(blocks, **picker_kwargs), trust, config)


def requests(actions: list[Action]) -> list[tuple[object, int]]:
    return [(a.source, a.block) for a in actions if isinstance(a, Request)]


def cancels(actions: list[Action]) -> list[tuple[object, int]]:
    return [(a.source, a.block) for a in actions if isinstance(a, Cancel)]


def drops(actions: list[Action]) -> list[object]:
    return [a.source for a in actions if isinstance(a, Drop)]


# -- caps ----------------------------------------------------------------------------------------------------


def test_outstanding_requests_are_bounded_per_peer_and_for_the_origin() -> None:
    policy = make(10)
    # a has all but block 2: the origin is asked for what no peer has
    assert requests(policy.add_peer("a", 0.0, [1, 1, 0, 1, 1, 1, 1, 1, 1, 1])) == [("a", 0), ("a", 1)]
    assert requests(policy.add_origin(0.0)) == [(ORIGIN, 2)]
    assert requests(policy.on_have("a", 5, 0.0)) == []  # a is full
    assert requests(policy.on_block("a", 0, 1.0)) == [("a", 3)]  # one slot freed, one request
    assert len(policy.outstanding("a")) == 2 and len(policy.outstanding(ORIGIN)) == 1


def test_set_cap_adapts_the_bound() -> None:
    policy = make(10)
    policy.add_peer("a", 0.0, has_all=True)
    assert requests(policy.set_cap("a", 4, 0.0)) == [("a", 2), ("a", 3)]
    with pytest.raises(ValueError):
        policy.set_cap("a", 0, 0.0)


def test_a_peer_announcing_a_wanted_block_gets_a_request() -> None:
    policy = make(4)
    assert requests(policy.add_peer("a", 0.0, [0, 0, 0, 0])) == []
    assert requests(policy.on_have("a", 2, 1.0)) == [("a", 2)]
    assert requests(policy.on_have("a", 2, 1.0)) == []


# -- timeouts, strikes, retry elsewhere ---------------------------------------------------------------------


def test_expired_request_goes_elsewhere_with_a_strike_and_a_snub() -> None:
    policy = make(4)
    policy.add_peer("a", 0.0, has_all=True)  # a: 0, 1
    assert policy.next_deadline() == 5.0
    assert policy.on_timeout(4.999) == []
    policy.add_peer("b", 1.0, [1, 1, 0, 0])  # nothing left for b yet
    actions = policy.on_timeout(5.0)
    assert cancels(actions) == [("a", 0), ("a", 1)]
    assert sorted(requests(actions)) == [("a", 2), ("b", 0), ("b", 1)]  # a snubbed: one request, not 0 or 1
    assert policy.trust.strikes("a") == 1
    assert policy.is_snubbed("a") and policy.cap("a") == 1


def test_a_delivery_lifts_the_snub_and_a_good_block_clears_strikes() -> None:
    policy = make(8)
    policy.add_peer("a", 0.0, has_all=True)
    policy.on_timeout(5.0)
    assert policy.cap("a") == 1
    (block,) = policy.outstanding("a")
    actions = policy.on_block("a", block, 6.0)
    assert policy.cap("a") == 2 and len(requests(actions)) == 2
    policy.on_verified(block, 6.0)
    assert policy.trust.strikes("a") == 0


def test_a_busy_peer_that_answers_late_is_snubbed_but_not_struck() -> None:
    policy = make(8)
    policy.add_peer("a", 0.0, has_all=True)  # a: 0, 1
    policy.on_block("a", 0, 4.0)  # a: 1, 2
    policy.on_verified(0, 4.0)
    actions = policy.on_timeout(5.0)  # block 1, asked at 0.0, is late; a delivered 1 s ago
    assert cancels(actions) == [("a", 1), ("a", 2)] and policy.is_snubbed("a")
    assert policy.trust.strikes("a") == 0  # busy, not unresponsive
    # a says nothing more: once it has been silent for max_strikes timeouts, its expiries are strikes
    now = 5.0
    while "a" in policy.sources() and now < 100:
        now = policy.next_deadline()
        policy.on_timeout(now)
    assert "a" not in policy.sources()
    assert now >= 4.0 + CONFIG.max_strikes * CONFIG.request_timeout


def test_a_source_that_let_a_block_expire_is_not_asked_for_it_again_until_the_backoff_ends() -> None:
    policy = make(1)
    policy.add_peer("a", 0.0, has_all=True)
    assert requests(policy.on_timeout(5.0)) == []  # the only source, but it just failed this block
    assert policy.next_deadline() == 15.0  # the retry ban's end is a deadline: no stall
    assert requests(policy.on_timeout(15.0)) == [("a", 0)]


def test_a_late_answer_after_the_timeout_is_still_used() -> None:
    policy = make(2)
    policy.add_peer("a", 0.0, [1, 0])
    policy.add_peer("b", 0.0, [0, 1])
    policy.on_timeout(5.0)
    actions = policy.on_block("a", 0, 6.0)
    assert not any(isinstance(a, Discard) for a in actions)
    assert policy.picker.state(0) == BlockState.RECEIVED


def test_a_peer_is_dropped_after_max_strikes_but_the_origin_never_is() -> None:
    policy = make(1, config=PolicyConfig(request_timeout=1.0, origin_request_timeout=1.0, retry_backoff=0.0))
    policy.add_peer("a", 0.0, has_all=True)
    policy.add_origin(0.0)
    now, dropped = 0.0, []
    for _ in range(12):
        now = policy.next_deadline() or now
        dropped += drops(policy.on_timeout(now))
    assert dropped == ["a"]
    assert policy.sources() == [ORIGIN]
    assert policy.trust.strikes(ORIGIN) >= 3
    assert policy.outstanding(ORIGIN)  # still asked, one request at a time
    assert policy.cap(ORIGIN) == 1


def test_rejects_send_the_block_elsewhere_and_count_as_strikes() -> None:
    policy = make(4)
    policy.add_peer("a", 0.0, has_all=True)  # a: 0, 1
    policy.add_peer("b", 0.0, has_all=True)  # b: 2, 3
    assert requests(policy.on_reject("a", 0, 1.0)) == []  # a may not take it back during the backoff
    assert policy.picker.state(0) == BlockState.MISSING
    assert policy.trust.strikes("a") == 1
    assert policy.on_reject("a", 0, 1.0) == []  # not outstanding any more: ignored
    assert requests(policy.on_block("b", 2, 1.5)) == [("b", 0)]


# -- the origin yields to peers ------------------------------------------------------------------------------

YIELDING = dataclasses.replace(CONFIG, origin_max_outstanding=2)


def test_a_block_only_the_origin_fetches_goes_to_a_peer_that_announces_it() -> None:
    policy = make(6, config=YIELDING)
    assert requests(policy.add_origin(0.0)) == [(ORIGIN, 0), (ORIGIN, 1)]
    policy.add_peer("a", 0.1, [0] * 6)
    actions = policy.on_have("a", 1, 0.5)
    assert cancels(actions) == [(ORIGIN, 1)]
    assert requests(actions) == [("a", 1), (ORIGIN, 2)]  # the origin's slot goes to a block nobody has
    assert policy.outstanding(ORIGIN).keys() == {0, 2}
    assert policy.picker.requesters(1) == frozenset({"a"})


def test_a_peer_joining_with_blocks_the_origin_fetches_takes_them() -> None:
    policy = make(6, config=YIELDING)
    policy.add_origin(0.0)  # origin: 0, 1
    actions = policy.add_peer("a", 0.2, [1, 1, 0, 0, 0, 0])
    assert set(cancels(actions)) == {(ORIGIN, 0), (ORIGIN, 1)}
    assert set(requests(actions)) == {(ORIGIN, 2), (ORIGIN, 3), ("a", 0), ("a", 1)}


def test_an_origin_alone_is_asked_for_the_delivery_point_then_each_downloaders_own_blocks() -> None:
    """A crowd the origin asked to swarm starts with no peer known: in the window's order every member would ask
    the busy origin for the same first blocks. Each asks for the delivery point, then for blocks in its own order."""
    seconds = set()
    for seed in range(6):
        policy = make(16, config=YIELDING, rng=random.Random(seed), window=8)
        first, second = requests(policy.add_origin(0.0))
        assert first == (ORIGIN, 0)
        seconds.add(second[1])
    assert len(seconds) > 2 and seconds != {1}


def test_an_origin_alone_takes_the_window_in_order_when_asked_to() -> None:
    """`spread_origin_alone` off (a proxied torrent's BitTorrent swarm, read in order by one client)."""
    config = dataclasses.replace(YIELDING, spread_origin_alone=False)
    policy = make(16, config=config, rng=random.Random(3), window=8)
    assert requests(policy.add_origin(0.0)) == [(ORIGIN, 0), (ORIGIN, 1)]


def test_an_origin_beside_silent_peers_takes_the_window_in_order() -> None:
    """Peers known, none answering (snubbed): the origin is asked for the delivery point and the window, as
    before any peer was spread over (a silent peer holding everything would leave the origin idle otherwise)."""
    policy = make(16, config=YIELDING, rng=random.Random(3), window=8)
    policy.add_peer("a", 0.0, has_all=True)
    policy.on_timeout(5.0)  # a's requests expire: it is snubbed
    assert policy.is_snubbed("a")
    assert requests(policy.add_origin(5.0)) == [(ORIGIN, 0), (ORIGIN, 1)]


@pytest.mark.parametrize("case", ["disabled", "peer full", "peer snubbed", "a peer fetches it too"])
def test_the_origin_keeps_its_block_when_no_peer_can_take_it_now(case: str) -> None:
    config = dataclasses.replace(YIELDING, origin_yields=case != "disabled",
                                 spread_origin=case != "a peer fetches it too")
    policy = make(3 if case == "a peer fetches it too" else 6, config=config)
    policy.add_origin(0.0)  # origin: 0, 1
    if case == "peer full":
        policy.add_peer("a", 0.0, [0, 0, 0, 0, 1, 1])  # a: 4, 5 (cap 2)
    elif case == "peer snubbed":
        policy.add_peer("a", 0.0, [0, 0, 0, 0, 1, 0])  # a: 4, which expires
        policy.on_timeout(5.0)
        assert policy.is_snubbed("a") and policy.outstanding("a") == {}
    elif case == "a peer fetches it too":
        policy.add_peer("b", 0.0, has_all=True)  # b: 2
        policy.on_block("b", 2, 0.5)  # b, idle, duplicates the origin's 0 (endgame)
        policy.on_block(ORIGIN, 0, 1.0)  # b's copy of 0 is cancelled, b asks for 1 (endgame)
        assert policy.picker.requesters(1) == frozenset({ORIGIN, "b"})
        policy.add_peer("a", 1.0, [0, 0, 0])
    actions = policy.on_have("a", 1, 5.0)
    assert cancels(actions) == []
    assert ORIGIN in policy.picker.requesters(1)


# -- trust ---------------------------------------------------------------------------------------------------


GREEDY_ORIGIN = dataclasses.replace(CONFIG, spread_origin=False)  # the origin takes blocks peers have too


def test_a_hash_failure_bans_the_sender_and_its_blocks_go_elsewhere_at_once() -> None:
    policy = make(4, config=GREEDY_ORIGIN)
    policy.add_peer("b", 0.0, has_all=True)  # b: 0, 1
    policy.add_origin(0.0)  # origin: 2
    policy.on_block("b", 0, 0.1)  # b: 1, 3
    actions = policy.on_hash_failure(0, 0.2)
    assert drops(actions) == ["b"]
    assert policy.trust.is_banned("b")
    assert "b" not in policy.sources()
    assert policy.picker.state(0) == BlockState.FAILED
    # the origin is busy with block 2 (cap 1), so nothing can be requested yet, but nothing is lost either
    assert policy.picker.requesters(1) == frozenset() and policy.picker.state(1) == BlockState.MISSING
    assert requests(policy.on_block(ORIGIN, 2, 1.0)) == [(ORIGIN, 0)]  # the failed block, rarest-first tie


def test_a_banned_source_is_never_asked_again() -> None:
    policy = make(4)
    policy.add_peer("b", 0.0, has_all=True)
    policy.on_block("b", 0, 0.1)
    policy.on_hash_failure(0, 0.2)
    assert policy.add_peer("b", 1.0, has_all=True) == [Drop("b", "banned")]
    assert policy.on_block("b", 1, 1.0) == [Discard("b", 1)]  # its in-flight bytes are thrown away
    assert policy.on_have("b", 1, 1.0) == []


def test_a_bad_hash_layer_bans_at_once() -> None:
    policy = make(2)
    policy.add_peer("a", 0.0, has_all=True)
    actions = policy.on_bad_hash_layer("a", 1.0)
    assert drops(actions) == ["a"] and policy.trust.is_banned("a")


def test_a_source_on_parole_gets_one_request_at_a_time() -> None:
    trust = Trust(TrustConfig(ban_sole_contributor=False))
    policy = make(8, trust=trust)
    policy.add_peer("a", 0.0, has_all=True)
    policy.on_block("a", 0, 1.0)
    policy.on_hash_failure(0, 1.0)
    assert not trust.is_banned("a") and trust.on_parole("a")
    assert policy.cap("a") == 1


# -- endgame and vanishing sources ---------------------------------------------------------------------------


def test_endgame_duplicates_and_loser_cancel() -> None:
    policy = make(3)
    policy.add_peer("a", 0.0, has_all=True)  # a: 0, 1
    policy.add_peer("b", 0.0, has_all=True)  # b: 2, and no duplicate while it has a request outstanding
    assert policy.outstanding("b").keys() == {2}
    # b is idle: it duplicates one of a's blocks, the one nearest the delivery point
    assert requests(policy.on_block("b", 2, 1.0)) == [("b", 0)]
    actions = policy.on_block("a", 0, 1.2)
    assert cancels(actions) == [("b", 0)]
    assert requests(actions) == [("b", 1)]  # idle again: the next one
    assert policy.on_block("b", 0, 1.5)[0] == Discard("b", 0)  # the cancelled copy arrived anyway


def test_a_vanished_source_hands_its_blocks_to_others_in_the_same_call() -> None:
    policy = make(4, config=GREEDY_ORIGIN, window=4)
    policy.add_peer("a", 0.0, has_all=True)  # a: 0, 1
    policy.add_origin(0.0)  # origin: 2
    policy.add_peer("c", 0.0, [1, 1, 0, 0])  # nothing for c yet
    actions = policy.on_source_lost("a", 1.0)
    assert requests(actions) == [("c", 0), ("c", 1)]
    assert policy.on_source_lost("a", 1.0) == []


def test_next_deadline_is_none_when_nothing_is_pending() -> None:
    policy = make(1)
    assert policy.next_deadline() is None
    policy.add_peer("a", 0.0, has_all=True)
    policy.on_block("a", 0, 1.0)
    policy.on_verified(0, 1.0)
    assert policy.is_complete and policy.next_deadline() is None


# -- simulation ----------------------------------------------------------------------------------------------


@dataclass
class Behaviour:
    """How a simulated source answers a request."""

    kind: str  # "good", "silent", "corrupt", "reject", "vanish"
    latency: float = 0.2
    vanish_after: int = 2  # "vanish": good for this many blocks, then disconnects


@dataclass
class Simulation:
    """A fake clock and an event heap; the policy's actions become scheduled answers."""

    policy: RequestPolicy
    behaviours: dict
    now: float = 0.0
    events: list = field(default_factory=list)
    seq: itertools.count = field(default_factory=itertools.count)
    delivered: dict = field(default_factory=dict)
    gone: set = field(default_factory=set)
    requests_after_ban: list = field(default_factory=list)
    sent_bad: set = field(default_factory=set)

    def at(self, when: float, callback: Callable[[], list[Action]]) -> None:
        heapq.heappush(self.events, (when, next(self.seq), callback))

    def apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Request):
                self.request(action.source, action.block)
            elif isinstance(action, Drop):
                self.gone.add(action.source)

    def request(self, source, block: int) -> None:
        if self.policy.trust.is_banned(source) or source in self.gone:
            self.requests_after_ban.append((source, block))
        behaviour = self.behaviours[source]
        if behaviour.kind == "silent":
            return
        if behaviour.kind == "reject":
            self.at(self.now + behaviour.latency, lambda: self.policy.on_reject(source, block, self.now))
            return
        self.at(self.now + behaviour.latency, lambda: self.deliver(source, block))

    def deliver(self, source, block: int) -> list[Action]:
        if source in self.gone:  # the connection is closed: nothing arrives
            return []
        behaviour = self.behaviours[source]
        if behaviour.kind == "vanish":
            self.delivered[source] = self.delivered.get(source, 0) + 1
            if self.delivered[source] > behaviour.vanish_after:
                self.gone.add(source)
                return self.policy.on_source_lost(source, self.now)
        # as the shell would: act on the arrival first, then verify (in a worker) and report the outcome
        actions = self.policy.on_block(source, block, self.now)
        self.apply(actions)
        if Discard(source, block) in actions:
            return []
        if behaviour.kind == "corrupt":
            self.sent_bad.add(source)
            return self.policy.on_hash_failure(block, self.now)
        return self.policy.on_verified(block, self.now)

    def run(self, limit: float) -> None:
        """Step the clock from event to event (or deadline) until done, idle, or past `limit`."""
        for _ in range(100_000):
            if self.policy.is_complete:
                return
            deadline = self.policy.next_deadline()
            next_event = self.events[0][0] if self.events else None
            candidates = [t for t in (deadline, next_event) if t is not None]
            if not candidates:
                return  # idle: nothing will ever happen again
            self.now = max(self.now, min(candidates))
            if self.now > limit:
                return
            while self.events and self.events[0][0] <= self.now:
                _, _, callback = heapq.heappop(self.events)
                self.apply(callback())
            if deadline is not None and deadline <= self.now:
                self.apply(self.policy.on_timeout(self.now))


def start(sim: Simulation, peers: dict, origin: bool) -> None:
    for name, bitfield in peers.items():
        sim.apply(sim.policy.add_peer(name, 0.0, bitfield, has_all=bitfield is None))
    if origin:
        sim.apply(sim.policy.add_origin(0.0))


@pytest.mark.parametrize("endgame", [True, False], ids=["endgame", "no-endgame"])
@pytest.mark.parametrize("spread", [True, False], ids=["spread", "greedy"])
def test_silent_and_corrupt_peers_cannot_stall_the_fetch_while_the_origin_works(endgame: bool, spread: bool) -> None:
    # peers 8 at a time, 5 s request timeout; the origin 4 at a time, so that it fetches its share of the
    # blocks before the silent peer's requests expire
    config = PolicyConfig(origin_max_outstanding=4, spread_origin=spread)
    per_origin = 0.5 / config.origin_max_outstanding  # s per block from the origin alone
    policy = make(32, config=config, window=4, max_duplicates=2 if endgame else 1)
    sim = Simulation(
        policy,
        {"a": Behaviour("silent"), "b": Behaviour("corrupt", latency=0.05), ORIGIN: Behaviour("good", latency=0.5)},
    )
    start(sim, {"a": None, "b": None}, origin=True)  # a holds blocks 0-7 and never answers
    sim.run(limit=300.0)
    assert policy.is_complete, policy.picker
    assert policy.trust.is_banned("b") and "b" not in policy.sources()
    assert sim.requests_after_ban == []
    if spread:  # the origin leaves a's blocks to a until a's requests expire (it is snubbed), then takes them
        assert policy.trust.strikes("a") >= 1
        assert sim.now < config.max_strikes * config.request_timeout  # not waiting for a's third strike (was 45 s)
    # the origin alone needs 32 * per_origin s
    elif endgame:  # it duplicates a's blocks near the end: a's silence costs nothing
        assert sim.now <= 32 * per_origin + 0.5
    else:  # a's blocks come back when they expire, and the origin fetches them then
        assert policy.trust.strikes("a") >= 1
        assert sim.now <= config.request_timeout + 8 * per_origin + 0.5


def test_without_the_origin_a_good_peer_is_enough() -> None:
    policy = make(16, config=PolicyConfig(request_timeout=2.0))
    behaviours = {p: Behaviour(kind) for p, kind in zip("abcd", ["silent", "corrupt", "reject", "good"])}
    sim = Simulation(policy, behaviours)
    start(sim, dict.fromkeys("abcd"), origin=False)
    sim.run(limit=300.0)
    assert policy.is_complete
    assert policy.trust.is_banned("b")
    assert "c" not in policy.sources()  # three refusals in a row
    assert sim.requests_after_ban == []


KINDS = ["good", "silent", "corrupt", "reject", "vanish"]


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.integers(1, 24),
    peers=st.lists(
        st.tuples(st.sampled_from(KINDS), st.floats(0.01, 3.0), st.lists(st.booleans(), min_size=24, max_size=24)),
        max_size=5,
    ),
    window=st.integers(0, 4),
    origin_latency=st.floats(0.01, 2.0),
)
def test_any_mix_of_misbehaving_peers_never_stalls_while_the_origin_works(
    blocks: int, peers: list, window: int, origin_latency: float
) -> None:
    config = PolicyConfig(request_timeout=4.0, origin_request_timeout=6.0, retry_backoff=5.0)
    policy = make(blocks, config=config, window=window)
    behaviours = {ORIGIN: Behaviour("good", latency=origin_latency)}
    bitfields = {}
    for i, (kind, latency, bits) in enumerate(peers):
        name = f"p{i}"
        behaviours[name] = Behaviour(kind, latency=latency)
        bitfields[name] = bits[:blocks]
    sim = Simulation(policy, behaviours)
    start(sim, bitfields, origin=True)
    # generous bound: the origin alone needs blocks / 4 * latency (+ its timeouts if peers keep it busy)
    sim.run(limit=2000.0)
    assert policy.is_complete, (policy.picker, sim.now)
    assert sim.requests_after_ban == []
    for name in sim.sent_bad:
        assert policy.trust.is_banned(name) and name not in policy.sources()
