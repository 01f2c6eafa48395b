"""The extension in a real Chromium (Debian's, driven by Playwright), against a real `swarmproxy run` on a port
of the kernel's choosing and a local origin: the generated PAC script sends a listed site through the proxy,
an unlisted one direct, switching off restores direct, and a stopped proxy falls back to direct with the badge
on ERR. Every wait is on a condition (Playwright's expect and wait_for_function, with timeouts). The popup and
the options page are photographed into extension/screenshots/."""

from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from .conftest import DOWNLOAD, SCREENSHOTS, Browser, Origin, ProxyProcess

pytestmark = pytest.mark.e2e


def visit(browser: Browser, origin: Origin) -> tuple[str, str]:
    """Loads a fresh origin page in a new tab; returns its path and what the page says about Via."""
    path = f"/page/{uuid.uuid4().hex}"
    page = browser.context.new_page()
    try:
        response = page.goto(origin.url(path))
        assert response is not None and response.ok, response
        return path, page.locator("#via").inner_text()
    finally:
        page.close()


def wait_for_async(page, expression: str, arg: object = None) -> object:
    """Waits until the async `expression` (a function of `arg` returning a promise) resolves to something
    truthy, and returns that. wait_for_function would take the promise itself for true: each poll starts the
    call and looks at the last one that finished."""
    page.evaluate("() => { window.__swarmproxyLast = undefined; }")
    return page.wait_for_function(f"""arg => {{
        Promise.resolve(({expression})(arg)).then(v => {{ window.__swarmproxyLast = v; }});
        return window.__swarmproxyLast || false;
    }}""", arg=arg).json_value()


def badge_is(page, text: str) -> None:
    wait_for_async(page, "text => chrome.action.getBadgeText({}).then(t => t === text)", text)


