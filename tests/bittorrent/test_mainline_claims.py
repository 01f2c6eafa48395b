"""`MainlineClaims` (`bittorrent.mainline_claims`): claims kept by their publishers, found on the Mainline DHT and
asked of them directly. The DHT here is a stand-in that hands out what the test says a lookup finds."""

from __future__ import annotations

import asyncio

import pytest

from bittorrent.errors import BridgeError
from bittorrent.mainline import address_id
from bittorrent.mainline_claims import MAX_ASKED, MainlineClaims, claim_key
from swarm.discovery.own_claims import OwnClaims
from swarm.discovery.seam import Attestation, ManifestClaim
from swarm.errors import PeerError, TransportError

KEY = bytes(range(32))
CLAIM = ManifestClaim(b"\x11" * 32, 1000, 16384, b'"v1"')
OTHER = ManifestClaim(b"\x22" * 32, 1000, 16384, b'"v1"')


class FakeSession:
    """What a lookup finds, batch by batch, and what was announced."""

    def __init__(self, batches: list[list[tuple[str, int]]]) -> None:
        self.batches = batches
        self.announced: list[tuple[bytes, int]] = []
        self.looked_up: list[bytes] = []
        self.over = 0

    def dht_lookup(self, key: bytes) -> asyncio.Queue:
        self.looked_up.append(key)
        heard: asyncio.Queue = asyncio.Queue()
        for batch in self.batches:
            heard.put_nowait(None if batch == [None] else batch)
        return heard

    def dht_lookup_over(self, key, heard) -> None:
        self.over += 1

    def dht_announce(self, key: bytes, port: int) -> None:
        self.announced.append((key, port))


class FakeDirectory:
    node_id = b"\x99" * 20

    def __init__(self, session: FakeSession) -> None:
        self.session = session
        self.reachable = True
        self.external: str | None = None

    def own_host(self) -> str | None:
        return self.external

    def may_announce(self) -> bool:
        return self.reachable


def store(batches, monkeypatch) -> MainlineClaims:
    monkeypatch.setattr("bittorrent.mainline_claims.CLAIMS_WAIT", 0.2)
    monkeypatch.setattr("bittorrent.mainline_claims.CLAIMS_BUDGET", 5.0)
    monkeypatch.setattr("bittorrent.mainline_claims.GRACE", 0.05)
    monkeypatch.setattr("bittorrent.mainline_claims.ASK_TIMEOUT", 0.1)
    return MainlineClaims(FakeDirectory(FakeSession(batches)), OwnClaims(), clock=lambda: 1_000_000.0)


def answers(ask):
    """An ask of (address, key) giving claims only, as the node's: claims, and no other claimers passed on."""
    async def asking(address, key, claiming):
        return await ask(address, key), []
    return asking


async def test_claims_are_asked_of_the_addresses_found_and_come_back_first_hand(monkeypatch):
    claims = store([[("7.7.1.10", 4000), ("7.7.2.10", 4000)], [("7.7.3.10", 4000), ("7.7.1.10", 4000)]], monkeypatch)
    asked = []

    async def ask(address, key):
        asked.append(address)
        assert key == KEY
        if address[0] == "7.7.2.10":
            raise PeerError("closed the connection")  # a stale entry: one failed connection
        if address[0] == "7.7.3.10":
            raise TransportError("refused")
        return [(CLAIM, 999_990.0, 1_003_600.0)]

    claims.ask, claims.peer_port = answers(ask), 5000
    vouches = await claims.get_manifests(KEY)
    assert claims.session.looked_up == [claim_key(KEY)] and claims.session.over == 1
    assert sorted(asked) == [("7.7.1.10", 4000), ("7.7.2.10", 4000), ("7.7.3.10", 4000)]  # each once
    (vouch,) = vouches
    assert vouch.claim == CLAIM and vouch.attestation is Attestation.FIRST_HAND
    assert vouch.publisher_host == "7.7.1.10" and vouch.publisher_id == address_id("7.7.1.10", 4000)
    assert vouch.published_at == 999_990.0
    assert claims.status()["answered"] == 1 and claims.status()["asked"] == 3


async def test_a_name_is_the_address_so_nobody_can_speak_for_another(monkeypatch):
    # Two addresses answering the same claim are two publishers, each named by its own address: a stranger cannot
    # take an honest publisher's name to replace its claim in the composite's one-per-publisher merge.
    claims = store([[("7.7.1.10", 4000), ("7.7.1.11", 4000)]], monkeypatch)

    async def ask(address, key):
        return [(CLAIM if address[0].endswith("10") else OTHER, 999_990.0, 1_003_600.0)]

    claims.ask, claims.peer_port = answers(ask), 5000
    vouches = await claims.get_manifests(KEY)
    assert {(v.publisher_id, v.content_root) for v in vouches} == {(address_id("7.7.1.10", 4000), CLAIM.content_root),
                                                                   (address_id("7.7.1.11", 4000), OTHER.content_root)}


