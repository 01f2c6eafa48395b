"""A small synchronous WebDriver BiDi client for Firefox ESR: Firefox speaks BiDi itself
(`--remote-debugging-port`), so no geckodriver and no downloaded browser build are needed. The websocket runs on
an event loop in a thread of its own, so that the tests stay plain synchronous functions."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import subprocess
import threading
from pathlib import Path

import aiohttp

FIREFOX = os.environ.get("SWARMPROXY_FIREFOX", "/usr/bin/firefox-esr")
EXTENSION_ID = "extension@swarmproxy.invalid"  # manifest.json: browser_specific_settings.gecko.id
EXTENSION_UUID = "6c2d1f0e-5a7b-4c3d-9e8f-0a1b2c3d4e5f"  # fixed by a pref, so the tests know moz-extension://…
PREFS = {
    "extensions.webextensions.uuids": json.dumps({EXTENSION_ID: EXTENSION_UUID}),
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.homepage_override.mstone": "ignore",
    "browser.aboutwelcome.enabled": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "toolkit.telemetry.reportingpolicy.firstRun": False,
    "app.update.disabledForTesting": True,
    "browser.download.dir": "",
    "browser.download.folderList": 2,
    "browser.download.useDownloadDir": True,
    "browser.download.always_ask_before_handling_new_types": False,
}


class BiDiError(RuntimeError):
    pass


class Firefox:
    def __init__(self, profile: Path, downloads: Path, timeout: float = 20) -> None:
        self.timeout = timeout
        self.downloads = downloads
        prefs = {**PREFS, "browser.download.dir": str(downloads)}
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "user.js").write_text("".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n"
                                                 for k, v in prefs.items()))
        env = {**os.environ, "MOZ_HEADLESS": "1", "MOZ_CRASHREPORTER_DISABLE": "1"}
        self.process = subprocess.Popen(
            [FIREFOX, "--headless", "--no-remote", "--profile", str(profile), "--remote-debugging-port", "0",
             "--remote-allow-system-access",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.log: list[str] = []
        url = self._listening_url()
        threading.Thread(target=self._drain, daemon=True).start()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bidi", daemon=True)
        self.thread.start()
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future] = {}
        self._run(self._connect(f"{url}/session"))
        self.send("session.new", {"capabilities": {"alwaysMatch": {"acceptInsecureCerts": True}}})

    def _listening_url(self) -> str:
        # Firefox says where it listens on stderr: "WebDriver BiDi listening on ws://127.0.0.1:PORT".
        timer = threading.Timer(self.timeout, self.process.kill)
        timer.start()
        try:
            for line in self.process.stderr:
                self.log.append(line)
                if m := re.search(r"WebDriver BiDi listening on (ws://\S+)", line):
                    return m.group(1)
        finally:
            timer.cancel()
        raise BiDiError("Firefox did not start its WebDriver BiDi server:\n" + "".join(self.log[-30:]))

    def _drain(self) -> None:
        for line in self.process.stderr:
            self.log.append(line)

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(self.timeout + 5)

    async def _connect(self, url: str) -> None:
        self.session = aiohttp.ClientSession()
        self.ws = await self.session.ws_connect(url, max_msg_size=64 * 2**20)
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            future = self.pending.pop(data.get("id"), None)
            if future is not None and not future.done():
                future.set_result(data)

    async def _send(self, method: str, params: dict) -> dict:
        ident = next(self.ids)
        future = self.loop.create_future()
        self.pending[ident] = future
        await self.ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        return await asyncio.wait_for(future, self.timeout)

    def send(self, method: str, params: dict | None = None) -> dict:
        answer = self._run(self._send(method, params or {}))
        if answer.get("type") == "error":
            raise BiDiError(f"{method}: {answer.get('error')}: {answer.get('message')}")
        return answer["result"]

    # What the tests use.

    def install_extension(self, path: Path) -> str:
        return self.send("webExtension.install", {"extensionData": {"type": "path", "path": str(path)}})["extension"]

    def new_tab(self) -> str:
        return self.send("browsingContext.create", {"type": "tab"})["context"]

    def navigate(self, context: str, url: str) -> None:
        self.send("browsingContext.navigate", {"context": context, "url": url, "wait": "complete"})

    def evaluate(self, context: str, expression: str) -> object:
        """The value of a JavaScript expression (awaited if a promise), passed through JSON."""
        # Chained with .then on the value itself: Promise.resolve() in BiDi's sandbox loses the value of an
        # extension page's promise (an Xray wrapper), while its own .then sees it.
        wrapped = (f"new Promise((ok, fail) => {{ const v = ({expression}); "
                   "const done = x => ok(JSON.stringify(x === undefined ? null : x)); "
                   "if (v && typeof v.then === 'function') v.then(done, e => fail(String(e))); else done(v); })")
        result = self.send("script.evaluate", {
            "expression": wrapped,
            "target": {"context": context}, "awaitPromise": True, "resultOwnership": "none"})
        if result.get("type") == "exception":
            raise BiDiError(f"{expression[:200]}: {result['exceptionDetails'].get('text')}")
        return json.loads(result["result"]["value"])

    def wait_for(self, context: str, predicate: str, timeout_ms: int = 15_000) -> object:
        """Waits, in the page, until the async JavaScript `predicate` (a function returning a promise) resolves
        to something truthy; returns it. Fails with the last value after `timeout_ms`."""
        return self.evaluate(context, f"""new Promise((ok, fail) => {{
            const started = Date.now(); let last;
            const call = () => new Promise((r, j) => {{
                const v = ({predicate})(); if (v && typeof v.then === "function") v.then(r, j); else r(v); }});
            const poll = () => call().then(v => {{
                last = v;
                if (v) ok(v);
                else if (Date.now() - started > {timeout_ms}) fail("timed out; last: " + JSON.stringify(last));
                else setTimeout(poll, 50);
            }}, fail);
            poll();
        }})""")

    def screenshot(self, context: str, path: Path, origin: str = "document") -> None:
        data = self.send("browsingContext.captureScreenshot", {"context": context, "origin": origin})["data"]
        path.write_bytes(base64.b64decode(data))

    def set_viewport(self, context: str, width: int, height: int) -> None:
        self.send("browsingContext.setViewport", {"context": context, "viewport": {"width": width, "height": height}})

    def close(self) -> None:
        try:
            self._run(self._send("browser.close", {}))
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        try:
            self._run(self.session.close())
        except Exception:  # noqa: BLE001
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
