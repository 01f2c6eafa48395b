"""Hostile peers: forged identities, replays, lying replies, junk datagrams and floods."""

from __future__ import annotations

import asyncio
import os
import random
import time

from dht.identity import NodeIdentity
from dht.node import DhtNode
from dht.records import KIND_PROVIDER, ProviderRecord, decode_record
from dht.responder import Responder
from dht.storage import StoreResult
from dht.wire import Contact, ErrorCode, Message, MessageType, Method, decode_message, encode_message

from .conftest import TEST_CONFIG, RawClient, start_swarm, stop_swarm
from .test_network import found_by

ATTACKER_ID = b"\xaa" * 20


def request(method: Method, **fields) -> Message:
    return Message(MessageType.REQUEST, os.urandom(8), method, ATTACKER_ID, **fields)


async def ask(client: RawClient, node: DhtNode, message: Message) -> Message | None:
    client.send(encode_message(message), node.address)
    data = await client.reply()
    return None if data is None else decode_message(data)


async def write_token(client: RawClient, node: DhtNode) -> bytes:
    reply = await ask(client, node, request(Method.FIND_NODE, target=os.urandom(20)))
    return reply.token


async def test_record_under_another_publishers_identity_is_rejected():
    alice, mallory = NodeIdentity.generate(), NodeIdentity.generate()
    nodes = await start_swarm(10)
    client = await RawClient.open()
    try:
        root = os.urandom(32)
        honest = ProviderRecord.create(mallory, root=root, host="127.0.0.1", port=666, now=time.time(), ttl_s=600)
        forged = bytearray(honest.encode())
        forged[2:34] = alice.public_key  # "published by Alice", signed by Mallory
        target = nodes[3]
        token = await write_token(client, target)
        reply = await ask(client, target, request(Method.ANNOUNCE, token=token, record=bytes(forged)))
        assert reply.type == MessageType.RESPONSE and reply.status == StoreResult.BAD_SIGNATURE
        assert target.store.get(KIND_PROVIDER, root, time.time()) == []
        assert not await found_by(nodes[0], root, 666)
    finally:
        client.close()
        await stop_swarm(nodes)


async def test_replayed_old_record_does_not_replace_newer():
    nodes = await start_swarm(10)
    client = await RawClient.open()
    try:
        publisher = nodes[0]
        root = os.urandom(32)
        now = time.time()
        old = ProviderRecord.create(publisher.identity, root=root, host="127.0.0.1", port=1111, now=now - 60,
                                    ttl_s=3600)
        assert await publisher.publish(old) >= 5
        await publisher.announce(root, "127.0.0.1", 2222)  # newer, replaces the old one everywhere
        storers = [n for n in nodes if n.store.get(KIND_PROVIDER, root, time.time())]
        assert storers
        for storer in storers:  # the attacker replays the old bytes with a valid write token
            token = await write_token(client, storer)
            reply = await ask(client, storer, request(Method.ANNOUNCE, token=token, record=old.encode()))
            assert reply.status == StoreResult.STALE
        assert await found_by(nodes[7], root, 2222)
        assert not await found_by(nodes[8], root, 1111)
    finally:
        client.close()
        await stop_swarm(nodes)


async def test_writes_need_a_token_and_the_right_kind():
    nodes = await start_swarm(3)
    client = await RawClient.open()
    try:
        record = ProviderRecord.create(NodeIdentity.generate(), root=os.urandom(32), host="127.0.0.1", port=1,
                                       now=time.time(), ttl_s=60)
        reply = await ask(client, nodes[1], request(Method.ANNOUNCE, token=b"\x00" * 8, record=record.encode()))
        assert reply.type == MessageType.ERROR and reply.status == ErrorCode.BAD_TOKEN
        token = await write_token(client, nodes[1])
        reply = await ask(client, nodes[1], request(Method.PUT_RECORD, token=token, record=record.encode()))
        assert reply.type == MessageType.ERROR and reply.status == ErrorCode.WRONG_KIND
        reply = await ask(client, nodes[1], request(Method.ANNOUNCE, token=token, record=b"\x01" * 100))
        assert reply.type == MessageType.ERROR and reply.status == ErrorCode.MALFORMED
    finally:
        client.close()
        await stop_swarm(nodes)


class LyingResponder(Responder):
    """Answers provider lookups with records it forged or tampered with, for any key asked."""

    def _answer_read(self, request, address, kind, now, monotonic):
        reply = super()._answer_read(request, address, kind, now, monotonic)
        victim = NodeIdentity.generate()
        forged = bytearray(ProviderRecord.create(victim, root=request.target, host="127.0.0.1", port=6666,
                                                 now=time.time(), ttl_s=600).encode())
        forged[-1] ^= 1  # bad signature
        other_key = ProviderRecord.create(self.node.identity, root=os.urandom(32), host="127.0.0.1", port=6667,
                                          now=time.time(), ttl_s=600).encode()  # valid, but for another root
        reply.records = [bytes(forged), other_key, b"\x01junk"] + reply.records[:2]
        return reply


async def test_lying_replies_are_filtered_and_counted():
    nodes = await start_swarm(8)
    liar = DhtNode(NodeIdentity.generate(), TEST_CONFIG)
    liar.responder = LyingResponder(liar)
    await liar.start("127.0.0.1", 0, maintenance=False)
    try:
        await liar.bootstrap([nodes[0].address])
        root = os.urandom(32)
        await nodes[1].announce(root, "127.0.0.1", 7777)
        asker = nodes[5]
        asker.routing.add(Contact(liar.node_id, *liar.address), asker.monotonic())  # make sure the liar gets asked
        ports = [r.port async for r in asker.find_providers(root)]
        assert ports == [7777]
        assert asker.counters["bad_records_received"] >= 3
    finally:
        await liar.stop()
        await stop_swarm(nodes)


