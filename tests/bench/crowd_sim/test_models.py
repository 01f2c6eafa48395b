"""The simulator's models of the links, the origin and the DHT, table by table (virtual time: no sleeps)."""

import random

import pytest

from bench.crowd_sim.events import Clock
from bench.crowd_sim.models import CHUNK, MAINLINE, OURS, Dht, Links, NetParams, Origin, Uplink
from server_plugin.peer_pool import PeerPool
from swarm.discovery.seam import Provider
from swarm.trust import IN_PROGRESS_ROOT, ManifestClaim, Vouch

NET = NetParams(delay=0.025, up=1_000_000.0, down=2_000_000.0)


@pytest.mark.parametrize("sends, expected", [
    ([("a", "b", 1000, 0.0)], [0.001 + 0.025 + 0.0005]),  # the uplink's serialisation, the delay, the downlink's
    ([("a", "b", 1000, 0.0), ("a", "c", 1000, 0.0)], [0.0265, 0.0275]),  # the second waits for a's uplink
    ([("a", "c", 4000, 0.0), ("b", "c", 4000, 0.0)], [0.031, 0.033]),  # both land on c: its downlink queues them
    ([("o", "b", 4000, 0.0)], [0.025 + 0.002]),  # an unlimited sender: only the delay and b's downlink
])
def test_links_queue_per_host(sends, expected):
    links = Links(NET)
    links.unlimited.add("o")
    got = [links.send(src, dst, n, now) for src, dst, n, now in sends]
    assert got == pytest.approx(expected)


def test_uplink_serves_in_order_and_a_cancelled_request_costs_nothing():
    clock, links = Clock(), Links(NET)
    uplink = Uplink(clock, links, "p")
    landed = []
    entries = [[1000, "b", lambda i=i: landed.append((i, clock.now)), True] for i in range(3)]
    entries[1][3] = False  # cancelled before its turn
    for entry in entries:
        uplink.queue.append(entry)
    uplink.next()
    clock.run()
    assert [i for i, _ in landed] == [0, 2]
    assert landed[1][1] == pytest.approx(0.002 + 0.025 + 0.0005)  # the cancelled one took no uplink time
    assert uplink.sent == 2000


