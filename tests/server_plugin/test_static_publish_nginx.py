"""`swarmproxy manifest publish` with a real nginx (Debian's package, which scripts/test.sh installs): the
command runs as a subprocess through its entry point, nginx includes the configuration it wrote, and then

- every published file's response carries its `Swarm-Manifest` field (odd names too: $uri is percent-decoded),
  an unpublished one none, and the layer path serves the sidecar the proxy's `fetch_layer` accepts;
- a swarmproxy node fetches a file whose layer is not inline through its proxy, swarming at once (nginx adds
  `Swarm-Hint: swarm`), trusts the origin's manifest and delivers the exact bytes;
- nginx builds the map for many long keys with the hash sizes the command computed.

nginx runs as this user in the foreground (`daemon off; master_process off;`), every file it writes under the
test's tmp directory, on a port found free by binding port 0."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse

import aiohttp
import pytest
import pytest_asyncio
from multidict import CIMultiDict
from yarl import URL

from proxy.demo.local_swarm import Cluster
from proxy.origin_head import published
from proxy.origin_manifest import fetch_layer
from server_plugin import static_config
from server_plugin.publisher import LAYER_PREFIX
from swarm.content.manifest import HEADER, build_manifest, parse_header

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
SWARMPROXY = pathlib.Path(sys.executable).with_name("swarmproxy")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (scripts/test.sh installs Debian's nginx "
                                             "with apt-get when run as root)"),
]

SIZE = 2 * 1024 * 1024 + 777  # 129 blocks of 16 KiB by the auto rule: more than 64, so the layer is a sidecar
DATA = (hashlib.sha256(b"static publish").digest() * (SIZE // 32 + 1))[:SIZE]
ODD = {"a b é.bin": b"1" * 5000, 'quote" back\\slash $x;{}.bin': b"2" * 5000, "100%.bin": b"3" * 5000,
       "Case.bin": b"4" * 5000, "case.bin": b"5" * 5000}
FAST_SWITCH = {"first_byte_timeout": "0.3", "min_rate": "160k", "rate_window": "0.5", "discover_size": "0"}

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {conf}/nginx-http.conf;
    server {{
        listen 127.0.0.1:{port};
        include {conf}/nginx-server.conf;
        add_header Swarm-Hint swarm;  # a busy origin: nodes take the rest from peers (and by Range) at once
        location /files/ {{
            alias {www}/;
            # Busy indeed: unthrottled on loopback, the stream would deliver every byte before the switch.
            limit_rate 1m;
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def nginx_args(tmp: pathlib.Path, *extra: str) -> list[str]:
    # -e: the error log from the start, before the configuration is read (not /var/log/nginx: not ours)
    return [NGINX, "-p", str(tmp), "-c", str(tmp / "nginx.conf"), "-e", str(tmp / "error.log"), *extra]


def start_nginx(tmp: pathlib.Path, conf: pathlib.Path, www: pathlib.Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, conf=conf, www=www, port=port))
    process = subprocess.Popen(nginx_args(tmp), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(200):  # bounded: nginx answers within milliseconds, or has exited with its reason
        if process.poll() is not None:
            raise AssertionError(f"nginx exited: {process.stderr.read().decode()}"
                                 f"{(tmp / 'error.log').read_text() if (tmp / 'error.log').exists() else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except ConnectionRefusedError:
            time.sleep(0.02)
    process.kill()
    raise AssertionError("nginx never answered")


def publish(www: pathlib.Path, conf: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SWARMPROXY), "manifest", "publish", str(www), "--url-prefix", "/files",
                           "--config-dir", str(conf)], capture_output=True, text=True, timeout=120)


@pytest_asyncio.fixture
async def site(tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    (www / "big.bin").write_bytes(DATA)
    for name, body in ODD.items():
        (www / name).write_bytes(body)
    (www / ".secret").write_bytes(b"hidden files are not published")
    conf = tmp_path / "conf"
    done = publish(www, conf)
    assert done.returncode == 0, done.stderr
    assert "6 files published" in done.stderr and "layer sidecars 1 written" in done.stderr
    nginx_dir = tmp_path / "nginx"
    nginx_dir.mkdir()
    process, port = start_nginx(nginx_dir, conf, www)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def quoted(name: str) -> str:
    return "/files/" + urllib.parse.quote(name, safe="")


async def test_nginx_sends_each_files_field_and_serves_the_layer_the_proxy_accepts(site):
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.get(site + "/files/big.bin", headers={"Range": "bytes=0-99"}) as response:
            assert response.status == 206 and await response.read() == DATA[:100]  # (the whole: 2 s at 1 MB/s)
            headers = response.headers
        assert len(headers.getall(HEADER)) == 1 and headers["Swarm-Hint"] == "swarm"
        claim = published(CIMultiDict(headers), SIZE)  # the proxy's own reading of the field
        manifest, layer = build_manifest([DATA], SIZE)
        assert claim is not None and claim.root == manifest.root and claim.layer_path == \
            LAYER_PREFIX + manifest.root.hex()
        async with session.get(site + claim.layer_path) as response:
            assert response.status == 200 and await response.read() == b"".join(layer)
            assert response.headers["Content-Type"] == "application/octet-stream"
            assert response.headers["Cache-Control"] == "public, max-age=86400"
        assert await fetch_layer(session, site + "/files/big.bin", claim) == layer

        for name, body in ODD.items():
            async with session.get(URL(site + quoted(name), encoded=True)) as response:
                assert response.status == 200 and await response.read() == body, name
                assert parse_header(response.headers[HEADER]).root == build_manifest([body], len(body))[0].root
        for path, status in ((quoted(".secret"), 200), ("/files/missing.bin", 404),
                             (LAYER_PREFIX + "index.json", 404)):
            async with session.get(URL(site + path, encoded=True)) as response:
                assert response.status == status and HEADER not in response.headers, path


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path / "nodes", **FAST_SWITCH)
    yield group
    await group.close()


async def test_a_node_swarms_at_once_and_trusts_the_manifest_nginx_publishes(site, cluster):
    node = await cluster.add()
    status, headers, body = await cluster.get(node, site + "/files/big.bin")
    assert status == 200 and body == DATA
    record = cluster.last_record(node)
    assert record["manifest_source"] == "origin" and record["transition"] == "hint"
    assert record["error"] is None and record["bytes_origin"] == SIZE


def test_nginx_builds_the_map_of_many_long_keys_with_the_computed_hash_sizes(tmp_path):
    entries = [static_config.Entry(f"/files/{i:06d}/" + "x" * (i % 250), "root=" + "0" * 64) for i in range(20000)]
    entries.append(static_config.Entry("/files/" + "long" * 1000, "root=" + "1" * 64))
    (tmp_path / "nginx-http.conf").write_text(static_config.nginx_http(entries, "test"))
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nevents {{}}\nhttp {{\n    include {tmp_path}/nginx-http.conf;\n}}\n")
    check = subprocess.run(nginx_args(tmp_path, "-t"), capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "could not build" not in check.stderr, check.stderr