async def test_junk_datagrams_and_a_flood_do_not_stop_a_node():
    from dataclasses import replace

    nodes = await start_swarm(6, config=replace(TEST_CONFIG, request_rate=50.0, request_burst=100.0))
    target, bystander = nodes[0], nodes[1]
    client = await RawClient.open()
    rng = random.Random(1)
    try:
        valid_ping = encode_message(request(Method.PING))
        junk = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300))) for _ in range(300)]
        junk += [b"", b"SPD\x01", valid_ping[:-1] + b"", valid_ping + b"\x00", b"\x00" * 65_000, b"SPD\x01" * 350]
        junk += [valid_ping[:4] + bytes([t]) + valid_ping[5:] for t in range(3, 256, 17)]  # wrong message types
        junk += [valid_ping[:13] + bytes([m]) + valid_ping[14:] for m in (0, 7, 99, 255)]  # unknown methods
        # wrong argument types: a FIND_NODE carrying a 32-byte key, a GET_RECORDS carrying a 20-byte id
        junk += [encode_message(request(Method.FIND_NODE, target=b"x" * 20))[:-20] + b"x" * 32]
        junk += [encode_message(request(Method.GET_RECORDS, target=b"x" * 32))[:-32] + b"x" * 20]
        # oversized values: a record over the 512-byte record cap inside a datagram under the 1,400-byte cap
        junk += [encode_message(request(Method.ANNOUNCE, token=b"k" * 8, record=b"x" * 500)) + b"x" * 100]
        # an unsolicited "response" that matches nothing we asked
        junk += [encode_message(Message(MessageType.RESPONSE, os.urandom(8), Method.PING, ATTACKER_ID))]
        for data in junk:
            client.send(data, target.address)

        async def flood():
            # Valid requests from one address, far past its rate limit. Yielding every 100 datagrams only lets
            # the loop run (one process plays both sides); the flood is still ~100x the allowed rate.
            for _burst in range(40):
                for _ in range(100):
                    client.send(valid_ping, target.address)
                await asyncio.sleep(0)

        async def ping_with_retries(attempts: int = 5) -> bytes | None:
            # Under a flood the kernel itself drops datagrams when the socket buffer is full, before any code of
            # ours runs; a real client retries (or asks another node). What we require is that the target is
            # alive and answering others, not that no datagram of theirs is ever lost.
            for _ in range(attempts):
                answer = await bystander.ping(target.address)
                if answer is not None:
                    return answer
            return None

        flooding = asyncio.create_task(flood())
        during = await ping_with_retries()
        await flooding
        after = await ping_with_retries()  # queued behind the flood: the target got through it
        assert during == after == target.node_id

        counters = target._protocol.counters
        assert counters["handler_errors"] == 0
        assert counters["dropped_malformed"] >= 250
        assert counters["dropped_oversized"] >= 1
        assert counters["dropped_unexpected_reply"] >= 1
        assert counters["dropped_rate_limited"] > 0
        assert target.stats()["dropped_datagrams"] >= 250
        assert target.running

        # The node still works for everyone: lookups through it succeed.
        root = os.urandom(32)
        await nodes[2].announce(root, "127.0.0.1", 3333)
        assert await found_by(target, root, 3333)
        assert await found_by(nodes[3], root, 3333)
    finally:
        client.close()
        await stop_swarm(nodes)


async def test_handler_bug_is_contained():
    nodes = await start_swarm(3)
    client = await RawClient.open()
    try:
        target = nodes[0]

        def broken(message, address):
            raise RuntimeError("bug in a handler")

        original = target.handle_request
        target.handle_request = broken  # type: ignore[method-assign]
        client.send(encode_message(request(Method.PING)), target.address)
        assert await client.reply(timeout=0.3) is None  # no answer, but no crash
        assert target._protocol.counters["handler_errors"] == 1
        target.handle_request = original  # type: ignore[method-assign]
        assert await nodes[1].ping(target.address) == target.node_id
    finally:
        client.close()
        await stop_swarm(nodes)


async def test_store_caps_hold_against_one_source():
    """One address cannot fill a node's store: it hits the per-source cap and nobody else is affected."""
    from dataclasses import replace

    from dht.storage import StoreLimits

    config = replace(TEST_CONFIG, store_limits=StoreLimits(per_source=5))
    nodes = await start_swarm(3, config=config)
    client = await RawClient.open()
    try:
        target = nodes[0]
        token = await write_token(client, target)
        statuses = []
        for _ in range(8):
            record = ProviderRecord.create(NodeIdentity.generate(), root=os.urandom(32), host="127.0.0.1",
                                           port=1, now=time.time(), ttl_s=60)
            statuses.append((await ask(client, target, request(Method.ANNOUNCE, token=token,
                                                               record=record.encode()))).status)
        assert statuses.count(StoreResult.STORED) == 5
        assert statuses.count(StoreResult.SOURCE_FULL) == 3
        root = os.urandom(32)
        assert await nodes[1].announce(root, "127.0.0.1", 1234) >= 2
        assert await found_by(nodes[2], root, 1234)
        assert decode_record(target.store.get(KIND_PROVIDER, root, time.time())[0].encode()).port == 1234
    finally:
        client.close()
        await stop_swarm(nodes)
