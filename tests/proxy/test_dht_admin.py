"""The DHT inside `swarmproxy run`: its listener, bootstrap, and the admin endpoints that show it."""

from __future__ import annotations

import json

import pytest

from proxy.config import Config
from proxy.errors import ListenError
from proxy.server import ProxyServer

from .conftest import proxy_config
from .rawhttp import request


async def admin_get(server: ProxyServer, path: str):
    proxy = server.addresses["proxy"]
    response = await request(proxy, f"GET {path} HTTP/1.1\r\nHost: {proxy}\r\n\r\n".encode())
    return response.status, json.loads(response.body)


@pytest.fixture
async def two_nodes(tmp_path):
    first = ProxyServer(proxy_config(tmp_path / "a", dht_listen="127.0.0.1:0"))
    await first.start()
    second = ProxyServer(proxy_config(tmp_path / "b", dht_listen="127.0.0.1:0", bootstrap=[first.addresses["dht"]]))
    await second.start()
    await second._bootstrap_task  # joined (or failed) before the test looks
    yield first, second
    await second.stop()
    await first.stop()


async def test_dht_status_and_ready_addresses(two_nodes):
    first, second = two_nodes
    assert first.addresses["dht"].startswith("127.0.0.1:")
    status, dht = await admin_get(second, "/_swarm/dht")
    assert status == 200
    assert len(bytes.fromhex(dht["node_id"])) == 20
    assert dht["routing_table_size"] >= 1  # it knows the bootstrap node
    assert {"records", "dropped_datagrams"} <= set(dht)
    status, proxy_status = await admin_get(second, "/_swarm/status")
    assert proxy_status["listen"]["dht"] == second.addresses["dht"]
    status, backends = await admin_get(second, "/_swarm/discovery")  # every backend, by name: the DHT alone
    assert status == 200 and list(backends) == ["dht"] and backends["dht"]["node_id"] == dht["node_id"]


async def test_providers_lookup_finds_an_announce(two_nodes):
    first, second = two_nodes
    root = bytes(range(32))
    assert await first.dht.announce(root, "127.0.0.1", 4444) >= 1
    status, found = await admin_get(second, f"/_swarm/dht/providers/{root.hex()}")
    assert status == 200
    assert found["root"] == root.hex()
    assert [(p["host"], p["port"]) for p in found["providers"]] == [("127.0.0.1", 4444)]
    assert found["providers"][0]["node_id"] == first.dht.node_id.hex()
    status, empty = await admin_get(second, f"/_swarm/dht/providers/{'ab' * 32}")
    assert status == 200 and empty["providers"] == []


    status, through_all = await admin_get(second, f"/_swarm/discovery/providers/{root.hex()}")  # every backend's
    assert status == 200 and through_all["providers"] == found["providers"]


@pytest.mark.parametrize("path", ["/_swarm/dht/providers/", "/_swarm/discovery/providers/"])
@pytest.mark.parametrize("root", ["abc", "zz" * 32, "ab" * 31])
async def test_providers_rejects_a_bad_root(two_nodes, root, path):
    _, second = two_nodes
    status, body = await admin_get(second, f"{path}{root}")
    assert status == 400 and "64 hex digits" in body["error"]


@pytest.mark.parametrize("path", ["/_swarm/dht", "/_swarm/discovery", "/_swarm/discovery/providers/" + "ab" * 32])
async def test_dht_off(proxy, path):
    status, body = await admin_get(proxy, path)
    assert status == 404 and "--dht-listen off" in body["error"]
    assert "dht" not in proxy.addresses


async def test_dht_port_in_use_is_a_clear_error(tmp_path):
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        server = ProxyServer(proxy_config(tmp_path, dht_listen=f"127.0.0.1:{port}"))
        with pytest.raises(ListenError, match="--dht-listen"):
            await server.start()
        await server.stop()


@pytest.mark.parametrize("flags,expected", [
    ({"dht_listen": "off"}, None),
    ({"dht_listen": "7000"}, "0.0.0.0:7000"),
    ({"bootstrap": ["a.example:1", "b.example:2,c.example:3"]}, None),
])
def test_dht_options(flags, expected):
    config = Config.load(flags, environ={})
    if "dht_listen" in flags:
        assert (str(config.dht_listen) if config.dht_listen else None) == expected
    else:
        assert [str(node) for node in config.bootstrap] == ["a.example:1", "b.example:2", "c.example:3"]


def test_bootstrap_from_environment():
    config = Config.load({}, environ={"SWARMPROXY_BOOTSTRAP": "h1:1,h2:2", "SWARMPROXY_NO_LAN_DISCOVERY": "true"})
    assert [str(node) for node in config.bootstrap] == ["h1:1", "h2:2"] and config.no_lan_discovery
