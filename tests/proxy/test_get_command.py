"""`swarmproxy get` as a newcomer meets it, against a plain proxy in this event loop: failures that name what to
change (the proxy's --ca-file, its --read-timeout)."""

from __future__ import annotations

import asyncio

import pytest
import trustme

from proxy import cli
from proxy.get_command import ORIGIN_UNREACHABLE
from proxy.server import ProxyServer

from .conftest import body_bytes
from .tls_origin import tls_origin

DATA = body_bytes(300_000)


async def get(proxy: ProxyServer, url: str, output, *flags: str) -> int:
    """`swarmproxy get` (in a thread: it blocks), with what it says on stderr (not -q)."""
    return await asyncio.to_thread(cli.main, ["get", url, "-o", str(output), "--proxy", proxy.addresses["proxy"],
                                              *flags])


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
