"""`swarmproxy get` as a newcomer meets it, against a plain proxy in this event loop: what `-c` did with the partial
file, and failures that name what to change (the proxy's --ca-file, its --read-timeout)."""

from __future__ import annotations

import asyncio

import pytest
import trustme

from proxy import cli
from proxy.get_command import OK, ORIGIN_UNREACHABLE
from proxy.server import ProxyServer

from .conftest import body_bytes
from .tls_origin import tls_origin

DATA = body_bytes(300_000)


async def get(proxy: ProxyServer, url: str, output, *flags: str) -> int:
    """`swarmproxy get` (in a thread: it blocks), with what it says on stderr (not -q)."""
    return await asyncio.to_thread(cli.main, ["get", url, "-o", str(output), "--proxy", proxy.addresses["proxy"],
                                              *flags])


async def test_continue_says_the_byte_it_resumes_at(proxy, slow_origin, tmp_path, capfd):
    url = slow_origin.add("/part.bin", DATA)
    target = tmp_path / "part.bin"
    target.write_bytes(DATA[:100_000])
    assert await get(proxy, url, target, "-c") == OK
    assert target.read_bytes() == DATA
    assert ("GET", "/part.bin", "bytes=100000-") in slow_origin.requests
    err = capfd.readouterr().err
    assert f"{target}: resuming at byte 100,000" in err and "warning" not in err


async def test_continue_warns_when_the_origin_ignored_the_range(proxy, origin, tmp_path, capfd):
    target = tmp_path / "whole.bin"
    target.write_bytes(body_bytes(5000)[:1000])
    assert await get(proxy, f"{origin.url}/bytes/5000", target, "-c") == OK  # /bytes/N answers 200 to a Range
    assert target.read_bytes() == body_bytes(5000)  # started over, not appended
    err = capfd.readouterr().err
    assert ("swarmproxy get: warning: the origin ignored the Range (it answered 200, not 206): "
            f"{target} is downloaded again from the start") in err
    assert "resuming" not in err


async def test_continue_says_nothing_with_quiet(proxy, slow_origin, tmp_path, capfd):
    url = slow_origin.add("/quiet.bin", DATA)
    target = tmp_path / "quiet.bin"
    target.write_bytes(DATA[:10])
    assert await get(proxy, url, target, "-c", "-q") == OK and target.read_bytes() == DATA
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("case, said", [
    ("unknown-ca", ["tls: certificate of 127.0.0.1:", "give it to the proxy, which verifies origins: swarmproxy run "
                    "--ca-file CA.pem"]),
    ("silent", ["504 Gateway Timeout: timeout: origin 127.0.0.1:", "was silent for 2 s (the proxy's --read-timeout)"]),
])
async def test_a_failure_names_what_to_change_on_the_proxy(proxy, origin, tmp_path, capfd, case, said):
    if case == "unknown-ca":  # an HTTPS origin signed by a CA nobody gave the proxy
        server = await tls_origin(trustme.CA(), "127.0.0.1")
        url = server.add("/file.bin", DATA)
    else:  # answers nothing: the proxy fixture's --read-timeout is 2 s
        server, url = None, f"{origin.url}/silent"
    try:
        assert await get(proxy, url, tmp_path / "never") == ORIGIN_UNREACHABLE
    finally:
        if server is not None:
            await server.stop()
    err = capfd.readouterr().err
    assert all(words in err for words in said), err
    assert not (tmp_path / "never").exists()
