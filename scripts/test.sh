#!/usr/bin/env bash
# Quick start, command 2: install what is needed, then run the whole test suite.
# Any arguments are passed to pytest.
set -euo pipefail
# The test tools, and the lab's dependencies: tests/bench and the libtorrent test vectors need them.
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
cd "$root"
exec python -m pytest -q -p no:cacheprovider "$@"
