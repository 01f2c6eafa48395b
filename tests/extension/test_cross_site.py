"""Issue 35: a web page must not use the proxy's admin API, above all its explicit fetch, which fetches a URL only
this machine reaches (`<img src="http://127.0.0.1:PORT/_swarm/fetch?url=...">`). In real browsers (Debian's
Chromium through Playwright, Firefox ESR over WebDriver BiDi), against a real `swarmproxy run`: a page of another
origin on this machine (another port: `localhost:PORT` is another site, `127.0.0.1:PORT` the same site) asks for
the fetch in every way a page can (an image, a frame, a form, fetch in no-cors and cors mode, with the extension's
own field, a navigation) and for the other admin paths; the target origin, also on loopback, sees none of it, and
the proxy's log shows it refused each. The user (an address typed) and the extension (its status checks, record
lookups and downloads) are still served, in the same browser.

Waits are on conditions: the page's own promises (each settles once the browser has the proxy's answer, and the
proxy logs a refusal before it answers), or a poll of the target's hits and the proxy's log with a deadline.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from aiohttp import web

from .conftest import Browser, ProxyProcess
from .firefox_bidi import EXTENSION_UUID, Firefox

pytestmark = pytest.mark.e2e
FILE = hashlib.sha256(b"only this machine reaches it").digest() * 2048  # 64 KiB
POLL_S, DEADLINE_S = 0.05, 15.0
REFUSED = re.compile(r"refused (\w+) (\S+): a browser's request for a web page")

# The page of "another site": every way a page can ask this machine's proxy, each a promise that settles once the
# browser has the proxy's answer (the page can never read it). `kind` names each fetch's target URL.
ATTACK = """<!doctype html><title>another site</title><body><script>
const P = %(proxy)s, T = %(target)s;
const fetchUrl = kind => `${P}/_swarm/fetch?url=${encodeURIComponent(T + kind)}`;
const settle = promise => promise.then(() => true, () => true);
// A frame's load that is not its first about:blank: its document is the proxy's, of another origin.
const frameLoaded = frame => new Promise(done => { frame.onload = () => {
  try { if (frame.contentWindow.location.href === "about:blank") return; } catch (err) { /* another origin */ }
  done(true);
}; });
const image = src => new Promise(done => { const img = new Image(); img.onload = img.onerror = done; img.src = src; });
const waits = [image(fetchUrl("img"))];
const frame = document.createElement("iframe");
document.body.append(frame);
waits.push(frameLoaded(frame));
frame.src = fetchUrl("iframe");
const target = document.createElement("iframe");
target.name = "formframe";
document.body.append(target);
waits.push(frameLoaded(target));
const form = document.createElement("form");
form.method = "GET"; form.action = `${P}/_swarm/fetch`; form.target = "formframe";
const input = document.createElement("input");
input.name = "url"; input.value = T + "form";
form.append(input); document.body.append(form); form.submit();
waits.push(settle(fetch(fetchUrl("nocors"), {mode: "no-cors"})));
waits.push(settle(fetch(fetchUrl("cors"))));
// The extension's own field: dropped in no-cors mode, and in cors mode only a refused preflight goes out.
waits.push(settle(fetch(fetchUrl("nocors-field"), {mode: "no-cors", headers: {"Swarm-Client": "extension"}})));
waits.push(settle(fetch(fetchUrl("cors-field"), {headers: {"Swarm-Client": "extension"}})));
waits.push(settle(fetch(`${P}/_swarm/status`, {mode: "no-cors"})));
waits.push(settle(fetch(`${P}/_swarm/requests`, {mode: "no-cors"})));
waits.push(image(`${P}/metrics`));
window.settled = Promise.all(waits).then(() => true);
</script>"""

# What the proxy must have refused once the page settled (at least: a browser may ask again).
EXPECTED_REFUSALS = collections.Counter({
    ("GET", "/_swarm/fetch"): 6, ("OPTIONS", "/_swarm/fetch"): 1, ("GET", "/_swarm/status"): 1,
    ("GET", "/_swarm/requests"): 1, ("GET", "/metrics"): 1,
})


@dataclass
class Servers:
    """The target (a file server only this machine reaches) and the pages of another origin, both on loopback."""

    target_port: int = 0
    pages_port: int = 0
    hits: list[str] = field(default_factory=list)  # the target's request paths

    def target(self, path: str) -> str:
        return f"http://127.0.0.1:{self.target_port}{path}"

    def page(self, host: str, proxy: str, target: str) -> str:
        return f"http://{host}:{self.pages_port}/attack?{urlencode({'proxy': proxy, 'target': target})}"

    def hits_under(self, prefix: str) -> list[str]:
        return [path for path in self.hits if path.startswith(prefix)]


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    state = Servers()

    async def target(request: web.Request) -> web.StreamResponse:
        state.hits.append(request.path)
        if request.path.startswith("/file/"):
            return web.Response(body=FILE, content_type="application/octet-stream", headers={
                "Content-Disposition": f'attachment; filename="{request.path.rsplit("/", 1)[1]}"'})
        return web.Response(text="a file only this machine reaches\n")

    async def pages(request: web.Request) -> web.StreamResponse:
        if request.path != "/attack":
            return web.Response(text="<!doctype html><title>another site</title>", content_type="text/html")
        values = {name: json.dumps(request.query[name]) for name in ("proxy", "target")}
        return web.Response(text=ATTACK % values, content_type="text/html")

    loop = asyncio.new_event_loop()
    runners = [web.AppRunner(_app(handler), access_log=None) for handler in (target, pages)]
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        ports = []
        for runner in runners:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            ports.append(site._server.sockets[0].getsockname()[1])
        state.target_port, state.pages_port = ports
        started.set()
        loop.run_forever()
        for runner in runners:
            loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=serve, name="cross-site-servers", daemon=True)
    thread.start()
    assert started.wait(10), "the target and page servers did not start"
    yield state
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _app(handler) -> web.Application:
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    return app


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ProxyProcess]:
    process = ProxyProcess(tmp_path)
    yield process
    process.stop()


def refusals(proxy: ProxyProcess) -> collections.Counter:
    return collections.Counter(m.groups() for m in REFUSED.finditer(proxy.log.read_text(errors="replace")))


def wait_until(condition, what: str) -> None:
    """Polls `condition` (the target's hits, the proxy's log: state outside the browser) until true."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def fetch_url(proxy: ProxyProcess, url: str) -> str:
    return f"http://{proxy.address}/_swarm/fetch?url={quote(url, safe='')}"


