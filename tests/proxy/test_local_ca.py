"""The local CA signs only what it should (issue 35 §6): a name from a client (TLS SNI, a CONNECT target) is a
valid, listed host name before any file is touched, and leaves are filed under a hash of it, never under the name.

The attacks are those of `bench/attacks/ca_names.py`, through the same raw ClientHello; each ends with the whole
temporary directory compared byte for byte with how it was before. Nothing here resolves a name: every CONNECT
to a listed host goes to the local TLS listener on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import pathlib
import re
import sys

import pytest
from cryptography import x509

import proxy.local_ca as local_ca
from bench.attacks.ca_names import answer_to_hello, open_streams
from proxy.errors import ConfigError, OriginError
from proxy.local_ca import LocalCA, parse_mitm_hosts
from proxy.mitm import Interceptor

DOMAIN = "swarm.test"
GOOD = f"ok.{DOMAIN}"
UP = "../../../outside"  # from <tmp>/data/ca/leaves to <tmp>/outside
PRECIOUS = b"not a certificate: must survive every attack\n"

# Names a client may send that must never become a leaf or reach a path (str: what a ssl client or CONNECT says).
BAD_NAMES = [
    f"{UP}/evil.{DOMAIN}",  # a key and leaf outside the data dir (the leaf cache's eviction deleted it later)
    f"{UP}/victim.{DOMAIN}",  # overwrites outside/victim.swarm.test.pem
    f"../evil.{DOMAIN}",
    f"*.{DOMAIN}",  # a wildcard leaf: good for every name under the domain
    f"a..{DOMAIN}", f"x y.{DOMAIN}", f"-x.{DOMAIN}", f"x-.{DOMAIN}", f"a_b.{DOMAIN}", f"{'a' * 64}.{DOMAIN}",
    f"x.{DOMAIN}..", f".{DOMAIN}", f"a\nb.{DOMAIN}", f"a\\b.{DOMAIN}", f"a%2f..%2fb.{DOMAIN}",
    f"\u212a.{DOMAIN}",  # KELVIN SIGN: str.lower() makes it "k"
]


def absolute_name(root: pathlib.Path) -> str:
    return f"{root}/outside/absolute.{DOMAIN}"  # pathlib's `/` drops the leaves dir before an absolute part


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def root(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / f"victim.{DOMAIN}.pem").write_bytes(PRECIOUS)
    return tmp_path


@pytest.fixture
def ca(root):
    authority = LocalCA(root / "data" / "ca", parse_mitm_hosts(f"*.{DOMAIN}"))
    authority.context_for(GOOD)  # the leaves dir exists, as on any proxy that served one CONNECT
    return authority


# -- host names ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,normal", [
    ("Deb.Debian.Org.", "deb.debian.org"), ("localhost", "localhost"),
    ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ("a-b.c0.example", "a-b.c0.example"), ("1.example", "1.example"),
    (".".join(["a" * 63] * 3 + ["b" * 61]), ".".join(["a" * 63] * 3 + ["b" * 61])),  # 253: the longest
])
def test_host_name_normalises(name, normal):
    assert local_ca.host_name(name) == normal


@pytest.mark.parametrize("name", BAD_NAMES + [
    "", ".", "..", "/", "127.0.0.1", "127.0.0.10.", "::1", "[::1]", "1.2.3", "x.0x7f", "x.0x", "x.123",
    ".".join(["a" * 63] * 3 + ["b" * 62]), "a\x00b.example", "é.example", None, b"x.example",
])
def test_host_name_refuses(name):
    with pytest.raises(local_ca.RefusedName):
        local_ca.host_name(name)


@pytest.mark.parametrize("text", ["*.0.0.10", "x.0x7f", "*.x.example..", "x y.example", "é.example",
                                  ".".join(["a" * 63] * 4)])
def test_a_list_of_names_the_ca_could_not_sign_is_refused_at_start(text):
    with pytest.raises(ConfigError):
        parse_mitm_hosts(text)


# -- the CA --------------------------------------------------------------------------------------------------------

def test_a_bad_name_touches_no_file_and_mints_no_leaf(root, ca):
    before = snapshot(root)
    for name in BAD_NAMES + [absolute_name(root)]:
        with pytest.raises(ConfigError):
            ca.context_for(name)
    assert snapshot(root) == before


def test_leaves_are_filed_under_the_hash_of_the_normalised_name(root, ca):
    assert ca.context_for("OK.Swarm.Test.") is ca.context_for(GOOD)  # one name, one leaf
    files = sorted(p.name for p in (root / "data" / "ca" / "leaves").iterdir())
    assert files == [hashlib.sha256(GOOD.encode()).hexdigest() + ".pem"]
    assert all(re.fullmatch(r"[0-9a-f]{64}\.pem", name) for name in files)


def test_leaves_named_the_old_way_are_deleted_when_the_ca_loads(root, ca):
    """Leaves were once filed under the client's SNI: a key signed by our CA lying about, never used again."""
    ca.context_for(GOOD)
    leaves = root / "data" / "ca" / "leaves"
    (leaves / f"{GOOD}.pem").write_bytes(b"an old leaf and its key")
    (root / "kept.pem").write_bytes(PRECIOUS)
    (leaves / "link.pem").symlink_to(root / "kept.pem")
    LocalCA(root / "data" / "ca", parse_mitm_hosts(f"*.{DOMAIN}"))
    assert [p.name for p in leaves.iterdir()] == [hashlib.sha256(GOOD.encode()).hexdigest() + ".pem"]
    assert (root / "kept.pem").read_bytes() == PRECIOUS  # a link is removed, never followed


