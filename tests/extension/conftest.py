"""Fixtures for the extension's real-browser tests: Debian's Chromium driven by Playwright for Python with the
unpacked extension loaded, a real `swarmproxy run` process, and a local aiohttp origin that says whether a
request came through a proxy (its `Via`).

The origin listens on a non-loopback address of this machine: browsers never send loopback (127.0.0.0/8,
localhost) to a proxy, whatever the PAC script says (Chromium's implicit bypass rules), so an origin on
127.0.0.x could not show that a listed site goes through the proxy. Every port is chosen by the kernel (port 0).
Skipped, saying why, where Chromium, Playwright or such an address is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from .firefox_bidi import FIREFOX, Firefox

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "extension"
# The suite photographs the popup and options pages into a scratch directory, so that it leaves the clone clean;
# `SWARMPROXY_SCREENSHOTS=extension/screenshots bash scripts/test.sh tests/extension` refreshes the committed ones.
SCREENSHOTS = Path(os.environ.get("SWARMPROXY_SCREENSHOTS") or Path(tempfile.gettempdir()) / "swarmproxy-screenshots")
CHROMIUM = os.environ.get("SWARMPROXY_CHROMIUM", "/usr/bin/chromium")
TIMEOUT_MS = 15_000
SLOW_HEAD_S = 1.2  # > the proxy's default first-byte timeout T (0.75 s)
DOWNLOAD = hashlib.sha256(b"swarmproxy extension test").digest() * 8192  # 256 KiB of fixed bytes


def lan_ipv4() -> str | None:
    """A non-loopback IPv4 address of this machine (the source address of a route off it), or None."""
    for target in ("192.0.2.1", "10.255.255.254", "172.31.255.254", "192.168.255.254"):
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))  # UDP: no packet is sent, the kernel only picks a route
            address = s.getsockname()[0]
            if not address.startswith("127.") and address != "0.0.0.0":
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind((address, 0))
                return address
    return None


@dataclass
class Origin:
    """A local origin: every request is recorded with the `Via` it carried."""

    host: str
    ca_file: Path
    port: int = 0
    tls_port: int = 0
    seen: list[dict] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def tls_url(self, path: str) -> str:
        return f"https://{self.host}:{self.tls_port}{path}"

    def via_of(self, path: str) -> list[str | None]:
        return [r["via"] for r in self.seen if r["path"] == path]


@pytest.fixture(scope="session")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Origin]:
    """The origin, on http:// and https:// (a certificate from a throwaway CA, which the proxy is told to trust
    with --ca-file and the browser accepts because the test context ignores certificate errors)."""
    import trustme

    host = lan_ipv4()
    if host is None:
        pytest.skip("this machine has no non-loopback IPv4 address; browsers never proxy loopback origins")
    ca = trustme.CA()
    ca_file = tmp_path_factory.mktemp("origin-ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(host).configure_cert(tls)
    state = Origin(host, ca_file)

    async def page(request: web.Request) -> web.StreamResponse:
        via = request.headers.get("Via")
        state.seen.append({"path": request.path_qs, "via": via})
        if request.path.startswith("/files/"):
            return web.Response(body=DOWNLOAD, content_type="application/octet-stream", headers={
                "Content-Disposition": f'attachment; filename="{request.path.rsplit("/", 1)[1]}"',
                "ETag": '"v1"', "Last-Modified": "Mon, 02 Jan 2023 00:00:00 GMT"})
        if request.path.startswith("/slow/"):
            # A page whose first byte comes later than the proxy's first-byte timeout T (0.75 s by default): the
            # proxy switches (`transition: T` in /_swarm/requests), finds no peers (--dht-listen off) and lets
            # the origin finish.
            await asyncio.sleep(SLOW_HEAD_S)
            text = "<!doctype html><title>slow</title><p id=via>" + (via or "direct") + "</p>" + "<!-- -->" * 25_000
            return web.Response(text=text, content_type="text/html", headers={
                "ETag": '"slow"', "Last-Modified": "Mon, 02 Jan 2023 00:00:00 GMT"})
        if request.path.startswith("/links/"):
            target = request.query["to"]
            text = f"<!doctype html><title>links</title><a id=link href='{target}'>the file</a>"
            return web.Response(text=text, content_type="text/html")
        text = f"<!doctype html><title>origin</title><p id=via>{via or 'direct'}</p>"
        return web.Response(text=text, content_type="text/html", headers={"Cache-Control": "no-store"})

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app, access_log=None)
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, host, 0)
        loop.run_until_complete(site.start())
        state.port = site._server.sockets[0].getsockname()[1]
        tls_site = web.TCPSite(runner, host, 0, ssl_context=tls)
        loop.run_until_complete(tls_site.start())
        state.tls_port = tls_site._server.sockets[0].getsockname()[1]
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=serve, name="origin", daemon=True)
    thread.start()
    assert started.wait(10), "the origin did not start"
    yield state
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


class ProxyProcess:
    """`python -m proxy.cli run` on 127.0.0.1:0 (or `listen`), its address read from the ready file."""

    def __init__(self, tmp: Path, *extra: str, listen: str = "127.0.0.1:0") -> None:
        ready = tmp / "ready.json"
        self.log = tmp / "proxy.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "proxy.cli", "run", "--listen", listen, "--ready-file", str(ready),
                 "--dht-listen", "off", "--data-dir", str(tmp / "data"),
                 # The pages' origins are on loopback: listed, as a user lists an office mirror.
                 "--share-private-origins", "127.0.0.1", *extra],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not ready.exists():  # the ready file is written atomically once the listeners are bound
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"swarmproxy did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)
        self.address = json.loads(ready.read_text())["proxy"]

    def get(self, path: str) -> object:
        """GET an admin path, directly (no proxy)."""
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{self.address}{path}", timeout=5) as response:
            return json.loads(response.read())

    def requests(self) -> list[str]:
        return [r["url"] for r in self.get("/_swarm/requests")]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def swarmproxy(tmp_path: Path, origin: Origin) -> Iterator[ProxyProcess]:
    proxy = ProxyProcess(tmp_path, "--ca-file", str(origin.ca_file))
    yield proxy
    proxy.stop()


@dataclass
class Browser:
    context: object
    worker: object
    extension_id: str

    def page(self, path: str):
        """An extension page (src/popup.html, src/options.html) in a tab of its own."""
        page = self.context.new_page()
        page.goto(f"chrome-extension://{self.extension_id}/{path}")
        return page

    def configure(self, page, **config) -> dict:
        """Sets the configuration the way the popup and options page do (a message to the background, which
        answers once the proxy setting is in effect) and returns the background's state."""
        answer = page.evaluate("config => chrome.runtime.sendMessage({type: 'set', config})", config)
        assert "failure" not in answer, answer
        return answer


