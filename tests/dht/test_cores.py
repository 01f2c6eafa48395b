"""Pure cores of the network layer: wire codec, admission, lookup state machine, announcement schedule."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dht.admission import RateLimiter, TokenBucket, WriteTokens
from dht.announcements import AnnouncementSchedule
from dht.errors import MalformedMessage
from dht.lookup import Lookup
from dht.wire import (
    MAX_CONTACTS,
    MAX_DATAGRAM_BYTES,
    Contact,
    Message,
    MessageType,
    Method,
    decode_message,
    encode_message,
)

NID = b"\x01" * 20
TX = b"t" * 8
CONTACTS = [Contact(bytes([i]) * 20, f"10.0.0.{i}", 1000 + i) for i in range(1, 6)] + [
    Contact(b"\x09" * 20, "2001:db8::9", 9)
]

# ------------------------------------------------------------------------------------------------------- wire

ROUND_TRIP = [
    Message(MessageType.REQUEST, TX, Method.PING, NID),
    Message(MessageType.RESPONSE, TX, Method.PING, NID),
    Message(MessageType.RESPONSE, TX, Method.PING, NID, observed=("198.51.100.7", 6881)),
    Message(MessageType.RESPONSE, TX, Method.PING, NID, observed=("2001:db8::7", 6881)),
    Message(MessageType.REQUEST, TX, Method.FIND_NODE, NID, target=b"\x02" * 20),
    Message(MessageType.RESPONSE, TX, Method.FIND_NODE, NID, token=b"k" * 8, contacts=CONTACTS),
    Message(MessageType.REQUEST, TX, Method.FIND_PROVIDERS, NID, target=b"\x03" * 32),
    Message(MessageType.RESPONSE, TX, Method.FIND_PROVIDERS, NID, token=b"k" * 8, contacts=CONTACTS,
            records=[b"r" * 150, b"s" * 10, b"t" * 20], observed_from=["198.51.100.7", None, "2001:db8::7"]),
    Message(MessageType.REQUEST, TX, Method.GET_RECORDS, NID, target=b"\x04" * 32),
    Message(MessageType.RESPONSE, TX, Method.GET_RECORDS, NID, token=b"k" * 8),
    Message(MessageType.RESPONSE, TX, Method.GET_RECORDS, NID, token=b"k" * 8, records=[b"m" * 404],
            observed_from=[None]),
    Message(MessageType.REQUEST, TX, Method.ANNOUNCE, NID, token=b"k" * 8, record=b"x" * 160),
    Message(MessageType.RESPONSE, TX, Method.ANNOUNCE, NID, status=3),
    Message(MessageType.REQUEST, TX, Method.PUT_RECORD, NID, token=b"k" * 8, record=b"x" * 400),
    Message(MessageType.RESPONSE, TX, Method.PUT_RECORD, NID, status=0),
    Message(MessageType.ERROR, TX, Method.ANNOUNCE, NID, status=2),
]


@pytest.mark.parametrize("message", ROUND_TRIP, ids=lambda m: f"{m.type.name}-{m.method.name}")
def test_wire_round_trip(message):
    assert decode_message(encode_message(message)) == message


def sample(type_: MessageType, method: Method) -> bytes:
    return encode_message(next(m for m in ROUND_TRIP if m.type == type_ and m.method == method))


PING = sample(MessageType.REQUEST, Method.PING)
FIND = sample(MessageType.RESPONSE, Method.FIND_NODE)
ANNOUNCE = sample(MessageType.REQUEST, Method.ANNOUNCE)
MALFORMED = {
    "empty": b"",
    "short": PING[:10],
    "bad magic": b"XPD" + PING[3:],
    "bad version": PING[:3] + b"\x01" + PING[4:],  # version 1 carried no observed addresses
    "bad type": PING[:4] + b"\x07" + PING[5:],
    "bad method": PING[:13] + b"\x63" + PING[14:],
    "trailing bytes": PING + b"\x00",
    "truncated contacts": FIND[:-3],
    "too many contacts": FIND[:42] + bytes([MAX_CONTACTS + 1]) + FIND[43:],
    "bad family": FIND[:43 + 20] + b"\x05" + FIND[43 + 21:],
    "oversized": PING + b"\x00" * MAX_DATAGRAM_BYTES,
    "find_node target short": sample(MessageType.REQUEST, Method.FIND_NODE)[:-1],
    "announce without record": ANNOUNCE[:42],
    "announce record oversized": ANNOUNCE + b"x" * 400,
    "ping observed bad family": sample(MessageType.RESPONSE, Method.PING)[:34] + b"\x05" + b"\x00" * 6,
    "ping observed truncated": encode_message(ROUND_TRIP[2])[:-1],
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_wire_rejects_malformed(name):
    with pytest.raises(MalformedMessage):
        decode_message(MALFORMED[name])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=MAX_DATAGRAM_BYTES + 10))
def test_wire_random_bytes_only_raise_malformed(data):
    try:
        decode_message(data)
    except MalformedMessage:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([encode_message(m) for m in ROUND_TRIP]), st.data())
def test_wire_mutations_only_raise_malformed(valid, data):
    position = data.draw(st.integers(0, len(valid) - 1))
    mutated = bytearray(valid)
    mutated[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(valid)))
    for candidate in (bytes(mutated), bytes(mutated[:cut])):
        try:
            decode_message(candidate)
        except MalformedMessage:
            pass


def test_encode_refuses_oversized():
    message = Message(MessageType.RESPONSE, TX, Method.FIND_PROVIDERS, NID, token=b"k" * 8,
                      records=[b"r" * 500] * 3)
    with pytest.raises(ValueError):
        encode_message(message)


# -------------------------------------------------------------------------------------------------- admission


def test_token_bucket():
    bucket = TokenBucket(rate=2, burst=3, tokens=3, updated=0)
    assert [bucket.allow(0) for _ in range(4)] == [True, True, True, False]
    assert bucket.allow(0.5) and not bucket.allow(0.5)
    assert bucket.allow(100) and bucket.tokens == 2  # refill capped at burst


def test_rate_limiter_is_per_source_and_bounded():
    limiter = RateLimiter(rate=1, burst=2, max_sources=3)
    assert [limiter.allow("a", 0) for _ in range(3)] == [True, True, False]
    assert limiter.allow("b", 0)  # another source is unaffected
    for source in "cdefg":
        limiter.allow(source, 0)
    assert len(limiter) == 3


def test_write_tokens_bound_to_ip_and_rotate():
    tokens = WriteTokens(now=0, rotate_every_s=10)
    token = tokens.issue("192.0.2.1", 0)
    assert tokens.check("192.0.2.1", token, 1)
    assert not tokens.check("192.0.2.2", token, 1)
    assert tokens.check("192.0.2.1", token, 12)  # previous secret still accepted after one rotation
    assert not tokens.check("192.0.2.1", token, 25)  # gone after two


# ----------------------------------------------------------------------------------------------------- lookup


def contact(n: int) -> Contact:
    return Contact(n.to_bytes(20, "big"), "127.0.0.1", 1000 + n)


def test_lookup_queries_alpha_closest_first_and_terminates():
    target = (0).to_bytes(20, "big")
    lookup = Lookup.start(target, [contact(n) for n in (50, 40, 30, 20, 10)], k=3, alpha=2, deadline=100)
    first = lookup.next_queries(0)
    assert first == [contact(10), contact(20)]
    assert lookup.next_queries(0) == []  # alpha in flight
    lookup.on_reply(contact(10), [contact(5), contact(15)], b"tok")
    assert lookup.next_queries(0) == [contact(5)]
    lookup.on_failure(contact(20))
    assert lookup.next_queries(0) == [contact(15)]
    lookup.on_reply(contact(5), [])
    lookup.on_reply(contact(15), [])
    assert lookup.finished(0)
    assert [c for c, _ in lookup.result()] == [contact(5), contact(10), contact(15)]
    assert dict(lookup.result())[contact(10)] == b"tok"


def test_a_converged_lookup_asks_the_rest_of_the_k_closest_at_once():
    """Kademlia's final round: once a reply brings nothing closer than what is known, every one of the k closest not
    asked yet is asked at once, not alpha at a time (the lookup must hear from all of them before it ends)."""
    target = (0).to_bytes(20, "big")
    lookup = Lookup.start(target, [contact(n) for n in (60, 50, 40, 30, 20)], k=5, alpha=2, deadline=100)
    assert lookup.next_queries(0) == [contact(20), contact(30)]
    lookup.on_reply(contact(20), [contact(10), contact(70)])  # closer than anything known: still alpha at a time
    assert not lookup.converged
    assert lookup.next_queries(0) == [contact(10)]
    lookup.on_reply(contact(10), [contact(15), contact(25)])  # nothing closer than 10: converged
    assert lookup.converged
    # the k closest are 10, 15, 20, 25, 30: 15 and 25 not asked yet, asked together (30 is still in flight)
    assert lookup.next_queries(0) == [contact(15), contact(25)]
    lookup.on_reply(contact(15), [contact(5)])  # a closer one found later is asked at once too
    assert lookup.next_queries(0) == [contact(5)]
    for n in (25, 30, 5):
        lookup.on_reply(contact(n), [])
    assert lookup.finished(0)
    assert [c for c, _ in lookup.result()] == [contact(n) for n in (5, 10, 15, 20, 25)]


@pytest.mark.parametrize("first_reply, converged", [
    ([], True),  # nothing new at all
    ([31], True),  # only farther ones
    ([19], False),  # one closer than the closest known (20)
])
def test_lookup_converges_on_the_first_reply_that_brings_nothing_closer(first_reply, converged):
    lookup = Lookup.start((0).to_bytes(20, "big"), [contact(n) for n in (20, 30)], k=4, alpha=1, deadline=10)
    assert lookup.next_queries(0) == [contact(20)]
    lookup.on_reply(contact(20), [contact(n) for n in first_reply])
    assert lookup.converged is converged


def test_lookup_deadline_and_empty():
    lookup = Lookup.start(bytes(20), [contact(1)], k=3, alpha=3, deadline=5)
    assert lookup.next_queries(0) == [contact(1)]
    assert not lookup.finished(4.9)
    assert lookup.finished(5) and lookup.next_queries(5) == []
    assert Lookup.start(bytes(20), [], k=3, alpha=3, deadline=5).finished(0)


def test_a_resumed_lookup_asks_again_what_was_in_flight_and_keeps_what_replied():
    lookup = Lookup.start(bytes(20), [contact(n) for n in (10, 20, 30)], k=3, alpha=2, deadline=5)
    assert lookup.next_queries(0) == [contact(10), contact(20)]
    lookup.on_reply(contact(10), [], b"t10")  # then the driver stopped, contact(20) still in flight
    assert lookup.finished(5)
    lookup.resume(deadline=20)
    assert not lookup.finished(6)
    assert lookup.next_queries(6) == [contact(20), contact(30)]
    lookup.on_reply(contact(20), [], b"t20")
    lookup.on_reply(contact(30), [], b"t30")
    assert lookup.finished(6)
    assert lookup.result() == [(contact(10), b"t10"), (contact(20), b"t20"), (contact(30), b"t30")]


def settled_lookup(k: int = 3) -> Lookup:
    """A lookup of target 0 that converged and heard from its k closest: 10, 20, 30."""
    lookup = Lookup.start(bytes(20), [contact(n) for n in (10, 20, 30, 40)], k=k, alpha=2, deadline=5)
    lookup.next_queries(0)
    lookup.on_reply(contact(10), [])  # nothing closer: converged
    lookup.next_queries(0)
    for n in (20, 30):
        lookup.on_reply(contact(n), [])
    return lookup


@pytest.mark.parametrize("how, settled, first_asked", [
    ("ran to the end", True, [10, 20, 30]),  # its k closest again, all at once
    ("stopped in flight", False, [10, 20]),  # a walk, alpha at a time, from what it heard
    ("never converged", False, [10, 20]),
])
def test_a_lookup_again_asks_a_settled_ones_closest_at_once_else_walks(how, settled, first_asked):
    if how == "ran to the end":
        previous = settled_lookup()
    elif how == "stopped in flight":
        previous = Lookup.start(bytes(20), [contact(n) for n in (10, 20, 30)], k=3, alpha=2, deadline=5)
        previous.next_queries(0)
        previous.on_reply(contact(10), [])  # converged, but 20 still in flight and 30 never asked
    else:
        previous = Lookup.start(bytes(20), [contact(n) for n in (10, 20)], k=3, alpha=1, deadline=5)
        previous.next_queries(0)
        previous.on_reply(contact(10), [contact(5)])  # brought a closer one
    assert previous.settled() is settled
    again = Lookup.again(previous, [contact(n) for n in (20, 40)], k=3, alpha=2, deadline=10)
    assert again.next_queries(1) == [contact(n) for n in first_asked]
    assert again.target == previous.target and again.deadline == 10


def test_a_lookup_again_replaces_a_dead_closest_and_asks_nearer_ones_it_hears_of():
    again = Lookup.again(settled_lookup(), [contact(40)], k=3, alpha=1, deadline=10)
    assert again.next_queries(0) == [contact(10), contact(20), contact(30)]
    again.on_failure(contact(30))  # gone since: the next known one takes its place at once
    assert again.next_queries(0) == [contact(40)]
    again.on_reply(contact(10), [contact(5)])  # a nearer node joined: asked at once too
    assert again.next_queries(0) == [contact(5)]
    for n in (20, 40, 5):
        again.on_reply(contact(n), [])
    assert again.finished(0) and again.settled()
    assert [c for c, _ in again.result()] == [contact(5), contact(10), contact(20)]


@pytest.mark.parametrize("slack, replied, finished", [
    (0, (10, 20, 30), False),  # a write hears from all k closest
    (1, (10, 20, 30), True),  # a read may leave one straggler
    (1, (10, 20), False),  # ... not two
    (2, (10, 20), True),
])
def test_a_read_ends_without_its_last_stragglers_once_converged(slack, replied, finished):
    lookup = Lookup.start(bytes(20), [contact(n) for n in (10, 20, 30, 40)], k=4, alpha=4, deadline=5)
    lookup.slack = slack
    assert lookup.next_queries(0) == [contact(n) for n in (10, 20, 30, 40)]
    for n in replied:
        lookup.on_reply(contact(n), [])  # nothing closer: converged
    assert lookup.converged and lookup.finished(1) is finished and lookup.settled() is finished
    assert [c for c, _ in lookup.result()] == [contact(n) for n in replied]


def test_a_read_still_waits_for_contacts_it_has_not_asked_and_a_resumed_write_for_all():
    lookup = Lookup.start(bytes(20), [contact(n) for n in (10, 20, 30)], k=3, alpha=1, deadline=5)
    lookup.slack = 2
    assert lookup.next_queries(0) == [contact(10)]
    lookup.on_reply(contact(10), [])  # converged: 20 and 30 asked next, not skipped
    assert not lookup.finished(0)
    assert lookup.next_queries(0) == [contact(20), contact(30)]
    lookup.on_reply(contact(20), [])
    assert lookup.finished(0)  # 30 is a straggler
    lookup.resume(deadline=10)  # a write goes on from it: 30 is asked again and waited for
    assert lookup.slack == 0 and not lookup.finished(1) and lookup.next_queries(1) == [contact(30)]


def test_lookup_ignores_self_and_bad_ids_and_bounds_candidates():
    lookup = Lookup.start(bytes(20), [], k=3, alpha=3, deadline=5, self_id=contact(1).node_id)
    lookup.add_contacts([contact(1), Contact(b"short", "127.0.0.1", 1)])
    assert lookup.next_queries(0) == []
    lookup.add_contacts(contact(n) for n in range(2, 1000))
    assert len(lookup._candidates) <= lookup.max_candidates


# ----------------------------------------------------------------------------------------------- announcements


def test_announcement_schedule_refreshes_before_expiry():
    schedule = AnnouncementSchedule(refresh_fraction=0.5)
    schedule.add(1, b"a", {}, ttl_s=100, now=0)
    schedule.add(1, b"b", {}, ttl_s=40, now=0)
    assert schedule.next_deadline() == 20
    assert [e.key for e in schedule.due(19)] == []
    assert [e.key for e in schedule.due(20)] == [b"b"]
    assert schedule.next_deadline() == 40
    assert sorted(e.key for e in schedule.due(50)) == [b"a", b"b"]
    assert schedule.remove(1, b"a") is not None
    assert [e.key for e in schedule.due(1000)] == [b"b"]
    assert (1, b"a") not in schedule and len(schedule) == 1


def test_a_record_on_too_few_storers_is_published_again_once_the_table_grows():
    schedule = AnnouncementSchedule()
    schedule.add(2, b"thin", {}, ttl_s=3600, now=0)
    schedule.add(2, b"full", {}, ttl_s=3600, now=0)
    schedule.published(2, b"thin", stored=3, wanted=20, table_size=3)
    schedule.published(2, b"full", stored=20, wanted=20, table_size=3)
    assert schedule.grown(3) == []  # nobody new to give it to
    assert [e.key for e in schedule.grown(5)] == [b"thin"]
    assert schedule.grown(9) == []  # asked for once: the next `published` says whether it is still thin
    schedule.published(2, b"thin", stored=9, wanted=20, table_size=9)
    assert [e.key for e in schedule.grown(10)] == [b"thin"]
    schedule.published(2, b"thin", stored=20, wanted=20, table_size=40)
    assert schedule.grown(400) == []
    schedule.published(2, b"thin", stored=12, wanted=20, table_size=40)  # eight of the closest did not answer
    assert schedule.grown(400) == []  # not worth a republish: the refresh comes anyway
    schedule.published(2, b"thin", stored=9, wanted=20, table_size=40)  # most of them did not: worth one
    assert [e.key for e in schedule.grown(41)] == [b"thin"]
    schedule.published(2, b"gone", stored=1, wanted=20, table_size=1)  # not announced: ignored


def test_announcement_readd_replaces():
    schedule = AnnouncementSchedule()
    schedule.add(1, b"a", {"port": 1}, ttl_s=10, now=0)
    schedule.add(1, b"a", {"port": 2}, ttl_s=10, now=3)
    due = schedule.due(100)
    assert [e.params["port"] for e in due] == [2]

