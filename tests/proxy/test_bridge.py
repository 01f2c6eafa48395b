"""The BitTorrent bridge in the proxy: what may leave for the BitTorrent world, and a shared download exported by
`swarmproxy torrent export` and fetched by a stock libtorrent client, byte-exact."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys

import pytest

from proxy.bridge import Bridge
from proxy.server import ProxyServer
from swarm.content.manifest import Manifest, build_manifest
from swarm.service.store_work import BytesBody, fill_entry

from .conftest import proxy_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "bittorrent" / "stock_client.py"


class Resolved:
    """Which names resolved to public addresses alone in this run (`OriginResolver.resolved_public`)."""

    def __init__(self, *public: str) -> None:
        self.public = set(public)

    def resolved_public(self, host: str) -> bool:
        return host in self.public


def manifest_of(url: str | None) -> Manifest:
    return Manifest(size=10, block_size=16384, root=bytes(range(32)), url=url, validator='"v1"')


@pytest.mark.parametrize(("url", "refused"), [
    (None, "no URL"),  # a segment, or `swarm seed`'s file: where it came from is not known
    ("http://192.31.196.1/f.iso", None),  # a public address
    ("https://mirror.example.org/f.iso", None),  # a name that resolved to public addresses alone
    ("https://other.example.org/f.iso", "did not resolve to public addresses alone"),  # not (yet) in this run
    ("http://10.0.0.7/f.iso", "private network"),
    ("http://127.0.0.1:8000/f.iso", "private network"),  # even one listed with --share-private-origins
    ("http://[fd00::7]/f.iso", "private network"),
    ("http://files.corp.example/f.iso", "local"),  # under --local-domains
    ("http://printer.local/f.iso", "local"),
    ("https://mirror.example.org/f.iso?X-Amz-Signature=8f2a9c4e1b7d3f60a5c8e2b4d6f1a3c5", "may not be announced"),
    ("https://user:secret@mirror.example.org/f.iso", "may not be announced (userinfo)"),
])
def test_what_may_leave_for_the_bittorrent_world(url, refused):
    bridge = Bridge(None, Resolved("mirror.example.org"), None, local_domains=("corp.example",))
    why = bridge.refusal(manifest_of(url))
    assert (why is None) if refused is None else (why is not None and refused in why), why


async def shared(server: ProxyServer, data: bytes, url: str | None) -> Manifest:
    engine = server.engine
    manifest, layer = build_manifest([data], len(data), url=url, validator='"v1"')
    await engine.service.in_thread(manifest.root, lambda stop: fill_entry(engine.store, manifest, layer,
                                                                           BytesBody(data), stop))
    engine.service.share(manifest)
    return manifest


async def run(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(*args, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    return process.returncode, out.decode(), err.decode()


async def test_a_shared_download_is_exported_and_a_stock_client_fetches_it(tmp_path):
    server = ProxyServer(proxy_config(tmp_path, peer_listen="127.0.0.1:0", bt_listen="127.0.0.1:0"))
    await server.start()
    try:
        bt_host, bt_port = server.addresses["bittorrent"].rsplit(":", 1)
        data = os.urandom(5 * 1024 * 1024 + 3)
        url = "http://192.31.196.1/pub/file.iso"  # a public origin (its bytes are the test's)
        manifest = await shared(server, data, url)
        unknown = await shared(server, os.urandom(60_000), None)
        private = await shared(server, os.urandom(70_000), "http://127.0.0.1:9/intranet.bin")
        proxy = server.addresses["proxy"]
        cli = (sys.executable, "-m", "proxy.cli", "torrent", "export", "--proxy", proxy)

        code, out, err = await run(*cli, url, "-o", str(tmp_path / "f.torrent"))  # by its URL
        assert code == 0, err
        assert out.startswith("magnet:?xt=urn:btmh:1220") and f"x.pe={bt_host}:{bt_port}" in out
        assert "dn=file.iso" in out and "ws=http%3A%2F%2F192.31.196.1%2Fpub%2Ffile.iso" in out
        report = await run(sys.executable, str(CLIENT), "--torrent", str(tmp_path / "f.torrent"), "--peer",
                           f"{bt_host}:{bt_port}", "--save", str(tmp_path / "got"), "--timeout", "60")
        assert json.loads(report[1])["complete"], report
        assert (tmp_path / "got" / manifest.root.hex()).read_bytes() == data

        code, out, err = await run(*cli, manifest.root.hex(), "--hybrid", "-o", str(tmp_path / "h.torrent"))
        assert code == 0 and "xt=urn:btih:" in out and ", v1 " in err, err  # v1-only clients' info-hash too
        report = await run(sys.executable, str(CLIENT), "--torrent", str(tmp_path / "h.torrent"), "--peer",
                           f"{bt_host}:{bt_port}", "--save", str(tmp_path / "got-hybrid"), "--timeout", "60")
        assert json.loads(report[1])["complete"], report
        assert (tmp_path / "got-hybrid" / manifest.root.hex()).read_bytes() == data

        for root in (private.root, unknown.root):  # shared with our swarm, never with BitTorrent's
            code, out, err = await run(*cli, root.hex())
            assert code == 1 and "not seeded here" in err and out == ""
        code, _, err = await run(*cli, "http://127.0.0.1:9/intranet.bin")
        assert code == 1 and "not seeded here" in err
        status = server.admin.bridge().status()
        assert status["torrents"] == 1 and status["uploaded_bytes"] >= len(data)
        metrics = server.stats.prometheus_text().decode()
        assert "swarmproxy_bittorrent_torrents 1.0" in metrics
        uploaded = [line for line in metrics.splitlines()
                    if line.startswith("swarmproxy_bittorrent_uploaded_bytes_total")]
        assert uploaded and float(uploaded[0].split()[1]) >= len(data)
    finally:
        await server.stop()


async def test_without_the_bridge_export_says_how_to_turn_it_on(tmp_path):
    server = ProxyServer(proxy_config(tmp_path, peer_listen="127.0.0.1:0"))
    await server.start()
    try:
        code, out, err = await run(sys.executable, "-m", "proxy.cli", "torrent", "export", "--proxy",
                                   server.addresses["proxy"], "ab" * 32)
        assert code == 1 and "--bt-listen" in err and out == ""
    finally:
        await server.stop()


async def test_the_bridge_needs_the_block_engine(tmp_path):
    from proxy.errors import ListenError

    server = ProxyServer(proxy_config(tmp_path, bt_listen="127.0.0.1:0"))
    try:
        with pytest.raises(ListenError, match="--peer-listen"):
            await server.start()
    finally:
        await server.stop()
