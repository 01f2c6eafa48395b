"""The fallback over the Internet mode alone, with real processes and real curl: two `swarmproxy run` processes with
our own DHT off, on a Mainline DHT of stock libtorrent nodes on this machine (`--mainline-bootstrap`). The first
fetches the file while the origin is fast and vouches for it; the second fetches it while the origin crawls,
finds the first's claim by asking it directly (`bittorrent.mainline_claims`) and its blocks through the Mainline
directory, and gets most bytes from it. The second starts only once both announcements can be found on the DHT
(a Mainline announcement lands on the storing nodes some time after it is made, later under load: waiting for the
first node's vouch alone once let a lookup miss it).

Every process here is on 127.0.0.1, one network to the quorum, so the second trusts any claim (`--trust any`): the
counting has tests of its own (tests/swarm/trust); this one shows that the claim and the providers travel."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys

import pytest

from bittorrent.mainline_claims import claim_key
from proxy.engine import url_key
from swarm.content.manifest import build_manifest

from ..bittorrent.stock_dht import stock_dht
from .conftest import run_tool, start_proxy_process
from .test_e2e_swarm import _admin, _until

pytestmark = pytest.mark.e2e

SIZE = 4 * 1024 * 1024 + 7
DATA = (hashlib.sha256(b"e2e mainline").digest() * (SIZE // 32 + 1))[:SIZE]


async def test_a_slow_download_is_rescued_through_the_mainline_dht_alone(tmp_path, slow_origin):
    url = slow_origin.add("/file.bin", DATA)
    processes = []
    with stock_dht() as nodes:
        try:
            for index in range(2):
                args = ["--dht-listen", "off", "--peer-listen", "127.0.0.1:0", "--transport", "tcp",
                        "--mainline-bootstrap", ",".join(nodes), "--trust", "any",
                        "--min-rate", "160k", "--rate-window", "0.5", "--first-byte-timeout", "0.5",
                        "--early-lookup", "0", "--share-private-origins", "127.0.0.1", "--discover-size", "0"]
                (tmp_path / f"n{index}").mkdir()
                processes.append(await start_proxy_process(tmp_path / f"n{index}", *args))
            first, second = processes
            assert "mainline" in _admin(first.address, "/_swarm/discovery")

            code, out, err = await run_tool("curl", "-sS", "--proxy", first.url, url, "-o", "-")
            assert code == 0 and out == DATA, err
            await _until(first, lambda: _admin(first.address, "/_swarm/status")["swarm"]["published"] == 1,
                         "the node to vouch for what it fetched", timeout=60)

            root = build_manifest([DATA], SIZE)[0].root
            await _until(second, lambda: _admin(second.address, f"/_swarm/discovery/providers/{root.hex()}")
                         ["providers"], "the first node's blocks to be findable on the Mainline DHT", timeout=60)
            assert await _claim_found(url, nodes), "the first node's claim never became findable on the DHT"

            slow_origin.set_rate(64_000)
            target = tmp_path / "out.bin"
            code, _, err = await run_tool("curl", "-sS", "--proxy", second.url, url, "-o", str(target))
            assert code == 0, err
            assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(DATA).digest()
            await _until(second, lambda: _admin(second.address, "/_swarm/requests")[-1]["status"] == 200,
                         "the request record to close")
            record = _admin(second.address, "/_swarm/requests")[-1]
            assert record["transition"] == "R", record
            assert record["bytes_peers"] > SIZE // 2, record
            assert record["bytes_origin"] + record["bytes_peers"] == SIZE
            claims = _admin(second.address, "/_swarm/discovery")["mainline-claims"]
            assert claims["answered"] >= 1, claims
        finally:
            for process in processes:
                process.process.terminate()
                await process.process.wait()


async def _claim_found(url: str, nodes: tuple[str, ...], timeout: float = 60.0) -> list:
    """The addresses a read-only stock session finds under the URL's claim key (`bench.dht_wait`), [] at timeout."""
    waiting = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.dht_wait", "127.0.0.1", claim_key(url_key(url)).hex(), str(timeout), *nodes,
        stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(waiting.communicate(), timeout + 30)
    return json.loads(out)["found"]