def test_listed_site_goes_through_the_proxy_unlisted_direct(chromium: Browser, origin: Origin,
                                                             swarmproxy: ProxyProcess) -> None:
    from playwright.sync_api import expect

    popup = chromium.page("src/popup.html")
    try:
        state = chromium.configure(popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
        assert state["ok"] is True and state["badge"] == "ON", state
        assert state["control"] == "controlled_by_this_extension", state
        badge_is(popup, "ON")

        path, via = visit(chromium, origin)
        assert "swarmproxy" in via, via  # the origin saw the proxy's Via
        assert origin.url(path) in swarmproxy.requests()

        # Not listed (the list names another host): direct, and the proxy never sees it.
        chromium.configure(popup, rules=["downloads.example.org"])
        path, via = visit(chromium, origin)
        assert via == "direct"
        assert origin.via_of(path) == [None]
        assert origin.url(path) not in swarmproxy.requests()

        # Everything, but the host excluded: direct; the exclusion removed, through the proxy.
        chromium.configure(popup, mode="all", exclude=[origin.host])
        assert visit(chromium, origin)[1] == "direct"
        chromium.configure(popup, exclude=[])
        path, via = visit(chromium, origin)
        assert "swarmproxy" in via and origin.url(path) in swarmproxy.requests()

        # Off, by the popup's own switch: direct again, the badge OFF.
        popup.reload()
        popup.get_by_label("Off").check()
        expect(popup.locator("#modes")).to_have_attribute("data-applied", "off")
        badge_is(popup, "OFF")
        path, via = visit(chromium, origin)
        assert via == "direct" and origin.url(path) not in swarmproxy.requests()
        assert chromium.worker.evaluate("chrome.proxy.settings.get({}).then(s => s.value.mode)") == "system"
    finally:
        popup.close()


def test_stopped_proxy_falls_back_to_direct_with_badge_err(chromium: Browser, origin: Origin,
                                                           swarmproxy: ProxyProcess) -> None:
    from playwright.sync_api import expect

    popup = chromium.page("src/popup.html")
    try:
        chromium.configure(popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
        badge_is(popup, "ON")
        assert "swarmproxy" in visit(chromium, origin)[1]

        swarmproxy.stop()
        # Browsing goes on, direct (the PAC's "PROXY …; DIRECT"), and the failed proxy attempt makes the
        # extension re-check at once: the badge turns ERR without waiting for its periodic check.
        path, via = visit(chromium, origin)
        assert via == "direct" and origin.via_of(path) == [None]
        badge_is(popup, "ERR")
        popup.reload()
        expect(popup.locator("#badge")).to_have_text("ERR")
        expect(popup.locator("#running")).to_have_text("not answering")
    finally:
        popup.close()


def test_screenshots_of_popup_and_options(chromium: Browser, origin: Origin, swarmproxy: ProxyProcess) -> None:
    """Photographs the popup and the options page (extension/screenshots/, shown in extension/README.md)."""
    from playwright.sync_api import expect

    SCREENSHOTS.mkdir(exist_ok=True)
    rules = ["*.mirrors.example.org", "downloads.example.com"]
    # Two pages through the proxy (today's counters), then the site unlisted and open in the tab before the
    # popup: the popup offers "Add this site" for it.
    chromium.worker.evaluate("config => swarmproxy.setConfig(config).then(() => true)", {
        "mode": "listed", "proxy": swarmproxy.address, "rules": [origin.host], "exclude": ["*.bank.example"]})
    assert all("swarmproxy" in visit(chromium, origin)[1] for _ in range(2))
    chromium.worker.evaluate("rules => swarmproxy.setConfig({rules}).then(() => true)", rules)
    site = chromium.context.new_page()
    site.goto(origin.url("/page/home"))
    site.bring_to_front()
    popup = chromium.page("src/popup.html")
    try:
        popup.set_viewport_size({"width": 354, "height": 330})
        expect(popup.locator("#running")).to_have_text("running")
        expect(popup.locator("#version")).to_have_text(swarmproxy.get("/_swarm/status")["version"])
        # (2 pages, and whatever else the browser asked the site for through the proxy, e.g. /favicon.ico)
        expect(popup.locator("#swarmed")).to_have_text(re.compile(r"^0 of ([2-9]|\d\d+) requests today$"))
        expect(popup.locator("#peers")).to_have_text("0 B today")
        expect(popup.locator("#site-state")).to_have_text("not listed · direct")
        expect(popup.locator("#status-page")).to_have_attribute("href", f"http://{swarmproxy.address}/_swarm/")
        popup.locator("body").screenshot(path=str(SCREENSHOTS / "chromium-popup.png"))
    finally:
        popup.close()
        site.close()

    options = chromium.page("src/options.html")
    try:
        options.set_viewport_size({"width": 800, "height": 640})
        expect(options.locator("#proxy")).to_have_value(swarmproxy.address)
        expect(options.locator("#rules")).to_have_value("\n".join(rules))
        # A bad pattern is reported and nothing is saved.
        options.locator("#exclude").fill("*.bank.example\nnot a^host")
        options.get_by_role("button", name="Save").click()
        expect(options.locator("#errors")).to_contain_text("a^host")
        options.locator("#exclude").fill("*.bank.example")
        options.get_by_role("button", name="Save").click()
        expect(options.locator("#saved")).to_have_attribute("data-state", "saved")
        expect(options.locator("#errors")).to_be_hidden()
        options.screenshot(path=str(SCREENSHOTS / "chromium-options.png"), full_page=True)
    finally:
        options.close()


def test_https_download_on_listed_site_goes_through_the_fetch_endpoint(chromium: Browser, origin: Origin,
                                                                      swarmproxy: ProxyProcess,
                                                                      tmp_path: Path) -> None:
    """A click on an https:// link of a listed site: the extension replaces the browser's download with one
    through /_swarm/fetch, which the proxy fetches (and could swarm) itself; the file lands byte-exact under
    its own name."""
    popup = chromium.page("src/popup.html")
    page = chromium.context.new_page()
    # Playwright saves downloads under random names; let Chromium name them as it would for a user.
    cdp = chromium.context.new_cdp_session(page)
    cdp.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    try:
        chromium.configure(popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
        name = f"data-{uuid.uuid4().hex[:8]}.bin"
        file_url = origin.tls_url(f"/files/{name}")
        page.goto(origin.url(f"/links/x?to={file_url}"))
        page.locator("#link").click()
        item = wait_for_async(popup, """async url => {
            const items = await chrome.downloads.search({url});
            return items.length === 1 && items[0].state !== "in_progress" ? items[0] : false;
        }""", fetch_url(swarmproxy.address, file_url))
        assert item["state"] == "complete", item
        assert Path(item["filename"]) == tmp_path / name
        assert item["fileSize"] == len(DOWNLOAD) and item["totalBytes"] == len(DOWNLOAD)
        assert hashlib.sha256(Path(item["filename"]).read_bytes()).digest() == hashlib.sha256(DOWNLOAD).digest()
        # The browser's own download of the https:// URL was cancelled and erased: one item, the fetch.
        others = chromium.worker.evaluate("url => chrome.downloads.search({url})", file_url)
        assert others == [], others
        assert file_url in swarmproxy.requests()  # the proxy fetched it, over TLS, itself
    finally:
        cdp.detach()
        page.close()
        popup.close()


def fetch_url(proxy: str, url: str) -> str:
    return f"http://{proxy}/_swarm/fetch?url={quote(url, safe='')}"


def test_tab_badge_shows_the_transition_cause_of_a_slow_page(chromium: Browser, origin: Origin,
                                                             swarmproxy: ProxyProcess) -> None:
    """A listed page whose origin answers later than T: the proxy switches (T; no peers here), and that tab's
    badge says T, its title why no peer data came; switched off, the tab shows the global OFF again."""
    popup = chromium.page("src/popup.html")
    page = chromium.context.new_page()
    try:
        chromium.configure(popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
        url = origin.url(f"/slow/{uuid.uuid4().hex}.html")
        response = page.goto(url)
        assert "swarmproxy" in page.locator("#via").inner_text()
        # The proxy named its record of this response (Swarm-Request), which is how the extension found it.
        record = swarmproxy.get(f"/_swarm/requests/{response.headers['swarm-request']}")
        assert record["url"] == url and record["transition"] == "T", record
        tab_id = popup.evaluate("url => chrome.tabs.query({url}).then(([tab]) => tab.id)", url)
        wait_for_async(popup, "tabId => chrome.action.getBadgeText({tabId}).then(t => t === 'T')", tab_id)
        title = popup.evaluate("tabId => chrome.action.getTitle({tabId})", tab_id)
        # The page's origin is a special-purpose address (192.0.2.x): never shared, and the popup says why.
        assert "switched, T; no peer data (private-origin)" in title, title
        # Other tabs keep the global badge.
        assert popup.evaluate("chrome.action.getBadgeText({})") == "ON"

        chromium.configure(popup, mode="off")
        wait_for_async(popup, "tabId => chrome.action.getBadgeText({tabId}).then(t => t === 'OFF')", tab_id)
    finally:
        page.close()
        popup.close()


def test_add_this_site_from_the_popup(chromium: Browser, origin: Origin, swarmproxy: ProxyProcess) -> None:
    """The popup opened (as a page: no automation opens the toolbar popup) right after a site's tab takes that tab
    for the current site; "Add this site" lists it, and the site's next page goes through the proxy."""
    from playwright.sync_api import expect

    site = chromium.context.new_page()
    popup = None
    try:
        chromium.worker.evaluate("config => swarmproxy.setConfig(config).then(() => true)", {
            "mode": "listed", "proxy": swarmproxy.address, "rules": ["downloads.example.org"], "exclude": []})
        site.goto(origin.url(f"/page/{uuid.uuid4().hex}"))
        assert site.locator("#via").inner_text() == "direct"
        site.bring_to_front()
        popup = chromium.page("src/popup.html")
        expect(popup.locator("#site-host")).to_have_text(origin.host)
        expect(popup.locator("#site-state")).to_have_text("not listed · direct")
        popup.get_by_role("button", name="Add this site").click()
        expect(popup.locator("#site-state")).to_have_text("listed · through swarmproxy")
        expect(popup.locator("#add-site")).to_be_hidden()
        assert sorted(chromium.worker.evaluate("swarmproxy.state.config.rules")) == sorted(
            ["downloads.example.org", origin.host])
        path, via = visit(chromium, origin)
        assert "swarmproxy" in via and origin.url(path) in swarmproxy.requests()
    finally:
        site.close()
        if popup is not None:
            popup.close()


def test_download_with_swarmproxy_from_the_context_menu(chromium: Browser, origin: Origin,
                                                        swarmproxy: ProxyProcess, tmp_path: Path) -> None:
    """The menu item exists on links; its click handler (driven through the service worker: no automation opens
    the browser's native context menu) downloads the link, an https:// file of a site not listed, through
    /_swarm/fetch, byte-exact under its own name."""
    popup = chromium.page("src/popup.html")
    cdp = chromium.context.new_cdp_session(popup)
    cdp.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    try:
        chromium.configure(popup, mode="listed", proxy=swarmproxy.address, rules=[], exclude=[])
        # update() fails for an item that does not exist: this is the one the handler answers to.
        menu = chromium.worker.evaluate("""() => chrome.contextMenus.update(swarmproxy.MENU_ID, {})
            .then(() => swarmproxy.MENU_ID)""")
        name = f"menu-{uuid.uuid4().hex[:8]}.bin"
        file_url = origin.tls_url(f"/files/{name}")
        download_id = chromium.worker.evaluate(
            "info => swarmproxy.menuClicked(info)",
            {"menuItemId": menu, "linkUrl": file_url, "pageUrl": origin.url("/links/x"), "editable": False})
        item = wait_for_async(popup, """async id => {
            const [item] = await chrome.downloads.search({id});
            return item && item.state !== "in_progress" ? item : false;
        }""", download_id)
        assert item["state"] == "complete", item
        assert item["url"] == fetch_url(swarmproxy.address, file_url)
        assert Path(item["filename"]) == tmp_path / name
        assert hashlib.sha256(Path(item["filename"]).read_bytes()).digest() == hashlib.sha256(DOWNLOAD).digest()
        assert file_url in swarmproxy.requests()
        # Another menu's click (or one without a link) does nothing.
        assert chromium.worker.evaluate("swarmproxy.menuClicked({menuItemId: 'other', linkUrl: 'http://x/'})") is None
    finally:
        cdp.detach()
        popup.close()


def test_the_popup_opens_the_proxys_status_page(chromium: Browser, swarmproxy: ProxyProcess) -> None:
    """The popup's "status page" link points at the configured proxy, and opens its page in a tab of its own, which
    the proxy serves (the browser's own request, not an extension page's) and which goes live."""
    from playwright.sync_api import expect

    popup = chromium.page("src/popup.html")
    try:
        chromium.configure(popup, mode="listed", proxy=swarmproxy.address, rules=[], exclude=[])
        popup.reload()
        link = popup.locator("#status-page")
        expect(link).to_have_attribute("href", f"http://{swarmproxy.address}/_swarm/")
        with chromium.context.expect_page() as opened:
            link.click()
        page = opened.value
        try:
            page.wait_for_function("() => document.body.dataset.state === 'up'")
            assert page.url == f"http://{swarmproxy.address}/_swarm/"
        finally:
            page.close()
    finally:
        if not popup.is_closed():
            popup.close()
