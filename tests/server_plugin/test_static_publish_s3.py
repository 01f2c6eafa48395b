"""`swarmproxy manifest publish --server s3` end to end: the command (through its entry point) writes the upload
script, the real AWS CLI runs it against moto's local S3 server (no account, no network), and then what S3 answers
is what the proxy trusts:

- every published object's response carries `x-amz-meta-swarm-manifest`, which `proxy.origin_head.published`
  reads as the origin's manifest of exactly those bytes (odd names too: spaces, quotes, UTF-8);
- a layer too long for S3's 2 KB of metadata is a sidecar object under `.well-known/swarm-layer/` (with
  `--path-style`, below the bucket), which the proxy's `fetch_layer` fetches and accepts;
- the layer directory's index is not uploaded.

The unit half checks the script's quoting and the usage errors."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import urllib.parse

import aiohttp
import pytest
from multidict import CIMultiDict

from proxy.origin_head import published
from proxy.origin_manifest import fetch_layer
from server_plugin import static_s3
from server_plugin.static_publish import main
from swarm.content.manifest import METADATA_HEADERS, METADATA_INLINE_HASHES, build_manifest

SWARMPROXY = pathlib.Path(sys.executable).with_name("swarmproxy")
AWS = shutil.which("aws", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("aws")
BUCKET = "swarm-test"
MAX_METADATA = 2048  # S3's limit on an object's user metadata, keys and values

FILES = {
    "big.bin": 2 * 1024 * 1024 + 777,  # 129 blocks of 16 KiB: a sidecar for every server
    "mid.bin": 40 * 16384 + 1,  # 41 blocks: inline for nginx (up to 64), a sidecar for S3 (over 32)
    "small.bin": 5000,  # one block: inline
    "a b é.bin": 3000,
    "it's \"quoted\" $HOME.bin": 3000,
}


def data(name: str, size: int) -> bytes:
    return (hashlib.sha256(name.encode()).digest() * (size // 32 + 1))[:size]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def s3(tmp_path):
    """moto's S3 on a free port, and the environment the AWS CLI needs to use it (path-style, fake keys)."""
    pytest.importorskip("moto.server", reason="moto is not installed (scripts/test.sh installs the test extras)")
    if AWS is None:
        pytest.skip("the AWS CLI is not installed (scripts/test.sh installs the test extras)")
    from moto.server import ThreadedMotoServer
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    config = tmp_path / "aws-config"
    config.write_text("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "AWS_CONFIG_FILE": str(config),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    made = subprocess.run([AWS, "s3", "mb", f"s3://{BUCKET}"], env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    try:
        yield f"http://127.0.0.1:{port}", env
    finally:
        server.stop()


async def test_s3_serves_each_objects_field_and_layer_the_proxy_accepts(tmp_path, s3):
    endpoint, env = s3
    www = tmp_path / "www"
    www.mkdir()
    for name, size in FILES.items():
        (www / name).write_bytes(data(name, size))
    conf = tmp_path / "conf"
    done = subprocess.run([str(SWARMPROXY), "manifest", "publish", str(www), "--server", "s3", "--bucket", BUCKET,
                           "--path-style", "--url-prefix", "/files", "--config-dir", str(conf)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "5 files published" in done.stderr and "layer sidecars 2 written" in done.stderr
    # Downloads are public: here by each object's ACL (SWARM_S3_ARGS), elsewhere often by a bucket policy.
    uploaded = subprocess.run(["sh", str(conf / "s3-upload.sh")], env={**env, "SWARM_S3_ARGS": "--acl public-read"},
                              capture_output=True, text=True, timeout=300)
    assert uploaded.returncode == 0, uploaded.stderr + uploaded.stdout

    async with aiohttp.ClientSession() as session:
        for name, size in FILES.items():
            body = data(name, size)
            url = f"{endpoint}/{BUCKET}/files/{urllib.parse.quote(name, safe='')}"
            async with session.get(url) as answer:
                assert answer.status == 200 and await answer.read() == body
                headers = CIMultiDict(answer.headers)
            field = headers[METADATA_HEADERS[0]]
            assert len("swarm-manifest") + len(field) <= MAX_METADATA
            manifest = published(headers, size)
            assert manifest is not None, (name, field)
            expected, layer = build_manifest([body], size)
            assert (manifest.root, manifest.block_size) == (expected.root, expected.block_size)
            if len(layer) > METADATA_INLINE_HASHES:
                assert manifest.layer_path == f"/{BUCKET}/.well-known/swarm-layer/{expected.root.hex()}"
            else:
                assert manifest.layer_path is None
            assert await fetch_layer(session, url, manifest) == layer  # from S3 for a sidecar, checked
        async with session.get(f"{endpoint}/{BUCKET}/.well-known/swarm-layer/index.json") as answer:
            assert answer.status == 404  # the publisher's index stays local


def test_the_script_quotes_every_name_and_uploads_the_layers_first():
    text = static_s3.script([static_s3.Upload("/srv/it's $x.bin", "v2/it's $x.bin", "root=ab; size=1")],
                            "/srv/.well-known/swarm-layer", "downloads", "/srv")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert lines[:3] == ["set -euf  # -f: no file name globbing, in SWARM_S3_ARGS either",
                         "bucket=${SWARM_S3_BUCKET:-'downloads'}", "extra=${SWARM_S3_ARGS:-}"]
    assert "--exclude 'index.json'" in lines[3] and '"s3://$bucket/.well-known/swarm-layer/"' in lines[4]
    metadata = "'{\"swarm-manifest\": \"root=ab; size=1\"}'"
    assert lines[5].startswith(f"aws s3 cp --only-show-errors $extra --metadata {metadata}")
    assert lines[6].strip() == "'/srv/it'\\''s $x.bin' \"s3://$bucket/\"'v2/it'\\''s $x.bin'"
    # the shell reads each quoted word back as it was
    words = subprocess.run(["sh", "-c", "printf '%s\\n' " + lines[6].strip().replace('"s3://$bucket/"', "")],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert words == ["/srv/it's $x.bin", "v2/it's $x.bin"]


@pytest.mark.parametrize("argv, error", [
    (["--server", "s3"], "needs --bucket"),
    (["--server", "s3", "--bucket", "Bad_Name"], "a bucket name is"),
    (["--server", "s3", "--bucket", "a..b"], "a bucket name is"),
    (["--bucket", "downloads"], "go with --server s3"),
    (["--path-style"], "go with --server s3"),
])
def test_usage_errors(tmp_path, capsys, argv, error):
    assert main(["publish", str(tmp_path), *argv]) == 2
    assert error in capsys.readouterr().err


def test_a_key_s3_cannot_take_is_skipped_with_a_warning(tmp_path, capsys):
    (tmp_path / "fine.bin").write_bytes(b"x" * 100)
    (tmp_path / os.fsdecode(b"latin-\xe9.bin")).write_bytes(b"y" * 100)
    out = tmp_path / "out"
    assert main(["publish", str(tmp_path), "--server", "s3", "--bucket", "downloads", "--config-dir", str(out)]) == 0
    assert "not UTF-8" in capsys.readouterr().err
    script = (out / "s3-upload.sh").read_text()
    assert "fine.bin" in script and "latin-" not in script