def assert_refused(servers: Servers, proxy: ProxyProcess, prefix: str, before: collections.Counter) -> None:
    """Nothing reached the target, and the proxy refused each request (so each did reach the proxy)."""
    assert servers.hits_under(prefix) == [], f"the proxy fetched for a web page: {servers.hits_under(prefix)}"
    seen = refusals(proxy) - before
    missing = EXPECTED_REFUSALS - seen
    assert not missing, f"not refused by the proxy (or never sent by the browser): {dict(missing)}; log:\n" + \
        proxy.log.read_text()[-3000:]


def navigation_refused(servers: Servers, proxy: ProxyProcess, prefix: str, before: collections.Counter) -> None:
    """A page's top-level navigation to the fetch: waits for its outcome (a target hit, or a refusal), then checks."""
    wait_until(lambda: servers.hits_under(prefix) or (refusals(proxy) - before)[("GET", "/_swarm/fetch")],
               "the page's navigation to reach the proxy")
    assert servers.hits_under(prefix) == [], "the proxy fetched for a page's navigation"


# Chromium (the `chromium` fixture of conftest.py: Debian's, with the extension loaded).

@pytest.mark.parametrize("page_host", ["localhost", "127.0.0.1"])  # another site; the same site, another port
def test_chromium_pages_cannot_make_the_proxy_fetch_nor_read_it(chromium: Browser, servers: Servers,
                                                               proxy: ProxyProcess, page_host: str) -> None:
    prefix = f"/secret/{uuid.uuid4().hex}/"
    before = refusals(proxy)
    page = chromium.context.new_page()
    try:
        page.goto(servers.page(page_host, f"http://{proxy.address}", servers.target(prefix)))
        assert page.evaluate("window.settled") is True
        assert_refused(servers, proxy, prefix, before)

        before = refusals(proxy)
        page.evaluate("url => { location.href = url; }", fetch_url(proxy, servers.target(prefix + "navigation")))
        navigation_refused(servers, proxy, prefix, before)
        page.wait_for_url(fetch_url(proxy, servers.target(prefix + "navigation")))
        assert "403 Forbidden" in page.locator("body").inner_text()
    finally:
        page.close()


