"""`swarmproxy swarm manifest`: JSON for scripts, one-line errors for people."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from swarm import merkle


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
