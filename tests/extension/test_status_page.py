"""The status page (`/_swarm/`, issue 41) in real browsers: Debian's Chromium through Playwright, and Firefox ESR
over WebDriver BiDi. In both: hostile URLs and names, put into the proxy's history as request records, show as
text, inject no element and trip no Content-Security-Policy report; the page follows a download under way and
comes back by itself after the proxy process is killed and started again on its port. In Chromium: 1,000 records
load newest first. Every wait is on a condition in the page, with a deadline."""

from __future__ import annotations

import http.client
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Browser, ProxyProcess
from .firefox_bidi import Firefox
from .status_page_support import HOSTILE_NAMES, HOSTILE_URLS, DrippingOrigin, ThreadedProxy, free_port, shown

pytestmark = pytest.mark.e2e

# Installed before any script of the page (Playwright's init scripts run whatever the page's policy): every CSP
# report and every dialog the page would open are kept for the test to read.
WATCH = """
window.__violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
"""


@pytest.fixture
def threaded_proxy(tmp_path: Path) -> Iterator[ThreadedProxy]:
    proxy = ThreadedProxy(tmp_path, request_history="1000")
    yield proxy
    proxy.stop()


@pytest.fixture
def drip() -> Iterator[DrippingOrigin]:
    origin = DrippingOrigin()
    yield origin
    origin.stop()


def open_page(chromium: Browser, address: str):
    """The status page in a new tab, with what it must never do recorded: dialogs, script errors, console errors."""
    page = chromium.context.new_page()
    page.add_init_script(WATCH)
    seen: dict[str, list[str]] = {"dialogs": [], "errors": [], "console": []}
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("console", lambda m: seen["console"].append(m.text) if m.type in ("error", "warning") else None)
    response = page.goto(f"http://{address}/_swarm/")
    assert response is not None and response.status == 200
    page.wait_for_function("() => Number(document.body.dataset.polls || 0) >= 1")
    page.seen = seen  # type: ignore[attr-defined]
    return page


def polls(page) -> int:
    return int(page.evaluate("Number(document.body.dataset.polls || 0)"))


def nothing_went_wrong(page) -> None:
    assert page.evaluate("window.__violations") == []
    assert page.seen == {"dialogs": [], "errors": [], "console": []}, page.seen


def test_hostile_urls_and_names_show_as_text_and_inject_nothing(chromium: Browser,
                                                                 threaded_proxy: ThreadedProxy) -> None:
    records = []
    for i, url in enumerate(HOSTILE_URLS):
        name = HOSTILE_NAMES[i % len(HOSTILE_NAMES)]
        records.append(threaded_proxy.record(
            url=url, method="GET", transition=name, switch_verdict=name, swarm_skipped=f"private {name}",
            error=f"origin_cut: {name}", events=[f"+0.10s lookup: {name}", f"+0.20s {url}"],
            peers=[f"{name}:7000"], manifest_source=name, bytes_origin=1000 * (i + 1), bytes_peers=500))
    page = open_page(chromium, threaded_proxy.address)
    try:
        for record in records:
            row = page.locator(f'#recent tr.record[data-id="{record.id}"]')
            url = record.shown()["url"]  # (as the admin API shows it: a credential-like value redacted)
            assert row.locator("td.url").text_content() == shown(url)
            assert row.locator("td.url").get_attribute("title") == shown(url, 4000)
            assert row.locator("td.transition").text_content() == shown(f"{record.transition} · {record.transition}")
            assert row.locator("td.why").text_content() == shown(f"{record.swarm_skipped}; error: {record.error}")
        # Every record's details open on a click and show its decisions as text too.
        first = records[0]
        page.locator(f'#recent tr.record[data-id="{first.id}"] td.url').click()
        details = page.locator("#recent tr.details")
        details.wait_for()
        assert details.locator("li").all_text_contents() == [shown(line) for line in first.events]
        assert shown(first.peers[0]) in details.locator("dd").all_text_contents()
        # Nothing the strings held became an element or a handler; the page's own img and script only.
        assert page.evaluate("""() => ({
            img: document.querySelectorAll("img").length, script: document.querySelectorAll("script").length,
            other: document.querySelectorAll("iframe, svg, b, i, marquee, object, embed, a[href^=javascript]").length,
            handlers: [...document.querySelectorAll("*")].flatMap(e => [...e.attributes])
                        .filter(a => a.name.startsWith("on")).length,
            links: [...document.querySelectorAll("main a")].length,
        })""") == {"img": 1, "script": 1, "other": 0, "handlers": 0, "links": 0}
        nothing_went_wrong(page)
    finally:
        page.close()