def test_chromium_the_user_and_the_extension_are_still_served(chromium: Browser, servers: Servers,
                                                            proxy: ProxyProcess, tmp_path: Path) -> None:
    prefix = f"/file/{uuid.uuid4().hex}-"
    page = chromium.page("src/popup.html")  # an extension page, which can ask chrome.downloads
    # Playwright saves downloads under random names; let Chromium save them as it would for a user.
    cdp = chromium.context.new_cdp_session(page)
    cdp.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    typed = chromium.context.new_page()
    try:
        # An address typed by the user (Sec-Fetch-Site: none).
        response = typed.goto(f"http://{proxy.address}/_swarm/status")
        assert response is not None and response.status == 200 and "uptime_s" in response.text()
        response = typed.goto(fetch_url(proxy, servers.target("/typed/" + prefix[6:])))
        assert response is not None and response.status == 200
        assert servers.hits_under("/typed/" + prefix[6:]), "the proxy did not fetch an address the user typed"

        # The extension: its status check (a fetch: Sec-Fetch-Site: none), a record lookup, a download
        # (downloads.download: Sec-Fetch-Site: cross-site, with its Swarm-Client field).
        state = chromium.worker.evaluate("""config => swarmproxy.setConfig(config)
            .then(() => swarmproxy.refreshStatus(true))""", {
            "mode": "listed", "proxy": proxy.address, "rules": [], "exclude": []})
        assert state["ok"] is True and state["badge"] == "ON", state
        record = proxy.get("/_swarm/requests")[-1]["id"]
        assert chromium.worker.evaluate(f"fetch('http://{proxy.address}/_swarm/requests/{record}')"
                                        ".then(r => r.status)") == 200
        download = chromium.worker.evaluate("info => swarmproxy.menuClicked(info)", {
            "menuItemId": "swarmproxy-download", "linkUrl": servers.target(prefix + "ext.bin")})
        item = wait_for_download(page, download)
        assert item["state"] == "complete", item
        assert Path(item["filename"]).read_bytes() == FILE
        assert servers.hits_under(prefix) == [prefix + "ext.bin"]
    finally:
        cdp.detach()
        typed.close()
        page.close()


def wait_for_download(page, download_id: int) -> dict:
    """The download's item once it is no longer in progress, asked from an extension page (chrome.downloads)."""
    from .test_chromium import wait_for_async

    return wait_for_async(page, """async id => {
        const [item] = await chrome.downloads.search({id});
        return item && item.state !== "in_progress" ? item : false;
    }""", download_id)


# Firefox ESR, over WebDriver BiDi (the `firefox` fixture: conftest.py), with the extension installed.

@pytest.mark.parametrize("page_host", ["localhost", "127.0.0.1"])
def test_firefox_pages_cannot_make_the_proxy_fetch_nor_read_it(firefox: Firefox, servers: Servers,
                                                              proxy: ProxyProcess, page_host: str) -> None:
    prefix = f"/secret/{uuid.uuid4().hex}/"
    before = refusals(proxy)
    context = firefox.new_tab()
    try:
        firefox.navigate(context, servers.page(page_host, f"http://{proxy.address}", servers.target(prefix)))
        assert firefox.evaluate(context, "window.settled") is True
        assert_refused(servers, proxy, prefix, before)

        before = refusals(proxy)
        url = fetch_url(proxy, servers.target(prefix + "navigation"))
        firefox.evaluate(context, f"(location.href = {json.dumps(url)}, true)")
        navigation_refused(servers, proxy, prefix, before)
    finally:
        firefox.send("browsingContext.close", {"context": context})


def test_firefox_the_user_and_the_extension_are_still_served(firefox: Firefox, servers: Servers,
                                                           proxy: ProxyProcess) -> None:
    prefix = f"/file/{uuid.uuid4().hex}-"
    context = firefox.new_tab()
    try:
        # An address typed by the user (Sec-Fetch-Site: none).
        firefox.navigate(context, fetch_url(proxy, servers.target("/typed/" + prefix[6:])))
        assert servers.hits_under("/typed/" + prefix[6:]), "the proxy did not fetch an address the user typed"

        # The extension: its status check and a record lookup (fetch: Sec-Fetch-Site: same-origin), a download
        # (downloads.download: Sec-Fetch-Site: none, with its Swarm-Client field).
        firefox.navigate(context, f"moz-extension://{EXTENSION_UUID}/src/popup.html")
        config = {"mode": "listed", "proxy": proxy.address, "rules": [], "exclude": []}
        state = firefox.evaluate(context, f"browser.runtime.sendMessage({{type: 'set', config: {json.dumps(config)}}})")
        assert state["ok"] is True and state["badge"] == "ON", state
        record = proxy.get("/_swarm/requests")[-1]["id"]
        assert firefox.evaluate(context, f"""browser.runtime.getBackgroundPage()
            .then(bg => bg.fetch('http://{proxy.address}/_swarm/requests/{record}')).then(r => r.status)""") == 200
        info = {"menuItemId": "swarmproxy-download", "linkUrl": servers.target(prefix + "ext.bin")}
        download = firefox.evaluate(
            context, f"browser.runtime.getBackgroundPage().then(bg => bg.swarmproxy.menuClicked({json.dumps(info)}))")
        item = firefox.wait_for(context, f"""() => browser.downloads.search({{id: {int(download)}}})
            .then(items => items.length === 1 && items[0].state !== "in_progress" ? items[0] : false)""")
        assert item["state"] == "complete", item
        assert Path(item["filename"]).read_bytes() == FILE
        assert servers.hits_under(prefix) == [prefix + "ext.bin"]
    finally:
        firefox.send("browsingContext.close", {"context": context})
