"""`swarmproxy demo` as a user runs it: a real process on loopback (origin, peers and a fresh node), then its
argument checks. Nothing leaves the machine; the demo binds 127.0.0.x itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .conftest import ROOT


def run_demo(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}  # no http_proxy, no SWARMPROXY_*
    return subprocess.run([sys.executable, "-m", "proxy.cli", "demo", *args], cwd=ROOT, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


@pytest.mark.e2e
def test_demo_downloads_byte_exact_through_the_swarm():
    result = run_demo("--size", "300000", "--peers", "2", "--origin-rate", "100k")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "byte-exact: yes" in out, out
    assert "switched to peers:" in out, out
    assert "(300,000 bytes)" in out
    assert re.search(r"peer 1: serving it at 127\.0\.0\.\d+:\d+", out) and "peer 2: serving" in out, out
    assert "peer 3:" not in out
    match = re.search(r"bytes from peers:\s+(\d+)% \(([\d,]+) of ([\d,]+);", out)
    assert match, out
    percent, from_peers, total = int(match[1]), int(match[2].replace(",", "")), int(match[3].replace(",", ""))
    assert total == 300_000 and 0 <= from_peers <= total
    assert percent == round(100 * from_peers / total)
    assert "Traceback" not in result.stderr, result.stderr
    # The direct download crawls (300 kB at 100 kB/s shared with the proxy): a progress line each second,
    # one per line when stdout is not a terminal.
    assert re.search(r"^ +\d+\.\d s  direct: [\d,]+ of 300,000 bytes, [\d,]+ kB/s \| through swarmproxy: ", out,
                     re.MULTILINE), out
    assert "\r" not in out



# (arguments, text stderr must contain)
BAD_ARGUMENTS = [
    pytest.param(["--peers", "0"], "--peers must be 1..50", id="no-peers"),
    pytest.param(["--peers", "-1"], "--peers must be 1..50", id="negative-peers"),
    pytest.param(["--peers", "51"], "--peers must be 1..50", id="too-many-peers"),
    pytest.param(["--peers", "two"], "invalid int value", id="peers-not-a-number"),
    pytest.param(["--size", "banana"], "'banana' is not a size", id="size-banana"),
    pytest.param(["--size", "0"], "greater than 0", id="size-zero"),
    pytest.param(["--size", "0.5"], "greater than 0", id="size-under-one-byte"),
    pytest.param(["--size=-1k"], "must not be negative", id="size-negative"),
    pytest.param(["--origin-rate", "0"], "greater than 0", id="rate-zero"),
    pytest.param(["--origin-rate", "fast"], "'fast' is not a rate in bytes/s", id="rate-not-a-rate"),
    pytest.param(["--transport", "pigeon"], "invalid choice", id="unknown-transport"),
    pytest.param(["--size", "nan"], "swarmproxy demo:", id="size-nan"),
    pytest.param(["--size", "inf"], "swarmproxy demo:", id="size-inf"),
]


@pytest.mark.parametrize("args,message", BAD_ARGUMENTS)
def test_bad_arguments_exit_2_with_a_message(args, message):
    result = run_demo(*args, timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stdout == ""  # nothing was started
