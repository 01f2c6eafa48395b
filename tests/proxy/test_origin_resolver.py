"""The rebinding rule as pure decisions (`proxy.exposure`), the resolver that applies it (`proxy.origin_resolver`),
the sharing rule (`may_share`) and the address a connection really went to (`proxy.origin.connected_address`).
Every name is answered by a `StaticResolver`: nothing here asks real DNS or leaves loopback."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from proxy.errors import OriginError
from proxy.exposure import is_local_name, may_share, may_swarm_name, rebinding_refusal, screen
from proxy.origin import OriginStream, connected_address, describe_failure, make_session
from proxy.origin_resolver import OriginResolver, RebindingRefused, StaticResolver

PUBLIC_V4, PUBLIC_V6 = "93.184.216.34", "2606:2800:220:1::1"


@pytest.mark.parametrize("host,local", [
    ("localhost", True), ("LOCALHOST.", True), ("app.localhost", True), ("nas", True), ("nas.", True),
    ("printer.local", True), ("db.internal", True), ("router.lan", True), ("nas.home.arpa", True),
    ("127.0.0.1", True), ("10.1.2.3", True), ("::1", True), ("[::1]", True), ("fe80::1%eth0", True),
    ("example.com", False), ("localhost.evil.example", False), ("evil-local", True), ("evil.localhost.com", False),
    ("notlocal", True), ("x.notlocal", False), ("home.arpa.evil.example", False), ("127.0.0.1.nip.io", False),
])
def test_which_names_are_local_by_themselves(host, local):
    assert is_local_name(host) is local


def test_local_domains_cover_their_names_and_nothing_beside():
    domains = ("corp.example.com",)
    assert is_local_name("wiki.corp.example.com", domains)
    assert is_local_name("corp.example.com", domains)
    assert is_local_name("Deep.Wiki.Corp.Example.Com.", domains)
    assert not is_local_name("evilcorp.example.com", domains)
    assert not is_local_name("example.com", domains)


# (host, port, resolved, local_domains, origins) -> (kept, refused) indexes
@pytest.mark.parametrize("host,port,resolved,domains,origins,kept,refused", [
    ("rebind.example", 80, ["127.0.0.1"], (), (), [], [0]),
    ("rebind.example", 80, ["10.0.0.7"], (), (), [], [0]),
    ("rebind.example", 80, ["192.168.1.1"], (), (), [], [0]),
    ("rebind.example", 80, ["100.64.0.1"], (), (), [], [0]),  # carrier-grade NAT: private
    ("rebind.example", 80, ["169.254.169.254"], (), (), [], [0]),  # the cloud metadata service
    ("rebind.example", 80, ["0.0.0.0"], (), (), [], [0]),  # "0.0.0.0 day": reaches this machine on Linux
    ("rebind.example", 80, ["::1"], (), (), [], [0]),
    ("rebind.example", 80, ["::ffff:127.0.0.1"], (), (), [], [0]),  # mapped: still loopback
    ("rebind.example", 80, ["fd00::7"], (), (), [], [0]),
    ("rebind.example", 80, ["fe80::1%eth0"], (), (), [], [0]),
    ("rebind.example", 80, ["64:ff9b::7f00:1"], (), (), [], [0]),  # NAT64 of 127.0.0.1
    ("rebind.example", 80, [PUBLIC_V4, "127.0.0.1"], (), (), [0], [1]),  # a mixed answer keeps the public one
    ("www.example.com", 443, [PUBLIC_V4, PUBLIC_V6], (), (), [0, 1], []),
    ("localhost", 80, ["127.0.0.1", "::1"], (), (), [0, 1], []),
    ("nas", 80, ["192.168.1.5"], (), (), [0], []),
    ("wiki.corp.example.com", 80, ["10.0.0.7"], (), (), [], [0]),
    ("wiki.corp.example.com", 80, ["10.0.0.7"], ("corp.example.com",), (), [0], []),
    ("mirror.example.com", 8080, ["10.0.0.5"], (), (("10.0.0.5", 8080),), [0], []),
    ("mirror.example.com", 8080, ["10.0.0.5"], (), (("10.0.0.5", None),), [0], []),
    ("mirror.example.com", 80, ["10.0.0.5"], (), (("10.0.0.5", 8080),), [], [0]),  # another port: not listed
    ("mirror.example.com", 80, ["::ffff:10.0.0.5"], (), (("10.0.0.5", None),), [0], []),
])
def test_screen(host, port, resolved, domains, origins, kept, refused):
    assert screen(host, port, resolved, local_domains=domains, origins=origins) == (kept, refused)


def test_the_refusal_names_the_host_the_address_and_both_ways_to_allow_it():
    text = rebinding_refusal("wiki.corp.example.com", 8080, ["10.0.0.7"])
    assert text.startswith("forbidden: wiki.corp.example.com resolved to 10.0.0.7 (a private address)")
    assert "DNS rebinding" in text
    assert "--local-domains wiki.corp.example.com" in text
    assert "--share-private-origins 10.0.0.7:8080" in text
    assert "--share-private-origins [::1]:80" in rebinding_refusal("x.example", 80, ["::1"])


@pytest.mark.parametrize("address,port,origins,shared", [
    (PUBLIC_V4, 80, (), True),
    (PUBLIC_V6, 443, (), True),
    ("::ffff:" + PUBLIC_V4, 80, (), True),
    (None, 80, (), False),  # unknown: never
    ("not-an-address", 80, (), False),
    ("127.0.0.1", 80, (), False),
    ("10.0.0.5", 80, (), False),
    ("169.254.1.1", 80, (), False),
    ("0.0.0.0", 80, (), False),
    ("192.0.2.1", 80, (), False),  # documentation: special
    ("fd00::7", 80, (), False),
    ("10.0.0.5", 80, (("10.0.0.5", None),), True),
    ("10.0.0.5", 8080, (("10.0.0.5", 8080),), True),
    ("10.0.0.5", 80, (("10.0.0.5", 8080),), False),
    ("10.0.0.6", 80, (("10.0.0.5", None),), False),
    ("::ffff:127.0.0.1", 80, (("127.0.0.1", 80),), True),
    ("fd00::7", 80, (("fd00::7", 80),), True),
    ("fd00:0::7", 80, (("fd00::7", None),), True),
])
def test_may_share(address, port, origins, shared):
    assert may_share(address, port, origins) is shared


@pytest.mark.parametrize("host, port, local_domains, origins, early", [
    ("downloads.example.com", 80, (), (), True),  # a public name reaches public (or listed) addresses only
    (PUBLIC_V4, 80, (), (), True),
    ("localhost", 80, (), (("127.0.0.1", None),), False),  # a local name: its head says where it went
    ("nas", 80, (), (), False),
    ("printer.lan", 80, (), (), False),
    ("wiki.corp.example.com", 80, ("corp.example.com",), (), False),  # may resolve to a private address
    ("127.0.0.1", 80, (), (), False),
    ("127.0.0.1", 80, (), (("127.0.0.1", None),), True),  # listed: the user shares it
    ("10.0.0.5", 8080, (), (("10.0.0.5", 80),), False),  # another port than the listed one
    ("198.51.100.7", 80, (), (), False),  # special-purpose: nobody's origin
], ids=str)
def test_which_urls_may_be_looked_up_before_their_head(host, port, local_domains, origins, early):
    assert may_swarm_name(host, port, local_domains, origins) is early


async def test_the_resolver_refuses_a_public_name_that_resolves_only_to_local_addresses():
    base = StaticResolver({"rebind.example": ["127.0.0.1", "::1"]})
    with pytest.raises(RebindingRefused) as caught:
        await OriginResolver(base).resolve("rebind.example", 80, socket.AF_UNSPEC)
    assert "rebind.example resolved to 127.0.0.1, ::1" in caught.value.message
    assert isinstance(caught.value, OSError)


async def test_the_resolver_keeps_only_the_public_addresses_of_a_mixed_answer():
    base = StaticResolver({"mixed.example": ["127.0.0.1", PUBLIC_V4, "10.0.0.1", PUBLIC_V6]})
    found = await OriginResolver(base).resolve("mixed.example", 443, socket.AF_UNSPEC)
    assert [result["host"] for result in found] == [PUBLIC_V4, PUBLIC_V6]
    assert all(result["port"] == 443 for result in found)


async def test_the_resolver_lets_local_names_listed_domains_and_listed_origins_through():
    base = StaticResolver({"app.localhost": ["127.0.0.1"], "wiki.corp.example.com": ["10.0.0.7"],
                           "mirror.example.com": ["10.0.0.5"]})
    resolver = OriginResolver(base, local_domains=("corp.example.com",), origins=(("10.0.0.5", 8080),))
    for host, port in (("app.localhost", 80), ("wiki.corp.example.com", 80), ("mirror.example.com", 8080)):
        assert (await resolver.resolve(host, port, socket.AF_UNSPEC))[0]["hostname"] == host
    with pytest.raises(RebindingRefused):
        await resolver.resolve("mirror.example.com", 80, socket.AF_UNSPEC)


async def test_a_name_is_known_shareable_only_once_it_resolved_to_shareable_addresses():
    """The fallback looks a URL up before its head only when its name led to public (or listed) addresses: an
    intranet's public-looking name, or one whose DNS has not answered yet, never reaches the DHT that early."""
    base = StaticResolver({"files.example": [PUBLIC_V4], "wiki.corp.example.com": ["10.0.0.7"],
                           "mirror.example.com": ["10.0.0.5"], "rebind.example": ["127.0.0.1"]})
    resolver = OriginResolver(base, local_domains=("corp.example.com",), origins=(("10.0.0.5", None),))
    assert not resolver.resolved_shareable("files.example")  # not resolved yet: not known
    for host in ("files.example", "wiki.corp.example.com", "mirror.example.com"):
        await resolver.resolve(host, 80, socket.AF_UNSPEC)
    with pytest.raises(RebindingRefused):
        await resolver.resolve("rebind.example", 80, socket.AF_UNSPEC)
    assert resolver.resolved_shareable("files.example") and resolver.resolved_shareable("mirror.example.com")
    assert not resolver.resolved_shareable("wiki.corp.example.com")  # allowed to connect, never shared
    assert not resolver.resolved_shareable("rebind.example")