def test_a_thousand_records_load_newest_first(chromium: Browser, threaded_proxy: ThreadedProxy) -> None:
    def fill() -> str:
        stats = threaded_proxy.server.stats
        last = ""
        for i in range(1000):
            record = stats.begin("GET", f"http://mirror.example/file-{i:04d}.iso", "127.0.0.1")
            record.bytes_origin, record.bytes_peers = 10_000, 1000 * (i % 10)
            stats.finish(record, 200, record.bytes_origin + record.bytes_peers, 0.5)
            last = record.id
        return last

    newest = threaded_proxy.call(fill)
    page = open_page(chromium, threaded_proxy.address)
    try:
        rows = page.locator("#recent tr.record")
        assert rows.count() == 100
        assert rows.first.get_attribute("data-id") == newest
        assert rows.first.locator("td.url").text_content() == "http://mirror.example/file-0999.iso"
        assert rows.nth(99).locator("td.url").text_content() == "http://mirror.example/file-0900.iso"
        # "Show more": the next hundred, in this page only.
        page.get_by_role("button", name="Show more").click()
        page.wait_for_function("() => document.querySelectorAll('#recent tr.record').length === 200")
        assert rows.nth(199).locator("td.url").text_content() == "http://mirror.example/file-0800.iso"
        nothing_went_wrong(page)
    finally:
        page.close()


class Download(threading.Thread):
    """A GET through the proxy, read to its end in a thread (the browser only watches)."""

    def __init__(self, proxy: str, url: str) -> None:
        super().__init__(daemon=True)
        self.proxy, self.url, self.size, self.error = proxy, url, 0, None
        self.start()

    def run(self) -> None:
        host, port = self.proxy.rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            connection.request("GET", self.url)
            response = connection.getresponse()
            while chunk := response.read(65536):
                self.size += len(chunk)
        except OSError as exc:
            self.error = exc
        finally:
            connection.close()


def test_the_page_follows_a_download_and_survives_a_restart(chromium: Browser, drip: DrippingOrigin,
                                                             tmp_path: Path) -> None:
    port = free_port()
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
    proxy = ProxyProcess(tmp_path / "first", listen=f"127.0.0.1:{port}")
    page = None
    try:
        page = open_page(chromium, proxy.address)
        url = drip.url(f"{uuid.uuid4().hex}.bin")
        download = Download(proxy.address, url)
        # The download shows under way, and its bytes grow from one poll to a later one.
        row = page.locator("#under-way tr.record").filter(has_text=url)
        row.wait_for()
        first = row.locator("td.bytes").text_content()
        page.wait_for_function("""([url, first]) => [...document.querySelectorAll("#under-way tr.record")]
            .some(r => r.querySelector("td.url").textContent === url
                       && r.querySelector("td.bytes").textContent !== first)""", arg=[url, first])
        drip.release.set()
        download.join(30)
        assert download.error is None and download.size > 0
        # Finished: gone from "under way", first among the recent ones, its bytes in the rate plot's data.
        page.wait_for_function("""url => !document.querySelector("#under-way tr.record")
            && document.querySelector("#recent tr.record td.url")?.textContent === url""", arg=url)

        # The proxy dies: the page says so, and keeps asking.
        proxy.process.kill()
        proxy.process.wait(10)
        page.wait_for_function("() => document.body.dataset.state === 'down'")
        assert page.locator("#down").is_visible()
        assert page.locator("#state").text_content() == "not answering"
        # A new proxy on the same port: the page is live again without a reload, with the new process's history.
        proxy = ProxyProcess(tmp_path / "second", listen=f"127.0.0.1:{port}")
        page.wait_for_function("() => document.body.dataset.state === 'up'")
        assert page.locator("#down").is_hidden()
        page.wait_for_function("() => !document.querySelector('#recent tr.record')")  # (nothing kept across restarts)
        assert page.evaluate("window.__violations") == [] and page.seen["dialogs"] == []
        assert page.seen["errors"] == []
    finally:
        if page is not None:
            page.close()
        proxy.stop()