def _origin(size=100_000, rate=256_000.0, max_connections=256, busy_at=None, body_hold=0.0):
    clock, links = Clock(), Links(NetParams(delay=0.025))
    return clock, Origin(clock, links, "origin", bytes(range(256)) * (size // 256) + bytes(size % 256), rate=rate,
                         max_connections=max_connections, busy_at=busy_at, body_hold=body_hold)


def _client(clock, origin, name, at=0.0, **kw):
    got = {"head": None, "bytes": bytearray(), "done": None}

    def head(status, start, end):
        got["head"] = (clock.now, status, start, end)

    def data(piece):
        got["bytes"] += piece
        if got["head"] and len(got["bytes"]) == got["head"][3] - got["head"][2]:
            got["done"] = clock.now
    clock.at(at, lambda: got.__setitem__("conn", origin.get(name, clock.now, head, data, **kw)))
    return got


def test_origin_alone_head_after_two_round_trips_body_at_its_rate():
    clock, origin = _origin()
    got = _client(clock, origin, "c")
    clock.run()
    assert got["head"][:2] == (pytest.approx(0.1), 200)  # SYN, SYN-ACK, request, head: four one-way delays
    assert bytes(got["bytes"]) == origin.data
    # The burst (25.6 kB) goes at once, the rest at 256 kB/s: (100,000 - 25,600) / 256,000 s after the request.
    assert got["done"] == pytest.approx(0.075 + (100_000 - 25_600) / 256_000 + 0.025, abs=0.02)
    assert origin.bytes_sent == 100_000


@pytest.mark.parametrize("clients", [2, 5])
def test_origin_shares_fairly_chunk_by_chunk(clients):
    clock, origin = _origin()
    got = [_client(clock, origin, f"c{i}") for i in range(clients)]
    clock.run()
    done = [g["done"] for g in got]
    assert all(bytes(g["bytes"]) == origin.data for g in got)
    assert max(done) - min(done) < 1.5 * CHUNK / 256_000 * clients  # they finish within about one round of turns
    assert min(done) > (clients * 100_000 - 25_600) / 256_000 * 0.8  # ... each at about 1/n of the rate


def test_origin_connection_cap_makes_the_next_head_wait():
    clock, origin = _origin(max_connections=1)
    first, second = _client(clock, origin, "a"), _client(clock, origin, "b", at=0.001)
    clock.run()
    assert second["head"][0] > first["done"] - 0.03  # its head went out once the first response ended


def test_origin_range_answers_206():
    clock, origin = _origin()
    got = _client(clock, origin, "c", start=1000, end=5000)
    clock.run()
    assert got["head"][1:] == (206, 1000, 5000)
    assert bytes(got["bytes"]) == origin.data[1000:5000]


def test_a_client_that_left_costs_the_origin_nothing_more():
    clock, origin = _origin()
    stays, leaves = _client(clock, origin, "a"), _client(clock, origin, "b")
    clock.at(0.2, lambda: origin.close(leaves["conn"], clock.now))
    clock.run()
    assert stays["done"] is not None and leaves["done"] is None
    assert origin.bytes_sent < 200_000 - 50_000  # it got a few chunks, not its 100 kB
    assert origin.active == 0 and not origin.waiting


# One slot, held by "a" (streaming); "b" and "c" wait in line for it. SlowOrigin cancels a departed client's handler
# when its FIN arrives, one delay after the close, wherever it waits, and frees its slot then (a real SlowOrigin gave
# a departed client's slot to the next in line within 2 ms, though that client's turn for the lock was a second off).
# When does "c" get its head? One delay after the slot is freed: when a response before it ended (its last byte
# lands about then), or when the FINs arrived.
@pytest.mark.parametrize("closes, c_head", [
    ({}, "b done"),  # nobody leaves: c waits for two whole responses
    ({"b": 0.2}, "a done"),  # b left while in line: skipped, at no cost
    ({"a": 0.2}, "b done"),  # a left mid-body: its slot went to b at 0.225, not when a's turn would have come
    ({"a": 0.2, "b": 0.2}, 0.2 + 0.025 + 0.025),  # both left: c takes the slot when their FINs arrive
])
def test_a_client_that_left_frees_its_slot_when_its_fin_arrives(closes, c_head):
    clock, origin = _origin(max_connections=1)
    got = {name: _client(clock, origin, name, at=0.001 * i) for i, name in enumerate("abc")}
    for name, at in closes.items():
        clock.at(at, lambda name=name: origin.close(got[name]["conn"], clock.now))
    clock.run()
    if isinstance(c_head, str):
        assert got["c"]["head"][0] == pytest.approx(got[c_head[0]]["done"], abs=0.01)
    else:
        assert got["c"]["head"][0] == pytest.approx(c_head)
    assert bytes(got["c"]["bytes"]) == origin.data
    assert origin.active == 0 and origin.in_line == 0


@pytest.mark.parametrize("b_leaves, chunks_before_a", [
    (False, 4),  # b stays: its 4 chunks and a's share the rate, turn by turn (a's last waits for b's last but one)
    (True, 1),  # b leaves while it waits for its second chunk's tokens: only its first (sent) delays a
])
def test_a_chunk_whose_client_left_while_it_waited_gives_its_tokens_back(b_leaves, chunks_before_a):
    """SlowOrigin takes a chunk's tokens, then sleeps for them; a handler cancelled in that sleep sends nothing and
    gives them back. On the tree before they stayed spent, and a's last byte came one chunk's time later still."""
    rate, size = 16_000.0, 4 * CHUNK  # the burst is one chunk: every later chunk waits CHUNK / rate
    alone_clock, alone = _origin(size=size, rate=rate)
    a_alone = _client(alone_clock, alone, "a", at=0.001)
    alone_clock.run()
    clock, origin = _origin(size=size, rate=rate)
    b = _client(clock, origin, "b")  # first: the burst goes to its first chunk, then it sleeps for its second's
    a = _client(clock, origin, "a", at=0.001)
    if b_leaves:
        clock.at(0.2, lambda: origin.close(b["conn"], clock.now))
    clock.run()
    assert a["done"] - a_alone["done"] == pytest.approx(chunks_before_a * CHUNK / rate, abs=0.05)
    assert origin.bytes_sent == size + (CHUNK if b_leaves else size)


def test_a_head_waits_for_a_slot_as_a_get_does_and_holds_none():
    clock, origin = _origin(max_connections=1)
    first = _client(clock, origin, "a")
    head = _client(clock, origin, "h", at=0.001, head_only=True)
    after = _client(clock, origin, "b", at=0.002)
    clock.run()
    assert head["head"][0] == pytest.approx(first["done"], abs=0.01)  # in line behind the GET's slot
    assert not head["bytes"]
    assert after["head"][0] == pytest.approx(head["head"][0])  # the HEAD let the slot go at once


@pytest.mark.parametrize("leaves, hinted", [
    (False, True),  # c1's head: c1 in flight, c2 and c3 waiting for the slot
    (True, False),  # c2 left the line before: two in flight
])
def test_a_get_that_left_the_line_no_longer_counts_for_the_hint(leaves, hinted):
    """The plugin's middleware counts a GET from its start until its handler ends or is cancelled."""
    clock, origin = _origin(max_connections=1, busy_at=3)
    got = [_client(clock, origin, f"c{i}", at=0.001 * i) for i in range(4)]
    if leaves:
        clock.at(0.2, lambda: origin.close(got[2]["conn"], clock.now))
    clock.run()
    assert got[1]["conn"].hinted is hinted


@pytest.mark.parametrize("params", [OURS, MAINLINE], ids=lambda p: p.name)
def test_dht_lookup_latency_has_the_median_and_p99_asked(params):
    dht = Dht(params, random.Random(1))
    draws = sorted(dht.lookup_latency() for _ in range(20_000))
    assert draws[10_000] == pytest.approx(params.lookup_median, rel=0.05)
    assert draws[19_800] == pytest.approx(params.lookup_p99, rel=0.15)


CLAIM = ManifestClaim(IN_PROGRESS_ROOT, 100, 16384, b"v")


def _vouch(pid: bytes) -> Vouch:
    return Vouch.seen(CLAIM, pid, "11.0.0.1", frozenset())


@pytest.mark.parametrize("params", [OURS, MAINLINE], ids=lambda p: p.name)
@pytest.mark.parametrize("step, seen", [
    ("before", 0),  # a put is invisible until its announce latency is over
    ("after", 1),
    ("withdrawn", 0),  # a withdrawal hides it, once it is visible itself
    ("expired", 0),  # an in-progress claim lives claim_ttl
])
def test_dht_records_visibility(params, step, seen):
    dht = Dht(params, random.Random(2))
    dht.put(b"p", _vouch(b"p"), 0.0, claim=True)
    at = {"before": params.announce_min - 0.01, "after": params.announce_max + 0.01,
          "withdrawn": 2 * params.announce_max + 1, "expired": params.announce_max + params.claim_ttl + 1}[step]
    if step == "withdrawn":
        dht.put(b"p", None, params.announce_max, claim=True)
    assert len(dht.vouches(at)) == seen


def test_dht_providers_appear_after_their_announcement_a_sample_of_them():
    dht = Dht(OURS, random.Random(3))
    for i in range(100):
        dht.announce(Provider(bytes([i]), f"n{i}", 1, 1), float(i))
    assert dht.providers(0.2, 9) == []
    assert len(dht.providers(50.0, 9)) == 9
    assert {p.host for p in dht.providers(1000.0, 200)} == {f"n{i}" for i in range(100)}


@pytest.mark.parametrize("busy_at, max_connections, hinted", [
    (None, 256, [False, False, False]),  # no plugin: never
    (1, 256, [True, True, True]),  # every GET counts itself
    (2, 256, [False, True, True]),  # the lab's: from the second in flight
    (3, 256, [False, False, True]),
    # One slot: the second is answered when the first is done, the third waiting for the slot counts for it (the
    # middleware runs before SlowOrigin's semaphore); the third is answered alone
    (2, 1, [False, True, False]),
])
def test_origin_hints_from_busy_at_gets_in_flight(busy_at, max_connections, hinted):
    """server_plugin's `Publisher.busy`: a head carries `Swarm-Hint` when `busy_at` GETs are in flight, itself
    included, counted from the middleware on."""
    clock, origin = _origin(busy_at=busy_at, max_connections=max_connections)
    got = [_client(clock, origin, f"c{i}", at=0.001 * i) for i in range(3)]
    clock.run()
    assert [g["conn"].hinted for g in got] == hinted
    assert all(bytes(g["bytes"]) == origin.data for g in got)  # a hint changes nothing the origin sends


# server_plugin's hold (`Publisher.hold`, 1 s here): a hinted GET that said it leaves at the hint (`accepts`) gets its
# head at once (0.1 s) and its body only once the hold is over (1.075 s at the origin), unless its client's FIN came
# first. A GET that did not say so, or one not hinted, gets its body at once.
@pytest.mark.parametrize("busy_at, accepts, leaves, first_byte, sent, left_in_hold", [
    (1, True, 0.1, None, 0, 1),  # left at its head: its FIN at 0.125, nothing sent, its slot freed
    (1, True, None, 1.1, 100_000, 0),  # stayed: its body after the hold
    (1, True, 1.5, 1.1, None, 0),  # left after the hold: it got chunks before its FIN came
    (1, False, None, 0.1, 100_000, 0),  # did not say it leaves
    (2, True, None, 0.1, 100_000, 0),  # not busy: no hint, nothing to hold
])
def test_a_hinted_body_is_held_for_a_client_that_leaves_at_the_hint(busy_at, accepts, leaves, first_byte, sent,
                                                                     left_in_hold):
    clock, origin = _origin(busy_at=busy_at, body_hold=1.0)
    first: list[float] = []
    got = _client(clock, origin, "c", accepts=accepts)
    clock.at(0.0, lambda: got["conn"].__setattr__("on_data", lambda piece: first.append(clock.now)))
    if leaves is not None:
        clock.at(leaves, lambda: origin.close(got["conn"], clock.now))
    clock.run()
    expected = None if first_byte is None else pytest.approx(first_byte, abs=0.02)  # + 16 KiB at 1.25 MB/s
    assert (first[0] if first else None) == expected
    if sent is not None:
        assert origin.bytes_sent == sent
    assert (origin.held, origin.left_in_hold) == (int(busy_at == 1 and accepts), left_in_hold)
    assert origin.active == 0



def test_a_hinted_head_lists_the_clients_hinted_before():
    """With the plugin's peer list (its real `PeerPool`): a hinted GET that leaves at the hint names its address
    and port and is listed to the next; one that does not leave, or names nothing, is not."""
    clock, links = Clock(), Links(NetParams(delay=0.025))
    origin = Origin(clock, links, "origin", bytes(1000), busy_at=1, body_hold=1.0,
                    peers=PeerPool(rng=random.Random(1)))
    kinds = [dict(accepts=True, peer=("11.0.0.1", 0)), dict(accepts=True, peer=("11.0.1.1", 1)),
             dict(accepts=False, peer=None), dict(accepts=True, peer=None), dict(accepts=True, peer=("11.0.4.1", 4))]
    got = [_client(clock, origin, f"c{i}", at=0.001 * i, **kind) for i, kind in enumerate(kinds)]
    clock.run()
    assert [sorted(g["conn"].listed) for g in got] == [
        [], [("11.0.0.1", 0)], [], [("11.0.0.1", 0), ("11.0.1.1", 1)], [("11.0.0.1", 0), ("11.0.1.1", 1)]]
