#!/usr/bin/env bash
# Builds the browser extension (extension/) into dist/:
#   dist/swarmproxy-chromium-VERSION.zip   for Chromium/Chrome (Load unpacked from the unzipped folder, or the store)
#   dist/swarmproxy-firefox-VERSION.xpi    for Firefox (about:debugging → Load Temporary Add-on, or AMO signing)
# Each gets the manifest its browser expects (Chromium: background.service_worker; Firefox: background.scripts
# and browser_specific_settings); the shared extension/manifest.json, which loads unpacked in both, is the source.
# The archives are reproducible: sorted entries, fixed timestamps.
#
#   bash scripts/build-extension.sh          build both
#   bash scripts/build-extension.sh --lint   build both, then `web-ext lint` the Firefox one (web-ext is
#                                            installed from npm, pinned, into build/tools/ on first use)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WEB_EXT_VERSION=8.10.0  # the last 8.x: it still runs on Debian 12's Node 18 (9.x and later need Node 20)
out="$root/dist"
stage="$root/build/extension"
lint=0
for arg in "$@"; do
  case "$arg" in
    --lint) lint=1 ;;
    *) echo "usage: $0 [--lint]" >&2; exit 2 ;;
  esac
done

rm -rf "$stage"
mkdir -p "$stage" "$out"
python3 - "$root/extension" "$stage" "$out" <<'EOF'
import json, pathlib, sys, zipfile

src, stage, out = (pathlib.Path(a) for a in sys.argv[1:])
manifest = json.loads((src / "manifest.json").read_text())
version = manifest["version"]
# What the extension is made of; package.json (for Node's tests), README and screenshots stay out.
files = sorted(p for d in ("src", "icons") for p in (src / d).rglob("*") if p.is_file())

def variant(browser: str) -> dict:
    m = json.loads(json.dumps(manifest))
    if browser == "chromium":
        m["background"] = {"service_worker": m["background"]["service_worker"], "type": "module"}
        m.pop("browser_specific_settings", None)
    else:
        m["background"] = {"scripts": m["background"]["scripts"], "type": "module"}
    return m

for browser, name in (("chromium", f"swarmproxy-chromium-{version}.zip"), ("firefox", f"swarmproxy-firefox-{version}.xpi")):
    folder = stage / browser
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(variant(browser), indent=2) + "\n")
    for f in files:
        target = folder / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.read_bytes())
    entries = ["manifest.json"] + [str(f.relative_to(src)) for f in files]
    archive = out / name
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for entry in entries:
            info = zipfile.ZipInfo(entry, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, (folder / entry).read_bytes())
    print(f"{archive.relative_to(out.parent)}  ({archive.stat().st_size} bytes; unpacked: {folder.relative_to(out.parent)})")
EOF

if [ "$lint" = 1 ]; then
  tools="$root/build/tools/web-ext-$WEB_EXT_VERSION"
  if [ ! -x "$tools/node_modules/.bin/web-ext" ]; then
    command -v npm >/dev/null || { echo "swarmproxy: web-ext lint needs npm (Debian: apt-get install npm)" >&2; exit 1; }
    echo "swarmproxy: installing web-ext@$WEB_EXT_VERSION into $tools" >&2
    npm install --prefix "$tools" --no-audit --no-fund --loglevel=error "web-ext@$WEB_EXT_VERSION" >&2
  fi
  # NO_UPDATE_NOTIFIER: web-ext would otherwise ask npm for a newer version first (seconds, and a network call).
  NO_UPDATE_NOTIFIER=1 "$tools/node_modules/.bin/web-ext" lint --source-dir "$stage/firefox" --no-config-discovery
fi