async def test_a_lookup_asks_at_most_max_asked_and_a_silent_one_costs_its_timeout(monkeypatch):
    crowd = [(f"7.7.{i}.1", 4000) for i in range(3 * MAX_ASKED)]
    claims = store([crowd], monkeypatch)
    asked = []

    async def ask(address, key):
        asked.append(address)
        await asyncio.Event().wait()  # never answers

    claims.ask, claims.peer_port = answers(ask), 5000
    assert await claims.get_manifests(KEY) == []
    assert len(asked) == MAX_ASKED


async def test_nobody_found_is_no_claim(monkeypatch):
    claims = store([], monkeypatch)
    claims.ask, claims.peer_port = (lambda address, key, claiming: None), 5000
    assert await claims.get_manifests(KEY) == []


async def test_a_claim_is_kept_announced_and_withdrawn(monkeypatch):
    claims = store([], monkeypatch)
    with pytest.raises(BridgeError, match="not listening"):
        await claims.put_manifest(KEY, CLAIM)  # nobody could ask for it yet
    with pytest.raises(BridgeError, match="not listening"):
        await claims.get_manifests(KEY)
    claims.peer_port, claims.ask = 5000, None
    await claims.put_manifest(KEY, CLAIM, ttl=120)
    (own,) = claims.own.get(KEY, 1_000_000.0)
    assert own.claim == CLAIM and own.expires_at == 1_000_120.0
    await asyncio.sleep(0)  # the keeping task's first turn: the announcement
    assert claims.session.announced == [(claim_key(KEY), 5000)]
    await claims.put_manifest(KEY, OTHER)  # replaces it (one claim per key)
    assert [o.claim for o in claims.own.get(KEY, 1_000_000.0)] == [OTHER]
    await claims.withdraw_manifest(KEY)
    assert claims.own.get(KEY, 1_000_000.0) == [] and claims.status()["claims_kept"] == 0
    claims.close()


async def test_one_party_cannot_crowd_the_others_out(monkeypatch):
    # Attack: 16 ports of one address and five addresses of one /24 answer first; the honest claimers after them
    # were never asked (the 16 asks all went to the first address). One per host, two per network now.
    crowd = [("6.6.6.6", 4000 + i) for i in range(16)] + [(f"6.6.7.{i}", 4000) for i in range(5)]
    honest = [("55.55.1.10", 4000), ("55.55.2.10", 4000)]
    claims = store([crowd, honest, [None]], monkeypatch)
    asked = []

    async def ask(address, key):
        asked.append(address)
        return [(CLAIM, 999_990.0, 1_003_600.0)] if address in honest else []

    claims.ask, claims.peer_port = answers(ask), 5000
    vouches = await claims.get_manifests(KEY)
    assert sorted(asked) == [("55.55.1.10", 4000), ("55.55.2.10", 4000), ("6.6.6.6", 4000), ("6.6.7.0", 4000),
                             ("6.6.7.1", 4000)]
    assert {v.publisher_host for v in vouches} == {"55.55.1.10", "55.55.2.10"}


async def test_a_silent_stranger_costs_its_answer_not_the_others(monkeypatch):
    claims = store([[("55.55.1.10", 4000), ("55.55.2.10", 4000)]], monkeypatch)
    monkeypatch.setattr("bittorrent.mainline_claims.ASK_TIMEOUT", 60.0)
    monkeypatch.setattr("bittorrent.mainline_claims.CLAIMS_BUDGET", 0.5)

    async def ask(address, key):
        if address[0] == "55.55.2.10":
            await asyncio.Event().wait()  # a tarpit: accepts, never answers
        return [(CLAIM, 999_990.0, 1_003_600.0)]

    claims.ask, claims.peer_port = answers(ask), 5000
    (vouch,) = await claims.get_manifests(KEY)  # within the budget, with what answered
    assert vouch.publisher_host == "55.55.1.10"


async def test_a_lookup_that_is_over_is_not_waited_for(monkeypatch):
    claims = store([[None]], monkeypatch)  # the DHT says the lookup is over, having found nobody
    monkeypatch.setattr("bittorrent.mainline_claims.CLAIMS_WAIT", 60.0)
    claims.ask, claims.peer_port = (lambda address, key, claiming: None), 5000
    async with asyncio.timeout(10):  # (60 s if the end were not heard)
        assert await claims.get_manifests(KEY) == []


