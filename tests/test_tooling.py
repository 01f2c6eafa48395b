"""The linter and the type checker, as tests: the test command runs them over the tree (config in pyproject.toml)."""

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    if shutil.which(module, path=str(pathlib.Path(sys.executable).parent)) is None:
        pytest.skip(f"{module} is not installed: pip install '.[test]' (scripts/test.sh does)")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing():
    done = _run("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
