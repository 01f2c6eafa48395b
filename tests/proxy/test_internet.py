"""The Internet mode in the proxy (`proxy.internet`): when the node joins which network, what it says of it, and a
root shared by one proxy found by another through a Mainline DHT of stock libtorrent nodes on this machine."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from bittorrent.mainline import address_id
from bittorrent.settings import MAINLINE_ROUTERS, PRIVATE_NETWORK_ENV
from proxy.internet import Internet, plan
from proxy.server import ProxyServer
from swarm.content.manifest import build_manifest
from swarm.discovery.seam import Attestation, ManifestClaim
from swarm.service.store_work import BytesBody, fill_entry

from ..bittorrent.stock_dht import stock_dht
from .conftest import proxy_config, start_proxy_process
from .test_e2e_swarm import _admin

GUARD = {PRIVATE_NETWORK_ENV: "1"}


@pytest.mark.parametrize("flags, environ, on, public, mapping, why", [
    ({}, {}, True, True, True, None),  # a user's machine: on by default, as BitTorrent clients are
    ({}, GUARD, False, False, False, PRIVATE_NETWORK_ENV),  # the suite, the lab, the demo
    ({"private_network": "true"}, {}, False, False, False, "--private-network"),
    ({"peer_listen": "off"}, {}, False, False, False, "--peer-listen off"),
    # A DHT of one's own: joined through the nodes named, the guard or not; nothing asked of a router.
    ({"mainline_bootstrap": "127.0.0.1:6881"}, GUARD, True, False, False, None),
    ({"mainline_bootstrap": "10.0.0.1:6881,[fd00::1]:6881"}, {}, True, False, False, None),
    # ... even with --private-network: not the public network (and the suite's processes have both).
    ({"mainline_bootstrap": "127.0.0.1:6881", "private_network": "true"}, GUARD, True, False, False, None),
    # Under the guard, nodes by address only: a name would be a DNS query, and could be a public router.
    ({"mainline_bootstrap": "router.bittorrent.com:6881"}, GUARD, False, False, False, "no node by a non-public"),
    ({"mainline_bootstrap": "67.215.246.10:6881"}, GUARD, False, False, False, "no node by a non-public"),
    ({"mainline_bootstrap": "router.example:6881,127.0.0.1:6881"}, GUARD, True, False, False, None),
    # A lab behind NATs of its own maps ports when told to, but never under the guard.
    ({"mainline_bootstrap": "55.55.0.2:6881", "map_ports": "true"}, {}, True, False, True, None),
    ({"mainline_bootstrap": "10.0.0.2:6881", "map_ports": "true"}, GUARD, True, False, False, None),
])
def test_when_the_node_joins_which_network(tmp_path, flags, environ, on, public, mapping, why):
    cfg = proxy_config(tmp_path, **{"peer_listen": "127.0.0.1:0", **flags})
    decided = plan(cfg, environ)
    assert (decided.on, decided.public, decided.port_mapping) == (on, public, mapping)
    assert (decided.why_off is None) if why is None else why in (decided.why_off or "")
    if public:
        assert decided.dht_nodes == MAINLINE_ROUTERS
    if "mainline_bootstrap" in flags and on:
        assert decided.dht_nodes == tuple(n for n in flags["mainline_bootstrap"].split(",")
                                          if not environ or "example" not in n)
        assert not environ or all(not n.startswith(("55.", "67.")) for n in decided.dht_nodes)


def test_the_first_run_says_what_joining_means(tmp_path):
    internet = Internet(proxy_config(tmp_path, peer_listen="127.0.0.1:0"), environ={})
    internet.first_run = True
    said = "\n".join(internet.consent_lines())
    assert "public BitTorrent DHT" in said and "--private-network" in said and "router.bittorrent.com" in said
    internet.first_run = False  # later runs: one line
    assert len(internet.consent_lines()) == 1
    off = Internet(proxy_config(tmp_path, peer_listen="127.0.0.1:0"), environ=GUARD)
    assert off.consent_lines() == [f"  public network: off ({PRIVATE_NETWORK_ENV} is set (the test suite, the lab "
                                   "or the demo))"]


async def test_the_suite_never_starts_a_session_for_the_public_network(tmp_path):
    assert PRIVATE_NETWORK_ENV in os.environ
    server = ProxyServer(proxy_config(tmp_path, peer_listen="127.0.0.1:0"))
    await server.start()
    try:
        assert server.internet is not None and server.internet.session is None
        assert "bittorrent" not in server.addresses
        assert server.internet.status()["why_off"].startswith(PRIVATE_NETWORK_ENV)
    finally:
        await server.stop()


async def test_the_suites_proxy_processes_keep_the_guard(tmp_path):
    node = await start_proxy_process(tmp_path)  # as every end-to-end test starts one
    try:
        network = _admin(node.address, "/_swarm/status")["network"]
        assert network["mainline"] is False and network["public"] is False
        assert "--private-network" in network["why_off"]  # the guard, read as the flag's variable
    finally:
        node.process.terminate()
        await node.process.wait()


async def test_a_root_shared_by_one_proxy_is_found_by_another_on_the_mainline_dht(tmp_path, monkeypatch):
    monkeypatch.setattr("bittorrent.mainline.LOOKUP_SECONDS", 1.0)  # a lookup before the announcement lands
    with stock_dht() as nodes:
        servers = [ProxyServer(proxy_config(tmp_path / name, peer_listen="127.0.0.1:0",
                                            mainline_bootstrap=",".join(nodes))) for name in ("a", "b")]
        for server in servers:
            await server.start()
        sharer, finder = servers
        try:
            assert sharer.internet is not None and sharer.internet.directory is not None
            status = sharer.admin  # the status the user reads: which network, and the router's word
            data = os.urandom(50_000)
            engine = sharer.engine
            manifest, layer = build_manifest([data], len(data), url="http://192.31.196.1/f.bin", validator='"v1"')
            await engine.service.in_thread(manifest.root, lambda stop: fill_entry(engine.store, manifest, layer,
                                                                                   BytesBody(data), stop))
            engine.service.share(manifest)
            peer = ("127.0.0.1", int(sharer.addresses["peer"].rsplit(":", 1)[1]))
            async with asyncio.timeout(60):  # the proxies join the DHT, then the announcement lands: ask until so
                while peer not in await providers(finder, manifest.root, peer):
                    pass
            network = status.network()
            assert network is not None and network["mainline"] is True and network["public"] is False
            assert network["nat"] == {"port_mapping": False, "external_address": None, "mappings": []}
            reachability = network["reachability"]  # nothing known yet: the port is announced, and it says why
            assert reachability["announce"] is True and "tcp" in reachability["transports"], reachability
        finally:
            for server in servers:
                await server.stop()
    assert (tmp_path / "a" / "data" / "mainline").exists() is False  # a DHT of one's own: no table kept


async def test_a_claim_made_by_one_proxy_is_asked_of_it_by_another(tmp_path, monkeypatch):
    monkeypatch.setattr("bittorrent.mainline_claims.CLAIMS_WAIT", 1.0)  # a lookup before the announcement lands
    with stock_dht() as nodes:
        servers = [ProxyServer(proxy_config(tmp_path / name, peer_listen="127.0.0.1:0",
                                            mainline_bootstrap=",".join(nodes))) for name in ("a", "b")]
        for server in servers:
            await server.start()
        publisher, reader = servers
        try:
            assert publisher.discovery is not None and reader.discovery is not None
            key, claim = os.urandom(32), ManifestClaim(os.urandom(32), 50_000, 16384, b'"v1"')
            await publisher.discovery.put_manifest(key, claim)
            async with asyncio.timeout(60):  # the proxies join the DHT, then the announcement lands: ask until so
                while not (vouches := await reader.discovery.get_manifests(key)):
                    pass
            (vouch,) = vouches
            port = int(publisher.addresses["peer"].rsplit(":", 1)[1])
            assert vouch.claim == claim and vouch.attestation is Attestation.FIRST_HAND
            assert (vouch.publisher_host, vouch.publisher_id) == ("127.0.0.1", address_id("127.0.0.1", port))
            await publisher.discovery.withdraw_manifest(key)  # the DHT still names it; asked, it says nothing now
            assert await reader.discovery.get_manifests(key) == []
        finally:
            for server in servers:
                await server.stop()


async def providers(server: ProxyServer, root: bytes, wanted: tuple[str, int]) -> list[tuple[str, int]]:
    assert server.discovery is not None
    got = []
    async with contextlib.aclosing(server.discovery.find_providers(root)) as found:
        async for provider in found:
            got.append(provider.address)
            if provider.address == wanted:
                break
    return got
