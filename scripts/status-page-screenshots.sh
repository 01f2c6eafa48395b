#!/usr/bin/env bash
# The status page (/_swarm/, issue 41), photographed on purpose (the tests never write into the tree): a local swarm
# on loopback at work, into docs/screenshots/status-page-*.png, with the page's load time with 1,000 requests
# recorded printed as JSON (python -m bench.status_page; arguments go to it); then the extension's popup and options
# pages anew into extension/screenshots/ (the popup links to the page). Needs Debian's Chromium and Firefox ESR.
set -euo pipefail
SWARMPROXY_EXTRAS=test
source "$(dirname "$0")/bootstrap.sh"
cd "$root"
[ -x /usr/bin/chromium ] || apt_install chromium
python -m bench.status_page --screenshots docs/screenshots "$@"
[ -x /usr/bin/firefox-esr ] || apt_install firefox-esr || echo "swarmproxy: no Firefox: its screenshots are kept" >&2
SWARMPROXY_SCREENSHOTS=extension/screenshots python -m pytest -q -p no:cacheprovider \
  tests/extension/test_chromium.py tests/extension/test_firefox.py -k screenshots
