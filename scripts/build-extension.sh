#!/usr/bin/env bash
# Builds the browser extension (extension/) into dist/:
#   dist/swarmproxy-chromium-VERSION.zip   for Chromium/Chrome (Load unpacked from the unzipped folder, or the store)
#   dist/swarmproxy-firefox-VERSION.xpi    for Firefox (about:debugging → Load Temporary Add-on, or AMO signing)
# Each gets the manifest its browser expects (Chromium: background.service_worker; Firefox: background.scripts
# and browser_specific_settings); the shared extension/manifest.json, which loads unpacked in both, is the source.
# The archives are reproducible: sorted entries, fixed timestamps.
#
#   bash scripts/build-extension.sh                   build both
#   bash scripts/build-extension.sh --lint            build both, then `web-ext lint` the Firefox one (web-ext is
#                                                     installed from npm, pinned, into a cache dir on first use)
#   bash scripts/build-extension.sh --install-web-ext only install web-ext there if missing (scripts/test.sh)
#   bash scripts/build-extension.sh --web-ext-path    print where web-ext is (or would be) installed
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WEB_EXT_VERSION=8.10.0  # the last 8.x: it still runs on Debian 12's Node 18 (9.x and later need Node 20)
# Outside the work tree, so that a fresh clone (CI) does not fetch web-ext's ~85 MB of packages again.
web_ext_dir="${SWARMPROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/swarmproxy}/web-ext-$WEB_EXT_VERSION"
web_ext="$web_ext_dir/node_modules/.bin/web-ext"
# SWARMPROXY_EXTENSION_OUT / _STAGE: elsewhere than the clone (scripts/build-deb.sh, whose test leaves the clone alone)
out="${SWARMPROXY_EXTENSION_OUT:-$root/dist}"
stage="${SWARMPROXY_EXTENSION_STAGE:-$root/build/extension}"
lint=0

install_web_ext() {
  [ -x "$web_ext" ] && return 0
  command -v npm >/dev/null || { echo "swarmproxy: web-ext needs npm (Debian: apt-get install npm)" >&2; return 1; }
  echo "swarmproxy: installing web-ext@$WEB_EXT_VERSION into $web_ext_dir" >&2
  # Into a fresh directory renamed when complete: an interrupted install never looks installed.
  local tmp="$web_ext_dir.tmp$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "web-ext@$WEB_EXT_VERSION" >&2; then
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$web_ext_dir"
  mv "$tmp" "$web_ext_dir"
}

for arg in "$@"; do
  case "$arg" in
    --lint) lint=1 ;;
    --install-web-ext) install_web_ext; exit ;;
    --web-ext-path) echo "$web_ext"; exit 0 ;;
    *) echo "usage: $0 [--lint | --install-web-ext | --web-ext-path]" >&2; exit 2 ;;
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

for browser in ("chromium", "firefox"):
    name = f"swarmproxy-{browser}-{version}.{'zip' if browser == 'chromium' else 'xpi'}"
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
    unpacked = folder.relative_to(out.parent)
    print(f"{archive.relative_to(out.parent)}  ({archive.stat().st_size} bytes; unpacked: {unpacked})")
EOF

if [ "$lint" = 1 ]; then
  install_web_ext
  # NO_UPDATE_NOTIFIER: web-ext would otherwise ask npm for a newer version first (seconds, and a network call).
  NO_UPDATE_NOTIFIER=1 "$web_ext" lint --source-dir "$stage/firefox" --no-config-discovery
fi