async def test_an_unreachable_node_keeps_its_claim_but_announces_no_address(monkeypatch):
    claims = store([], monkeypatch)
    claims.directory.reachable = False  # peers in two networks could not connect back (swarm.core.reachability)
    claims.peer_port = 5000
    await claims.put_manifest(KEY, CLAIM)
    await asyncio.sleep(0)  # the keeping task's first turn
    assert claims.session.announced == [] and claims.own.get(KEY, 1_000_000.0)  # asked directly, it still answers
    claims.close()


async def test_those_who_answered_are_the_candidates_for_a_connect_back(monkeypatch):
    from proxy.internet import probe_candidates

    claims = store([[("55.55.1.10", 4000), ("55.55.1.11", 4000), ("55.55.2.10", 4000), ("6.6.6.6", 4000)]],
                   monkeypatch)

    async def ask(address, key):
        if address[0] == "6.6.6.6":
            raise PeerError("closed")  # did not answer: not a node of ours
        return []

    claims.ask, claims.peer_port = answers(ask), 5000
    await claims.get_manifests(KEY)
    assert sorted(claims.answered_by) == [("55.55.1.10", 4000), ("55.55.1.11", 4000), ("55.55.2.10", 4000)]
    chosen = probe_candidates(list(claims.answered_by))
    assert len(chosen) == 2 and {host.rsplit(".", 1)[0] for host, _ in chosen} == {"55.55.1", "55.55.2"}


def test_the_key_is_ours_alone():
    assert len(claim_key(KEY)) == 20 and claim_key(KEY) != KEY[:20]
    from bittorrent.mainline import root_key

    assert claim_key(KEY) != root_key(KEY)  # a root and a claim key never meet on one Mainline key


# --- addresses behind NATs: a punch through a node that answered -----------------------------------------------

NATTED, OPEN = ("55.55.101.2", 4000), ("55.55.50.2", 4000)


async def test_an_address_refused_is_asked_again_after_a_punch_through_one_that_answered(monkeypatch):
    claims = store([[NATTED, OPEN]], monkeypatch)
    punched: set = set()
    asked_through: list = []

    async def ask(address, key):
        if address == NATTED and address not in punched:
            while OPEN not in claims.answered_by:  # (refused once the open node has answered: a coordinator)
                await asyncio.sleep(0)
            raise TransportError("refused")  # the NAT's router: nothing listens there for a stranger
        return [(CLAIM if address == NATTED else OTHER, 999_990.0, 1_003_600.0)]

    async def punch(coordinators, address):
        asked_through.append((list(coordinators), address))
        punched.add(address)
        return True

    claims.ask, claims.punch, claims.peer_port = answers(ask), punch, 5000
    vouches = await claims.get_manifests(KEY)
    assert {vouch.claim for vouch in vouches} == {CLAIM, OTHER}
    assert {vouch.serves_at for vouch in vouches} == {NATTED, OPEN}  # each a provider where it answered
    assert list(claims.answered_by) == [OPEN]  # reached only through a punch: nobody's coordinator
    assert asked_through == [([OPEN], NATTED)]  # through the node of this lookup that answered
    assert claims.status()["punched"] == 1


async def test_a_silent_address_is_punched_to_while_its_ask_still_runs(monkeypatch):
    """A NAT that drops a stranger's packets says nothing: the punch is asked for after ASK_TIMEOUT, not after the
    ask's whole time, and the second ask comes within the lookup's budget."""
    claims = store([[NATTED]], monkeypatch)
    claims.answered_by.append(OPEN)  # answered an earlier lookup
    punched: set = set()
    started: list = []

    async def ask(address, key):
        if address not in punched:
            await asyncio.Event().wait()  # silent: only the timeout ends it
        return [(CLAIM, 999_990.0, 1_003_600.0)]

    async def punch(coordinators, address):
        started.append(coordinators)
        punched.add(address)
        return True

    claims.ask, claims.punch, claims.peer_port = answers(ask), punch, 5000
    assert [vouch.claim for vouch in await claims.get_manifests(KEY)] == [CLAIM]
    assert started == [[OPEN]]


async def test_no_punch_without_a_coordinator_nor_for_a_peer_that_answered_wrongly(monkeypatch):
    claims = store([[NATTED, ("55.55.102.2", 4000)]], monkeypatch)
    punches: list = []

    async def ask(address, key):
        if address == NATTED:
            raise TransportError("refused")
        raise PeerError("answered HAVE instead of the CLAIMS for our key")

    async def punch(coordinators, address):
        punches.append(address)
        return True

    claims.ask, claims.punch, claims.peer_port = answers(ask), punch, 5000
    assert await claims.get_manifests(KEY) == []
    assert punches == []  # nobody answered to coordinate; and a wrong answer is no NAT


