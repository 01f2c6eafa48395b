"""`swarmproxy swarm manifest`: JSON for scripts, one-line errors for people."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time

import pytest

from swarm.cli import add_commands, default_data_dir
from swarm.content import merkle
from swarm.service.node import FETCH_STALL_TIMEOUT


def swarmproxy(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proxy.cli", *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("size", [1, 16384, 16385, 3 * 1024 * 1024 + 7])
def test_manifest_prints_root_size_and_block_size(tmp_path, size):
    data = (hashlib.sha256(str(size).encode()).digest() * (size // 32 + 1))[:size]
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    result = swarmproxy("swarm", "manifest", str(path))
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed == {"root": merkle.merkle_root(data).hex(), "size": size, "block_size": printed["block_size"]}
    assert printed["block_size"] >= 16384 and printed["block_size"] & (printed["block_size"] - 1) == 0


@pytest.mark.parametrize("argv,code,needle", [
    (["swarm", "manifest", "/nonexistent/file"], 1, "cannot read"),
    (["swarm", "manifest", "{file}", "--block-size", "1000"], 2, "power of two"),
])
def test_manifest_errors_are_one_line(tmp_path, argv, code, needle):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x")
    result = swarmproxy(*[a.replace("{file}", str(path)) for a in argv])
    assert result.returncode == code
    assert needle in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("size", [0, 5, 3 * 1024 * 1024 + 7])
def test_seed_then_get_writes_the_file_once(tmp_path, size):
    """`swarm get` runs the download into the store and ends with the store's data file as OUT."""
    source = tmp_path / "source.bin"
    source.write_bytes(bytes(range(256)) * (size // 256) + bytes(size % 256))
    ready = tmp_path / "ready.json"
    seed = subprocess.Popen([sys.executable, "-m", "proxy.cli", "swarm", "seed", str(source), "--data-dir",
                             str(tmp_path / "seed"), "--ready-file", str(ready)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(1000):
            if ready.exists() or seed.poll() is not None:
                break
            time.sleep(0.02)
        info = json.loads(ready.read_text())
        out = tmp_path / "out.bin"
        done = swarmproxy("swarm", "get", info["root"], "--peer", info["peer"], "-o", str(out),
                          "--data-dir", str(tmp_path / "leech"))
        assert done.returncode == 0, done.stderr
        assert out.read_bytes() == source.read_bytes()
        assert not (tmp_path / "out.bin.part").exists()
        assert not list((tmp_path / "leech" / "blocks").glob("*.data"))  # moved out, not left as a copy
    finally:
        seed.terminate()
        seed.wait()


def test_output_falls_back_to_writing_when_the_store_refuses(tmp_path):
    from swarm.cli import _Output
    from swarm.content.manifest import build_manifest
    from swarm.store.disk import DiskBlockStore

    data = bytes(range(256)) * 64 * 5  # five 16 KiB blocks
    manifest, layer = build_manifest([data], len(data), block_size=16384)
    store = DiskBlockStore(tmp_path / "store")
    store.create(manifest, layer)
    for block in (0, 1):
        assert store.write_block(manifest.root, block, data[block * 16384:(block + 1) * 16384])
    output = _Output(store, manifest, str(tmp_path / "out"))
    assert output.into_store
    with output:
        for block in range(5):
            chunk = b"" if block in (0, 1) else data[block * 16384:(block + 1) * 16384]  # 2 refused
            if block == 3:  # stored meanwhile, after the switch: read back from the store
                assert store.write_block(manifest.root, 3, data[3 * 16384:4 * 16384])
                chunk = b""
            assert output.write(chunk) == 16384
    output.finish()
    assert (tmp_path / "out").read_bytes() == data
    assert manifest.root in store  # nothing was moved out


@pytest.mark.parametrize("xdg, expected", [("/x/data", "/x/data/swarmproxy"), ("", "{home}/.local/share/swarmproxy"),
                                           (None, "{home}/.local/share/swarmproxy")])
def test_the_one_default_data_dir(monkeypatch, tmp_path, xdg, expected):
    monkeypatch.setenv("HOME", str(tmp_path))
    if xdg is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
    assert str(default_data_dir()) == expected.format(home=tmp_path)


def test_get_gives_up_after_the_fetch_stall_default():
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    args = parser.parse_args(["swarm", "get", "0" * 64, "--peer", "127.0.0.1:1", "-o", "out"])
    assert args.timeout == FETCH_STALL_TIMEOUT
