"""HTTPS through the explicit fetch, end to end: a local TLS origin whose certificate a throwaway CA (trustme)
signed, nodes that trust that CA through --ca-file, `swarmproxy get` and `GET /_swarm/fetch?url=`. Two nodes fetch
an https:// file and vouch for it; a third, on a crawling origin, finishes from them byte-exact. A certificate
that is expired or names another host is refused on every path, naming the host and the reason."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import socket
import urllib.parse

import aiohttp
import pytest
import pytest_asyncio
import trustme

from proxy import cli
from proxy.demo.local_swarm import Cluster
from proxy.get_command import INCOMPLETE, NO_PROXY, OK, ORIGIN_UNREACHABLE
from proxy.server import ProxyServer

from .tls_origin import tls_origin, trusting_cluster

DATA = (hashlib.sha256(b"https").digest() * 40_000)[:1_200_000]
# W = 30 s: a crawling origin is left by the crowd rule, 0.3 s after its first byte, once peers hold the file.
SETTINGS = {"first_byte_timeout": "5", "min_rate": "160k", "rate_window": "30", "early_lookup": "0.3",
            "discover_size": "0"}  # every size may be announced: the privacy rule has tests of its own


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest_asyncio.fixture
async def origin(ca):
    server = await tls_origin(ca, "127.0.0.1")
    yield server
    await server.stop()


@pytest_asyncio.fixture
async def cluster(tmp_path, ca):
    group = trusting_cluster(tmp_path, ca, **SETTINGS)
    yield group
    await group.close()


async def get(node: ProxyServer, url: str, output, *flags: str) -> int:
    """`swarmproxy get` against `node` (in a thread: it blocks), then wait until the node stored what it got."""
    done = node.stats.counters["requests"] + 1
    code = await asyncio.to_thread(cli.main, ["get", url, "-o", str(output), "-q", "--proxy",
                                             node.addresses["proxy"], *flags])
    if code == OK:
        await node.stats.wait_for_requests(done)
        await node.fallback.settled()
    return code


async def fetch(cluster: Cluster, node: ProxyServer, url: str, headers: dict[str, str] | None = None):
    done = node.stats.counters["requests"] + 1
    target = f"{node.url}/_swarm/fetch?{urllib.parse.urlencode({'url': url})}"
    async with cluster.client.get(target, headers=headers or {}) as response:
        result = response.status, response.headers.copy(), await response.read()
    if result[0] < 400:
        await node.stats.wait_for_requests(done)
        await node.fallback.settled()
    return result


async def test_two_nodes_get_an_https_file_and_a_third_fetches_it_from_them(cluster, origin, tmp_path):
    url = origin.add("/release.tar", DATA)
    assert url.startswith("https://")
    *fetchers, third = await cluster.grow(3)  # all up first: each vouch is stored by the two others
    for index, node in enumerate(fetchers):
        target = tmp_path / f"copy{index}"
        assert await get(node, url, target) == OK
        assert target.read_bytes() == DATA
        record = cluster.last_record(node)
        assert record["url"] == url and record["transition"] is None and node.engine.counters.published == 1

    origin.set_rate(64_000)  # crawling now
    status, headers, body = await fetch(cluster, third, url)
    assert status == 200 and body == DATA
    assert headers["Content-Length"] == str(len(DATA)) and headers["ETag"] == origin.files["/release.tar"][1]
    assert headers["Content-Type"] == "application/octet-stream"
    record = cluster.last_record(third)
    assert record["manifest_source"] == "quorum" and record["bytes_peers"] > len(DATA) // 2

    status, headers, body = await fetch(cluster, third, url, {"Range": "bytes=1000-1999"})  # the client's Range
    assert status == 206 and body == DATA[1000:2000]
    assert headers["Content-Range"] == f"bytes 1000-1999/{len(DATA)}"


async def test_get_resumes_a_partial_file_with_a_range(cluster, origin, tmp_path):
    url = origin.add("/resume.bin", DATA)
    node = await cluster.add()
    target = tmp_path / "resume.bin"
    target.write_bytes(DATA[:300_000])
    assert await get(node, url, target, "-c") == OK
    assert target.read_bytes() == DATA
    assert ("GET", "/resume.bin", "bytes=300000-") in origin.requests
    assert await get(node, url, target, "-c") == OK and target.read_bytes() == DATA  # complete already: 416


@pytest.mark.parametrize("validity", [
    pytest.param({"identities": ("wrong.example",)}, id="wrong-name"),
    pytest.param({"identities": ("127.0.0.1",), "not_before": datetime.datetime(2020, 1, 1),
                  "not_after": datetime.datetime(2020, 2, 1)}, id="expired"),
])
async def test_a_bad_certificate_is_refused_on_every_path_naming_host_and_reason(cluster, ca, tmp_path, capfd,
                                                                                 validity):
    identities = validity.pop("identities")
    bad = await tls_origin(ca, *identities, **validity)
    try:
        url = bad.add("/file.bin", DATA[:10_000])
        node = await cluster.add()
        host = url.split("/")[2]
        status, _, body = await fetch(cluster, node, url)
        assert status == 502 and body.decode().startswith(f"502 Bad Gateway: tls: certificate of {host} is not valid")
        assert await get(node, url, tmp_path / "never") == ORIGIN_UNREACHABLE
        assert f"tls: certificate of {host} is not valid" in capfd.readouterr().err
        assert not (tmp_path / "never").exists()
        assert cluster.last_record(node)["bytes_peers"] == 0 and bad.requests == []  # no byte, no fallback
    finally:
        await bad.stop()


async def test_a_private_https_response_is_never_announced(cluster, origin, tmp_path):
    url = origin.add("/account.pdf", DATA[:50_000], headers={"Cache-Control": "private, max-age=60"})
    node = await cluster.add()
    assert await get(node, url, tmp_path / "account.pdf") == OK
    assert (tmp_path / "account.pdf").read_bytes() == DATA[:50_000]
    assert cluster.last_record(node)["swarm_skipped"] == "private"
    assert node.engine.counters.announced == 0 and node.engine.counters.published == 0


async def test_fetch_refuses_what_is_not_one_absolute_http_url(cluster):
    node = await cluster.add()
    async with aiohttp.ClientSession() as client:
        for query in ("", "?url=ftp://host/x", "?url=/relative", "?url=http://a/&url=http://b/"):
            async with client.get(f"{node.url}/_swarm/fetch{query}") as response:
                assert response.status == 400, query
                assert "url" in await response.text()


async def test_get_says_when_no_proxy_answers(tmp_path, capfd):
    with socket.socket() as probe:  # a port nobody listens on (bound, then freed)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = await asyncio.to_thread(cli.main, ["get", "https://example.test/x", "-o", str(tmp_path / "x"),
                                             "--proxy", f"127.0.0.1:{port}"])
    assert code == NO_PROXY and "no swarmproxy answers at" in capfd.readouterr().err


async def test_get_reports_a_cut_transfer(cluster, origin, tmp_path):
    url = origin.add("/cut.bin", DATA)
    origin.die_after["/cut.bin"] = 200_000
    origin.down_after_cut = True  # and nobody else has it: the proxy must cut, never end short
    node = await cluster.add()
    assert await get(node, url, tmp_path / "cut.bin") == INCOMPLETE
    assert len((tmp_path / "cut.bin").read_bytes()) < len(DATA)