@contextlib.contextmanager
def launch_chromium(tmp_path_factory: pytest.TempPathFactory, *extra_args: str,
                    ignore_default_args: tuple[str, ...] = ()) -> Iterator[Browser]:
    """Debian's Chromium, headless, with this extension loaded (its service worker ready); skipped, saying why,
    where Chromium or Playwright is missing. For the module-scoped fixtures of the test modules."""
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"{CHROMIUM} is missing (Debian: apt-get install chromium; scripts/test.sh does it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright for Python is missing (pip install -e '.[test]'; scripts/test.sh does it)")
    user_data = tmp_path_factory.mktemp("chromium-profile")
    # Playwright starts Chromium with --disable-extensions, which --disable-extensions-except overrides for ours
    # alone; where the caller keeps extensions enabled (ignore_default_args), any extension loads.
    enabled = "--disable-extensions" in ignore_default_args
    except_ours = [] if enabled else [f"--disable-extensions-except={EXTENSION}"]
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(user_data), executable_path=CHROMIUM, headless=True, ignore_https_errors=True,
            accept_downloads=True, downloads_path=str(tmp_path_factory.mktemp("downloads")),
            ignore_default_args=list(ignore_default_args), args=[
                "--headless=new", *except_ours, f"--load-extension={EXTENSION}", "--no-first-run",
                "--no-default-browser-check", *extra_args])
        context.set_default_timeout(TIMEOUT_MS)
        ours = [w for w in context.service_workers if w.url.endswith("/src/background.js")]
        worker = ours[0] if ours else context.wait_for_event(
            "serviceworker", lambda w: w.url.endswith("/src/background.js"))
        worker.evaluate("swarmproxy.ready.then(() => true)")
        extension_id = worker.url.split("/")[2]
        try:
            yield Browser(context, worker, extension_id)
        finally:
            context.close()


# Module scope, not session: Playwright's sync API keeps an event loop running in this thread while it is open,
# and every pytest-asyncio test after it would fail ("Runner.run() cannot be called from a running event loop").
@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with launch_chromium(tmp_path_factory) as browser:
        yield browser


# Firefox ESR, over WebDriver BiDi (no geckodriver), with the extension installed; module scope like Chromium's.
@pytest.fixture(scope="module")
def firefox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Firefox]:
    if not (os.path.exists(FIREFOX) and os.access(FIREFOX, os.X_OK)):
        pytest.skip(f"{FIREFOX} is missing (Debian: apt-get install firefox-esr; scripts/test.sh does it)")
    browser = Firefox(tmp_path_factory.mktemp("firefox-profile"), tmp_path_factory.mktemp("firefox-downloads"))
    try:
        assert browser.install_extension(EXTENSION) == "extension@swarmproxy.invalid"
        yield browser
    finally:
        browser.close()
