#!/usr/bin/env bash
# Quick start, command 2: install what is needed, then run the whole test suite.
# Any arguments are passed to pytest.
set -euo pipefail
# The test tools, and the lab's dependencies (matplotlib): tests/bench needs them.
SWARMPROXY_EXTRAS=test,lab
source "$(dirname "$0")/bootstrap.sh"
# Real clients and reference servers the end-to-end tests drive.
missing=()
for tool in curl wget openssl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
# nginx (in /usr/sbin, which a user's PATH may lack): the reference server of
# tests/server_plugin/test_static_publish_nginx.py, which is skipped where it cannot be installed.
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  apt_install nginx || echo "swarmproxy: the nginx tests will be skipped" >&2
fi
# redis-server: the coordination store of the cluster mode, which tests/cluster/test_cluster_processes.py starts
# on a free port (skipped, saying why, where it cannot be installed).
if ! command -v redis-server >/dev/null && [ ! -x /usr/bin/redis-server ]; then
  apt_install redis-server || echo "swarmproxy: the cluster end-to-end tests will be skipped" >&2
fi
# ip and tc (iproute2, in /usr/sbin): tests/cluster/test_netns.py builds network namespaces with a `tc tbf` shaped
# link (as root; skipped, saying why, where it cannot).
sbin_tool() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
if ! sbin_tool ip || ! sbin_tool tc; then
  apt_install iproute2 || echo "swarmproxy: the cluster network namespace test will be skipped" >&2
fi
# iptables, nft (nftables) and miniupnpd (all in /usr/sbin): tests/bench/test_internet_netns.py builds a test
# internet in network namespaces, home routers doing NAT and one running miniupnpd as a real UPnP-IGD/NAT-PMP router
# inside its namespace (as root; skipped, saying why, where it cannot). Debian's package never starts the daemon on
# this machine itself (its debconf default, start_daemon=false); miniupnpd pulls in its nftables build.
if ! sbin_tool iptables || ! sbin_tool nft || ! sbin_tool miniupnpd; then
  apt_install iptables nftables miniupnpd || echo "swarmproxy: the test internet's namespace tests will be skipped" >&2
fi
# chromium, firefox-esr and nodejs: the browser extension's tests (tests/extension/) drive Debian's Chromium with
# Playwright and Firefox ESR over WebDriver BiDi (never a downloaded browser build: `playwright install` fails on
# these machines), and run the extension's rules module under Node's own test runner; each is skipped, saying
# why, where it cannot be installed.
extension_missing=()
[ -x /usr/bin/chromium ] || extension_missing+=(chromium)
[ -x /usr/bin/firefox-esr ] || extension_missing+=(firefox-esr)
command -v node >/dev/null || extension_missing+=(nodejs)
command -v npm >/dev/null || extension_missing+=(npm)
if [ ${#extension_missing[@]} -gt 0 ]; then
  apt_install "${extension_missing[@]}" || echo "swarmproxy: the browser extension tests will be skipped" >&2
fi
# web-ext, pinned in build-extension.sh, from the npm registry into a cache dir on first use (the tests themselves
# never go online): tests/extension/test_build.py lints the Firefox build with it, and is skipped, saying why,
# only where npm cannot install it.
if command -v npm >/dev/null; then
  bash "$root/scripts/build-extension.sh" --install-web-ext \
    || echo "swarmproxy: web-ext could not be installed from npm; its lint test will be skipped" >&2
fi
cd "$root"
# Two worker processes (pytest-xdist; SWARMPROXY_TEST_WORKERS=N for another count, 0 for none): most of the suite's
# time is spent waiting on real processes, shaped links and timeouts, which overlap on two cores.
exec python -m pytest -q -p no:cacheprovider -n "${SWARMPROXY_TEST_WORKERS:-2}" "$@"
