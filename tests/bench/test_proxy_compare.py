"""`python -m bench.proxy_compare` runs end to end on a small scale: two proxies (this tree against itself), the bare
copy relay, both memory figures, the added latency of each tree, and says so in its JSON. Loopback only; curl is the
client (and an asyncio one for the latency)."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed (scripts/test.sh installs it)")
def test_a_small_comparison_of_this_tree_with_itself(tmp_path):
    out = tmp_path / "compare.json"
    done = subprocess.run([sys.executable, "-m", "bench.proxy_compare", "--base", str(ROOT), "--size-mb", "2",
                           "--rounds", "2", "--sections", "tunnel,file,latency", "--latency-sizes", "1024",
                           "--latency-requests", "20", "--memory-clients", "4",
                           "--memory-rounds", "1", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert set(result["tunnel"]) == {"direct", "base", "this_tree", "bare_copy_relay", "this_tree_over_base"}
    assert set(result["file"]) == {"direct", "base", "this_tree", "this_tree_over_base"}
    for path in ("base", "this_tree"):
        assert result["tunnel"][path]["gb_per_s"] > 0 and len(result["tunnel"][path]["rounds_gb_per_s"]) == 2
        assert "cpu_s_per_gb" in result["file"][path]
        peaks = result["memory_peak_kib_per_download"][path]
        assert len(peaks["relay"]) == len(peaks["tunnel"]) == 1
        latency = result["latency_1024"][path]
        assert latency["p50_ms"] > 0 and latency["cpu_us_per_request"] >= 0  # (CPU ticks: 0 for so few)
        assert len(latency["rounds_added_p50_ms"]) == len(latency["rounds_added_p99_ms"]) == 2
    assert result["latency_1024"]["requests_a_path"] == 40 and result["latency_1024"]["direct"]["p99_ms"] > 0
    assert set(result["latency_1024"]["this_tree_over_base_added"]) == {"p50", "p99", "p50_round_by_round_median"}
