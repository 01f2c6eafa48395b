"""The simulator's models of the links, the origin and the DHT, table by table (virtual time: no sleeps)."""

import random

import pytest

from bench.crowd_sim.events import Clock
from bench.crowd_sim.models import CHUNK, MAINLINE, OURS, Dht, Links, NetParams, Origin, Uplink
from swarm.discovery.seam import Provider
from swarm.trust import IN_PROGRESS_ROOT, ManifestClaim, Vouch

NET = NetParams(delay=0.025, up=1_000_000.0, down=2_000_000.0)


@pytest.mark.parametrize("sends, expected", [
    ([("a", "b", 1000, 0.0)], [0.001 + 0.025]),  # the uplink's serialisation, then the delay
    ([("a", "b", 1000, 0.0), ("a", "c", 1000, 0.0)], [0.026, 0.027]),  # the second waits for a's uplink
    ([("a", "c", 4000, 0.0), ("b", "c", 4000, 0.0)], [0.029, 0.031]),  # both land on c: its downlink queues them
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
    assert landed[1][1] == pytest.approx(0.002 + 0.025)  # the cancelled one took no uplink time
    assert uplink.sent == 2000


def _origin(size=100_000, rate=256_000.0, max_connections=256, busy_at=None):
    clock, links = Clock(), Links(NetParams(delay=0.025))
    return clock, Origin(clock, links, "origin", bytes(range(256)) * (size // 256) + bytes(size % 256), rate=rate,
                         max_connections=max_connections, busy_at=busy_at)


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