def test_firefox_loads_the_page_follows_a_download_and_survives_a_restart(firefox: Firefox, drip: DrippingOrigin,
                                                                         tmp_path: Path) -> None:
    port = free_port()
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
    proxy = ProxyProcess(tmp_path / "first", listen=f"127.0.0.1:{port}")
    context = firefox.new_tab()
    try:
        firefox.navigate(context, f"http://{proxy.address}/_swarm/")
        firefox.wait_for(context, "() => Number(document.body.dataset.polls || 0) >= 1")
        assert firefox.evaluate(context, "document.body.dataset.state") == "up"
        url = drip.url(f"{uuid.uuid4().hex}.bin")
        download = Download(proxy.address, url)
        check = f"""() => [...document.querySelectorAll("#under-way tr.record td.url")]
            .some(td => td.textContent === {json.dumps(url)})"""
        firefox.wait_for(context, check)
        drip.release.set()
        download.join(30)
        assert download.error is None and download.size > 0
        firefox.wait_for(context, f"""() => document.querySelector("#recent tr.record td.url")?.textContent
            === {json.dumps(url)}""")
        assert firefox.evaluate(context, "document.querySelectorAll('script').length") == 1

        proxy.process.kill()
        proxy.process.wait(10)
        firefox.wait_for(context, "() => document.body.dataset.state === 'down'")
        assert firefox.evaluate(context, "document.getElementById('down').hidden") is False
        proxy = ProxyProcess(tmp_path / "second", listen=f"127.0.0.1:{port}")
        live = "() => document.body.dataset.state === 'up' && document.getElementById('down').hidden"
        firefox.wait_for(context, live)
        firefox.wait_for(context, "() => !document.querySelector('#recent tr.record')")
    finally:
        firefox.send("browsingContext.close", {"context": context})
        proxy.stop()


def test_firefox_shows_hostile_urls_and_names_as_text(firefox: Firefox, threaded_proxy: ThreadedProxy) -> None:
    records = [threaded_proxy.record(url=url, swarm_skipped=f"private {name}", transition=name,
                                     events=[f"+0.10s {name}"])
               for url, name in zip(HOSTILE_URLS, HOSTILE_NAMES * 3)]
    # Before any script of the page (BiDi's preload script, in the page's own realm): its CSP reports, its dialogs.
    preload = firefox.send("script.addPreloadScript", {"functionDeclaration": """() => {
        window.__violations = []; window.__dialogs = [];
        document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective));
        window.alert = window.confirm = window.prompt = (m) => { window.__dialogs.push(String(m)); };
    }"""})["script"]
    context = firefox.new_tab()
    try:
        firefox.navigate(context, f"http://{threaded_proxy.address}/_swarm/")
        firefox.wait_for(context, "() => Number(document.body.dataset.polls || 0) >= 1")
        cells = firefox.evaluate(context, """Object.fromEntries([...document.querySelectorAll("#recent tr.record")]
            .map(r => [r.dataset.id, [r.querySelector("td.url").textContent, r.querySelector("td.why").textContent,
                                      r.querySelector("td.transition").textContent]]))""")
        for record in records:
            assert cells[record.id] == [shown(record.shown()["url"]), shown(record.swarm_skipped or ""),
                                        shown(record.transition or "")]
        assert firefox.evaluate(context, """({
            img: document.querySelectorAll("img").length, script: document.querySelectorAll("script").length,
            other: document.querySelectorAll("iframe, svg, b, marquee, main a").length,
            handlers: [...document.querySelectorAll("*")].flatMap(e => [...e.attributes])
                        .filter(a => a.name.startsWith("on")).length,
            violations: window.__violations, dialogs: window.__dialogs,
        })""") == {"img": 1, "script": 1, "other": 0, "handlers": 0, "violations": [], "dialogs": []}
    finally:
        firefox.send("browsingContext.close", {"context": context})
        firefox.send("script.removePreloadScript", {"script": preload})
