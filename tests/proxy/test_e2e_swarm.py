"""The fallback with real processes and real curl: three `swarmproxy run` processes on 127.0.0.2x, a
throttled origin in this test's event loop. Two fetch the file while the origin is fast (and vouch for it);
the third fetches it while the origin crawls, switches by R, and gets most bytes from the other two."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import urllib.request

import pytest

from .conftest import run_tool, start_proxy_process

pytestmark = pytest.mark.e2e

SIZE = 4 * 1024 * 1024 + 7
DATA = (hashlib.sha256(b"e2e swarm").digest() * (SIZE // 32 + 1))[:SIZE]


def _admin(address: str, path: str) -> object:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{address}{path}", timeout=10) as response:
        return json.load(response)


async def _until(node, check, what: str, timeout: float = 30.0) -> None:
    """Ask a real process until `check()` holds (it cannot push the answer to us); fail if it dies."""
    try:
        async with asyncio.timeout(timeout):
            while not await asyncio.to_thread(check):
                with contextlib.suppress(asyncio.TimeoutError):  # the tick: its exit, or 0.1 s
                    await asyncio.wait_for(asyncio.shield(node.process.wait()), 0.1)
                    raise AssertionError(f"the proxy exited while waiting for {what}: {node.log()}")
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}: {node.log()[-3000:]}") from None


async def test_three_processes_and_curl(tmp_path, slow_origin):
    url = slow_origin.add("/file.bin", DATA)
    processes = []
    try:
        for index in range(3):
            host = f"127.0.0.{21 + index}"
            args = ["--dht-listen", f"{host}:0", "--peer-listen", f"{host}:0", "--transport", "tcp",
                    "--min-rate", "160k", "--rate-window", "0.5", "--first-byte-timeout", "0.5",
                    "--early-lookup", "0", "--share-private-origins", "127.0.0.1", "--discover-size", "0"]
            # The origin is on loopback, listed as a user lists an office mirror; every size may be announced, so the
            # first two publish what they fetched from a fast origin (the privacy rule has tests of its own).
            # No early lookup: the third switches by R, not by the crowd rule, and the first two vouch once each (a
            # head lookup answering before the body ends would make them claim it and vouch per segment too).
            if processes:
                args += ["--bootstrap", processes[0].ready["dht"]]
            (tmp_path / f"n{index}").mkdir()
            processes.append(await start_proxy_process(tmp_path / f"n{index}", *args))
        first, second, third = processes
        assert third.ready["peer"].startswith("127.0.0.23:")

        for node in (first, second):
            code, out, err = await run_tool("curl", "-sS", "--proxy", node.url, url, "-o", "-")
            assert code == 0 and out == DATA, err
            await _until(node, lambda n=node: _admin(n.address, "/_swarm/status")["swarm"]["published"] == 1,
                         "the node to publish its manifest")

        slow_origin.set_rate(64_000)
        target = tmp_path / "out.bin"
        code, _, err = await run_tool("curl", "-sS", "--proxy", third.url, url, "-o", str(target))
        assert code == 0, err
        assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(DATA).digest()
        await _until(third, lambda: _admin(third.address, "/_swarm/requests")[-1]["status"] == 200,
                     "the request record to close")
        record = _admin(third.address, "/_swarm/requests")[-1]
        assert record["transition"] == "R"
        assert record["manifest_source"] == "quorum"
        assert record["bytes_peers"] > SIZE // 2
        assert record["bytes_origin"] + record["bytes_peers"] == SIZE
        metrics = await asyncio.to_thread(
            lambda: urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"http://{third.address}/metrics", timeout=10).read().decode())
        assert 'swarmproxy_transitions_total{cause="R"} 1.0' in metrics
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.process.terminate()
            await process.process.wait()
