"""Runs the extension's unit tests (tests/extension/*.test.mjs: the rules module, the per-tab badge) with Node's
own test runner, so that the README's test command covers them. Skipped, saying why, where no Node >= 18 is
installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _node() -> str:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node is not installed (Debian: apt-get install nodejs; scripts/test.sh does it)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    major = int(re.match(r"v(\d+)", version).group(1))
    if major < 18:
        pytest.skip(f"node {version} has no test runner (node --test needs >= 18)")
    return node


def test_extension_modules_with_node_test_runner() -> None:
    node = _node()
    files = sorted(str(p) for p in HERE.glob("*.test.mjs"))
    assert len(files) >= 2, files
    result = subprocess.run([node, "--test", *files], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert re.search(r"^# fail 0$", result.stdout, re.M), result.stdout[-3000:]
