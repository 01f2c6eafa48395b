"""The extension in a real Firefox ESR (Debian's), driven over WebDriver BiDi (tests/extension/firefox_bidi.py; no
geckodriver), against a real `swarmproxy run` and a local origin: proxy.onRequest sends a listed site through
the proxy, an unlisted one direct, switching off restores direct, a stopped proxy falls back to direct with the
badge on ERR. Waits are on conditions (polled in the page, with timeouts). Screenshots of the popup and the
options page go to extension/screenshots/firefox-*.png."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from .conftest import DOWNLOAD, SCREENSHOTS, Origin, ProxyProcess
from .firefox_bidi import EXTENSION_UUID, BiDiError, Firefox

pytestmark = pytest.mark.e2e
PAGES = f"moz-extension://{EXTENSION_UUID}/src"


@pytest.fixture
def popup(firefox: Firefox) -> Iterator[str]:
    context = firefox.new_tab()
    firefox.navigate(context, f"{PAGES}/popup.html")
    yield context
    firefox.send("browsingContext.close", {"context": context})


def configure(firefox: Firefox, context: str, **config) -> dict:
    answer = firefox.evaluate(context, f"browser.runtime.sendMessage({{type: 'set', config: {json.dumps(config)}}})")
    assert "failure" not in answer, answer
    return answer


def visit(firefox: Firefox, origin: Origin) -> tuple[str, str]:
    path = f"/page/{uuid.uuid4().hex}"
    context = firefox.new_tab()
    try:
        firefox.navigate(context, origin.url(path))
        return path, firefox.evaluate(context, "document.getElementById('via').textContent")
    finally:
        firefox.send("browsingContext.close", {"context": context})


def badge_is(firefox: Firefox, context: str, text: str) -> None:
    firefox.wait_for(context, f"() => browser.action.getBadgeText({{}}).then(t => t === {json.dumps(text)})")


def test_firefox_listed_site_through_the_proxy_unlisted_direct_off(firefox: Firefox, popup: str, origin: Origin,
                                                                  swarmproxy: ProxyProcess) -> None:
    state = configure(firefox, popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
    assert state["ok"] is True and state["badge"] == "ON" and state["firefox"] is True, state
    badge_is(firefox, popup, "ON")

    path, via = visit(firefox, origin)
    assert "swarmproxy" in via, via
    assert origin.url(path) in swarmproxy.requests()

    configure(firefox, popup, rules=["downloads.example.org"])
    path, via = visit(firefox, origin)
    assert via == "direct" and origin.via_of(path) == [None]
    assert origin.url(path) not in swarmproxy.requests()

    configure(firefox, popup, mode="all", exclude=[origin.host])
    assert visit(firefox, origin)[1] == "direct"
    configure(firefox, popup, exclude=[])
    assert "swarmproxy" in visit(firefox, origin)[1]

    # Off, by the popup's own switch.
    firefox.navigate(popup, f"{PAGES}/popup.html")
    firefox.wait_for(popup, "() => document.querySelector('input[value=all]').checked")
    firefox.evaluate(popup, "document.querySelector('input[value=off]').click()")
    firefox.wait_for(popup, "() => document.getElementById('modes').dataset.applied === 'off'")
    badge_is(firefox, popup, "OFF")
    path, via = visit(firefox, origin)
    assert via == "direct" and origin.url(path) not in swarmproxy.requests()


def test_firefox_stopped_proxy_falls_back_to_direct_with_badge_err(firefox: Firefox, popup: str, origin: Origin,
                                                                   swarmproxy: ProxyProcess) -> None:
    configure(firefox, popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
    badge_is(firefox, popup, "ON")
    assert "swarmproxy" in visit(firefox, origin)[1]

    swarmproxy.stop()
    path, via = visit(firefox, origin)
    assert via == "direct" and origin.via_of(path) == [None]
    badge_is(firefox, popup, "ERR")
    firefox.navigate(popup, f"{PAGES}/popup.html")
    firefox.wait_for(popup, "() => document.getElementById('running').textContent === 'not answering'")


def test_firefox_screenshots_of_popup_and_options(firefox: Firefox, popup: str, origin: Origin,
                                                  swarmproxy: ProxyProcess) -> None:
    """As in Chromium: two pages through the proxy, then the site unlisted and open in the tab before the popup."""
    SCREENSHOTS.mkdir(exist_ok=True)
    rules = ["*.mirrors.example.org", "downloads.example.com"]
    configure(firefox, popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host],
              exclude=["*.bank.example"])
    assert all("swarmproxy" in visit(firefox, origin)[1] for _ in range(2))
    configure(firefox, popup, rules=rules)
    site = firefox.new_tab()
    page = None
    try:
        firefox.navigate(site, origin.url("/page/home"))
        firefox.send("browsingContext.activate", {"context": site})
        page = firefox.new_tab()
        firefox.set_viewport(page, 354, 330)
        firefox.navigate(page, f"{PAGES}/popup.html")
        firefox.wait_for(page, "() => document.getElementById('running').textContent === 'running'")
        firefox.wait_for(page, r"""() => /^0 of ([2-9]|\d\d+) requests today$/
            .test(document.getElementById('swarmed').textContent)""")
        firefox.wait_for(page, "() => document.getElementById('site-state').textContent === 'not listed · direct'")
        assert firefox.evaluate(page, "document.getElementById('peers').textContent") == "0 B today"
        assert firefox.evaluate(page, "document.getElementById('status-page').href") == \
            f"http://{swarmproxy.address}/_swarm/"
        firefox.screenshot(page, SCREENSHOTS / "firefox-popup.png", origin="viewport")
    finally:
        for context in (site, page):
            if context is not None:
                firefox.send("browsingContext.close", {"context": context})

    firefox.set_viewport(popup, 800, 640)
    firefox.navigate(popup, f"{PAGES}/options.html")
    firefox.wait_for(popup, f"() => document.getElementById('proxy').value === {json.dumps(swarmproxy.address)}")
    assert firefox.evaluate(popup, "document.getElementById('rules').value") == "\n".join(rules)
    firefox.evaluate(popup, "document.getElementById('save').click()")
    firefox.wait_for(popup, "() => document.getElementById('saved').dataset.state === 'saved'")
    firefox.screenshot(popup, SCREENSHOTS / "firefox-options.png", origin="viewport")


def test_firefox_https_download_on_listed_site_goes_through_the_fetch_endpoint(firefox: Firefox, popup: str,
                                                                              origin: Origin,
                                                                              swarmproxy: ProxyProcess) -> None:
    configure(firefox, popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
    name = f"data-{uuid.uuid4().hex[:8]}.bin"
    file_url = origin.tls_url(f"/files/{name}")
    fetch = f"http://{swarmproxy.address}/_swarm/fetch?url={quote(file_url, safe='')}"
    page = firefox.new_tab()
    try:
        firefox.navigate(page, origin.url(f"/links/x?to={file_url}"))
        firefox.evaluate(page, "document.getElementById('link').click()")
        item = firefox.wait_for(popup, f"""() => browser.downloads.search({{url: {json.dumps(fetch)}}})
            .then(items => items.length === 1 && items[0].state !== "in_progress" ? items[0] : false)""")
    finally:
        firefox.send("browsingContext.close", {"context": page})
    assert item["state"] == "complete", item
    assert Path(item["filename"]) == firefox.downloads / name
    assert hashlib.sha256(Path(item["filename"]).read_bytes()).digest() == hashlib.sha256(DOWNLOAD).digest()
    assert firefox.evaluate(popup, f"browser.downloads.search({{url: {json.dumps(file_url)}}})") == []
    assert file_url in swarmproxy.requests()


def test_firefox_tab_badge_shows_the_transition_cause_of_a_slow_page(firefox: Firefox, popup: str, origin: Origin,
                                                                     swarmproxy: ProxyProcess) -> None:
    configure(firefox, popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
    url = origin.url(f"/slow/{uuid.uuid4().hex}.html")
    page = firefox.new_tab()
    try:
        firefox.navigate(page, url)
        assert "swarmproxy" in firefox.evaluate(page, "document.getElementById('via').textContent")
        # (Firefox's match patterns have no port: query every tab and compare.)
        tab_id = firefox.evaluate(
            popup, f"browser.tabs.query({{}}).then(ts => ts.find(t => t.url === {json.dumps(url)}).id)")
        firefox.wait_for(popup, f"() => browser.action.getBadgeText({{tabId: {tab_id}}}).then(t => t === 'T')")
        title = firefox.evaluate(popup, f"browser.action.getTitle({{tabId: {tab_id}}})")
        # The page's origin is a special-purpose address (192.0.2.x): never shared, and the popup says why.
        assert "switched, T; no peer data (private-origin)" in title, title
        assert firefox.evaluate(popup, "browser.action.getBadgeText({})") == "ON"
        configure(firefox, popup, mode="off")
        firefox.wait_for(popup, f"() => browser.action.getBadgeText({{tabId: {tab_id}}}).then(t => t === 'OFF')")
    finally:
        firefox.send("browsingContext.close", {"context": page})


def test_firefox_add_this_site_from_the_popup(firefox: Firefox, popup: str, origin: Origin,
                                              swarmproxy: ProxyProcess) -> None:
    """As in Chromium: the popup page opened right after a site's tab takes that tab for the current site."""
    configure(firefox, popup, mode="listed", proxy=swarmproxy.address, rules=["downloads.example.org"], exclude=[])
    site = firefox.new_tab()
    page = None
    try:
        firefox.navigate(site, origin.url(f"/page/{uuid.uuid4().hex}"))
        assert firefox.evaluate(site, "document.getElementById('via').textContent") == "direct"
        firefox.send("browsingContext.activate", {"context": site})
        page = firefox.new_tab()
        firefox.navigate(page, f"{PAGES}/popup.html")
        firefox.wait_for(page, f"() => document.getElementById('site-host').textContent === {json.dumps(origin.host)}")
        firefox.wait_for(page, "() => document.getElementById('site-state').textContent === 'not listed · direct'")
        firefox.evaluate(page, "document.getElementById('add-site').click()")
        firefox.wait_for(
            page, "() => document.getElementById('site-state').textContent === 'listed · through swarmproxy'")
        rules = firefox.evaluate(page, "browser.runtime.sendMessage({type: 'get'}).then(s => s.config.rules)")
        assert sorted(rules) == sorted(["downloads.example.org", origin.host])
        path, via = visit(firefox, origin)
        assert "swarmproxy" in via and origin.url(path) in swarmproxy.requests()
    finally:
        for context in (site, page):
            if context is not None:
                firefox.send("browsingContext.close", {"context": context})


