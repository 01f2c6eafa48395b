"""Another extension takes Chromium's proxy setting: ours says so (badge ERR, the warning in the popup and on the
options page, from `levelOfControl`), and takes control back when the other one is removed.

The other extension is written by the test (a Manifest V3 extension with the "proxy" permission whose service
worker sets `chrome.proxy.settings` to direct) and loaded while ours runs, through the DevTools protocol
(`Extensions.loadUnpacked`, which Chromium offers with `--enable-unsafe-extension-debugging` on Playwright's pipe):
installed after ours, it wins the setting, as an extension a user installs later would; `Extensions.uninstall`
removes it. A browser of its own (this module's), so that the other modules' tests never meet the other extension.
Every wait is on a condition, with a timeout.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Browser, Origin, ProxyProcess, launch_chromium
from .test_chromium import badge_is, visit, wait_for_async

pytestmark = pytest.mark.e2e

WARNING = "Another extension (or a policy) controls the browser's proxy setting"
TAKER_WORKER = """// Takes the browser's proxy setting: everything direct.
globalThis.taken = chrome.proxy.settings.set({value: {mode: "direct"}, scope: "regular"})
  .then(() => chrome.proxy.settings.get({}));
"""


@pytest.fixture(scope="module")  # closed before the next module, like the other browser fixtures
def chromium_debug(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    # Extensions enabled (Playwright's --disable-extensions dropped): under it, Chromium would install the other
    # extension disabled. The DevTools protocol's Extensions domain wants --enable-unsafe-extension-debugging.
    with launch_chromium(tmp_path_factory, "--enable-unsafe-extension-debugging",
                         ignore_default_args=("--disable-extensions",)) as browser:
        yield browser


def write_taker(folder: Path) -> Path:
    """A second extension, "proxy-taker": Manifest V3, the proxy permission, a service worker that sets the
    proxy setting to direct when it starts."""
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({
        "manifest_version": 3, "name": "proxy-taker", "version": "1.0", "permissions": ["proxy"],
        "background": {"service_worker": "worker.js"}}))
    (folder / "worker.js").write_text(TAKER_WORKER)
    return folder


def control(browser: Browser) -> dict:
    """chrome.proxy.settings.get as our extension sees it."""
    return browser.worker.evaluate("chrome.proxy.settings.get({})")


def test_another_extension_controlling_the_proxy_setting(chromium_debug: Browser, origin: Origin,
                                                         swarmproxy: ProxyProcess, tmp_path: Path) -> None:
    from playwright.sync_api import Error, expect

    browser = chromium_debug
    if browser.context.browser is None:
        pytest.skip("Playwright gives no browser-level DevTools session for this persistent context")
    cdp = browser.context.browser.new_browser_cdp_session()
    popup = browser.page("src/popup.html")
    taker_id = None
    try:
        state = browser.configure(popup, mode="listed", proxy=swarmproxy.address, rules=[origin.host], exclude=[])
        assert state["badge"] == "ON" and state["conflict"] is False, state
        assert control(browser)["levelOfControl"] == "controlled_by_this_extension"
        assert "swarmproxy" in visit(browser, origin)[1]

        try:
            taker_id = cdp.send("Extensions.loadUnpacked", {"path": str(write_taker(tmp_path / "taker"))})["id"]
        except Error as err:
            pytest.skip(f"this Chromium loads no extension over the DevTools protocol: {err}")

        # Ours learns it at once (proxy.settings.onChange), not at its next periodic check.
        badge_is(popup, "ERR")
        assert "another extension" in popup.evaluate("chrome.action.getTitle({})")
        setting = control(browser)
        assert setting["levelOfControl"] == "controlled_by_other_extensions", setting
        assert setting["value"]["mode"] == "direct", setting
        # The conflict is real: the listed site now goes direct, whatever our rules say.
        path, via = visit(browser, origin)
        assert via == "direct" and origin.via_of(path) == [None]
        assert origin.url(path) not in swarmproxy.requests()

        popup.reload()
        expect(popup.locator("#badge")).to_have_text("ERR")
        expect(popup.locator("#conflict")).to_be_visible()
        expect(popup.locator("#conflict")).to_contain_text(WARNING)
        expect(popup.locator("#running")).to_have_text("running")  # the proxy itself is fine
        options = browser.page("src/options.html")
        try:
            expect(options.locator("#badge")).to_have_text("ERR")
            expect(options.locator("#conflict")).to_be_visible()
            expect(options.locator("#conflict")).to_contain_text(WARNING)
        finally:
            options.close()

        # The other extension removed: ours has the setting again (Chromium keeps each extension's value), the
        # badge says ON, the warning is gone, and the listed site goes through the proxy again.
        cdp.send("Extensions.uninstall", {"id": taker_id})
        taker_id = None
        badge_is(popup, "ON")
        assert control(browser)["levelOfControl"] == "controlled_by_this_extension"
        assert wait_for_async(popup, "() => chrome.runtime.sendMessage({type: 'get'}).then(s => !s.conflict)")
        popup.reload()
        expect(popup.locator("#badge")).to_have_text("ON")
        expect(popup.locator("#conflict")).to_be_hidden()
        path, via = visit(browser, origin)
        assert "swarmproxy" in via and origin.url(path) in swarmproxy.requests()
    finally:
        if taker_id is not None:
            with contextlib.suppress(Error):
                cdp.send("Extensions.uninstall", {"id": taker_id})
        cdp.detach()
        popup.close()
