"""`--mitm-hosts` end to end with curl: CONNECTs to listed hosts are terminated with a leaf of the install's local
CA (name-constrained, key 0600), everything else stays a tunnel showing the origin's own certificate, the upstream
side verifies the real origin, and a download through the terminated tunnel swarms like any other."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import os
import shutil
import stat

import pytest
import pytest_asyncio
import trustme
from cryptography import x509

from proxy import cli
from proxy.errors import ConfigError
from proxy.get_command import OK
from proxy.local_ca import LocalCA, matches, parse_mitm_hosts

from .tls_origin import tls_origin, trusting_cluster

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed (apt-get install curl)")

DATA = (hashlib.sha256(b"mitm").digest() * 40_000)[:1_000_000]
SETTINGS = {"first_byte_timeout": "5", "min_rate": "160k", "rate_window": "30", "early_lookup": "0.3",
            "discover_size": "0", "mitm_hosts": "localhost", "connect_ports": "*"}


@pytest.fixture(scope="module")
def origin_ca() -> trustme.CA:
    return trustme.CA()


@pytest_asyncio.fixture
async def origin(origin_ca):
    server = await tls_origin(origin_ca, "localhost", "127.0.0.1")
    yield server
    await server.stop()


@pytest_asyncio.fixture
async def cluster(tmp_path, origin_ca):
    group = trusting_cluster(tmp_path, origin_ca, **SETTINGS)
    yield group
    await group.close()


async def curl(node, url: str, cacert, output) -> tuple[int, str, str]:
    """curl through `node`'s proxy; (exit code, HTTP status, stderr)."""
    done = node.stats.counters["requests"]
    process = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--proxy", f"http://{node.addresses['proxy']}", "--cacert", str(cacert), "-o", str(output),
        "-w", "%{http_code}", url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "no_proxy": "", "NO_PROXY": ""})
    out, err = await process.communicate()
    if process.returncode == 0:
        await node.stats.wait_for_requests(done + 1)
        await node.fallback.settled()
    return process.returncode, out.decode(), err.decode()


def record_of(node, url: str) -> dict:
    return next(r.as_json() for r in reversed(node.stats.history) if r.url == url)


async def test_curl_through_a_listed_host_is_decrypted_and_finishes_from_peers(cluster, origin, tmp_path):
    url = origin.add("/pkg.deb", DATA).replace("127.0.0.1", "localhost")
    *fetchers, third = await cluster.grow(3)
    for index, node in enumerate(fetchers):  # two nodes get it from the origin and vouch for it
        code = await asyncio.to_thread(cli.main, ["get", url, "-o", str(tmp_path / f"copy{index}"), "-q",
                                                  "--proxy", node.addresses["proxy"]])
        assert code == OK
        await node.fallback.settled()
    origin.set_rate(64_000)
    local_ca = third.config.data_dir / "ca" / "ca.pem"
    code, status, err = await curl(third, url, local_ca, tmp_path / "curl.out")
    assert (code, status) == (0, "200"), err
    assert (tmp_path / "curl.out").read_bytes() == DATA
    record = record_of(third, url)  # the request inside the tunnel, recorded under its https URL
    assert record["manifest_source"] == "quorum" and record["bytes_peers"] > len(DATA) // 2
    assert stat.S_IMODE(os.stat(local_ca.with_name("ca.key")).st_mode) == 0o600


async def test_an_unlisted_host_stays_a_tunnel_with_the_origins_own_certificate(cluster, origin, origin_ca,
                                                                               tmp_path):
    url = origin.add("/plain.bin", DATA[:20_000])  # 127.0.0.1: not listed
    node = await cluster.add()
    origin_pem = tmp_path / "origin-ca-only.pem"
    origin_ca.cert_pem.write_to_path(str(origin_pem))
    code, status, err = await curl(node, url, origin_pem, tmp_path / "plain.out")  # only the origin's CA trusted
    assert (code, status) == (0, "200"), err
    assert (tmp_path / "plain.out").read_bytes() == DATA[:20_000]
    assert node.stats.history[-1].method == "CONNECT"  # a tunnel: no request of it was seen in clear


async def test_an_invalid_origin_certificate_is_a_502_page_never_re_signed(cluster, origin_ca, tmp_path):
    bad = await tls_origin(origin_ca, "wrong.example")  # not valid for localhost
    try:
        url = bad.add("/x.bin", DATA[:10_000]).replace("127.0.0.1", "localhost")
        node = await cluster.add()
        code, status, err = await curl(node, url, node.config.data_dir / "ca" / "ca.pem", tmp_path / "x.out")
        assert (code, status) == (0, "502"), err
        host = url.split("/")[2]
        assert f"tls: certificate of {host} is not valid" in (tmp_path / "x.out").read_text()
    finally:
        await bad.stop()


def test_the_ca_is_name_constrained_to_the_listed_domains(tmp_path):
    ca = LocalCA(tmp_path / "ca", parse_mitm_hosts("*.debian.org, downloads.example.com"))
    constraints = ca.cert.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert sorted(n.value for n in constraints.value.permitted_subtrees) == ["debian.org", "downloads.example.com"]
    assert ca.context_for("deb.debian.org") is ca.context_for("deb.debian.org")  # cached
    leaf = x509.load_pem_x509_certificate(ca.leaf_path("deb.debian.org").read_bytes())  # filed under a hash
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc < datetime.timedelta(days=2)  # short-lived
    with pytest.raises(ConfigError):
        ca.context_for("example.org")  # never signs an unlisted name
    with pytest.raises(ConfigError, match="swarmproxy ca rotate"):
        LocalCA(tmp_path / "ca", parse_mitm_hosts("*.ubuntu.com"))  # the constraints cannot change silently
    assert LocalCA(tmp_path / "ca", parse_mitm_hosts("*.ubuntu.com"), new=True).cert != ca.cert


@pytest.mark.parametrize("text,patterns", [
    ("*.debian.org,downloads.example.com", ("*.debian.org", "downloads.example.com")),
    (" Deb.Debian.Org. , ", ("deb.debian.org",)),
    ("localhost", ("localhost",)),
])
def test_parse_mitm_hosts(text, patterns):
    assert parse_mitm_hosts(text) == patterns


@pytest.mark.parametrize("text", ["127.0.0.1", "*.com", "bad_name.org", "-x.org", "a..b"])
def test_parse_mitm_hosts_refuses(text):
    with pytest.raises(ConfigError):
        parse_mitm_hosts(text)


@pytest.mark.parametrize("host,listed", [
    ("deb.debian.org", True), ("a.b.debian.org", True), ("debian.org", False), ("evildebian.org", False),
    ("downloads.example.com", True), ("x.downloads.example.com", False),
])
def test_matches(host, listed):
    assert matches(("*.debian.org", "downloads.example.com"), host) is listed