async def test_our_own_address_is_not_asked(monkeypatch):
    claims = store([[("55.55.9.9", 5000), ("55.55.9.9", 5001)]], monkeypatch)
    claims.directory.external = "55.55.9.9"
    asked: list = []

    async def ask(address, key):
        asked.append(address)
        return []

    claims.ask, claims.peer_port = answers(ask), 5000
    await claims.get_manifests(KEY)
    assert asked == [("55.55.9.9", 5001)]  # another node behind our NAT is asked; we are not


async def test_a_lookup_crowded_with_silent_addresses_asks_few_introductions(monkeypatch):
    """16 addresses that answer nothing made 16 requests at each coordinator, spending the 3 a minute they allow
    us (the hole-punch attack review): one lookup asks for PUNCHES_PER_LOOKUP."""
    from bittorrent.mainline_claims import PUNCHES_PER_LOOKUP
    silent = [(f"55.55.{i}.2", 4000) for i in range(1, 17)]
    claims = store([silent], monkeypatch)
    claims.answered_by.append(OPEN)
    punches: list = []

    async def ask(address, key):
        raise TransportError("refused")

    async def punch(coordinators, address):
        punches.append(address)
        return False

    claims.ask, claims.punch, claims.peer_port = answers(ask), punch, 5000
    assert await claims.get_manifests(KEY) == []
    assert len(punches) == PUNCHES_PER_LOOKUP


async def test_an_ask_that_fails_unexpectedly_costs_only_its_own_answer(monkeypatch):
    """A bug of ours in one ask (here a ValueError) must not take the other addresses' claims with it."""
    claims = store([[NATTED, OPEN]], monkeypatch)

    async def ask(address, key):
        if address == NATTED:
            raise ValueError("not an IP address")
        return [(CLAIM, 999_990.0, 1_003_600.0)]

    claims.ask, claims.peer_port = answers(ask), 5000
    assert [vouch.claim for vouch in await claims.get_manifests(KEY)] == [CLAIM]


async def test_the_claimers_a_found_node_passes_on_are_asked_too_once_and_one_hop(monkeypatch):
    # Only 7.7.1.10's announcement is findable; it passes on two others (and us, and a host already asked): those
    # two are asked directly, and what they pass on is not followed. We say our port: we claim under the key.
    claims = store([[("7.7.1.10", 4000)]], monkeypatch)
    claims.own.put(KEY, CLAIM, now=1_000_000.0, ttl=120)
    passed_on = {("7.7.1.10", 4000): [("7.7.2.10", 4000), ("7.7.3.10", 4001), ("8.8.8.8", 5000), ("7.7.1.10", 9)],
                 ("7.7.2.10", 4000): [("7.7.9.10", 4000)]}
    asked = []

    async def ask(address, key, claiming):
        asked.append((address, claiming))
        return [(CLAIM, 999_990.0, 1_003_600.0)], passed_on.get(address, [])

    claims.ask, claims.peer_port, claims.transports = ask, 5000, 3
    claims.directory.own_host = lambda: "8.8.8.8"
    vouches = await claims.get_manifests(KEY)
    assert sorted(a for a, _ in asked) == [("7.7.1.10", 4000), ("7.7.2.10", 4000), ("7.7.3.10", 4001)]
    assert {claiming for _, claiming in asked} == {(5000, 3)}
    assert {v.publisher_host for v in vouches} == {"7.7.1.10", "7.7.2.10", "7.7.3.10"}  # each first-hand
    assert claims.status()["introduced"] == 2 and claims.status()["asked"] == 3


async def test_a_node_passing_on_a_crowd_costs_no_more_asks_than_a_crowded_key(monkeypatch):
    # A liar passes on 100 addresses in 100 networks and 10 in one: at most MAX_ASKED asked in all, two per network.
    claims = store([[("7.7.1.10", 4000)]], monkeypatch)
    crowd = [(f"6.{i}.0.1", 4000) for i in range(100)] + [(f"5.5.5.{i}", 4000) for i in range(10)]
    asked = []

    async def ask(address, key, claiming):
        asked.append((address, claiming))
        return [], (crowd[-10:] + crowd[:-10] if address == ("7.7.1.10", 4000) else [])

    claims.ask, claims.peer_port, claims.transports = ask, 5000, 3
    await claims.get_manifests(KEY)
    assert len(asked) == MAX_ASKED
    assert sum(a[0].startswith("5.5.5.") for a, _ in asked) == 2
    assert {claiming for _, claiming in asked} == {None}  # we claim nothing under the key: we say no port