def test_firefox_download_with_swarmproxy_from_the_context_menu(firefox: Firefox, popup: str, origin: Origin,
                                                                swarmproxy: ProxyProcess) -> None:
    """The menu item exists; its click handler, called in the background page (runtime.getBackgroundPage: BiDi
    cannot open the native context menu either), downloads an https:// link of an unlisted site through
    /_swarm/fetch, byte-exact under its own name."""
    configure(firefox, popup, mode="listed", proxy=swarmproxy.address, rules=[], exclude=[])
    assert firefox.evaluate(popup, "browser.contextMenus.update('swarmproxy-download', {}).then(() => true)")
    name = f"menu-{uuid.uuid4().hex[:8]}.bin"
    file_url = origin.tls_url(f"/files/{name}")
    info = {"menuItemId": "swarmproxy-download", "linkUrl": file_url, "pageUrl": origin.url("/links/x")}
    download_id = firefox.evaluate(
        popup, f"browser.runtime.getBackgroundPage().then(bg => bg.swarmproxy.menuClicked({json.dumps(info)}))")
    item = firefox.wait_for(popup, f"""() => browser.downloads.search({{id: {int(download_id)}}})
        .then(items => items.length === 1 && items[0].state !== "in_progress" ? items[0] : false)""")
    assert item["state"] == "complete", item
    assert item["url"] == f"http://{swarmproxy.address}/_swarm/fetch?url={quote(file_url, safe='')}"
    assert Path(item["filename"]) == firefox.downloads / name
    assert hashlib.sha256(Path(item["filename"]).read_bytes()).digest() == hashlib.sha256(DOWNLOAD).digest()
    assert file_url in swarmproxy.requests()


