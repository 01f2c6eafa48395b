"""scripts/build-extension.sh: the Chromium zip and the Firefox xpi, each with its browser's manifest, and
`web-ext lint` of the Firefox build with no error and no warning. web-ext comes from npm, pinned, into a cache
dir: scripts/test.sh installs it (`build-extension.sh --install-web-ext`), as does `build-extension.sh --lint`;
the test never goes online, and is skipped, saying why, where it is not installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from .conftest import EXTENSION, ROOT

BUILD = ROOT / "scripts/build-extension.sh"


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
    version = re.search(r"^WEB_EXT_VERSION=(\S+)", BUILD.read_text(), re.M).group(1)
    web_ext = Path(subprocess.run(["bash", str(BUILD), "--web-ext-path"], capture_output=True, text=True,
                                  check=True).stdout.strip())
    if shutil.which("node") is None:
        pytest.skip("node is not installed (Debian: apt-get install nodejs npm; scripts/test.sh does it)")
    if not os.access(web_ext, os.X_OK):
        pytest.skip(f"web-ext {version} is not installed in {web_ext.parents[2]}: scripts/test.sh installs it "
                    "from npm (`bash scripts/build-extension.sh --install-web-ext`) and said why it could not")
    result = subprocess.run(
        [str(web_ext), "lint", "--source-dir", str(ROOT / "build/extension/firefox"), "--no-config-discovery",
         "--output", "json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_UPDATE_NOTIFIER": "1"})
    report = json.loads(result.stdout)
    assert report["summary"] == {"errors": 0, "notices": 0, "warnings": 0}, json.dumps(report, indent=1)[:4000]