def test_eviction_deletes_only_the_evicted_leaf(root, ca, monkeypatch):
    monkeypatch.setattr(local_ca, "MAX_LEAVES", 1)
    leaves = root / "data" / "ca" / "leaves"
    for name in BAD_NAMES:
        with pytest.raises(ConfigError):
            ca.context_for(name)
    ca.context_for(f"two.{DOMAIN}")  # evicts GOOD's leaf
    assert [p.name for p in leaves.iterdir()] == [hashlib.sha256(f"two.{DOMAIN}".encode()).hexdigest() + ".pem"]
    assert (root / "outside" / f"victim.{DOMAIN}.pem").read_bytes() == PRECIOUS
    assert sorted(p.name for p in (root / "outside").iterdir()) == [f"victim.{DOMAIN}.pem"]


def test_the_longest_host_name_gets_a_leaf(root, ca):
    name = ".".join(["a" * 63] * 2 + [f"b.{DOMAIN}"])  # longer than a commonName may be
    ca.context_for(name)
    leaf = x509.load_pem_x509_certificate(ca.leaf_path(name).read_bytes())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.value.get_values_for_type(x509.DNSName) == [name] and san.critical  # RFC 5280: empty subject


# -- through the TLS listener, as a client of the proxy can --------------------------------------------------------

@pytest.fixture
async def interceptor(ca):
    listener = Interceptor(ca, None)
    await listener.start()
    yield listener
    await listener.stop()


async def hello_on_a_tunnel(listener: Interceptor, sni: bytes, connect: str = GOOD) -> str:
    reader, writer, release = await open_streams(listener, connect, 443)
    try:
        return await answer_to_hello(reader, writer, sni)
    finally:
        writer.close()
        release()


async def test_a_bad_sni_is_refused_cleanly_and_touches_no_file(root, ca, caplog, monkeypatch):
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)  # where CPython would print a traceback
    caplog.set_level(logging.WARNING, logger="swarmproxy")
    listener = Interceptor(ca, None)
    await listener.start()
    try:
        names = [n.encode() for n in BAD_NAMES + [absolute_name(root), f"other.{DOMAIN}"]] + [b"\xff.swarm.test"]
        before = snapshot(root)
        for sni in names:
            caplog.clear()
            assert await hello_on_a_tunnel(listener, sni) != "server_hello", sni
            refusals = [r for r in caplog.records if "refused a TLS handshake" in r.getMessage()]
            assert len(refusals) == 1 and not refusals[0].exc_info, (sni, caplog.text)
        assert snapshot(root) == before
        assert unraisable == []
        assert await hello_on_a_tunnel(listener, b"OK.Swarm.Test.") == "server_hello"  # and it still works
    finally:
        await listener.stop()


async def test_a_leaf_is_made_only_for_a_name_a_connect_was_accepted_for(root, interceptor):
    assert await hello_on_a_tunnel(interceptor, f"two.{DOMAIN}".encode(), connect=f"two.{DOMAIN}") == "server_hello"
    assert await hello_on_a_tunnel(interceptor, f"three.{DOMAIN}".encode()) != "server_hello"  # tunnel for GOOD
    assert not LocalCA.leaf_path(interceptor.ca, f"three.{DOMAIN}").exists()


async def test_a_bad_connect_target_under_a_listed_domain_is_a_400_never_a_tunnel(root, interceptor, caplog):
    caplog.set_level(logging.WARNING, logger="swarmproxy")
    before = snapshot(root)
    for name in BAD_NAMES + [absolute_name(root)]:
        assert interceptor.wants(name, 443)  # ours to refuse, not a blind tunnel that resolves it
        with pytest.raises(OriginError) as refused:
            await interceptor.open(name, 443, asyncio.Protocol)
        assert refused.value.status == 400 and "CONNECT target refused" in refused.value.message
    assert interceptor.tunnels == {} and snapshot(root) == before
    assert caplog.text.count("refused CONNECT to a listed domain") == len(BAD_NAMES) + 1


async def test_the_proxy_answers_a_traversal_connect_with_a_400_and_goes_on(tmp_path):
    from proxy.demo.local_swarm import Cluster
    (tmp_path / "outside").mkdir()
    cluster = Cluster(tmp_path / "nodes", mitm_hosts=f"*.{DOMAIN}", discover_size="0")
    try:
        node = await cluster.add()
        host, port = node.addresses["proxy"].rsplit(":", 1)
        ca_dir = node.config.data_dir / "ca"
        before = snapshot(ca_dir)

        async def connect(target: str, sni: bytes) -> tuple[bytes, str]:
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(f"CONNECT {target}:443 HTTP/1.1\r\nHost: {target}:443\r\n\r\n".encode())
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                if not head.startswith(b"HTTP/1.1 200"):
                    length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
                    return head, (await asyncio.wait_for(reader.readexactly(length), 10)).decode()
                return head, await answer_to_hello(reader, writer, sni)
            finally:
                writer.close()

        evil = f"../../../../outside/evil.{DOMAIN}"  # from <tmp>/nodes/node0/ca/leaves to <tmp>/outside
        head, body = await connect(evil, evil.encode())
        assert snapshot(tmp_path / "outside") == {} and snapshot(ca_dir) == before
        assert head.startswith(b"HTTP/1.1 400") and "CONNECT target refused" in body, (head, body)
        head, answer = await connect(GOOD, GOOD.encode())
        assert head.startswith(b"HTTP/1.1 200") and answer == "server_hello"
    finally:
        await cluster.close()
