"""scripts/build-extension.sh: the Chromium zip and the Firefox xpi, each with its browser's manifest, and
`web-ext lint` of the Firefox build with no error and no warning (when web-ext is installed: it comes from npm,
pinned, into build/tools/ with `bash scripts/build-extension.sh --lint`; skipped, saying so, otherwise)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from .conftest import EXTENSION, ROOT

WEB_EXT = ROOT / "build/tools/web-ext-8.10.0/node_modules/.bin/web-ext"


@pytest.fixture(scope="module")
def built() -> dict[str, Path]:
    result = subprocess.run(["bash", str(ROOT / "scripts/build-extension.sh")], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    version = json.loads((EXTENSION / "manifest.json").read_text())["version"]
    return {"chromium": ROOT / f"dist/swarmproxy-chromium-{version}.zip",
            "firefox": ROOT / f"dist/swarmproxy-firefox-{version}.xpi"}


def test_archives_hold_the_extension_with_each_browsers_manifest(built: dict[str, Path]) -> None:
    sources = {str(p.relative_to(EXTENSION)) for d in ("src", "icons") for p in (EXTENSION / d).rglob("*")
               if p.is_file()}
    for browser, archive in built.items():
        with zipfile.ZipFile(archive) as z:
            assert set(z.namelist()) == sources | {"manifest.json"}, browser
            for name in sources:
                assert z.read(name) == (EXTENSION / name).read_bytes(), name
            manifest = json.loads(z.read("manifest.json"))
        assert manifest["manifest_version"] == 3
        if browser == "chromium":
            assert manifest["background"] == {"service_worker": "src/background.js", "type": "module"}
            assert "browser_specific_settings" not in manifest
        else:
            assert manifest["background"] == {"scripts": ["src/background.js"], "type": "module"}
            assert manifest["browser_specific_settings"]["gecko"]["id"] == "extension@swarmproxy.invalid"


def test_web_ext_lint_finds_nothing(built: dict[str, Path]) -> None:
    if not WEB_EXT.exists():
        pytest.skip("web-ext is not installed; `bash scripts/build-extension.sh --lint` installs it (npm, pinned)")
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    result = subprocess.run(
        [str(WEB_EXT), "lint", "--source-dir", str(ROOT / "build/extension/firefox"), "--no-config-discovery",
         "--output", "json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_UPDATE_NOTIFIER": "1"})
    report = json.loads(result.stdout)
    assert report["summary"] == {"errors": 0, "notices": 0, "warnings": 0}, json.dumps(report, indent=1)[:4000]