TAKER_ID = "proxy-taker@swarmproxy.invalid"


def test_firefox_another_extension_holding_proxy_settings_is_no_conflict(firefox: Firefox, popup: str,
                                                                         origin: Origin, swarmproxy: ProxyProcess,
                                                                         tmp_path: Path) -> None:
    """Another extension takes proxy.settings (everything direct). In Firefox it needs the private-browsing
    permission for that, which webExtension.install cannot grant: the test grants it as a user would in
    about:addons, by privileged script in the browser's own window (BiDi's chrome scope, which
    --remote-allow-system-access opens). Ours reads levelOfControl "controlled_by_other_extensions" but routes by
    proxy.onRequest, which wins over that setting: no warning, the badge ON, the listed site through the proxy."""
    taker = tmp_path / "taker"
    taker.mkdir()
    (taker / "manifest.json").write_text(json.dumps({
        "manifest_version": 3, "name": "proxy-taker", "version": "1.0", "permissions": ["proxy"],
        "background": {"scripts": ["background.js"]}, "browser_specific_settings": {"gecko": {"id": TAKER_ID}}}))
    (taker / "background.js").write_text("")
    (taker / "page.html").write_text("<!doctype html><title>proxy-taker</title>")
    configure(firefox, popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
    badge_is(firefox, popup, "ON")
    try:
        chrome = firefox.send("browsingContext.getTree", {"moz:scope": "chrome"})["contexts"][0]["context"]
    except BiDiError as err:
        pytest.skip(f"no privileged (chrome) scope over BiDi here, to grant the private-browsing permission: {err}")
    assert firefox.install_extension(taker) == TAKER_ID
    page = firefox.new_tab()
    try:
        taker_page = firefox.evaluate(chrome, f"""(async () => {{
            const {{ ExtensionPermissions }} = ChromeUtils.importESModule(
                "resource://gre/modules/ExtensionPermissions.sys.mjs");
            const {{ AddonManager }} = ChromeUtils.importESModule("resource://gre/modules/AddonManager.sys.mjs");
            await ExtensionPermissions.add({json.dumps(TAKER_ID)},
                {{permissions: ["internal:privateBrowsingAllowed"], origins: []}});
            await (await AddonManager.getAddonByID({json.dumps(TAKER_ID)})).reload();
            return WebExtensionPolicy.getByID({json.dumps(TAKER_ID)}).getURL("page.html");
        }})()""")
        firefox.navigate(page, taker_page)
        assert firefox.evaluate(page, "browser.proxy.settings.set({value: {proxyType: 'none'}})") is True
        assert firefox.evaluate(page, "browser.proxy.settings.get({}).then(s => s.levelOfControl)") == (
            "controlled_by_this_extension")

        assert firefox.evaluate(popup, "browser.proxy.settings.get({}).then(s => s.levelOfControl)") == (
            "controlled_by_other_extensions")
        state = firefox.evaluate(popup, "browser.runtime.sendMessage({type: 'get', refresh: true})")
        assert state["control"] == "controlled_by_other_extensions", state
        assert state["conflict"] is False and state["badge"] == "ON", state
        firefox.navigate(popup, f"{PAGES}/popup.html")
        firefox.wait_for(popup, "() => document.getElementById('badge').textContent === 'ON'")
        assert firefox.evaluate(popup, "document.getElementById('conflict').hidden") is True
        path, via = visit(firefox, origin)
        assert "swarmproxy" in via and origin.url(path) in swarmproxy.requests()
    finally:
        firefox.send("browsingContext.close", {"context": page})
        firefox.send("webExtension.uninstall", {"extension": TAKER_ID})