async def test_addresses_for_a_tunnel_takes_literals_as_they_are_and_keeps_remote_clients_public():
    base = StaticResolver({})  # a literal is never looked up
    resolver = OriginResolver(base)
    assert [r["host"] for r in await resolver.addresses_for("127.0.0.1", 443, local_client=True)] == ["127.0.0.1"]
    assert [r["family"] for r in await resolver.addresses_for("::1", 443, local_client=True)] == [socket.AF_INET6]
    assert base.asked == []
    with pytest.raises(OriginError) as caught:
        await resolver.addresses_for("10.0.0.1", 443, local_client=False)
    assert caught.value.status == 403 and "internal address" in caught.value.message
    with pytest.raises(RebindingRefused):
        await OriginResolver(StaticResolver({"rebind.example": ["127.0.0.1"]})).addresses_for(
            "rebind.example", 443, local_client=True)


def test_describe_failure_answers_a_refusal_with_403_however_aiohttp_wrapped_it():
    refused = RebindingRefused(rebinding_refusal("rebind.example", 80, ["127.0.0.1"]))
    wrapped = aiohttp.ClientConnectorDNSError(mock_key(), refused)
    for exc in (refused, wrapped):
        error = describe_failure(exc, "rebind.example", None)
        assert error.status == 403 and error.message == refused.message
    unknown = aiohttp.ClientConnectorDNSError(mock_key(), socket.gaierror(socket.EAI_NONAME, "no such name"))
    assert describe_failure(unknown, "nowhere.example", None).status == 502


