"""`swarmproxy run` as a real process, driven by real clients: curl and wget."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sys

import pytest

from .conftest import body_bytes, body_sha256, run_tool, start_proxy_process
from .rawhttp import RawConnection, request

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not (shutil.which("curl") and shutil.which("wget")), reason="needs curl and wget"),
]


def curl(proxy, *args: str) -> tuple[str, ...]:
    return ("curl", "--silent", "--show-error", "--proxy", proxy.url, *args)


async def test_curl_get_head_post(proxy_process, origin):
    code, out, err = await run_tool(*curl(proxy_process, f"{origin.url}/bytes/5000"))
    assert code == 0, err
    assert out == body_bytes(5000)

    code, out, err = await run_tool(*curl(proxy_process, "--head", f"{origin.url}/bytes/5000"))
    assert code == 0, err
    head = out.decode().lower()
    assert head.startswith("http/1.1 200") and "content-length: 5000" in head and "via: 1.1 swarmproxy" in head

    code, out, err = await run_tool(*curl(proxy_process, "--data-binary", "hello=world", f"{origin.url}/echo"))
    assert code == 0, err
    seen = json.loads(out)
    assert seen["method"] == "POST" and seen["body_sha256"] == hashlib.sha256(b"hello=world").hexdigest()


async def test_wget_get_head_post(proxy_process, origin, tmp_path):
    env_proxy = ("-e", "use_proxy=yes", "-e", f"http_proxy={proxy_process.url}")
    target = tmp_path / "out.bin"
    code, _, err = await run_tool("wget", "-q", *env_proxy, "-O", str(target), f"{origin.url}/bytes/70000")
    assert code == 0, err
    assert target.read_bytes() == body_bytes(70000)

    code, _, err = await run_tool("wget", "-S", "--spider", *env_proxy, f"{origin.url}/bytes/70000")
    assert code == 0, err
    assert b"Content-Length: 70000" in err

    code, _, err = await run_tool("wget", "-q", *env_proxy, "-O", str(target), "--post-data", "a=1",
                                  f"{origin.url}/echo")
    assert code == 0, err
    assert json.loads(target.read_text())["method"] == "POST"


async def test_100_megabyte_download_is_byte_exact(proxy_process, origin, tmp_path):
    size = 100 * 1000 * 1000
    target = tmp_path / "big.bin"
    code, _, err = await run_tool(*curl(proxy_process, "-o", str(target), f"{origin.url}/stream/{size}"))
    assert code == 0, err
    digest = hashlib.sha256()
    with open(target, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    assert digest.hexdigest() == body_sha256(size)


async def test_https_through_connect_to_a_self_signed_origin(proxy_process, tls_origin):
    code, out, err = await run_tool(*curl(proxy_process, "--cacert", str(tls_origin.cert),
                                          f"{tls_origin.url}/bytes/300000"))
    assert code == 0, err
    assert out == body_bytes(300000)
    # The certificate was checked end to end: without the CA, curl must refuse (the proxy did not
    # terminate TLS).
    code, _, err = await run_tool(*curl(proxy_process, f"{tls_origin.url}/bytes/1"))
    assert code == 60, err


async def test_chunked_upload_with_curl(proxy_process, origin, tmp_path):
    payload = body_bytes(2_500_000)
    source = tmp_path / "upload.bin"
    source.write_bytes(payload)
    code, out, err = await run_tool(*curl(proxy_process, "-H", "Transfer-Encoding: chunked",
                                          "--data-binary", f"@{source}", f"{origin.url}/echo"))
    assert code == 0, err
    seen = json.loads(out)
    assert seen["body_size"] == len(payload)
    assert seen["body_sha256"] == hashlib.sha256(payload).hexdigest()


async def test_redirect_and_404_with_curl(proxy_process, origin):
    code, out, err = await run_tool(*curl(proxy_process, "--location", "--write-out", "\n%{http_code} %{num_redirects}",
                                          f"{origin.url}/redirect"))
    assert code == 0, err
    body, _, summary = out.rpartition(b"\n")
    assert body == body_bytes(10) and summary == b"200 1"
    code, out, err = await run_tool(*curl(proxy_process, "--output", "/dev/null", "--write-out", "%{http_code}",
                                          f"{origin.url}/status/404"))
    assert code == 0 and out == b"404"


async def test_origin_cut_mid_body_fails_curl(proxy_process, origin):
    code, _, err = await run_tool(*curl(proxy_process, "--output", "/dev/null", f"{origin.url}/cut/400000"))
    assert code == 18, err  # CURLE_PARTIAL_FILE: curl knows the body is short
    code, out, _ = await run_tool(*curl(proxy_process, f"{origin.url}/bytes/9"))
    assert code == 0 and out == body_bytes(9)


async def test_bad_input_then_normal_requests_still_work(proxy_process, origin):
    for garbage in (b"\x00\xff" * 5000, b"GET http://[::bad/ HTTP/1.1\r\n\r\n", b"NOT HTTP AT ALL\r\n\r\n"):
        connection = await RawConnection.open(proxy_process.address)
        await connection.send(garbage)
        response = await connection.response()
        assert response.status == 400
        await connection.close()
    code, _, err = await run_tool(*curl(proxy_process, "--proxytunnel", "--output", "/dev/null",
                                        f"http://127.0.0.1:{origin.port}/bytes/1"))
    assert code == 0, err  # CONNECT to an allowed port ('*' here) works
    code, out, _ = await run_tool(*curl(proxy_process, f"{origin.url}/bytes/9"))
    assert code == 0 and out == body_bytes(9)
    assert proxy_process.process.returncode is None
    assert "Traceback" not in proxy_process.log()


async def test_connect_to_refused_port_then_normal_request(tmp_path, origin):
    proc = await start_proxy_process(tmp_path)  # default --connect-ports 443
    try:
        code, _, err = await run_tool("curl", "--silent", "--show-error", "--proxy", proc.url, "--proxytunnel",
                                      f"http://127.0.0.1:{origin.port}/bytes/1")
        assert code == 56 and b"403" in err  # CONNECT tunnel failed, response 403
        code, out, _ = await run_tool("curl", "--silent", "--proxy", proc.url, f"{origin.url}/bytes/9")
        assert code == 0 and out == body_bytes(9)
        assert "--connect-ports" in proc.log()
    finally:
        proc.process.terminate()
        await proc.process.wait()


async def test_client_that_never_reads_keeps_memory_bounded(proxy_process, origin):
    """The origin offers 2 GiB; the client reads nothing. Backpressure must stop the origin after a few
    MB of socket and proxy buffers, and the proxy's memory must not grow with the body."""
    rss_before = proxy_process.rss_bytes()
    connection = await RawConnection.open(proxy_process.address)
    await connection.send(f"GET {origin.url}/stream/{2 << 30} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    # Wait until the origin has stopped sending: no progress for a full second of waiting. Without
    # backpressure it would push the whole 2 GiB (about two seconds on loopback) instead.
    last, still_since = -1, asyncio.get_running_loop().time()
    async with asyncio.timeout(60):
        while asyncio.get_running_loop().time() - still_since < 1.0:
            if origin.sent != last:
                last, still_since = origin.sent, asyncio.get_running_loop().time()
            await asyncio.sleep(0.05)
    assert origin.sent < 128 << 20, f"origin pushed {origin.sent >> 20} MiB into a client that never reads"
    grown = proxy_process.rss_bytes() - rss_before
    assert grown < 64 << 20, f"proxy grew by {grown >> 20} MiB"
    await connection.close()
    code, out, _ = await run_tool(*curl(proxy_process, f"{origin.url}/bytes/9"))
    assert code == 0 and out == body_bytes(9)


async def test_status_command_and_admin_api(proxy_process, origin):
    await run_tool(*curl(proxy_process, f"{origin.url}/bytes/3"))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", "status", "--proxy", proxy_process.address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    out, err = await process.communicate()
    assert process.returncode == 0, err
    status = json.loads(out)
    assert status["listen"]["proxy"] == proxy_process.address
    assert status["listen"]["dht"] == proxy_process.ready["dht"] and proxy_process.ready["dht"].startswith("127.0.0.1:")
    assert status["counters"]["requests"] >= 1
    history = (await request(proxy_process.address, b"GET /_swarm/requests HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")).body
    assert any(r["url"] == f"{origin.url}/bytes/3" and r["status"] == 200 for r in json.loads(history))