def mock_key():
    from aiohttp.client_reqrep import ConnectionKey

    return ConnectionKey("rebind.example", 80, False, True, None, None, None)


async def test_make_session_refuses_rebinding_and_never_connects():
    accepted = []

    async def secret_service(reader, writer):
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(secret_service, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    session = make_session(connect_timeout=2, read_timeout=2, max_connections=4,
                           resolver=OriginResolver(StaticResolver({"rebind.example": ["127.0.0.1"]})))
    async with server, session:
        stream = OriginStream(session, f"http://rebind.example:{port}/secret", [])
        kind, error = await stream.next()
        stream.close()
    assert kind == "head_failed"
    assert describe_failure(error, "rebind.example", port).status == 403
    assert stream.connected_address is None
    assert accepted == []  # the refusal came before any connection


@pytest.mark.parametrize("path", ["/bytes/10", "/bytes/0", "/status/204", "/bytes/3000000"])
async def test_connected_address_is_the_socket_peer_over_http(origin, path):
    """Small bodies too: their connection goes back to the pool as the head is read, before anyone could ask it."""
    session = make_session(connect_timeout=2, read_timeout=2, max_connections=4,
                           resolver=OriginResolver(StaticResolver({"localhost": ["127.0.0.1"]})))
    async with session:
        stream = OriginStream(session, f"http://localhost:{origin.port}{path}", [])
        kind, response = await stream.next()
        assert kind == "head"
        assert stream.connected_address == "127.0.0.1"
        while (await stream.next())[0] == "data":
            pass
        assert connected_address(response) == "127.0.0.1"  # still known after the body was read
        stream.close()


async def test_connected_address_over_https(tls_origin):
    session = make_session(connect_timeout=2, read_timeout=2, max_connections=4, ca_file=tls_origin.cert,
                           resolver=OriginResolver(StaticResolver({"localhost": ["127.0.0.1"]})))
    async with session:
        stream = OriginStream(session, f"https://localhost:{tls_origin.port}/bytes/100", [])
        kind, response = await stream.next()
        stream.close()
        assert kind == "head" and response.status == 200
        assert stream.connected_address == "127.0.0.1"


async def test_connected_address_of_a_foreign_response_is_known_only_while_it_holds_its_connection(origin):
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{origin.url}/stream/3000000") as response:
            assert connected_address(response) == "127.0.0.1"
            await response.read()
            assert connected_address(response) is None
